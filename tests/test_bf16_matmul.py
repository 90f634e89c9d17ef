"""bf16 batch matmuls of two activations (:mod:`autosearch.tensor_units.matmul`): which matmuls qualify, every
sketch of such a task on AMX and on the AVX512-BF16 dot product against NumPy, and a real run that tunes an
attention's matmuls both ways, exports the faster and compiles it. Tests needing a unit the CPU lacks skip, naming
it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import run_cli, tune_and_export
from tests.test_dpbf16 import _dot_target, _needs_avx512_bf16
from tests.test_tensor_units import _needs_amx, _to_bf16

HEADS, TOKENS, DIM = 6, 40, 24  # no multiple of a tile: rows, reduction and columns all padded on AMX


def gram_onnx(path: str | None = None, *, softmax: bool = False, scores_out: bool = False) -> onnx.ModelProto:
    """``q = relu(x)``, ``s = q q^T``, ``y = s q``, ``g = y^T y`` over ``HEADS`` heads of ``TOKENS`` x ``DIM``:
    three matmuls of two activations (40 x 24 by 24 x 40, 40 x 40 by 40 x 24, 24 x 40 by 40 x 24). With
    ``softmax``, ``y = softmax(s) q``: the first two are an attention, the third a matmul outside it; with
    ``scores_out``, ``s`` is an output of the model too."""
    nodes = [
        helper.make_node("Relu", ["x"], ["q"]),
        helper.make_node("Transpose", ["q"], ["k"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        *([helper.make_node("Softmax", ["s"], ["p"], axis=-1)] if softmax else []),
        helper.make_node("MatMul", ["p" if softmax else "s", "q"], ["y"]),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["yt", "y"], ["g"]),
    ]
    graph = helper.make_graph(
        nodes, "attention" if softmax else "gram",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, HEADS, TOKENS, DIM])],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, HEADS, DIM, DIM])]
        + ([helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, HEADS, TOKENS, TOKENS])] if scores_out else []),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if path:
        onnx.save(model, path)
    return model


def _matmul_call(a_shape, b_shape, *, constant_b: bool = False):
    """A normalised Relax ``matmul`` call of operands of these shapes (b a constant if asked)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType(a_shape, "float32"))
    b = relax.const(np.zeros(b_shape, "float32")) if constant_b else relax.Var("b", relax.TensorType(b_shape,
                                                                                                       "float32"))
    return bb.normalize(relax.op.matmul(a, b))


def test_a_matmul_of_two_activations_of_one_batch_shape_qualifies() -> None:
    from autosearch.tensor_units.matmul import FlatMatmul, flat_matmul

    mm = flat_matmul(_matmul_call((2, 3, 40, 24), (2, 3, 24, 20)))
    assert mm == FlatMatmul(batch=(2, 3), m=40, k=24, n=20) and mm.batches == 6
    assert flat_matmul(_matmul_call((2, 40, 24), (2, 24, 20), constant_b=True)) is None  # constant, one per batch
    assert flat_matmul(_matmul_call((1, 40, 24), (2, 24, 20))) is None  # broadcast batch
    assert flat_matmul(_matmul_call((2, 40, 24), (2, 24, 8))) is None  # 8 columns: mostly padding
    assert flat_matmul(_matmul_call((2, 8, 24), (2, 24, 20))) is None  # 8 rows


def test_a_linear_layer_is_one_gemm_over_all_of_its_rows() -> None:
    """A matrix B, constant (a linear layer's weights) or not, serves every row of A: one GEMM, no batch."""
    from autosearch.tensor_units.matmul import FlatMatmul, flat_matmul

    assert flat_matmul(_matmul_call((40, 24), (24, 20))) == FlatMatmul(batch=(), m=40, k=24, n=20, lead=(40,))
    linear = flat_matmul(_matmul_call((1, 40, 24), (24, 20), constant_b=True))
    assert linear == FlatMatmul(batch=(), m=40, k=24, n=20, lead=(1, 40)) and linear.batches == 1
    assert flat_matmul(_matmul_call((40, 1, 24), (24, 20))).lead == (40, 1)
    assert flat_matmul(_matmul_call((2, 40, 24), (24, 20))) is None  # rows along two axes (linear_bf16 says why)
    assert flat_matmul(_matmul_call((1, 8, 24), (24, 20), constant_b=True)) is None  # 8 rows
    assert flat_matmul(_matmul_call((1, 40, 24), (24, 4), constant_b=True)) is None  # 4 columns


ROWS, FEATURES, HIDDEN, OUTPUTS = 50, 24, 40, 20  # no multiple of a tile


def linear_onnx(path: str | None = None) -> onnx.ModelProto:
    """Two linear layers, ``relu(x W1 + b1) W2``, over ``ROWS`` tokens: the feed-forward block of a transformer
    (RT-DETR's decoder), weights as initialisers."""
    from onnx import numpy_helper

    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array(rng.uniform(-1, 1, s).astype(np.float32), n)
               for n, s in (("w1", (FEATURES, HIDDEN)), ("b1", (HIDDEN,)), ("w2", (HIDDEN, OUTPUTS)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             [1, ROWS, FEATURES])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, ROWS, OUTPUTS])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if path:
        onnx.save(model, path)
    return model


@pytest.mark.parametrize("unit", ["host", "dot product"])
def test_linear_layers_on_a_bf16_unit_are_tuned_both_ways_and_run_within_bf16s_tolerance(unit, target) -> None:
    """Each linear layer has a bf16 alternative on the unit beside its fp32 one, under one layer key; its bf16 task
    reads B packed at compile time (no packing task); every sketch, at its default and a random config, computes
    A @ B (+ bias, relu) of the rounded operands as NumPy does; the bf16 model is ONNX Runtime's output within
    bf16's rounding."""
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from autosearch.frontend.importer import extract_tasks, to_relax
    from autosearch.frontend.lowering import build_module, lower
    from autosearch.tensor_units import cpu
    from autosearch.tensor_units.matmul import TASK_NAME

    if unit == "dot product":  # as a Zen 4 runs it, on any host with the dot product
        _needs_avx512_bf16()
        target = _dot_target()
    _needs_bf16_unit(target)
    if cpu.bf16_unit(target) != "AVX512-BF16":
        from autosearch.tensor_units.amx import request_permission

        request_permission()
    proto = linear_onnx()
    mod = to_relax(proto, {"x": (1, ROWS, FEATURES)})
    tasks = extract_tasks(mod, target, winograd="off", layout="NHWC", fast_math="off", precision="auto")
    layers: dict[str, set[str]] = {}
    for t in tasks:
        if "layer" in t.lowering:
            layers.setdefault(t.lowering["layer"], set()).add(t.lowering["algorithm"])
    assert layers == {f"1x{ROWS}x{FEATURES}@{FEATURES}x{HIDDEN}": {"fp32", "bf16"},
                      f"1x{ROWS}x{HIDDEN}@{HIDDEN}x{OUTPUTS}": {"fp32", "bf16"}}, layers
    assert not [t.name for t in tasks if "pack" in t.name]

    rng = np.random.default_rng(6)
    dev = tvm.cpu()
    bf16_tasks = [t for t in tasks if TASK_NAME in t.name]
    assert len(bf16_tasks) == 2 and all(len(t.args[1][0]) == 7 for t in bf16_tasks)  # B packed
    for task in bf16_tasks:
        inputs = [rng.uniform(-1, 1, shape).astype("float32") for shape, _ in task.args[:-1]]
        inputs = [_to_bf16(x) if dtype == "bfloat16" else x for x, (_, dtype) in zip(inputs, task.args[:-1])]
        a, packed = _to_bf16(inputs[0]).astype(np.float64), inputs[1].astype(np.float64)
        k, n = a.shape[-1], task.args[-1][0][-1]
        blocks = packed[0, :, 0, 0]  # (n / 32, k / 2, 32, 2): B[k, n] = blocks[n // 32, k // 2, n % 32, k % 2]
        b = blocks.transpose(1, 3, 0, 2).reshape(blocks.shape[1] * 2, -1)[:k, :n]
        want = a @ b
        if len(inputs) == 3:  # the first layer: its bias and relu fused
            want = np.maximum(want + inputs[2], 0)
        assert every_sketch_computes(task, inputs, want, target, rng)

    lowered = lower(mod, target, winograd="off", layout="NHWC", fast_math="off", precision="bf16")
    x = rng.uniform(-1, 1, (1, ROWS, FEATURES)).astype("float32")
    got = relax.VirtualMachine(build_module(lowered, target), dev)["main"](tvm.runtime.tensor(x, dev)).numpy()
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=2e-2 * np.abs(want).max())


def test_the_gemm_is_one_row_of_the_units_width() -> None:
    """On AMX, rows in whole 16-row tiles and K, N in 32s (a tile row, a packed block); on the dot product rows as a
    register block divides them and K, N in 16s: one GEMM row, not a convolution's pair."""
    from autosearch.tensor_units.matmul import FlatMatmul

    amx = FlatMatmul(batch=(6,), m=40, k=24, n=40)
    dot = FlatMatmul(batch=(6,), m=40, k=24, n=40, unit="dpbf16")
    assert (amx.width, amx.conv.in_padded, amx.conv.out_padded) == (48, 32, 64)
    assert (dot.width, dot.conv.in_padded, dot.conv.out_padded) == (40, 32, 48)


def check_matmul_tasks(tmp_path, target) -> int:
    """Each bf16 matmul task of :func:`gram_onnx` on ``target``, every sketch at its default and at a random
    config, built and run against NumPy on the same rounded operands; returns the sketches checked."""

    from autosearch.frontend.importer import import_model
    from autosearch.tensor_units.matmul import TASK_NAME

    path = str(tmp_path / "gram.onnx")
    gram_onnx(path)
    model = import_model(path, target, layout="NHWC", precision="bf16", winograd="off")
    tasks = [t for t in model.tasks if TASK_NAME in t.name]
    assert {(t.args[0][0], t.args[1][0]) for t in tasks} == {
        ((1, HEADS, TOKENS, DIM), (1, HEADS, DIM, TOKENS)), ((1, HEADS, TOKENS, TOKENS), (1, HEADS, TOKENS, DIM)),
        ((1, HEADS, DIM, TOKENS), (1, HEADS, TOKENS, DIM))}
    rng = np.random.default_rng(3)
    checked = 0
    for task in tasks:
        (a_shape, _), (b_shape, _), _ = task.args
        a, b = (rng.uniform(-1, 1, s).astype("float32") for s in (a_shape, b_shape))
        want = _to_bf16(a).astype(np.float64) @ _to_bf16(b).astype(np.float64)
        checked += every_sketch_computes(task, [a, b], want, target, rng)
    return checked


def every_sketch_computes(task, inputs, want, target, rng) -> int:
    """Each sketch of ``task``, at its default and at a random config, built and run on ``inputs`` into an output
    filled with NaN first (a row left unwritten shows), against ``want``; returns the sketches checked."""
    import tvm

    from autosearch.search.space import DecisionSpace

    dev = tvm.cpu()
    space = DecisionSpace(task.mod, task.target)
    assert space.sketches
    for sketch in space.sketches:
        for config in (space.default(sketch.index), space.sample(rng)):
            applied = space.apply(config)
            assert applied.ok, applied.error
            out = tvm.runtime.tensor(np.full(task.args[-1][0], np.nan, "float32"), dev)
            tvm.compile(applied.mod, target=target)(*(tvm.runtime.tensor(x, dev) for x in inputs), out)
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                       err_msg=f"{task.name} config {config}")
    return len(space.sketches)


def test_bf16_matmul_tasks_on_amx_match_numpy(tmp_path, target) -> None:
    from autosearch.tensor_units.amx import request_permission

    _needs_amx(target)
    request_permission()
    assert check_matmul_tasks(tmp_path, target) >= 6


def test_bf16_matmul_tasks_on_avx512_bf16_match_numpy(tmp_path) -> None:
    _needs_avx512_bf16()
    assert check_matmul_tasks(tmp_path, _dot_target()) >= 3


def test_a_bf16_matmul_is_checked_with_bf16s_tolerance() -> None:
    """Its arguments are fp32 (it rounds them inside), so its name tells the measurement, as a convolution's bf16
    weights do; an fp32 matmul is checked at fp32's."""
    from autosearch.measure.kernels import check_tolerance
    from autosearch.tensor_units.intrinsics import rounds_to_bf16

    args = [((1, 6, 40, 24), "float32"), ((1, 6, 24, 40), "float32"), ((1, 6, 40, 40), "float32")]
    assert rounds_to_bf16("matmul_bf162", args) == rounds_to_bf16("fused_conv2d_bf16_add", args) == 1
    assert rounds_to_bf16("matmul2", args) == 0
    assert check_tolerance(args, 1e-3, bf16=1) == (2.0**-7, 2.0**-8)
    assert check_tolerance(args, 1e-3) == (1e-3, 1e-4)
    assert rounds_to_bf16("attention_bf161", args) == 2  # two products, the first's result rounded again
    assert check_tolerance(args, 1e-3, bf16=2) == (2.0**-5, 2.0**-6)


def test_an_attention_is_fused_where_nothing_else_reads_its_scores(tmp_path, target) -> None:
    """On AMX or the dot product, ``--precision bf16`` computes the attention as one task, no softmax or matmul of
    its own left; when the scores are also the model's output, the matmuls stay apart (each a bf16 matmul) and the
    softmax fp32."""
    from autosearch.frontend.importer import import_model
    from autosearch.tensor_units import attention, matmul

    _needs_bf16_unit(target)
    names = {}
    for scores_out in (False, True):
        path = str(tmp_path / f"attention{int(scores_out)}.onnx")
        gram_onnx(path, softmax=True, scores_out=scores_out)
        names[scores_out] = [t.name for t in import_model(path, target, layout="NHWC", precision="bf16").tasks]
    assert sum(attention.TASK_NAME in n for n in names[False]) == 1
    assert not any("softmax" in n for n in names[False])
    assert sum(matmul.TASK_NAME in n for n in names[False]) == 1  # the matmul after the attention
    assert not any(attention.TASK_NAME in n for n in names[True])
    assert sum(matmul.TASK_NAME in n for n in names[True]) == 3 and any("softmax" in n for n in names[True])


def test_under_layout_auto_the_fp32_side_of_an_attention_keeps_its_layer(tmp_path, target) -> None:
    """The two matmuls and the softmax are the same tasks in the NCHW and the NHWC model; merged, they stay the
    attention's fp32 alternative (or the NHWC model would count them beside its fused task), and the matmul after it
    stays a layer of its own."""
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.lowering import LAYOUTS

    _needs_bf16_unit(target)
    path = str(tmp_path / "attention.onnx")
    gram_onnx(path, softmax=True)
    tasks = import_model(path, target, layout="auto", precision="auto", layouts=LAYOUTS).tasks  # both models
    scores = f"attention:1x{HEADS}x{TOKENS}x{TOKENS}"
    fp32 = [t for t in tasks if t.lowering.get("layer") == scores and t.lowering["algorithm"] == "fp32"]
    assert sorted(t.lowering["layouts"] for t in fp32) == [["NCHW", "NHWC"]] * 3
    assert sum("softmax" in t.name for t in fp32) == 1
    assert not [t for t in tasks if ("softmax" in t.name or "matmul" in t.name) and "layer" not in t.lowering]


def _needs_bf16_unit(target) -> None:
    """Skip unless the host has a unit the fused attention runs on: AMX tiles or the AVX512-BF16 dot product."""
    from autosearch.tensor_units import cpu

    if cpu.bf16_unit(target) is None:
        pytest.skip("this CPU has neither AMX-BF16 nor AVX512-BF16")


def test_fused_attention_on_amx_matches_numpy(tmp_path, target) -> None:
    """Every sketch of the fused attention, at its default and a random config, against NumPy with bf16's
    numerics: q, k and v rounded, scores and softmax exact, the probabilities rounded before the second product."""
    from autosearch.tensor_units.amx import request_permission

    _needs_amx(target)
    request_permission()
    _fused_attention_matches_numpy(tmp_path, target, sketches=8)  # 40 rows to 64, 40 columns to 64, 24 to 32


def test_fused_attention_on_the_dot_product_matches_numpy(tmp_path) -> None:
    """The same on AVX512-BF16 without AMX (AMD Zen 4): blocks of 16 or 32 query rows, each product in
    accumulator blocks of 8 rows x 32 columns or 16 x 16, every combination the extents allow."""
    _needs_avx512_bf16()
    _fused_attention_matches_numpy(tmp_path, _dot_target(), sketches=8)


def _fused_attention_matches_numpy(tmp_path, target, *, sketches: int) -> None:
    import tvm

    from autosearch.frontend.importer import import_model
    from autosearch.search.space import DecisionSpace
    from autosearch.tensor_units import attention

    path = str(tmp_path / "attention.onnx")
    gram_onnx(path, softmax=True)
    model = import_model(path, target, layout="NHWC", precision="bf16")
    (task,) = [t for t in model.tasks if attention.TASK_NAME in t.name]
    rng = np.random.default_rng(5)
    q, k, v = (rng.uniform(-2, 2, shape).astype("float32") for shape, _ in task.args[:3])

    def rounded(x):
        return _to_bf16(x).astype(np.float64)

    scores = rounded(q) @ rounded(k)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    want = rounded(probs / probs.sum(-1, keepdims=True)) @ rounded(v)
    space = DecisionSpace(task.mod, task.target)
    assert len(space.sketches) == sketches
    dev = tvm.cpu()
    for sketch in space.sketches:
        for config in (space.default(sketch.index), space.sample(rng)):
            applied = space.apply(config)
            assert applied.ok, applied.error
            out = tvm.runtime.tensor(np.full(want.shape, np.nan, "float32"), dev)
            tvm.compile(applied.mod, target=target)(*(tvm.runtime.tensor(a, dev) for a in (q, k, v)), out)
            np.testing.assert_allclose(out.numpy(), want, rtol=2e-2, atol=2.0**-7 * np.abs(want).max(),
                                       err_msg=f"config {config}")


def test_an_attention_and_a_matmul_tuned_both_ways_then_exported_and_compiled(tmp_path, target) -> None:
    """A real run with ``--precision auto`` on AMX or the dot product: the attention is one layer, its fused bf16
    task against its two matmuls and softmax in fp32, and the matmul after it another, bf16 against fp32; every bf16
    kernel passes the check against its fp32 reference, export records each layer's faster precision, and the
    compiled model is within bf16's tolerance of ONNX Runtime's output."""
    import onnxruntime as ort
    import tvm

    from autosearch.deploy.artifact import load_model
    from autosearch.deploy.database import database_lowering
    from autosearch.search.dataset import tensorised
    from autosearch.tensor_units import attention, matmul

    _needs_bf16_unit(target)
    run = tune_and_export(tmp_path, lambda p: gram_onnx(p, softmax=True), trials=24, batch=4,
                          options=("--layout", "NHWC", "--precision", "auto", "--winograd", "off",
                                   "--finalist-rounds", "0"))
    records = [json.loads(line) for line in open(run["log"])]
    layers: dict[str, dict[str, set[str]]] = {}
    for h in (r["task"] for r in records if r["kind"] == "task"):
        if "layer" in h["lowering"]:
            layers.setdefault(h["lowering"]["layer"], {}).setdefault(h["lowering"]["algorithm"], set()).add(h["name"])
    scores = f"attention:1x{HEADS}x{TOKENS}x{TOKENS}"
    product = f"1x{HEADS}x{DIM}x{TOKENS}@1x{HEADS}x{TOKENS}x{DIM}"
    assert set(layers) == {scores, product}
    assert [n for n in layers[scores]["bf16"]] == [n for n in layers[scores]["bf16"] if attention.TASK_NAME in n]
    assert sum("matmul" in n for n in layers[scores]["fp32"]) == 2
    assert sum("softmax" in n for n in layers[scores]["fp32"]) == 1
    assert all(matmul.TASK_NAME in n for n in layers[product]["bf16"])
    bf16 = [r for r in records if r["kind"] == "trial" and tensorised(r["task"]["name"])]
    assert {attention.TASK_NAME in r["task"]["name"] for r in bf16} == {True, False}
    assert all(r["result"]["status"] == "ok" for r in bf16), [r["result"] for r in bf16]
    choices = database_lowering(run["db"])["choices"]
    assert {scores, product} <= set(choices) and set(choices.values()) <= {"fp32", "bf16"}

    library = str(tmp_path / "model.so")
    proc = run_cli("compile", "--model", run["model"], "--db", run["db"], "--out", library)
    assert proc.returncode == 0, proc.stderr[-2000:]
    x = np.random.default_rng(4).uniform(-1, 1, (1, HEADS, TOKENS, DIM)).astype("float32")
    got = load_model(library)(tvm.runtime.tensor(x, tvm.cpu())).numpy()
    want = ort.InferenceSession(run["model"], providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=2e-2 * np.abs(want).max())
