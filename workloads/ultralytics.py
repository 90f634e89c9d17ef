"""Ultralytics building blocks (``ultralytics/nn/modules``) as ``yolo export format=onnx`` writes them.

Shared by the built-in YOLOv8n and YOLO11n. Ultralytics fuses BatchNorm into the convs before export,
so every ``Conv`` module is a biased Conv2d followed by SiLU (Sigmoid + Mul) or by nothing
(``act=False``). The Detect head's export-time decoding (DFL softmax-expectation, dist2bbox with
constant anchors) is part of the graph, as in a real export. COCO, 80 classes, 640x640 input.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autosearch.workloads.builder import LINEAR_GAIN, SILU_GAIN, GraphBuilder

IMAGE_SIZE = 640
NUM_CLASSES = 80
REG_MAX = 16
STRIDES = (8, 16, 32)
NUM_ANCHORS = sum((IMAGE_SIZE // s) ** 2 for s in STRIDES)  # 8400


def conv(b: GraphBuilder, x: str, c1: int, c2: int, k: int = 1, s: int = 1, *, g: int = 1, act: bool = True) -> str:
    """``Conv(c1, c2, k, s, g=g, act=act)`` after BN fusion: Conv2d(k, s, pad k//2, groups g, bias) [+ SiLU]."""
    y = b.conv(x, c1, c2, k, s, k // 2, bias=True, gain=SILU_GAIN if act else LINEAR_GAIN, group=g)
    return b.silu(y) if act else y


def bottleneck(b: GraphBuilder, x: str, c1: int, c2: int, shortcut: bool, k: tuple[int, int] = (3, 3),
               e: float = 0.5) -> str:
    """``Bottleneck(c1, c2, shortcut, k=k, e=e)``: two convs, plus the input when ``shortcut`` and c1 == c2."""
    c_ = int(c2 * e)
    y = conv(b, conv(b, x, c1, c_, k[0]), c_, c2, k[1])
    return b.add(x, y) if shortcut and c1 == c2 else y


def c2f(b: GraphBuilder, x: str, c1: int, c2: int, n: int, block: Callable[[str, int], str], e: float = 0.5) -> str:
    """``C2f`` and its YOLO11 variant ``C3k2``: 1x1 conv, split in halves of ``c = c2 * e`` channels, ``n``
    blocks (``block(x, c)``) chained on the last chunk, concat of all chunks, 1x1 conv."""
    c = int(c2 * e)
    chunks = b.split(conv(b, x, c1, 2 * c), [c, c])
    for _ in range(n):
        chunks.append(block(chunks[-1], c))
    return conv(b, b.concat(chunks), (2 + n) * c, c2)


def sppf(b: GraphBuilder, x: str, c1: int, c2: int, k: int = 5) -> str:
    """``SPPF``: 1x1 conv, three chained stride-1 max pools, concat of all four, 1x1 conv."""
    c_ = c1 // 2
    ys = [conv(b, x, c1, c_)]
    for _ in range(3):
        ys.append(b.maxpool(ys[-1], k, 1, pads=[k // 2] * 4))
    return conv(b, b.concat(ys), 4 * c_, c2)


def make_anchors() -> tuple[np.ndarray, np.ndarray]:
    """Grid-cell centres (1, 2, 8400) in grid units and per-anchor strides (1, 8400), like make_anchors."""
    points, strides = [], []
    for stride in STRIDES:
        size = IMAGE_SIZE // stride
        sy, sx = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="ij")
        points.append(np.stack([sx.ravel(), sy.ravel()], axis=0))
        strides.append(np.full(size * size, stride))
    anchors = np.concatenate(points, axis=1)[None].astype(np.float32)
    return anchors, np.concatenate(strides)[None].astype(np.float32)


def dfl(b: GraphBuilder, box: str) -> str:
    """Distribution Focal Loss decoding: softmax over 16 bins, expectation via a fixed 1x1 conv."""
    x = b.softmax(b.transpose(b.reshape(box, [1, 4, REG_MAX, NUM_ANCHORS]), [0, 2, 1, 3]), axis=1)
    weight = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    return b.reshape(b.conv(x, REG_MAX, 1, 1, 1, 0, bias=False, weight=weight), [1, 4, NUM_ANCHORS])


def dist2bbox(b: GraphBuilder, distance: str, *, v8_4: bool = False) -> str:
    """(left, top, right, bottom) distances -> (cx, cy, w, h) in pixels. ``v8_4``: as Ultralytics 8.4 exports
    it (``distance.chunk(2, 1)`` as two Slices, not a Split; the halving constant of rank 0)."""
    anchors, strides = make_anchors()
    anchor_points = b.constant("anchors", anchors)
    lt, rb = [b.slice(distance, 0, 2, 1), b.slice(distance, 2, 4, 1)] if v8_4 else b.split(distance, [2, 2])
    x1y1, x2y2 = b.sub(anchor_points, lt), b.add(anchor_points, rb)
    two = b.scalar("two", 2.0) if v8_4 else b.constant("two", np.asarray(2.0, dtype=np.float32))
    cxcy = b.div(b.add(x1y1, x2y2), two)
    box = b.concat([cxcy, b.sub(x2y2, x1y1)])
    return b.mul(box, b.constant("strides", strides))
