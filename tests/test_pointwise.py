"""1x1 convolutions of narrow images computed in rows of whole tiles (:mod:`autosearch.tensor_units.pointwise`):
which convolutions move, that their epilogue moves with them and other readers get the image back, that every
choice of bf16 layers lowers to extracted tasks, and that the model still computes what ONNX Runtime does."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosearch.tensor_units import cpu
from tests.bf16_models import amx_target, relax_of


def pointwise_onnx(hw: int) -> onnx.ModelProto:
    """x -> 1x1 conv with bias -> SiLU -> (3x3 conv -> SiLU) + the SiLU's output -> 1x1 conv: the first SiLU has a
    reader that is no convolution (the residual add)."""
    rng = np.random.default_rng(0)

    def weight(name, cout, cin, k):
        return numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) * 0.2).astype("float32"), name)

    inits = [weight("w1", 64, 32, 1), numpy_helper.from_array(rng.standard_normal(64).astype("float32"), "b1"),
             weight("w2", 64, 64, 3), weight("w3", 32, 64, 1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Sigmoid", ["c1"], ["s1"]), helper.make_node("Mul", ["c1", "s1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c2"], ["s2"]), helper.make_node("Mul", ["c2", "s2"], ["a2"]),
             helper.make_node("Add", ["a1", "a2"], ["r"]),
             helper.make_node("Conv", ["r", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, 32, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, hw, hw])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _bf16_task_inputs(hw: int, target) -> list[tuple[int, ...]]:
    from autosearch.frontend.importer import extract_tasks

    tasks = extract_tasks(relax_of(pointwise_onnx(hw)), target, winograd="off", layout="NHWC", precision="bf16")
    # (input shape, filter height: the packed weights' second axis) of each bf16 convolution, the 3x3 one first
    return sorted(((tuple(t.args[0][0]), t.args[1][0][1]) for t in tasks if "conv2d_bf16" in t.name),
                  key=lambda shapes: (-shapes[1], shapes[0][-1]))


@pytest.mark.parametrize(("hw", "rows"), [(40, (50, 32)), (20, (25, 16)), (13, None), (32, None)])
def test_a_1x1_convolution_of_a_narrow_image_runs_on_whole_tile_rows(hw, rows) -> None:
    """40 wide: 1,600 pixels as 50 rows of 32; 20: 400 as 25 of 16; 13 (169 pixels, no whole tiles) and 32 (whole
    tiles already) stay. The 3x3 convolution never moves."""
    inputs = _bf16_task_inputs(hw, amx_target())
    want = (1, *rows) if rows else (1, hw, hw)
    assert inputs == [((1, hw, hw, 64), 3), ((*want, 32), 1), ((*want, 64), 1)], inputs


def test_the_epilogue_moves_with_the_convolution_and_other_readers_get_the_image_back() -> None:
    from tvm import relax

    from autosearch.frontend.lowering import lower

    lowered = lower(relax_of(pointwise_onnx(20)), amx_target(), winograd="off", layout="NHWC", precision="bf16")
    text = lowered["main"].script()
    first = re.search(r"R\.call_tir\((?:cls\.)?(\w+), \(\w+, metadata.*?out_ty=R\.Tensor\(\((.*?)\)", text)
    assert "conv2d_bf16" in first.group(1) and first.group(2) == "1, 25, 16, 64", text
    assert "sigmoid" in first.group(1) and "multiply" in first.group(1), text  # bias and SiLU still in its epilogue
    # the image back, for the 3x3 convolution and the residual add: a reshape alone in its kernel, which the build
    # makes a view of the same memory (no copy)
    assert re.search(r"R\.call_tir\((?:cls\.)?reshape\w*, .*?R\.Tensor\(\(1, 20, 20, 64\)", text), text
    views = relax.transform.RewriteDataflowReshape()(lowered)["main"].script()
    assert len(re.findall(r"R\.reshape\(", views)) == 2 and "call_tir(cls.reshape" not in views, views


def test_every_choice_of_bf16_layers_lowers_to_extracted_tasks() -> None:
    from autosearch.frontend.importer import _extract, extract_tasks
    from autosearch.frontend.winograd import WinogradPolicy

    relax_mod, target = relax_of(pointwise_onnx(20)), amx_target()
    tasks = extract_tasks(relax_mod, target, winograd="off", layout="NHWC", precision="auto")
    extracted = {t.workload_key for t in tasks}
    # the reshapes to rows and back are views in the build: no task of their own
    assert not [t.name for t in tasks if "reshape" in t.name and "conv2d" not in t.name and "transpose" not in t.name]
    layers = sorted({t.lowering["layer"] for t in tasks if "layer" in t.lowering})
    assert len(layers) == 3
    for bf16 in ([], layers[:1], layers[1:2], layers[2:], layers):
        choices = {layer: "bf16" if layer in bf16 else "fp32" for layer in layers}
        policy = WinogradPolicy.of("off", choices, precision="auto")
        used = {t.workload_key for t in _extract(relax_mod, target, policy, "off", "NHWC", precision="auto")}
        assert used <= extracted, (bf16, used - extracted)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_model_still_matches_onnxruntime(target, precision) -> None:
    """Built untuned with every layer in bf16 (on this CPU's bf16 unit) or every layer of ``--precision auto`` in
    fp32 (TVM's own convolution on the new rows): within bf16's tolerance of ONNX Runtime fp32 (the activations
    that only convolutions read are rounded to bf16 either way: :mod:`autosearch.tensor_units.activations`)."""
    if not cpu.has_avx512_bf16(target):
        pytest.skip("this CPU has no bf16 unit (avx512_bf16 or amx_bf16 in /proc/cpuinfo)")
    import onnxruntime as ort
    import tvm

    from autosearch.frontend.importer import extract_tasks
    from autosearch.frontend.lowering import build_module, lower
    from autosearch.frontend.winograd import WinogradPolicy
    from autosearch.tensor_units.amx import request_permission

    request_permission()
    proto = pointwise_onnx(20)
    relax_mod = relax_of(proto)
    layers = sorted({t.lowering["layer"] for t in extract_tasks(relax_mod, target, winograd="off", layout="NHWC",
                                                                precision="auto") if "layer" in t.lowering})
    policy = WinogradPolicy.of("off", dict.fromkeys(layers, precision), precision="auto")
    lowered = lower(relax_mod, target, winograd=policy, layout="NHWC")
    assert "1, 25, 16" in lowered["main"].script()
    x = np.random.default_rng(2).uniform(-1, 1, (1, 32, 20, 20)).astype("float32")
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    vm = tvm.relax.VirtualMachine(build_module(lowered, target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=2e-2 * np.abs(want).max())
