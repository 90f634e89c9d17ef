"""Activations between bf16 convolutions kept in bf16 (:mod:`autosearch.tensor_units.activations`): which
activations the lowering rounds where they are computed, which stay fp32, that every choice of bf16 layers lowers
to tasks the tuner extracted, and that a model mixing bf16 and fp32 layers computes what ONNX Runtime does."""

from __future__ import annotations

import itertools
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosearch.tensor_units import cpu
from autosearch.tensor_units.pooling import WINDOW_MAX
from tests.bf16_models import amx_target, relax_of


def _conv(rng, name: str, cin: int, cout: int, data: str, out: str) -> tuple[list, list]:
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype("float32"), f"{name}_w")
    nodes = [helper.make_node("Conv", [data, f"{name}_w"], [f"{name}_c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [f"{name}_c"], [out])]
    return nodes, [w]


def chain_onnx(*, reader: str | None = None) -> onnx.ModelProto:
    """conv -> relu -> maxpool -> conv -> relu (-> combined with the pooled activation by ``reader``, ``Add`` or
    ``Mul``) -> conv -> relu: with ``reader`` the pooled activation has a reader no convolution is (a residual add,
    or a product)."""
    rng = np.random.default_rng(0)
    n1, w1 = _conv(rng, "a", 16, 32, "x", "r1")
    pool = [helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2], strides=[2, 2])]
    n2, w2 = _conv(rng, "b", 32, 32, "p", "r2")
    combine = [helper.make_node(reader, ["r2", "p"], ["s"])] if reader else []
    n3, w3 = _conv(rng, "c", 32, 32, "s" if reader else "r2", "y")
    graph = helper.make_graph([*n1, *pool, *n2, *combine, *n3], "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 8, 8])], [*w1, *w2, *w3])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def split_onnx(*, shortcut: bool) -> onnx.ModelProto:
    """YOLO's C2f block: conv -> relu -> split in two along the channels; the second half -> conv -> relu (+ that
    half with ``shortcut``); the two halves and that -> concat -> conv -> relu."""
    rng = np.random.default_rng(0)
    n1, w1 = _conv(rng, "a", 16, 32, "x", "r1")
    split = [helper.make_node("Split", ["r1", "sizes"], ["h0", "h1"], axis=1)]
    sizes = numpy_helper.from_array(np.array([16, 16], "int64"), "sizes")
    n2, w2 = _conv(rng, "b", 16, 16, "h1", "r2")
    add = [helper.make_node("Add", ["h1", "r2"], ["m"])] if shortcut else []
    cat = [helper.make_node("Concat", ["h0", "h1", "m" if shortcut else "r2"], ["c"], axis=1)]
    n3, w3 = _conv(rng, "c", 48, 32, "c", "y")
    graph = helper.make_graph([*n1, *split, *n2, *add, *cat, *n3], "c2f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
                              [*w1, sizes, *w2, *w3])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def c3k2_onnx() -> onnx.ModelProto:
    """YOLO11's and YOLO26's first C3k2 block in miniature: conv (16 -> 32) -> relu -> split in halves; the second
    half through a bottleneck that narrows it, conv 16 -> 8 and 8 -> 16 (too few channels for the tile unit), plus
    that half; the halves and the sum concatenated -> conv (48 -> 32) -> relu."""
    rng = np.random.default_rng(0)
    n1, w1 = _conv(rng, "a", 16, 32, "x", "r1")
    split = [helper.make_node("Split", ["r1", "sizes"], ["h0", "h1"], axis=1)]
    sizes = numpy_helper.from_array(np.array([16, 16], "int64"), "sizes")
    n2, w2 = _conv(rng, "b", 16, 8, "h1", "r2")
    n3, w3 = _conv(rng, "c", 8, 16, "r2", "r3")
    add = [helper.make_node("Add", ["h1", "r3"], ["m"])]
    cat = [helper.make_node("Concat", ["h0", "h1", "m"], ["c"], axis=1)]
    n4, w4 = _conv(rng, "d", 48, 32, "c", "y")
    graph = helper.make_graph([*n1, *split, *n2, *n3, *add, *cat, *n4], "c3k2",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
                              [*w1, sizes, *w2, *w3, *w4])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _kernels(lowered) -> dict[str, str]:
    """Each call_tir's PrimFunc name -> the dtype of its output, in the order the lowered model calls them."""
    text = lowered["main"].script()
    return {m.group(1): m.group(2) for m in re.finditer(r'R\.call_tir\((?:cls\.)?(\w+),.*?dtype="(\w+)"\)\)', text)}


def test_activations_read_only_by_bf16_convolutions_are_written_in_bf16() -> None:
    from autosearch.frontend.lowering import lower

    kernels = _kernels(lower(relax_of(chain_onnx()), amx_target(), winograd="off", layout="NHWC", precision="bf16"))
    convs = {name: dtype for name, dtype in kernels.items() if "conv2d" in name}
    assert len(convs) == 3, kernels
    (first, dtype1), (_, dtype2), (_, dtype3) = convs.items()  # in the order the model runs them
    assert (dtype1, dtype2) == ("bfloat16", "bfloat16"), convs  # the rounding fused into their epilogues
    assert dtype3 == "float32", convs  # the model's output
    # the pooling (exact on rounded values) fused into the first convolution: no kernel of its own
    assert WINDOW_MAX in first and not [k for k in kernels if "pool" in k and "conv2d" not in k], kernels


def test_an_activation_with_another_reader_stays_fp32() -> None:
    from tvm import relax

    from autosearch.frontend.lowering import lower
    from autosearch.tensor_units.activations import bf16_region

    mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(relax_of(chain_onnx(reader="Mul")))
    region, convs = bf16_region(mod["main"])
    bindings = mod["main"].body.blocks[0].bindings
    pooled = [b.var for b in bindings if b.value.op.name == "relax.nn.max_pool2d"]
    first, second, third = (b.var for b in bindings if b.value.op.name == "relax.nn.conv2d")
    assert pooled and pooled[0] not in region  # read by the product as well as by the second convolution
    kernels = _kernels(lower(relax_of(chain_onnx(reader="Mul")), amx_target(), winograd="off", layout="NHWC",
                             precision="bf16"))
    assert any(k.startswith("max_pool2d") for k in kernels), kernels  # not fused: its output stays fp32
    assert second not in convs and {first, third} <= convs  # the first reads the transposed input, the third the sum


def test_a_residual_add_reads_in_bf16_what_a_convolution_does_and_its_sum_is_rounded() -> None:
    """The pooled activation, read by the second convolution and by the residual add after it: kept in bf16 (the
    pooling fused into the first convolution), the add widening it in the second convolution's epilogue, the sum
    rounded there for the third. A product in the add's place keeps it fp32 (the test above)."""
    from tvm import relax

    from autosearch.frontend.lowering import lower
    from autosearch.tensor_units.activations import bf16_region

    mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(relax_of(chain_onnx(reader="Add")))
    region, convs = bf16_region(mod["main"])
    bindings = mod["main"].body.blocks[0].bindings
    pooled = next(b.var for b in bindings if b.value.op.name == "relax.nn.max_pool2d")
    total = next(b.var for b in bindings if b.value.op.name == "relax.add" and pooled in list(b.value.args))
    assert {pooled, total} <= region and len(convs) == 3
    kernels = _kernels(lower(relax_of(chain_onnx(reader="Add")), amx_target(), winograd="off", layout="NHWC",
                             precision="bf16"))
    convs = [(name, dtype) for name, dtype in kernels.items() if "conv2d" in name]
    assert [dtype for _, dtype in convs] == ["bfloat16", "bfloat16", "float32"], kernels
    assert WINDOW_MAX in convs[0][0] and not [k for k in kernels if "pool" in k and "conv2d" not in k], kernels
    # the residual add in the second convolution's epilogue: widen (cast), add, round (cast); no kernel of its own
    assert re.search(r"conv2d_bf16\w*_cast\w*_add\w*_cast", convs[1][0]), kernels
    assert len(kernels) == 5, kernels  # the input's transposition and rounding, three convolutions, the output's


@pytest.mark.parametrize("shortcut", [False, True])
def test_a_split_passes_bf16_to_its_convolutions_and_concatenation(shortcut) -> None:
    """A C2f block: the split's input is written in bf16 by the first convolution, the split and the
    concatenation run on bf16, with or without the residual add (which reads its half in bf16)."""
    from autosearch.frontend.lowering import lower

    kernels = _kernels(lower(relax_of(split_onnx(shortcut=shortcut)), amx_target(), winograd="off", layout="NHWC",
                             precision="bf16"))
    assert not [k for k in kernels if re.fullmatch(r"(fused_)?cast\d*", k)], kernels  # no rounding of its own
    first = next(k for k in kernels if "conv2d" in k)
    assert kernels[first] == "bfloat16", kernels
    moves = {k: dtype for k, dtype in kernels.items() if "conv2d" not in k and "transpose" not in k}
    assert moves and set(moves.values()) == {"bfloat16"}, kernels  # the split's parts and the concatenation
    assert ("_add" in " ".join(kernels)) == shortcut, kernels


def test_a_convolution_too_narrow_for_the_unit_reads_bf16_where_the_others_keep_it() -> None:
    """A C3k2 block whose bottleneck is too narrow for the tile unit: its half is kept in bf16 for the concatenation
    and the residual add anyway, so the narrow convolution reads it in bf16 through a cast in its own kernel, and the
    split, the sum and the concatenation stay on bf16 (they were fp32, with a rounding kernel before the last
    convolution)."""
    from autosearch.frontend.lowering import lower

    lowered = lower(relax_of(c3k2_onnx()), amx_target(), winograd="off", layout="NHWC", precision="bf16")
    kernels = _kernels(lowered)
    assert not [k for k in kernels if re.fullmatch(r"(fused_)?(concatenate\d*_)?cast\d*", k)], kernels
    moves = {k: dtype for k, dtype in kernels.items() if "conv2d" not in k and "transpose" not in k}
    assert moves and set(moves.values()) == {"bfloat16"}, kernels  # the split's parts and the concatenation
    [narrow] = [name for name in kernels if "conv2d" in name and "conv2d_bf16" not in name]  # 16 -> 8, in fp32
    data = re.search(r'def main\(\w+: T\.Buffer\(\(.*?\)\), "(\w+)"\)', lowered[narrow].script())
    assert data and data.group(1) == "bfloat16", lowered[narrow].script()[:600]
    assert kernels[narrow] == "bfloat16", kernels  # read by the 8 -> 16 convolution, which the unit runs (taps grouped)


def test_a_narrow_convolution_reading_bf16_computes_what_onnxruntime_does() -> None:
    """The C3k2 block above built for the dot product and run: within bf16's tolerance of ONNX Runtime fp32."""
    from tests.test_dpbf16 import _dot_target, _needs_avx512_bf16

    _needs_avx512_bf16()
    import onnxruntime as ort
    import tvm

    from autosearch.frontend.lowering import build_module, lower

    proto, target = c3k2_onnx(), _dot_target()
    lowered = lower(relax_of(proto), target, winograd="off", layout="NHWC", precision="bf16")
    assert any("conv2d_bf16" in k for k in _kernels(lowered))
    x = np.random.default_rng(2).uniform(-1, 1, (1, 16, 16, 16)).astype("float32")
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    vm = tvm.relax.VirtualMachine(build_module(lowered, target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=2e-2 * np.abs(want).max())


def test_every_choice_of_bf16_layers_lowers_to_extracted_tasks() -> None:
    """The lowering rounds activations by the graph, not by the tuner's choices: a model with any layers in bf16
    runs only tasks that ``--precision auto`` extracted (else export would leave kernels untuned)."""
    from autosearch.frontend.importer import _extract, extract_tasks
    from autosearch.frontend.winograd import WinogradPolicy

    relax_mod, target = relax_of(chain_onnx()), amx_target()
    extracted = {t.workload_key for t in extract_tasks(relax_mod, target, winograd="off", layout="NHWC",
                                                       precision="auto")}
    layers = sorted({t.lowering["layer"] for t in extract_tasks(relax_mod, target, winograd="off", layout="NHWC",
                                                                precision="auto") if "layer" in t.lowering})
    assert len(layers) == 2  # the last two convolutions have one shape: one choice (their tasks differ)
    for bf16 in ([], layers[:1], layers[1:], layers):
        choices = {layer: "bf16" if layer in bf16 else "fp32" for layer in layers}
        policy = WinogradPolicy.of("off", choices, precision="auto")
        used = {t.workload_key for t in _extract(relax_mod, target, policy, "off", "NHWC", precision="auto")}
        assert used <= extracted, (bf16, used - extracted)


def test_report_checks_fp32_layers_on_bf16_activations_as_bf16(tmp_path) -> None:
    """Every layer kept in fp32 by a ``--precision auto`` export still reads activations rounded to bf16 (the test
    above): report names the tuned row so and checks it with bf16's tolerance, not fp32's (1e-3, which such a
    model misses by far); a layer in bf16 is counted; ``--precision fp32`` is fp32."""
    from autosearch.deploy.report import tuned_row
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.winograd import WinogradPolicy

    path = str(tmp_path / "chain.onnx")
    onnx.save(chain_onnx(), path)
    auto = import_model(path, amx_target(), winograd="off", layout="NHWC", precision="auto")
    layers = sorted({t.lowering["layer"] for t in auto.tasks if "layer" in t.lowering})
    assert len(layers) == 2
    fp32 = WinogradPolicy.of("off", {layer: "fp32" for layer in layers}, precision="auto")
    assert tuned_row(auto, fp32) == ("TVM tuned (fp32 layers, bf16 activations)", "bf16")
    one = WinogradPolicy.of("off", {layers[0]: "bf16", layers[1]: "fp32"}, precision="auto")
    assert tuned_row(auto, one) == ("TVM tuned (bf16 on 1 layer)", "bf16")
    exact = import_model(path, amx_target(), winograd="off", layout="NHWC", precision="fp32")
    assert tuned_row(exact, WinogradPolicy.of("off", None, precision="fp32")) == ("TVM tuned", "f32")


@pytest.mark.parametrize("model", ["chain", "residual", "c2f"])
def test_a_model_mixing_bf16_and_fp32_layers_matches_onnxruntime(target, model) -> None:
    """Layers in bf16 and in fp32 (one reading a bf16 activation through its own cast), built untuned and run:
    within bf16's tolerance of ONNX Runtime fp32; with a residual add reading in bf16, and with a split."""
    if not cpu.has_amx_bf16(target):
        pytest.skip("this CPU has no AMX (amx_tile and amx_bf16 in /proc/cpuinfo)")
    import onnxruntime as ort
    import tvm

    from autosearch.frontend.importer import extract_tasks
    from autosearch.frontend.lowering import build_module, lower
    from autosearch.frontend.winograd import WinogradPolicy
    from autosearch.tensor_units.amx import request_permission

    request_permission()
    proto = {"chain": chain_onnx(), "residual": chain_onnx(reader="Add"), "c2f": split_onnx(shortcut=True)}[model]
    relax_mod = relax_of(proto)
    layers = sorted({t.lowering["layer"] for t in extract_tasks(relax_mod, target, winograd="off", layout="NHWC",
                                                                precision="auto") if "layer" in t.lowering})
    x = np.random.default_rng(2).uniform(-1, 1, (1, 16, 16, 16)).astype("float32")
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for bf16 in (layers[:1], layers[1:]):
        choices = {layer: "bf16" if layer in bf16 else "fp32" for layer in layers}
        policy = WinogradPolicy.of("off", choices, precision="auto")
        lowered = lower(relax_mod, target, winograd=policy, layout="NHWC")
        kinds = " ".join(_kernels(lowered))
        assert "conv2d_bf16" in kinds and kinds.count("conv2d") > kinds.count("conv2d_bf16"), kinds
        vm = tvm.relax.VirtualMachine(build_module(lowered, target), tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
        np.testing.assert_allclose(got, want, rtol=5e-2, atol=2e-2 * np.abs(want).max(), err_msg=str(bf16))


@pytest.mark.parametrize("unit", ["AMX-BF16", "AVX512-BF16"])
def test_a_task_with_its_pooling_fused_matches_numpy_in_every_sketch(tmp_path, target, unit) -> None:
    """The first convolution of the chain with its 2x2 max pooling fused (bf16 in, bf16 pooled out), every sketch
    on ``unit`` with its default and a random config, against NumPy on the same rounded operands."""
    if unit == "AMX-BF16" and not cpu.has_amx_bf16(target):
        pytest.skip("this CPU has no AMX (amx_tile and amx_bf16 in /proc/cpuinfo)")
    if unit == "AVX512-BF16":
        from tests.test_dpbf16 import _dot_target, _needs_avx512_bf16

        _needs_avx512_bf16()
        target = _dot_target()
    import tvm

    from autosearch.frontend.importer import import_model
    from autosearch.search.space import DecisionSpace
    from autosearch.tensor_units.amx import request_permission
    from autosearch.types import Config
    from tests.test_tensor_units import _conv_nhwc_relu, _packed, _to_bf16

    request_permission()
    path = str(tmp_path / "chain.onnx")
    proto = chain_onnx()
    onnx.save(proto, path)
    task = next(t for t in import_model(path, target, layout="NHWC", precision="bf16").tasks
                if "conv2d_bf16" in t.name and WINDOW_MAX in t.name)
    assert list(task.args[0][0]) == [1, 16, 16, 16], task.args
    assert (list(task.args[-1][0]), task.args[-1][1]) == ([1, 8, 8, 32], "bfloat16"), task.args  # pooled
    w = _to_bf16(numpy_helper.to_array(proto.graph.initializer[0]).transpose(0, 2, 3, 1))  # OIHW -> OHWI
    x = _to_bf16(np.random.default_rng(1).uniform(-1, 1, (1, 16, 16, 16)))
    conv = _conv_nhwc_relu(x, w)
    want = conv.reshape(1, 8, 2, 8, 2, 32).max(axis=(2, 4))
    space = DecisionSpace(task.mod, task.target)
    prefix = {"AMX-BF16": "amx_conv_bf16_", "AVX512-BF16": "dpbf16_conv_"}[unit]
    assert space.sketches and all(prefix in str(s.trace) for s in space.sketches)
    # every tile choice applies, those that leave a parallel block one row pair (one pooled row) included
    failed = [(s.index, values) for s in space.sketches
              for values in itertools.product(*(d.choices for d in s.decisions))
              if not space.apply(Config(s.index, values)).ok]
    assert not failed, failed
    rng = np.random.default_rng(2)
    dev = tvm.cpu()
    for sketch in space.sketches:
        for config in (space.default(sketch.index), space.sample(rng)):
            applied = space.apply(config)
            assert applied.ok, applied.error
            out = tvm.runtime.tensor(np.zeros(want.shape, _to_bf16(want).dtype), dev)
            tvm.compile(applied.mod, target=target)(tvm.runtime.tensor(x, dev),
                                                     tvm.runtime.tensor(_packed(w, task.args[1][0]), dev), out)
            np.testing.assert_allclose(out.numpy().astype("float32"), want, rtol=1e-2, atol=1e-2 * np.abs(want).max(),
                                       err_msg=f"config {config}")
