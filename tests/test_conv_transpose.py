"""Transposed convolutions (a segmentation export's mask upsampling) lower, tune and build in both layouts."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from autosearch.frontend.importer import extract_tasks, to_relax
from autosearch.frontend.lowering import build_module, lower

SHAPE = (1, 3, 10, 12)


def _model(kernel: int, stride: int, pad: int, output_pad: int) -> onnx.ModelProto:
    """conv 3 -> 8, transposed conv 8 -> 5, conv 5 -> 4: the transposed one between two layers a layout converts."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (8, 3, 3, 3)), ("w2", (8, 5, kernel, kernel)), ("w3", (4, 5, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["h", "w2"], ["y"], strides=[stride, stride], pads=[pad] * 4,
                              output_padding=[output_pad] * 2),
             helper.make_node("Conv", ["y", "w3"], ["z"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _transposed_kernel(mod):
    """The lowered module's transposed-convolution PrimFunc (exactly one), as TVMScript with plain integers."""
    funcs = [f for gv, f in mod.functions.items() if "conv2d_transpose" in gv.name_hint]
    assert len(funcs) == 1, [gv.name_hint for gv in mod.functions]
    return re.sub(r"T\.int64\((\d+)\)", r"\1", funcs[0].script())


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case, one_tap", [((2, 2, 0, 0), True), ((3, 2, 1, 1), False), ((4, 2, 1, 0), False)])
def test_transposed_convolutions_build_in_either_layout_and_match_onnxruntime(case, one_tap, layout, target):
    import onnxruntime as ort

    proto = _model(*case)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    lowered = lower(to_relax(proto, {"x": SHAPE}), target, winograd="off", layout=layout, fast_math="off",
                    precision="fp32")
    script = _transposed_kernel(lowered)
    # a filter as large as its stride takes one tap a pixel: no zeros dilated into the input to multiply
    assert ("data_dilate" not in script) == one_tap, script
    # computed in the layout of the layers around it (every case's output is 20 x 24 x 5)
    assert ("(1, 20, 24, 5)" if layout == "NHWC" else "(1, 5, 20, 24)") in script
    vm = relax.VirtualMachine(build_module(lowered, target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_an_nhwc_transposed_convolution_is_a_task_of_the_model(target):
    """Before, ConvertLayout made it NHWC, TVM's legalisation left it un-lowered: no task, and no build."""
    mod = to_relax(_model(2, 2, 0, 0), {"x": SHAPE})
    for layout in ("NCHW", "NHWC"):
        tasks = extract_tasks(mod, target, winograd="off", layout=layout, fast_math="off")
        transposed = [t for t in tasks if "conv2d_transpose" in t.name]
        assert len(transposed) == 1, [t.name for t in tasks]
        assert transposed[0].flops == 2 * 8 * 5 * 20 * 24  # one multiply-add per input channel and output value


def test_an_op_tvm_leaves_unlowered_is_named_before_any_tuning(target, monkeypatch):
    """TVM's legalisation returns a call it cannot lower as it was, and the VM fails on it in the build, after the
    run: the lowering names it first, with the layout that has no lowering."""
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d_transpose

    from autosearch.errors import UserError
    from autosearch.frontend import conv_transpose
    from autosearch.frontend.lowering import unlowered_ops

    mod = to_relax(_model(2, 2, 0, 0), {"x": SHAPE})
    with target:
        nhwc = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
        assert unlowered_ops(relax.transform.LegalizeOps()(nhwc)) == ["nn.conv2d_transpose (NHWC)"]
        assert unlowered_ops(relax.transform.LegalizeOps()(mod)) == []  # NCHW: TOPI's
    assert unlowered_ops(lower(mod, target, winograd="off", layout="NHWC")) == []

    monkeypatch.setattr(conv_transpose, "legalize", _nn_conv2d_transpose)  # the lowering as TVM has it
    with pytest.raises(UserError, match=r"no lowering for nn.conv2d_transpose \(NHWC\) in the NHWC lowering.*"
                                        r"--layout NCHW"):
        extract_tasks(mod, target, winograd="off", layout="NHWC")
    assert extract_tasks(mod, target, winograd="off", layout="NCHW")


def test_a_bf16_transposed_convolution_sums_in_fp32(target):
    """A bf16 call (bf16 data and weights) is summed in fp32 and rounded once: over 256 input channels a bf16 sum
    would round at every step."""
    import ml_dtypes

    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 4, 256)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((256, 8, 2, 2)).astype(ml_dtypes.bfloat16)
    bb = relax.BlockBuilder()
    data = relax.Var("x", relax.TensorType(x.shape, "bfloat16"))
    with bb.function("main", [data]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.conv2d_transpose(
                data, relax.const(w), strides=[2, 2], data_layout="NHWC", kernel_layout="IOHW", out_layout="NHWC")))
        bb.emit_func_output(out)
    lowered = lower(bb.get(), target, winograd="off", layout="NHWC", fast_math="off", precision="fp32")
    assert "data_dilate" not in _transposed_kernel(lowered)
    got = relax.VirtualMachine(build_module(lowered, target), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    want = np.einsum("nhwc,cokl->nhkwlo", xf, wf).reshape(1, 8, 8, 8)  # each output pixel: one input pixel, one tap
    error = np.abs(got.astype(np.float32) - want).max() / np.abs(want).max()
    assert error < 2 ** -8, error  # one bf16 rounding of the fp32 sum
