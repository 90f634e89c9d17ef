"""Tests of the built-in YOLO workloads: validity, runnability, FLOPs and architecture fidelity.

Expected numbers are derived from the published architectures (Darknet cfgs, Ultralytics yolov8.yaml and
yolo11.yaml with its modules) and written out here by hand, independently of the builder code.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from autosearch.errors import UserError
from autosearch.frontend.importer import BUILTIN_MODELS, build_model
from autosearch.workloads.onnx_flops import count_flops

EXPECTED_IO = {
    "tiny-yolov2": (("image", (1, 3, 416, 416)), {"grid": (1, 125, 13, 13)}),
    "yolov3-tiny": (
        ("input", (1, 3, 416, 416)),
        {"output_13": (1, 255, 13, 13), "output_26": (1, 255, 26, 26)},
    ),
    "yolov8n": (("images", (1, 3, 640, 640)), {"output0": (1, 84, 8400)}),
    "yolo11n": (("images", (1, 3, 640, 640)), {"output0": (1, 84, 8400)}),
}
EXPECTED_CONVS = {"tiny-yolov2": 9, "yolov3-tiny": 13, "yolov8n": 64, "yolo11n": 88}
MODEL_NAMES = sorted(EXPECTED_IO)


@functools.cache
def _model(name: str, seed: int = 0) -> onnx.ModelProto:
    """Build each model once per seed; building tiny-YOLOv2's 16M weights takes about a second."""
    return build_model(name, seed=seed)


def _conv_weight_shapes(model: onnx.ModelProto) -> list[tuple[int, ...]]:
    """(out, in, kh, kw) of every Conv in graph order."""
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    return [inits[n.input[1]] for n in model.graph.node if n.op_type == "Conv"]


def _first_conv_weight(model: onnx.ModelProto) -> np.ndarray:
    """Weights of the first Conv, which are random in every model."""
    name = next(n.input[1] for n in model.graph.node if n.op_type == "Conv")
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


def _conv_flops(layers: list[tuple[int, int, int, int]]) -> int:
    """2 x MACs of (c_in, c_out, k, out_hw) conv layers."""
    return sum(2 * c_out * hw * hw * c_in * k * k for c_in, c_out, k, hw in layers)


def test_registry_names_and_unknown_model() -> None:
    assert set(BUILTIN_MODELS) == {"tiny-yolov2", "yolo11n", "yolov3-tiny", "yolov8n"}
    with pytest.raises(UserError, match="tiny-yolov2, yolo11n, yolov3-tiny, yolov8n"):
        build_model("yolov99")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_is_valid_opset17(name: str) -> None:
    model = _model(name)
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert model.graph.name and model.graph.doc_string
    assert not any(n.op_type in ("Shape", "Gather") for n in model.graph.node), "graph must be static"


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_onnxruntime_runs_with_expected_outputs(name: str) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        _model(name).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    (input_name, input_shape), outputs = EXPECTED_IO[name]
    assert [(i.name, tuple(i.shape)) for i in session.get_inputs()] == [(input_name, input_shape)]
    image = np.random.default_rng(123).random(input_shape, dtype=np.float32)
    if name == "tiny-yolov2":
        image *= 255.0  # pixel units; the model scales by 1/255 itself
    results = session.run(None, {input_name: image})
    assert [o.name for o in session.get_outputs()] == list(outputs)
    for result, shape in zip(results, outputs.values(), strict=True):
        assert result.shape == shape
        assert np.isfinite(result).all()
        assert result.std() > 1e-3 and np.abs(result).max() < 1e4


@pytest.mark.parametrize("name", ["yolov8n", "yolo11n"])
def test_ultralytics_outputs_are_not_saturated(name: str) -> None:
    session = ort.InferenceSession(_model(name).SerializeToString(), providers=["CPUExecutionProvider"])
    image = np.random.default_rng(7).random((1, 3, 640, 640), dtype=np.float32)
    (out,) = session.run(None, {"images": image})
    scores, wh = out[0, 4:], out[0, 2:4]
    assert 0.2 < np.mean((scores > 0.05) & (scores < 0.95)) <= 1.0
    assert (wh > 0).all() and (wh < 2 * 640).all()  # DFL distances are in [0, 15] grid cells


def test_tiny_yolov2_flops() -> None:
    hw = [416, 208, 104, 52, 26, 13, 13, 13]
    chans = [3, 16, 32, 64, 128, 256, 512, 1024, 1024]
    layers = [(chans[i], chans[i + 1], 3, hw[i]) for i in range(8)] + [(1024, 125, 1, 13)]
    expected = _conv_flops(layers)
    assert expected == 6_971_041_792
    assert count_flops(_model("tiny-yolov2")) == expected
    assert abs(expected - 7.0e9) / 7.0e9 < 0.01


def test_yolov3_tiny_flops() -> None:
    # Darknet prints 5.571 BFLOPs, which also counts the six maxpool layers (~0.006 BFLOPs).
    layers = [
        (3, 16, 3, 416), (16, 32, 3, 208), (32, 64, 3, 104), (64, 128, 3, 52), (128, 256, 3, 26),
        (256, 512, 3, 13), (512, 1024, 3, 13), (1024, 256, 1, 13), (256, 512, 3, 13), (512, 255, 1, 13),
        (256, 128, 1, 13), (384, 256, 3, 26), (256, 255, 1, 26),
    ]  # fmt: skip
    expected = _conv_flops(layers)
    assert count_flops(_model("yolov3-tiny")) == expected
    assert abs(expected - 5.56e9) / 5.56e9 < 0.02


def test_yolov8n_flops() -> None:
    # Ultralytics reports 8.7 GFLOPs for the fused yolov8n at 640.
    assert 8.5e9 <= count_flops(_model("yolov8n")) <= 8.9e9


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_conv_count(name: str) -> None:
    assert sum(n.op_type == "Conv" for n in _model(name).graph.node) == EXPECTED_CONVS[name]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_build_is_deterministic_and_seeded(name: str) -> None:
    assert build_model(name, seed=0).SerializeToString() == _model(name).SerializeToString()
    other = _model(name, seed=1)
    first_weights = [_first_conv_weight(m) for m in (_model(name), other)]
    assert first_weights[0].shape == first_weights[1].shape
    assert not np.array_equal(*first_weights)
    assert [n.op_type for n in other.graph.node] == [n.op_type for n in _model(name).graph.node]


def test_yolov8n_matches_ultralytics_conv_shapes() -> None:
    shapes = _conv_weight_shapes(_model("yolov8n"))
    first_ten = [
        (16, 3, 3, 3),  # 0 Conv(3, 16, 3, 2)
        (32, 16, 3, 3),  # 1 Conv(16, 32, 3, 2)
        (32, 32, 1, 1),  # 2 C2f.cv1
        (16, 16, 3, 3),  # 2 C2f.m[0].cv1
        (16, 16, 3, 3),  # 2 C2f.m[0].cv2
        (32, 48, 1, 1),  # 2 C2f.cv2 on 3 x 16 channels
        (64, 32, 3, 3),  # 3 Conv(32, 64, 3, 2)
        (64, 64, 1, 1),  # 4 C2f.cv1
        (32, 32, 3, 3),  # 4 C2f.m[0].cv1
        (32, 32, 3, 3),  # 4 C2f.m[0].cv2
    ]
    assert shapes[:10] == first_ten
    assert shapes[25:27] == [(128, 256, 1, 1), (256, 512, 1, 1)]  # 9 SPPF cv1 (256 -> 128), cv2
    detect = []
    for ch in (64, 128, 256):  # per level: box branch (c2 = 64) then cls branch (c3 = 80)
        detect += [(64, ch, 3, 3), (64, 64, 3, 3), (64, 64, 1, 1)]
        detect += [(80, ch, 3, 3), (80, 80, 3, 3), (80, 80, 1, 1)]
    assert shapes[-19:] == [*detect, (1, 16, 1, 1)]  # DFL projection conv comes last


def test_yolov8n_parameter_count_matches_fused_ultralytics_model() -> None:
    # `YOLO("yolov8n.pt").info()` after fuse: "168 layers, 3151904 parameters, 8.7 GFLOPs".
    model = _model("yolov8n")
    conv_inputs = {i for n in model.graph.node if n.op_type == "Conv" for i in n.input[1:]}
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name in conv_inputs)
    assert params == 3_151_904
    dfl = next(t for t in model.graph.initializer if tuple(t.dims) == (1, 16, 1, 1))
    np.testing.assert_array_equal(numpy_helper.to_array(dfl).ravel(), np.arange(16, dtype=np.float32))


def test_yolo11n_flops() -> None:
    # Ultralytics reports 6.5 GFLOPs for the fused yolo11n at 640 (convs and the attention's two matmuls)
    assert 6.4e9 <= count_flops(_model("yolo11n")) <= 6.6e9


def _c3k2(c1: int, c2: int, e: float, c3k: bool) -> list[tuple[int, ...]]:
    """Conv weights of ``C3k2(c1, c2, n=1, c3k, e)`` in export order, from ultralytics/nn/modules/block.py."""
    c = int(c2 * e)
    if c3k:  # C3k(c, c): cv1, cv2 (c -> c/2), two 3x3 bottlenecks at c/2, cv3
        h = c // 2
        inner = [(h, c, 1, 1), (h, c, 1, 1), *[(h, h, 3, 3)] * 4, (c, c, 1, 1)]
    else:  # Bottleneck(c, c, e=0.5): 3x3 c -> c/2, 3x3 c/2 -> c
        inner = [(c // 2, c, 3, 3), (c, c // 2, 3, 3)]
    return [(2 * c, c1, 1, 1), *inner, (c2, 3 * c, 1, 1)]


def test_yolo11n_matches_ultralytics_conv_shapes() -> None:
    """yolo11.yaml at scale n: widths x 0.25 (64 -> 16 ... 1024 -> 256), repeats x 0.5 (2 -> 1)."""
    shapes = _conv_weight_shapes(_model("yolo11n"))
    backbone = [
        (16, 3, 3, 3), (32, 16, 3, 3),  # 0, 1 Conv stride 2
        *_c3k2(32, 64, 0.25, False), (64, 64, 3, 3),  # 2 C3k2, 3 Conv
        *_c3k2(64, 128, 0.25, False), (128, 128, 3, 3),  # 4 C3k2 (P3), 5 Conv
        *_c3k2(128, 128, 0.5, True), (256, 128, 3, 3),  # 6 C3k2 (P4), 7 Conv
        *_c3k2(256, 256, 0.5, True),  # 8
        (128, 256, 1, 1), (256, 512, 1, 1),  # 9 SPPF
        # 10 C2PSA(256): cv1; PSABlock(128, 2 heads): qkv (128 + 2 x 2 heads x 32), pe (depthwise), proj, ffn; cv2
        (256, 256, 1, 1), (256, 128, 1, 1), (128, 1, 3, 3), (128, 128, 1, 1), (256, 128, 1, 1), (128, 256, 1, 1),
        (256, 256, 1, 1),
    ]  # fmt: skip
    neck = [
        *_c3k2(384, 128, 0.5, False),  # 13 on cat(up(P5) 256, P4 128)
        *_c3k2(256, 64, 0.5, False),  # 16 on cat(up 128, P3 128)
        (64, 64, 3, 3), *_c3k2(192, 128, 0.5, False),  # 17 Conv, 19
        (128, 128, 3, 3), *_c3k2(384, 256, 0.5, True),  # 20 Conv, 22
    ]
    assert shapes[: len(backbone)] == backbone
    assert shapes[len(backbone): len(backbone) + len(neck)] == neck
    detect = []
    for ch in (64, 128, 256):  # box branch (c2 = 64); class branch (c3 = 80) with depthwise 3x3 convs
        detect += [(64, ch, 3, 3), (64, 64, 3, 3), (64, 64, 1, 1)]
        detect += [(ch, 1, 3, 3), (80, ch, 1, 1), (80, 1, 3, 3), (80, 80, 1, 1), (80, 80, 1, 1)]
    assert shapes[len(backbone) + len(neck):] == [*detect, (1, 16, 1, 1)]  # DFL projection last
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1)
              for n in _model("yolo11n").graph.node if n.op_type == "Conv"]
    assert [g for g in groups if g > 1] == [128, 64, 80, 128, 80, 256, 80]  # C2PSA pe, then Detect's DWConvs


def test_yolo11n_parameter_count_matches_fused_ultralytics_model() -> None:
    # `YOLO("yolo11n.yaml").fuse().info()` (Ultralytics 8.4): "100 layers, 2,616,248 parameters, 6.5 GFLOPs"
    model = _model("yolo11n")
    conv_inputs = {i for n in model.graph.node if n.op_type == "Conv" for i in n.input[1:]}
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name in conv_inputs) == 2_616_248


def test_yolo11n_attention_is_exported_op_for_op() -> None:
    """C2PSA's Attention (Ultralytics' forward, traced): qkv reshaped to (1, heads, 2 x 32 + 64, 400), split,
    (q * 32^-0.5)^T @ k, softmax over keys, v @ attn^T; the only MatMuls and the second Softmax."""
    model = _model("yolo11n")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMul") == 2 and ops.count("Softmax") == 2
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape" and inits[n.input[1]].tolist() ==
                   [1, 2, 128, 400])
    split = next(n for n in model.graph.node if n.op_type == "Split" and n.input[0] == reshape.output[0])
    assert inits[split.input[1]].tolist() == [32, 32, 64]
    scale = next(n for n in model.graph.node if n.op_type == "Mul" and n.input[0] == split.output[0])
    assert inits[scale.input[1]].shape == () and inits[scale.input[1]] == pytest.approx(32**-0.5)
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    assert [a.i for n in softmax for a in n.attribute] == [-1, 1]  # attention over keys; then DFL's bins


def test_count_flops_handles_matmul_gemm_and_grouped_conv() -> None:
    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], group=2, pads=[1, 1, 1, 1]),  # 8 -> 4 ch, 5x5
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "m"], ["mm"]),  # (4, 25) @ (25, 6)
        helper.make_node("Gemm", ["mm", "g"], ["y"], transB=1),  # (4, 6) @ (3, 6)^T
    ]
    graph = helper.make_graph(
        nodes,
        "flops",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 5, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 3])],
        [
            init("w", (4, 4, 3, 3)),
            numpy_helper.from_array(np.asarray([4, 25], dtype=np.int64), "shape"),
            init("m", (25, 6)),
            init("g", (3, 6)),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    conv, matmul, gemm = 4 * 25 * 4 * 9, 4 * 6 * 25, 4 * 3 * 6
    assert count_flops(model) == 2 * (conv + matmul + gemm)
