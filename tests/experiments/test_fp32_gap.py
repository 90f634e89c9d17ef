"""experiments/fp32_gap.py sets each TVM conv task beside the ONNX Runtime node of the same layer: both keyed by
the layer's NCHW shapes and kernel, whatever the layout, ORT's fused-node names or its channel padding."""

from __future__ import annotations

import math

from experiments.fp32_gap import layer_name, ort_conv_layers, ort_time
from tests.conftest import small_conv_onnx


def test_onnx_runtime_conv_nodes_are_keyed_by_their_shapes() -> None:
    layers = ort_conv_layers(small_conv_onnx(cin=16, cout=32, hw=28), threads=1, runs=2)
    # one conv (ORT fuses the ReLU into it and names the node after it): keyed by shapes, timed per pass
    assert list(layers) == ["1x16x28x28->1x32x28x28@3x3"]
    assert 0 < layers["1x16x28x28->1x32x28x28@3x3"] < 1000


def test_a_layer_onnx_runtime_padded_to_its_channel_block_still_matches() -> None:
    ort = {"1x1024x13x13->1x128x13x13@1x1": 0.16, "1x512x13x13->1x1024x13x13@3x3": 4.6}
    assert ort_time(ort, "1x1024x13x13->1x125x13x13@1x1") == 0.16  # 125 output channels padded to 128
    assert ort_time(ort, "1x512x13x13->1x1024x13x13@3x3") == 4.6
    assert math.isnan(ort_time(ort, "1x1024x13x13->1x100x13x13@1x1"))  # more than a block away: no match


def test_tvm_tasks_are_named_by_their_nchw_layer_whatever_the_layout() -> None:
    nhwc = {"name": "fused_conv2d1_add", "lowering": {"layouts": ["NHWC"]},
            "args": [[[1, 208, 208, 16], "float32"], [[32, 3, 3, 16], "float32"], [[1, 208, 208, 32], "float32"]]}
    nchw = {"name": "fused_conv2d1_add", "lowering": {"layouts": ["NCHW"]},
            "args": [[[1, 16, 208, 208], "float32"], [[32, 16, 3, 3], "float32"], [[1, 32, 208, 208], "float32"]]}
    assert layer_name(nhwc) == ("1x16x208x208->1x32x208x208@3x3", "direct", "NHWC")
    assert layer_name(nchw) == ("1x16x208x208->1x32x208x208@3x3", "direct", "NCHW")
    assert layer_name({**nhwc, "name": "max_pool2d"}) is None
    fixed = {**nhwc, "lowering": {"layout": "NHWC"}}  # a run of one layout: its own
    assert layer_name(fixed) == ("1x16x208x208->1x32x208x208@3x3", "direct", "NHWC")
