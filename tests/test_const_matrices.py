"""TOPI's constant matrices nested at build time (autosearch.frontend.const_matrices): the same values for every
index, the chains of other forms left alone, and a scheduled Winograd kernel computing the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te, tirx

from autosearch.frontend.const_matrices import MIN_ENTRIES, chain_entries, nest_const_matrices, rewrite_func

SPAN = 24  # indices -8 .. 15: every residue of each matrix's rows and columns, negative ones and wrapped ones


def _chain(pairs, end, dtype):
    """A flat chain as ``topi.utils.const_matrix`` writes it, the last of ``pairs`` outermost:
    ``Select(i % rows == r and j % cols == c, value, ...)``, ending in ``end``."""
    rows = max(r for r, _, _ in pairs) + 1
    cols = max(c for _, c, _ in pairs) + 1

    def entry(i, j):
        out = tirx.const(end, dtype)
        for r, c, value in pairs:
            out = tirx.Select(tirx.all(tirx.indexmod(i, rows) == r, tirx.indexmod(j, cols) == c),
                              tirx.const(value, dtype), out)
        return out

    return entry


def _func(entry, dtype):
    """A PrimFunc writing ``entry(i - 8, j - 8)`` over the span."""
    out = te.compute((SPAN, SPAN), lambda i, j: entry(i - 8, j - 8), name="out")
    return te.create_prim_func([out]).with_attr("global_symbol", "main")


def _run(func, dtype) -> bytes:
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    out = tvm.runtime.tensor(np.zeros((SPAN, SPAN), dtype))
    lib["main"](out)
    return out.numpy().tobytes()


def _flat_chains(func) -> int:
    import tvm_ffi
    from tvm.ir.prim.expr import Select

    found = []
    tvm_ffi.structural_walk(func.body, [(Select, lambda s: found.append(chain_entries(s) is not None))])
    return sum(found)


@pytest.mark.parametrize("dtype", ["float32", "uint16"])  # uint16: a bf16 kernel's matrices, as bit patterns
def test_winograds_matrices_nested_give_every_index_the_same_value(dtype):
    from tvm.topi.nn import winograd_util as wu

    points = wu._interpolation_points(4 + 3 - 2)
    for matrix in wu._cook_toom_convolution(points, 4, 3):  # A, B, G of F(4x4, 3x3), as TOPI builds them
        matrix = matrix.astype(dtype) if dtype == "float32" else (matrix * 7).astype(dtype)
        pairs = [(r, c, matrix[r][c].item()) for r in range(matrix.shape[0]) for c in range(matrix.shape[1])]
        func = _func(_chain(pairs, 0, dtype), dtype)
        nested = rewrite_func(func)
        assert _flat_chains(func) >= 1 and _flat_chains(nested) == 0
        assert _run(nested, dtype) == _run(func, dtype)


def test_an_end_other_than_zero_a_negative_zero_and_missing_entries_keep_their_values():
    pairs = [(0, 0, 1.5), (0, 2, -0.0), (1, 1, 2.0), (1, 2, 3.0), (2, 0, 3.0), (2, 2, -4.0)]  # (1, 0) etc. missing
    func = _func(_chain(pairs, 3.0, "float32"), "float32")
    nested = rewrite_func(func)
    assert not nested.same_as(func) and _flat_chains(nested) == 0
    expected = np.frombuffer(_run(func, "float32"), "float32").reshape(SPAN, SPAN)
    got = np.frombuffer(_run(nested, "float32"), "float32").reshape(SPAN, SPAN)
    assert got.tobytes() == expected.tobytes()
    assert np.signbit(got[8, 10]) and got[8, 10] == 0  # (0, 2): -0.0 kept, not folded into an end of 0
    assert got[9, 8] == 3.0  # (1, 0): no entry, the chain's end


def test_chains_of_other_forms_are_left_alone():
    short = [(0, 0, 1.0), (1, 1, 2.0), (2, 2, 3.0)][:MIN_ENTRIES - 1]
    func = _func(_chain(short, 0.0, "float32"), "float32")
    assert rewrite_func(func).same_as(func)

    # (0, 0) twice, the outer one winning: not a matrix as a whole; the four links inside it are one, and alone
    twice = [(0, 0, 1.0), (0, 1, 2.0), (1, 0, 3.0), (1, 1, 4.0), (0, 0, 5.0)]
    func = _func(_chain(twice, 0.0, "float32"), "float32")
    nested = rewrite_func(func)
    assert _flat_chains(nested) == 0 and "5.0" in nested.script()
    got = np.frombuffer(_run(nested, "float32"), "float32").reshape(SPAN, SPAN)
    assert got.tobytes() == _run(func, "float32") and got[8, 8] == 5.0

    def one_index(i, j):  # a chain on one index only
        out = tirx.const(0.0, "float32")
        for r in range(6):
            out = tirx.Select(tirx.indexmod(i, 6) == r, tirx.const(float(r), "float32"), out)
        return out

    func = _func(one_index, "float32")
    assert rewrite_func(func).same_as(func)
    mod = tvm.IRModule({"main": func})
    assert nest_const_matrices(mod).same_as(mod)  # nothing to nest: the module itself


@pytest.fixture(scope="module")
def winograd(target, tmp_path_factory):
    """A model of one wide convolution on 13 x 13 (tiny-YOLOv2's shape, which the tiles do not divide): the model
    and its Winograd task's design space."""
    from autosearch.frontend.importer import import_model
    from autosearch.search.space import DecisionSpace
    from tests.conftest import wide_conv_onnx

    path = str(tmp_path_factory.mktemp("winograd") / "wide13.onnx")
    wide_conv_onnx(path, channels=128, hw=13)
    model = import_model(path, target, layout="NCHW")
    task = next(t for t in model.tasks if "winograd" in t.name)
    return model, task, DecisionSpace(task.mod, task.target)


def test_a_scheduled_winograd_kernel_built_with_it_writes_the_same_bytes(winograd, tmp_path):
    """A Winograd task's sampled schedule, built as a trial is (:func:`autosearch.measure.kernels.build`) and with
    the chains as TOPI wrote them: the same outputs."""
    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import build, make_inputs
    from autosearch.measure.prepack import unpack_artifact
    from autosearch.tvm_compat import build_context

    _, task, space = winograd
    dev = tvm.cpu()
    for i, applied in enumerate(space.sample_applied(np.random.default_rng(0), 1)):
        mod = space.apply_for_features(applied.config, rewrite="none").mod  # the weights as the arguments give them
        assert nest_const_matrices(mod) is not mod  # the kernel has chains to nest
        outputs = []
        with build_context():
            as_topi = tvm.compile(mod, target=task.target)
        library, plan = unpack_artifact(build(tvm.ir.save_json(mod), target_to_json(task.target))[0])
        assert plan is None
        (tmp_path / f"kernel{i}.so").write_bytes(library)  # a file of its own: a loaded library stays mapped
        for run in (as_topi["main"], tvm.runtime.load_module(str(tmp_path / f"kernel{i}.so"))["main"]):
            arrays = [tvm.runtime.tensor(a, dev) for a in make_inputs(task.args, 0)]
            run(*arrays)
            outputs.append(b"".join(a.numpy().tobytes() for a in arrays))
        assert outputs[0] == outputs[1]


def _chains_seen():
    """A pass context whose instrument counts, before each pass, the flat chains of the module it is given."""
    seen: list[int] = []

    @tvm.ir.instrument.pass_instrument
    class Counter:
        def run_before_pass(self, mod, info):
            seen.append(sum(_flat_chains(f) for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)))

    return tvm.transform.PassContext(instruments=[Counter()]), seen


def test_a_trial_and_the_model_reach_tvms_passes_with_the_chains_nested(winograd, target):
    """What TVM's pipeline is handed, in a trial's build and in the model's: no flat chain left (TVM's own build of
    the same module sees them)."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.lowering import build_module, tuned_module
    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import build

    model, task, space = winograd
    mod = space.apply_for_features(space.default(0), rewrite="none").mod
    context, tvms = _chains_seen()
    with context:
        tvm.compile(mod, target=task.target)
    context, trial = _chains_seen()
    with context:
        build(tvm.ir.save_json(mod), target_to_json(task.target))
    assert max(tvms) > 0 and trial and max(trial) == 0

    # the model with its Winograd alternative lowered, untuned
    lowered = tuned_module(model.relax_mod, target, ms.database.MemoryDatabase(), winograd="candidates")
    assert sum(_flat_chains(f) for f in lowered.functions.values() if isinstance(f, tirx.PrimFunc)) > 0
    context, in_model = _chains_seen()
    with context:
        build_module(lowered, target)
    assert in_model and max(in_model) == 0
