"""``grid_sample`` computed channels innermost, fused with the copies that feed it.

A deformable attention (RT-DETR's decoder, Ultralytics' ``multi_scale_deformable_attn_pytorch``) samples its value
tensor, laid out ``(tokens, heads, channels)``, at points computed from the queries. The ONNX graph copies that
tensor whole to the NCHW planes ``grid_sample`` reads, slices it per level and samples each level; TOPI's
``grid_sample`` computes its output ``(n, c, h, w)`` in that order, so the channels of one sampling point are read
a plane apart, and ``AnnotateTIROpPattern`` calls it opaque (it reads at indices computed from the grid), so
``FuseOps`` fuses nothing into it: every decoder layer copied the value tensor twice, and its samplings read it
scattered, in a design space of a parallel and a vectorised loop that no schedule beat.

Here a 2-D bilinear ``grid_sample`` with zero padding is three blocks (:func:`legalize`): each point's corner and
fractions (:data:`COORDS`), the sampling computed ``(n, h, w, c)``, channels innermost, and the transpose to the
NCHW output. The sampling's kernel is marked injective (:func:`mark_injective`: each element is computed from its
own indices, with no reduction), so ``FuseOps`` fuses the copies and slices before it into it and the transpose and
the levels' concatenation after it; :func:`inline_inputs` then inlines the copies and simplifies what they compose
into, so the sampling reads the value tensor where it lies, each point's channels contiguous. The corner and the
sampling are kept out of MetaSchedule's inlining (:data:`NO_INLINE`), which would move them into the NCHW loop nest
of their consumer. Other ``grid_sample`` calls (nearest, bicubic, border or reflection padding, 3-D, symbolic
shapes) keep TOPI's lowering.
"""

from __future__ import annotations

from typing import Any

from autosearch.relax_util import INJECTIVE, mark_op_pattern, static_shape

KERNEL = "grid_sample_nhwc"  # the sampling's PrimFunc name hint
OP = "relax.image.grid_sample"
COORDS = "grid_sample_coords"  # the block of each point's corner and fractions
NO_INLINE_KEY = "meta_schedule.inline_rule"
NO_INLINE = {NO_INLINE_KEY: "disable"}  # MetaSchedule's AutoInline leaves the block where it is


def channels_last(data, grid, *, align_corners: bool):
    """Bilinear sampling of ``data`` (NCHW) at ``grid`` (``(n, 2, h_out, w_out)``: x then y in [-1, 1], as TOPI
    takes it), zero outside the image; output ``(n, h_out, w_out, c)``. TOPI's arithmetic, in its order. Each
    point's corner and fractions are a block of their own (:data:`COORDS`), computed once per point rather than
    once per channel and neighbour, so the grid's arithmetic fused before it appears once, not sixteen times."""
    from tvm import te, tirx

    n_, c_, h_, w_ = (int(s) for s in data.shape)
    out_h, out_w = (int(s) for s in grid.shape[2:])

    def source(v, size):  # TOPI's _unnormalize
        return (v + 1) * (size - 1) / 2 if align_corners else -0.5 + (v + 1) * size / 2

    def coordinate(n, i, j, k):  # k: 0 y0, 1 x0, 2 y - y0, 3 x - x0 (the corners as floats: small integers)
        y, x = source(grid[n, 1, i, j], h_), source(grid[n, 0, i, j], w_)
        y0, x0 = te.floor(y), te.floor(x)
        return tirx.Select(k == 0, y0, tirx.Select(k == 1, x0, tirx.Select(k == 2, y - y0, x - x0)))

    coords = te.compute((n_, out_h, out_w, 4), coordinate, name=COORDS, attrs=NO_INLINE)

    def value(n, i, j, c):
        y0, x0 = coords[n, i, j, 0].astype("int32"), coords[n, i, j, 1].astype("int32")
        fy, fx = coords[n, i, j, 2], coords[n, i, j, 3]

        def pixel(yy, xx):  # clamped into the image, so the fused index arithmetic's bounds are provable
            return data[n, c, tirx.max(tirx.min(yy, h_ - 1), 0), tirx.max(tirx.min(xx, w_ - 1), 0)]

        def inside(yy, xx):  # 1 for a neighbour inside the image, 0 outside (zero padding: its clamped read is
            # an edge pixel's value, finite in any model that runs; TOPI's if_then_else would hide the bounds)
            return tirx.Select(tirx.all(yy >= 0, xx >= 0, yy < h_, xx < w_), tirx.const(1.0, data.dtype),
                               tirx.const(0.0, data.dtype))

        return (pixel(y0, x0) * (inside(y0, x0) * (1.0 - fy) * (1.0 - fx))
                + pixel(y0, x0 + 1) * (inside(y0, x0 + 1) * (1.0 - fy) * fx)
                + pixel(y0 + 1, x0) * (inside(y0 + 1, x0) * fy * (1.0 - fx))
                + pixel(y0 + 1, x0 + 1) * (inside(y0 + 1, x0 + 1) * fy * fx))

    return te.compute((n_, out_h, out_w, c_), value, name="grid_sample_nhwc", attrs=NO_INLINE)


def _default(bb, call):
    """TVM's own legalisation of ``call`` (TOPI's grid_sample)."""
    import tvm

    return tvm.ir.Op.get(OP).get_attr("FLegalize")(bb, call)


def legalize(bb, call):
    """``LegalizeOps`` entry for ``relax.image.grid_sample``: the channels-last sampling and a transpose for a 2-D
    bilinear one with zero padding and static shapes, TOPI's kernel for any other."""
    from tvm import topi

    attrs = call.attrs
    data, grid = call.args
    shape = static_shape(data)
    if not (shape is not None and len(shape) == 4 and static_shape(grid) is not None
            and str(attrs.method) == "bilinear" and str(attrs.layout) == "NCHW"
            and str(attrs.padding_mode) == "zeros" and str(data.ty.dtype) == "float32"):
        return _default(bb, call)
    sampled = bb.emit_te(channels_last, data, grid, align_corners=bool(attrs.align_corners),
                         primfunc_name_hint=KERNEL)
    return bb.call_te(topi.transpose, sampled, [0, 3, 1, 2], primfunc_name_hint="transpose")


def mark_injective() -> Any:
    """The pass, after ``AnnotateTIROpPattern``: every :data:`KERNEL` marked injective."""
    return mark_op_pattern(KERNEL, INJECTIVE, name="MarkGridSampleInjective")


def inline_inputs() -> Any:
    """The pass, after ``FuseTIR``: in each fused kernel holding a :data:`KERNEL` block, every other intermediate
    block inlined into its consumers, then the kernel simplified. Inlined, the copies before the sampling (the value
    tensor's reshapes, transpose and per-level slice) compose into an index of reshapes' divisions and remainders
    that repeats each inner index several times over: simplified with the clamped coordinates' bounds, it is the
    value tensor's own ``(token, head * channels + channel)``. Left to MetaSchedule's AutoInline, the same
    composition is never simplified, and every schedule of the task spent seconds applying and analysing it."""
    import tvm
    from tvm import tirx
    from tvm.s_tir import Schedule

    def inlined(func):
        sch = Schedule(tvm.IRModule({"main": func}), debug_mask=0)
        root = sch.get_sblock("root")
        intermediates = list(sch.get(root).alloc_buffers)
        for rv in list(sch.get_child_blocks(root)):
            block = sch.get(rv)
            kept = str(block.annotations.get(NO_INLINE_KEY, "")) == "disable"
            output = not any(w.source.same_as(b) for w in block.writes for b in intermediates)
            if kept or output:
                continue
            try:
                sch.compute_inline(rv)
            except Exception:  # a block TVM cannot inline stays a block of its own
                continue
        return tirx.transform.StmtSimplify()(sch.mod)["main"]

    @tvm.transform.module_pass(opt_level=0, name="InlineGridSampleInputs")
    def run(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            if isinstance(func, tirx.PrimFunc) and KERNEL in gv.name_hint:
                mod[gv] = inlined(func)
        return mod

    return run


__all__ = ["COORDS", "INJECTIVE", "KERNEL", "NO_INLINE", "NO_INLINE_KEY", "OP", "channels_last", "inline_inputs",
           "legalize", "mark_injective"]
