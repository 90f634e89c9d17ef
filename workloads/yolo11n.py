"""YOLO11n (COCO, 80 classes) at 640x640, as ``yolo export model=yolo11n.pt format=onnx opset=17`` writes it.

Ultralytics' ``yolo11.yaml`` at scale n (depth 0.50, width 0.25, max_channels 1024), layer for layer
from ``ultralytics/nn/modules`` (8.4): C3k2 blocks (C2f with plain bottlenecks, or with C3k blocks where
the yaml says ``c3k=True``), SPPF, one C2PSA attention block on the 20x20 map (multi-head self-attention:
a 1x1 qkv conv, q^T k scaled by key_dim^-0.5, softmax, times v, plus a 3x3 depthwise positional conv of
v; a 1x1 projection; a two-conv feed-forward), and the YOLO11 Detect head, whose class branch uses
depthwise 3x3 convs. BatchNorm is fused into the convs; the head's decoding (DFL and dist2bbox with
constant anchors) is in the graph, as in Ultralytics 8.4's simplified export.
Shapes are fully static. The attention adds the batch_matmul and softmax kernels no other built-in has.
"""

from __future__ import annotations

import onnx

from autosearch.workloads.builder import LINEAR_GAIN, GraphBuilder
from autosearch.workloads.ultralytics import (
    IMAGE_SIZE,
    NUM_ANCHORS,
    NUM_CLASSES,
    REG_MAX,
    bottleneck,
    c2f,
    conv,
    dfl,
    dist2bbox,
    sppf,
)

INPUT_NAME = "images"
OUTPUT_NAME = "output0"
INPUT_SHAPE = (1, 3, IMAGE_SIZE, IMAGE_SIZE)
OUTPUT_SHAPE = (1, 4 + NUM_CLASSES, NUM_ANCHORS)
P5 = IMAGE_SIZE // 32  # side of the stride-32 map C2PSA attends over (20: 400 tokens)


def _c3k(b: GraphBuilder, x: str, c1: int, c2: int, n: int = 2, e: float = 0.5) -> str:
    """``C3k(c1, c2, n=2, shortcut=True)`` (a C3 with 3x3 bottlenecks): cv3(cat(m(cv1(x)), cv2(x)))."""
    c_ = int(c2 * e)
    y, skip = conv(b, x, c1, c_), conv(b, x, c1, c_)
    for _ in range(n):
        y = bottleneck(b, y, c_, c_, True, e=1.0)
    return conv(b, b.concat([y, skip]), 2 * c_, c2)


def _c3k2(b: GraphBuilder, x: str, c1: int, c2: int, n: int, c3k: bool, e: float = 0.5) -> str:
    """``C3k2(c1, c2, n, c3k, e)``: C2f whose blocks are ``C3k`` or ``Bottleneck(c, c, shortcut=True, e=0.5)``."""
    if c3k:
        return c2f(b, x, c1, c2, n, lambda y, c: _c3k(b, y, c, c), e)
    return c2f(b, x, c1, c2, n, lambda y, c: bottleneck(b, y, c, c, True), e)


def attention(b: GraphBuilder, x: str, dim: int, heads: int) -> str:
    """``Attention(dim, num_heads=heads, attn_ratio=0.5)`` on a P5 x P5 map, op for op as exported."""
    head_dim = dim // heads
    key_dim = head_dim // 2
    tokens = P5 * P5
    qkv = conv(b, x, dim, dim + 2 * key_dim * heads, act=False)
    q, k, v = b.split(b.reshape(qkv, [1, heads, 2 * key_dim + head_dim, tokens]), [key_dim, key_dim, head_dim], axis=2)
    q = b.mul(q, b.scalar("attn_scale", key_dim**-0.5))
    attn = b.softmax(b.matmul(b.transpose(q, [0, 1, 3, 2]), k), axis=-1)  # (1, heads, tokens, tokens)
    y = b.reshape(b.matmul(v, b.transpose(attn, [0, 1, 3, 2])), [1, dim, P5, P5])
    pe = conv(b, b.reshape(v, [1, dim, P5, P5]), dim, dim, 3, g=dim, act=False)
    return conv(b, b.add(y, pe), dim, dim, act=False)


def _c2psa(b: GraphBuilder, x: str, c1: int, n: int = 1) -> str:
    """``C2PSA(c1, c1, n)``: 1x1 conv, split in halves, ``n`` PSABlocks (attention and feed-forward, each
    with a residual) on the second half, concat, 1x1 conv."""
    c = c1 // 2
    a, y = b.split(conv(b, x, c1, 2 * c), [c, c])
    for _ in range(n):
        y = b.add(y, attention(b, y, c, max(c // 64, 1)))
        y = b.add(y, conv(b, conv(b, y, c, 2 * c), 2 * c, c, act=False))
    return conv(b, b.concat([a, y]), 2 * c, c1)


def _backbone(b: GraphBuilder, x: str) -> tuple[str, str, str]:
    """Layers 0-10; returns P3 (layer 4, 128 ch at 80x80), P4 (layer 6, 128 ch) and P5 (layer 10, 256 ch)."""
    x = conv(b, conv(b, x, 3, 16, 3, 2), 16, 32, 3, 2)
    x = _c3k2(b, x, 32, 64, 1, False, 0.25)
    p3 = _c3k2(b, conv(b, x, 64, 64, 3, 2), 64, 128, 1, False, 0.25)
    p4 = _c3k2(b, conv(b, p3, 128, 128, 3, 2), 128, 128, 1, True)
    x = _c3k2(b, conv(b, p4, 128, 256, 3, 2), 256, 256, 1, True)
    return p3, p4, _c2psa(b, sppf(b, x, 256, 256), 256)


def _neck(b: GraphBuilder, p3: str, p4: str, p5: str) -> tuple[str, str, str]:
    """Layers 11-22 (PAN-FPN); returns the 80x80x64, 40x40x128 and 20x20x256 maps fed to Detect."""
    h13 = _c3k2(b, b.concat([b.resize_nearest2x(p5), p4]), 384, 128, 1, False)
    out3 = _c3k2(b, b.concat([b.resize_nearest2x(h13), p3]), 256, 64, 1, False)
    out4 = _c3k2(b, b.concat([conv(b, out3, 64, 64, 3, 2), h13]), 192, 128, 1, False)
    out5 = _c3k2(b, b.concat([conv(b, out4, 128, 128, 3, 2), p5]), 384, 256, 1, True)
    return out3, out4, out5


def _detect(b: GraphBuilder, features: tuple[str, str, str]) -> str:
    """``Detect(nc=80, ch=(64, 128, 256))`` of YOLO11 (``legacy=False``) with the export-time decoding to
    (1, 84, 8400): box branch Conv 3x3, Conv 3x3, Conv2d 1x1; class branch DWConv 3x3, Conv 1x1, DWConv 3x3,
    Conv 1x1, Conv2d 1x1; boxes and scores of the three levels concatenated separately."""
    channels = (64, 128, 256)
    c2, c3 = max(16, channels[0] // 4, REG_MAX * 4), max(channels[0], min(NUM_CLASSES, 100))
    boxes, scores = [], []
    for x, ch in zip(features, channels, strict=True):
        box = conv(b, conv(b, x, ch, c2, 3), c2, c2, 3)
        box = b.conv(box, c2, 4 * REG_MAX, 1, 1, 0, bias=True, gain=LINEAR_GAIN)
        boxes.append(b.reshape(box, [1, 4 * REG_MAX, -1]))
        cls = conv(b, conv(b, x, ch, ch, 3, g=ch), ch, c3)
        cls = conv(b, conv(b, cls, c3, c3, 3, g=c3), c3, c3)
        scores.append(b.reshape(b.conv(cls, c3, NUM_CLASSES, 1, 1, 0, bias=True, gain=LINEAR_GAIN),
                                [1, NUM_CLASSES, -1]))
    box = dfl(b, b.concat(boxes, axis=-1))
    return b.concat([dist2bbox(b, box, v8_4=True), b.sigmoid(b.concat(scores, axis=-1))])


def build(*, seed: int = 0) -> onnx.ModelProto:
    """Build YOLO11n with random weights: ``images`` 1x3x640x640 (0..1) -> ``output0`` 1x84x8400.

    Rows 0-3 of the output are (cx, cy, w, h) in pixels, rows 4-83 the class probabilities.
    """
    b = GraphBuilder(seed=seed)
    p3, p4, p5 = _backbone(b, b.input(INPUT_NAME, INPUT_SHAPE))
    b.output(_detect(b, _neck(b, p3, p4, p5)), OUTPUT_NAME, OUTPUT_SHAPE)
    return b.build(
        name="yolo11n",
        doc="Ultralytics YOLO11n (COCO) 640x640 ONNX export layout (BN fused, opset 17), "
        "random weights generated by autosearch.",
    )
