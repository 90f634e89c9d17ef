"""Max pooling fused into the convolution whose output it pools, for the pools between bf16 convolutions.

tiny-YOLOv2 pools every convolution's output in 2x2 windows, stride 2. As separate kernels, the convolution
writes its whole output and the pooling reads it back to keep a quarter of it: at 416x416x16 that is most of the
stem's memory traffic. Fused, each block of output rows the convolution computes (rows come in pairs, see
:mod:`.conv`) is pooled while it is in cache, and only the pooled quarter is written.

Relax's ``FuseOps`` does not fuse a pooling after a convolution (both are "out-elementwise fusable"). So a pooling
that qualifies (non-overlapping windows, no padding, NHWC, on a bf16 activation (:mod:`.activations`) computed by
a stride-1 convolution the tile unit can run, through elementwise operations only) is lowered to a spatial
``window_max`` block, one output from its window's ``k * k`` inputs, and marked elementwise-fusable after
legalisation (:func:`mark_fusable`), so it joins the convolution's epilogue. Which poolings qualify depends on the
graph only, like the bf16 activations: every choice of bf16 layers has the same tasks.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from autosearch.relax_util import ELEMWISE, mark_op_pattern

WINDOW_MAX = "max_pool2d_window"  # the PrimFunc's name hint, kept in the fused task's name
ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
               "relax.sigmoid", "relax.nn.relu", "relax.nn.silu", "relax.nn.leakyrelu", "relax.clip")


def window(call) -> int | None:
    """The window size ``k`` of a ``max_pool2d`` call whose windows tile its NHWC input exactly (``k x k``, stride
    ``k``, no padding or dilation, the input a multiple of ``k``), else None."""
    attrs = call.attrs
    size, strides = [int(v) for v in attrs.pool_size], [int(v) for v in attrs.strides]
    if str(attrs.layout) != "NHWC" or str(attrs.out_layout or "NHWC") != "NHWC":
        return None
    if size[0] != size[1] or strides != size or any(int(p) for p in attrs.padding):
        return None
    if any(int(d) != 1 for d in attrs.dilation):
        return None
    try:
        _, h, w, _ = (int(s) for s in call.args[0].ty.shape)
    except (TypeError, ValueError):
        return None
    k = size[0]
    return k if k > 1 and h % k == 0 and w % k == 0 else None


def fed_by_convolution(var, pool, value_of: dict, readers: dict, convs: set) -> bool:
    """Whether ``var`` (read by the pooling ``pool``) is computed from one stride-1, size-preserving convolution of
    ``convs`` by elementwise operations only (a leaky ReLU's ``maximum(x, a * x)`` reads ``x`` twice), every value
    on the way read only on the way, so all of it fuses into one kernel."""
    from tvm import relax

    seen, stack, found = set(), [var], []
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        value = value_of.get(v)
        name = value.op.name if isinstance(value, relax.Call) and hasattr(value.op, "name") else None
        if name == "relax.nn.conv2d":
            if v not in convs or any(int(s) != 1 for s in value.attrs.strides):
                return False
            if [int(s) for s in value.ty.shape][1:3] != [int(s) for s in value.args[0].ty.shape][1:3]:
                return False
            found.append(v)
            continue
        if name not in ELEMENTWISE:
            return False
        stack.extend(a for a in value.args if isinstance(a, relax.Var) and a in value_of)
    inside = seen | {pool}
    return len(found) == 1 and all(b.var in inside for v in seen for b in readers.get(v, ()))


def window_max(data, k: int):
    """The max over each ``k x k`` window of ``data`` (NHWC), as a spatial block (no reduction loops), so the
    convolution's sketch schedules it like any epilogue."""
    from tvm import te, tirx

    n, h, w, c = data.shape

    def value(b, i, j, ch):
        return reduce(tirx.max, [data[b, i * k + di, j * k + dj, ch] for di in range(k) for dj in range(k)])

    return te.compute((n, h // k, w // k, c), value, name="window_max")


def emit_window_max(builder, data, k: int) -> Any:
    return builder.call_te(window_max, data, k, primfunc_name_hint=WINDOW_MAX)


def mark_fusable():
    """The pass, after ``AnnotateTIROpPattern``: every :data:`WINDOW_MAX` kernel marked elementwise, so
    ``FuseOps`` puts it in the epilogue of the convolution before it."""
    return mark_op_pattern(WINDOW_MAX, ELEMWISE, name="MarkWindowMaxFusable")


__all__ = ["ELEMENTWISE", "WINDOW_MAX", "emit_window_max", "fed_by_convolution", "mark_fusable", "window",
           "window_max"]
