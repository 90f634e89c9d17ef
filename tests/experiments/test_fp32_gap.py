"""experiments/fp32_gap.py sets each TVM conv task beside the ONNX Runtime node of the same layer: both keyed by
the layer's NCHW shapes and kernel, whatever the layout, ORT's fused-node names or its channel padding."""

from __future__ import annotations

import math

import pytest

from autosearch.records import LogContents
from autosearch.types import Config, MeasureResult, Record, Status
from experiments.fp32_gap import layer_name, ort_conv_layers, ort_time, searched_ms, tuned_layers
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


def _conv_log(tuned: dict[str, float | None]) -> LogContents:
    """One NHWC 3x3 64 -> 64 layer at 20 x 20 as three tasks: fused two ways (3 calls and 1 call a pass) in its
    direct form, and one Winograd task of the 3-call fusion; ``tuned``: task -> its best ms (None: no valid trial)."""
    args = [[[1, 20, 20, 64], "float32"], [[64, 3, 3, 64], "float32"], [[1, 20, 20, 64], "float32"]]
    tasks = {key: {"name": name, "weight": weight, "flops": 2e8 if "winograd" not in name else 1e8, "args": args,
                   "lowering": {"layout": "NHWC", "winograd": "auto", "fast_math": "on", "precision": "fp32"}}
             for key, name, weight in (("a", "fused_conv2d3_add_multiply", 3),
                                       ("b", "fused_conv2d3_add_multiply_add", 1),
                                       ("w", "fused_conv2d_winograd3_add_multiply", 3))}
    records = []
    for key, ms in tuned.items():
        result = MeasureResult(Status.OK, (ms * 1e-3,)) if ms is not None else MeasureResult(Status.RUN_ERROR)
        records.append(Record(kind="trial", task_key=key, task_name=tasks[key]["name"], target={},
                              config=Config(0, ()), result=result, flops=tasks[key]["flops"]))
    return LogContents(path="-", tasks=tasks, records=records)


def test_a_layer_run_in_several_places_counts_every_call_as_onnx_runtime_does() -> None:
    layer = "1x64x20x20->1x64x20x20@3x3"
    _, layers = tuned_layers(_conv_log({"a": 1.0, "b": 1.2, "w": 0.9}))
    # direct: 3 x 1.0 + 1 x 1.2 = 4.2 ms a pass; Winograd tuned for 3 of the 4 calls: 0.9 a call, 3.6 for all four
    assert list(layers) == [layer] and layers[layer]["calls"] == 4
    assert layers[layer]["algorithm"] == "winograd" and layers[layer]["ms"] == pytest.approx(3.6)
    assert layers[layer]["gflop"] == pytest.approx(0.8)  # the direct convolution's FLOPs, all four calls
    _, layers = tuned_layers(_conv_log({"a": 1.0, "b": 1.2, "w": 1.2}))
    assert layers[layer]["algorithm"] == "direct" and layers[layer]["ms"] == pytest.approx(4.2)
    assert layers[layer]["trials"] == 2
    # a longer search tuned the heaviest direct task (3 calls): its time per call counts for all four
    state = {"tuned": layers, "long": {layer: {"ms": 3 * 0.5, "trials": 40}}}
    assert searched_ms(state, "long", layer) == pytest.approx(4 * 0.5)
    assert math.isnan(searched_ms(state, "long", "1x8x8x8->1x8x8x8@1x1"))
