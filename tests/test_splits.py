"""A split that undoes a concatenation made before reshapes, transposes and other concatenations, rewritten to take
its pieces from the concatenation's inputs (autosearch/frontend/splits.py): a detection head's box / class split
leaves no channel concatenation behind, and the model computes ONNX Runtime's output in both layouts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

SHAPE = (1, 3, 16, 16)
BOX, CLS = 4, 3


def head_onnx(cuts: tuple[int, ...] = (BOX, CLS)) -> onnx.ModelProto:
    """A YOLOv8 detection head, small: two levels (16 x 16, and 8 x 8 by a strided convolution), each a box and a
    class convolution concatenated on the channels and flattened, the levels concatenated along the anchors, then
    split on the channels at ``cuts`` and put together again as Ultralytics' output is (boxes, sigmoid of the
    classes). Cuts other than (BOX, CLS) cut a level's concatenation in the middle of an input."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def conv(x, out, channels, stride=1):
        w = helper.make_tensor(f"w_{out}", TensorProto.FLOAT, [channels, 3, 3, 3],
                               (0.2 * rng.standard_normal((channels, 3, 3, 3))).astype("float32").ravel())
        inits.append(w)
        nodes.append(helper.make_node("Conv", [x, f"w_{out}"], [out], kernel_shape=[3, 3], strides=[stride] * 2,
                                      pads=[1, 1, 1, 1]))

    inits.append(helper.make_tensor("flat", TensorProto.INT64, [3], [1, BOX + CLS, -1]))
    inits.append(helper.make_tensor("cuts", TensorProto.INT64, [len(cuts)], list(cuts)))
    levels = []
    for level, stride in enumerate((1, 2)):
        conv("x", f"box{level}", BOX, stride)
        conv("x", f"cls{level}", CLS, stride)
        nodes.append(helper.make_node("Concat", [f"box{level}", f"cls{level}"], [f"cat{level}"], axis=1))
        nodes.append(helper.make_node("Reshape", [f"cat{level}", "flat"], [f"flat{level}"]))
        levels.append(f"flat{level}")
    pieces = [f"piece{i}" for i in range(len(cuts))]
    nodes += [helper.make_node("Concat", levels, ["anchors"], axis=2),
              helper.make_node("Split", ["anchors", "cuts"], pieces, axis=1),
              helper.make_node("Sigmoid", [pieces[-1]], ["scores"]),
              helper.make_node("Concat", pieces[:-1] + ["scores"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _split_and_channel_concats(mod) -> tuple[int, int]:
    """(the splits, the concatenations on the channels) the module's Relax functions call."""
    text = mod["main"].script()
    return text.count("R.split("), text.count("axis=1)")


def test_the_pass_takes_each_piece_from_the_concatenations_inputs_and_computes_the_same(target):
    import tvm
    from tvm import relax

    from autosearch.frontend.importer import to_relax
    from autosearch.frontend.splits import cancel_splits

    mod = to_relax(head_onnx(), {"x": SHAPE})
    rewritten = cancel_splits()(mod)
    assert _split_and_channel_concats(mod)[0] == 1
    splits, channel_concats = _split_and_channel_concats(rewritten)
    assert splits == 0 and channel_concats == 1, rewritten.script()  # the output's concatenation alone is left
    x = np.random.default_rng(1).standard_normal(SHAPE).astype("float32")
    outs = []
    for m in (mod, rewritten):
        vm = relax.VirtualMachine(tvm.compile(m, target), tvm.cpu())
        out = vm["main"](tvm.runtime.tensor(x))
        outs.append((out if hasattr(out, "numpy") else out[0]).numpy())
    np.testing.assert_array_equal(outs[1], outs[0])  # the same elements, moved


def test_a_split_that_cuts_an_input_is_left_as_it_is():
    from autosearch.frontend.importer import to_relax
    from autosearch.frontend.splits import cancel_splits

    mod = to_relax(head_onnx((2, BOX + CLS - 2)), {"x": SHAPE})
    assert _split_and_channel_concats(cancel_splits()(mod))[0] == 1


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_the_head_lowered_in_either_layout_has_no_split_and_matches_onnxruntime(target, layout):
    """Through the whole lowering (in NHWC the per-level transposes to NCHW lie between the concatenations): no
    kernel splits what another concatenated, and the built model computes ONNX Runtime's output."""
    import onnxruntime as ort
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.importer import to_relax
    from autosearch.frontend.lowering import build_module, tuned_module

    proto = head_onnx()
    lowered = tuned_module(to_relax(proto, {"x": SHAPE}), target, ms.database.MemoryDatabase(), layout=layout)
    names = [gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert not any("split" in n for n in names), names
    x = np.random.default_rng(2).standard_normal(SHAPE).astype("float32")
    vm = relax.VirtualMachine(build_module(lowered, target), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    got = (out if hasattr(out, "numpy") else out[0]).numpy()
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape == (1, BOX + CLS, 16 * 16 + 8 * 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
