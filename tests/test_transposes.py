"""An ONNX ``Pad`` written as Relax's ``nn.pad`` (autosearch/frontend/padding.py) and the transposes back to NCHW
moved past pads, poolings and concatenations (autosearch/frontend/transposes.py): an HGNet stem lowered to NHWC
stays NHWC and computes ONNX Runtime's output."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

SHAPE = (1, 3, 16, 16)


def stem_onnx(widths: tuple[int, int] = (8, 4)) -> onnx.ModelProto:
    """RT-DETR's HGNet stem, small: a strided convolution to ``widths[0]`` channels, a pad of one row and column
    after, then a max pooling (2x2, stride 1) beside two convolutions (to ``widths[1]`` channels and back; the second
    after a pad of its own), both concatenated on channels and read by a last convolution."""
    rng = np.random.default_rng(0)
    a, b = widths

    def weight(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape,
                                  (0.1 * rng.standard_normal(shape)).astype("float32").ravel())

    pads = helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 0, 0, 0, 0, 1, 1])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Pad", ["r1", "pads"], ["p1"], mode="constant"),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Pad", ["r2", "pads"], ["p2"], mode="constant"),
        helper.make_node("Conv", ["p2", "w3"], ["c3"], kernel_shape=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("MaxPool", ["p1"], ["pool"], kernel_shape=[2, 2], strides=[1, 1], ceil_mode=1),
        helper.make_node("Concat", ["pool", "r3"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w4"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "hgnet_stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, a, 4, 4])],
        [pads, weight("w1", [a, 3, 3, 3]), weight("b1", [a]), weight("w2", [b, a, 2, 2]), weight("w3", [a, b, 2, 2]),
         weight("w4", [a, 2 * a, 3, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _lowered(layout: str, target):
    from autosearch.frontend.importer import to_relax
    from autosearch.frontend.lowering import lower

    return lower(to_relax(stem_onnx(), {"x": SHAPE}), target, layout=layout, precision="fp32", winograd="off")


def _kernels(lowered) -> list[str]:
    from tvm import tirx

    return sorted(gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc))


def _run_untuned(lowered, target, x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.lowering import apply_database, build_module

    vm = relax.VirtualMachine(build_module(apply_database(lowered, target, ms.database.MemoryDatabase()), target),
                              tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()


def test_an_hgnet_stem_lowered_to_nhwc_stays_nhwc_and_matches_onnxruntime(target):
    """NHWC: no kernel transposes between the first convolution and the last (the pads, the pooling and the
    concatenation run on NHWC tensors; only the image in and the output out are transposed); NCHW keeps its pads.
    In neither is a pad fused into the epilogue of the convolution before it, where a bias is. Both compute ONNX
    Runtime's output."""
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(1).standard_normal(SHAPE).astype("float32")
    session = ort.InferenceSession(stem_onnx().SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]

    nhwc = _lowered("NHWC", target)
    names = _kernels(nhwc)
    transposing = [n for n in names if "transpose" in n]
    assert len(transposing) <= 2, names  # the image to NHWC and the output back, nothing between
    assert not any(op in n for n in transposing for op in ("pad", "pool", "concatenate")), names
    assert any("max_pool2d" in n for n in names) and any("pad" in n for n in names), names
    np.testing.assert_allclose(_run_untuned(nhwc, target, x), want, rtol=1e-4, atol=1e-4)

    nchw = _lowered("NCHW", target)
    assert not any("transpose" in n for n in _kernels(nchw)), _kernels(nchw)
    for names in (_kernels(nhwc), _kernels(nchw)):  # TVM calls such a pad element-wise (lowering's docstring)
        assert not any("conv2d" in n and "pad" in n for n in names), names
        assert any("conv2d" in n and "add" in n for n in names), names  # a broadcast bias still fuses
    np.testing.assert_allclose(_run_untuned(nchw, target, x), want, rtol=1e-4, atol=1e-4)


def _emitted(pad, shape, *args):
    """The PrimFunc ``bb.emit_te(pad, x, *args)`` writes, as TVM's ONNX importer calls it."""
    from tvm import relax, tirx

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with builder.function("main", [x]):
        builder.emit_func_output(builder.emit_te(pad, x, *args))
    return next(f for f in builder.get().functions.values() if isinstance(f, tirx.PrimFunc))


def test_only_constant_pads_are_read_back_with_their_widths_and_value():
    """A constant pad of any axes comes back with its widths and value; a reflect or edge pad, whose TIR also reads
    the input at shifted indices, is not taken for one."""
    from tvm import topi

    from autosearch.frontend.padding import pad_of

    shape = [2, 3, 5, 7]
    constant = _emitted(topi.nn.pad, shape, [0, 1, 2, 0], [1, 0, 3, 2], -1.5)
    assert pad_of(constant, shape, "float32") == ([0, 1, 2, 0], [1, 0, 3, 2], -1.5)
    assert pad_of(constant, [2, 3, 5, 6], "float32") is None  # another input shape: widths that do not add up
    reflect = _emitted(topi.nn.mirror_pad, shape, [0, 0, 1, 1], [0, 0, 1, 1], "REFLECT")
    edge = _emitted(topi.nn.replicate_pad, shape, [0, 0, 1, 1], [0, 0, 1, 1])
    assert pad_of(reflect, shape, "float32") is None and pad_of(edge, shape, "float32") is None


def test_a_transpose_stays_where_an_operand_is_not_transposed_and_the_rest_computes_the_same(target):
    """A concatenation of one transposed tensor and one NCHW input keeps its NCHW operands (nothing to sink); a
    pad, an average pooling counting its padding and a pad with a value, each after a transpose, move past it; the
    module computes what it did."""
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from autosearch.frontend.transposes import sink_transposes

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((1, 5, 6, 4), "float32"), z: R.Tensor((1, 2, 7, 6), "float32")):
            with R.dataflow():
                t = R.permute_dims(x, axes=[0, 3, 1, 2])
                p = R.nn.pad(t, pad_width=[0, 0, 1, 0, 1, 1, 0, 0], pad_value=2.5)
                q = R.nn.avg_pool2d(p, pool_size=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1],
                                    count_include_pad=True)
                c = R.concat((q, z), axis=1)
                y = R.permute_dims(q, axes=[0, 2, 3, 1])
                R.output(c, y)
            return (c, y)

    sunk = sink_transposes()(Module)
    text = sunk.script()
    assert 'layout="NHWC"' in text and text.count("R.permute_dims") == 1, text  # q's transpose, for the concat
    rng = np.random.default_rng(0)
    x, z = rng.standard_normal((1, 5, 6, 4)).astype("float32"), rng.standard_normal((1, 2, 7, 6)).astype("float32")
    outs = []
    for mod in (Module, sunk):
        vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
        c, y = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(z))
        outs.append((c.numpy(), y.numpy()))
    for got, want in zip(outs[1], outs[0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_in_bf16_the_stem_between_its_convolutions_runs_on_bf16():
    """RT-DETR's stem widths lowered for AMX: every activation between the convolutions (the pads, the pooling,
    the concatenation) is written in bf16, each convolution's output rounded in its own epilogue, and no kernel
    only casts or transposes but the output's transpose back to NCHW."""
    import re

    from autosearch.frontend.importer import to_relax
    from autosearch.frontend.lowering import lower
    from tests.bf16_models import amx_target

    lowered = lower(to_relax(stem_onnx((32, 16)), {"x": SHAPE}), amx_target(), layout="NHWC", precision="bf16",
                    winograd="off")
    text = lowered["main"].script()
    kernels = {m.group(1): m.group(2) for m in re.finditer(r'R\.call_tir\((?:cls\.)?(\w+),.*?dtype="(\w+)"\)\)', text)}
    between = {k: d for k, d in kernels.items() if any(op in k for op in ("pad", "max_pool2d", "concatenate"))}
    assert len(between) == 4 and set(between.values()) == {"bfloat16"}, kernels
    assert sum("conv2d_bf16" in k for k in kernels) == 4, kernels
    alone = [k for k in kernels if re.fullmatch(r"(cast|transpose)\d*", k)]
    assert alone == [list(kernels)[-1]] and alone[0].startswith("transpose"), kernels  # the output's, to NCHW
