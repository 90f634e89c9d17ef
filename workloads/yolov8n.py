"""YOLOv8n (COCO, 80 classes) at 640x640, as ``yolo export model=yolov8n.pt format=onnx opset=17`` writes it.

Ultralytics fuses BatchNorm into the convs before export, so every ``Conv`` module becomes a biased
Conv2d followed by SiLU (Sigmoid + Mul).  The exported graph also contains the decoding of the Detect
head (DFL softmax-expectation and dist2bbox with constant anchors), which adds the reshape, transpose,
softmax and elementwise kernels a real deployment has to tune as well.  Shapes are fully static.
"""

from __future__ import annotations

import numpy as np
import onnx

from workloads.builder import LINEAR_GAIN, SILU_GAIN, GraphBuilder

INPUT_NAME = "images"
OUTPUT_NAME = "output0"
IMAGE_SIZE = 640
INPUT_SHAPE = (1, 3, IMAGE_SIZE, IMAGE_SIZE)
NUM_CLASSES = 80
REG_MAX = 16
STRIDES = (8, 16, 32)
NUM_ANCHORS = sum((IMAGE_SIZE // s) ** 2 for s in STRIDES)  # 8400
OUTPUT_SHAPE = (1, 4 + NUM_CLASSES, NUM_ANCHORS)


def _conv(b: GraphBuilder, x: str, c1: int, c2: int, k: int = 1, s: int = 1) -> str:
    """Ultralytics ``Conv`` after BN fusion: Conv2d(k, s, pad k//2, bias) + SiLU."""
    return b.silu(b.conv(x, c1, c2, k, s, k // 2, bias=True, gain=SILU_GAIN))


def _bottleneck(b: GraphBuilder, x: str, c: int, shortcut: bool) -> str:
    """``Bottleneck(c, c, shortcut, k=(3, 3), e=1.0)`` as used inside C2f."""
    y = _conv(b, _conv(b, x, c, c, 3), c, c, 3)
    return b.add(x, y) if shortcut else y


def _c2f(b: GraphBuilder, x: str, c1: int, c2: int, n: int, shortcut: bool) -> str:
    """``C2f``: 1x1 conv, split in halves, n bottlenecks chained on the last chunk, concat, 1x1 conv."""
    c = int(c2 * 0.5)
    chunks = b.split(_conv(b, x, c1, 2 * c), [c, c])
    for _ in range(n):
        chunks.append(_bottleneck(b, chunks[-1], c, shortcut))
    return _conv(b, b.concat(chunks), (2 + n) * c, c2)


def _sppf(b: GraphBuilder, x: str, c1: int, c2: int, k: int = 5) -> str:
    """``SPPF``: 1x1 conv, three chained stride-1 max pools, concat of all four, 1x1 conv."""
    c_ = c1 // 2
    ys = [_conv(b, x, c1, c_)]
    for _ in range(3):
        ys.append(b.maxpool(ys[-1], k, 1, pads=[k // 2] * 4))
    return _conv(b, b.concat(ys), 4 * c_, c2)


def _backbone(b: GraphBuilder, x: str) -> tuple[str, str, str]:
    """Layers 0-9; returns the P3 (layer 4), P4 (layer 6) and P5 (layer 9) feature maps."""
    x = _conv(b, _conv(b, x, 3, 16, 3, 2), 16, 32, 3, 2)
    x = _c2f(b, x, 32, 32, 1, True)
    p3 = _c2f(b, _conv(b, x, 32, 64, 3, 2), 64, 64, 2, True)
    p4 = _c2f(b, _conv(b, p3, 64, 128, 3, 2), 128, 128, 2, True)
    x = _c2f(b, _conv(b, p4, 128, 256, 3, 2), 256, 256, 1, True)
    return p3, p4, _sppf(b, x, 256, 256)


def _neck(b: GraphBuilder, p3: str, p4: str, p5: str) -> tuple[str, str, str]:
    """Layers 10-21 (PAN-FPN); returns the 80x80x64, 40x40x128 and 20x20x256 maps fed to Detect."""
    h12 = _c2f(b, b.concat([b.resize_nearest2x(p5), p4]), 384, 128, 1, False)
    out3 = _c2f(b, b.concat([b.resize_nearest2x(h12), p3]), 192, 64, 1, False)
    out4 = _c2f(b, b.concat([_conv(b, out3, 64, 64, 3, 2), h12]), 192, 128, 1, False)
    out5 = _c2f(b, b.concat([_conv(b, out4, 128, 128, 3, 2), p5]), 384, 256, 1, False)
    return out3, out4, out5


def _branch(b: GraphBuilder, x: str, c_in: int, c_mid: int, c_out: int) -> str:
    """One Detect branch: Conv 3x3, Conv 3x3, plain Conv2d 1x1 with bias (no activation)."""
    y = _conv(b, _conv(b, x, c_in, c_mid, 3), c_mid, c_mid, 3)
    return b.conv(y, c_mid, c_out, 1, 1, 0, bias=True, gain=LINEAR_GAIN)


def _make_anchors() -> tuple[np.ndarray, np.ndarray]:
    """Grid-cell centres (1, 2, 8400) in grid units and per-anchor strides (1, 8400), like make_anchors."""
    points, strides = [], []
    for stride in STRIDES:
        size = IMAGE_SIZE // stride
        sy, sx = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="ij")
        points.append(np.stack([sx.ravel(), sy.ravel()], axis=0))
        strides.append(np.full(size * size, stride))
    anchors = np.concatenate(points, axis=1)[None].astype(np.float32)
    return anchors, np.concatenate(strides)[None].astype(np.float32)


def _dfl(b: GraphBuilder, box: str) -> str:
    """Distribution Focal Loss decoding: softmax over 16 bins, expectation via a fixed 1x1 conv."""
    x = b.softmax(b.transpose(b.reshape(box, [1, 4, REG_MAX, NUM_ANCHORS]), [0, 2, 1, 3]), axis=1)
    weight = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    return b.reshape(b.conv(x, REG_MAX, 1, 1, 1, 0, bias=False, weight=weight), [1, 4, NUM_ANCHORS])


def _dist2bbox(b: GraphBuilder, distance: str) -> str:
    """(left, top, right, bottom) distances -> (cx, cy, w, h) in pixels."""
    anchors, strides = _make_anchors()
    anchor_points = b.constant("anchors", anchors)
    lt, rb = b.split(distance, [2, 2])
    x1y1, x2y2 = b.sub(anchor_points, lt), b.add(anchor_points, rb)
    cxcy = b.div(b.add(x1y1, x2y2), b.constant("two", np.asarray(2.0, dtype=np.float32)))
    box = b.concat([cxcy, b.sub(x2y2, x1y1)])
    return b.mul(box, b.constant("strides", strides))


def _detect(b: GraphBuilder, features: tuple[str, str, str]) -> str:
    """``Detect(nc=80, ch=(64, 128, 256))`` including the export-time decoding to (1, 84, 8400)."""
    channels = (64, 128, 256)
    c2, c3 = max(16, channels[0] // 4, REG_MAX * 4), max(channels[0], min(NUM_CLASSES, 100))
    no = 4 * REG_MAX + NUM_CLASSES
    flat = []
    for x, ch in zip(features, channels, strict=True):
        level = b.concat([_branch(b, x, ch, c2, 4 * REG_MAX), _branch(b, x, ch, c3, NUM_CLASSES)])
        flat.append(b.reshape(level, [1, no, -1]))
    box, cls = b.split(b.concat(flat, axis=2), [4 * REG_MAX, NUM_CLASSES])
    return b.concat([_dist2bbox(b, _dfl(b, box)), b.sigmoid(cls)])


def build(*, seed: int = 0) -> onnx.ModelProto:
    """Build YOLOv8n with random weights: ``images`` 1x3x640x640 (0..1) -> ``output0`` 1x84x8400.

    Rows 0-3 of the output are (cx, cy, w, h) in pixels, rows 4-83 the class probabilities.
    """
    b = GraphBuilder(seed=seed)
    p3, p4, p5 = _backbone(b, b.input(INPUT_NAME, INPUT_SHAPE))
    b.output(_detect(b, _neck(b, p3, p4, p5)), OUTPUT_NAME, OUTPUT_SHAPE)
    return b.build(
        name="yolov8n",
        doc="Ultralytics YOLOv8n (COCO) 640x640 ONNX export layout (BN fused, opset 17), "
        "random weights generated by autosearch.",
    )
