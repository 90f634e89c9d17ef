"""Weight prepacking: layout-rewriting kernels are split as TVM deploys them, measured without the copy."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.measure.prepack import PrepackPlan, pack_artifact, split_prepack, unpack_artifact


def _prepacked(space, rng, tries: int = 40):
    """A random config of the conv task whose schedule rewrites the weight layout."""
    from autosearch.measure.prepack import has_prepack

    for _ in range(tries):
        applied = space.apply(space.sample(rng))
        if applied.ok and has_prepack(applied.mod["main"]):
            return applied
    pytest.fail("no random schedule rewrote the weight layout")


def test_conv_weights_are_layout_free(conv_task):
    attrs = conv_task.mod["main"].attrs
    assert "layout_free_buffers" in attrs and 1 in [int(i) for i in attrs["layout_free_buffers"]]


def test_artifact_round_trip():
    plan = PrepackPlan((1,), ((1, (2, 16, 3, 3, 8), "float32"),))
    assert unpack_artifact(pack_artifact(b"\x7fELF...", plan)) == (b"\x7fELF...", plan)
    assert unpack_artifact(pack_artifact(b"\x7fELF", None)) == (b"\x7fELF", None)
    assert unpack_artifact(b"\x7fELF") == (b"\x7fELF", None)  # a bare library


def test_split_kernel_computes_what_the_whole_kernel_computes(conv_task, conv_space):
    import tvm

    from autosearch.measure.kernels import make_inputs

    applied = _prepacked(conv_space, np.random.default_rng(3))
    split, plan = split_prepack(applied.mod)
    assert plan is not None and plan.inputs == (1,) and [p for p, _, _ in plan.outputs] == [1]
    assert tuple(plan.outputs[0][1]) != conv_task.args[1][0]  # the weight really changes layout
    dev = tvm.cpu()
    inputs = make_inputs(conv_task.args, seed=5)
    whole = [tvm.runtime.tensor(a, dev) for a in inputs]
    tvm.compile(applied.mod, target=conv_task.target)["main"](*whole)
    lib = tvm.compile(split, target=conv_task.target)
    packed = [tvm.runtime.empty(shape, dtype, dev) for _, shape, dtype in plan.outputs]
    lib["prepack"](*[tvm.runtime.tensor(inputs[i], dev) for i in plan.inputs], *packed)
    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    args[plan.outputs[0][0]] = packed[0]
    lib["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), whole[-1].numpy(), rtol=1e-5, atol=1e-5)
    # without the prepack the kernel reads the weights in the wrong order: the check would catch it
    args[1] = tvm.runtime.tensor(inputs[1].reshape(plan.outputs[0][1]), dev)
    lib["main"](*args)
    assert not np.allclose(args[-1].numpy(), whole[-1].numpy(), rtol=1e-3, atol=1e-3)


def test_unscheduled_and_plain_kernels_are_not_split(conv_task):
    assert split_prepack(conv_task.mod) == (conv_task.mod, None)


def test_measured_prepacked_kernel_is_checked_and_timed(conv_task, conv_space):
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.types import Status

    applied = _prepacked(conv_space, np.random.default_rng(4))
    with LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5),
                     build_workers=1) as runner:
        assert runner.prepare(conv_task).ok
        [result] = runner.measure(conv_task, [applied.mod])
    assert result.status is Status.OK, result.error
    assert result.median < runner.baseline_secs(conv_task)


def test_tuned_build_folds_the_prepacking_into_the_constants(tmp_path, small_model, conv_task, conv_space):
    import tvm

    from autosearch.deploy.database import export_database
    from autosearch.frontend.database_files import load_database
    from autosearch.frontend.lowering import apply_database, lower
    from autosearch.records import LogContents
    from autosearch.types import MeasureResult, Record, Status

    applied = _prepacked(conv_space, np.random.default_rng(6))
    contents = LogContents(path="mem")
    contents.tasks[conv_task.workload_key] = conv_task.to_json()
    contents.records.append(Record(kind="trial", task_key=conv_task.workload_key, task_name=conv_task.name,
                                   target={}, config=applied.config, result=MeasureResult(Status.OK, (1e-6,)),
                                   flops=conv_task.flops, trace=applied.trace_json()))
    export_database(contents, str(tmp_path / "db"))
    lowered = lower(small_model.relax_mod, conv_task.target)
    tuned = apply_database(lowered, conv_task.target, load_database(str(tmp_path / "db")))
    names = [gv.name_hint for gv in tuned.functions]
    assert any(n.endswith("_prepacked") for n in names)  # the tuned conv reads prepacked weights...
    script = tuned["main"].script()
    assert "_weight_prepack" not in script  # ...computed at compile time, not at every inference
    assert any(isinstance(f, tvm.tirx.PrimFunc) for f in tuned.functions.values())
