"""Transposes back to NCHW moved past the operators that can run in NHWC, where they meet and cancel the next
convolution's transpose to NHWC.

Relax's ``ConvertLayout`` converts an operator only where its layout rule follows the input's layout; where an
operator has none that does (``nn.pad``'s keeps its input's first layout), it transposes the tensor back to NCHW
and everything reading it stays NCHW, poolings and concatenations included, until a convolution transposes to
NHWC again. An HGNet stem (RT-DETR's backbone: pad, pooling, concatenation) did so on its widest images. This pass
rewrites, in one walk in program order, with ``T`` the transpose NHWC -> NCHW:

- ``pad(T(y))`` (constant mode) as ``T(pad(y))`` with the widths permuted;
- ``max_pool2d(T(y))`` and ``avg_pool2d(T(y))`` in NCHW as ``T(pool(y))`` in NHWC;
- ``concat(T(a), T(b), ...)`` on channels as ``T(concat(a, b, ...))`` on the last axis;
- ``T^-1(T(y))`` as ``y``;

each rewrite keeps the values computed (a permutation of the same elements), and the transposes left unused are
dropped.
"""

from __future__ import annotations

from typing import Any

TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")


def sink_transposes() -> Any:
    """The module pass (module docstring)."""
    import tvm
    from tvm import relax

    from autosearch.relax_util import mutate_relax_functions

    def axes_of(call) -> tuple[int, ...] | None:
        axes = call.attrs.axes
        return None if axes is None else tuple(int(a) for a in axes)

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def nhwc_of(self, x):
            """``y`` when ``x`` is bound to ``T(y)``, else None."""
            value = self.lookup_binding(x) if isinstance(x, relax.Var) else None
            if (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
                    and value.op.name == "relax.permute_dims" and axes_of(value) == TO_NCHW):
                return value.args[0]
            return None

        def to_nchw(self, y):
            return relax.op.permute_dims(self.builder_.emit(y), list(TO_NCHW))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
            if name == "relax.permute_dims" and axes_of(call) == TO_NHWC:
                y = self.nhwc_of(call.args[0])
                return call if y is None else y
            if name == "relax.nn.pad" and str(call.attrs.pad_mode) == "constant":
                y = self.nhwc_of(call.args[0])
                if y is None:
                    return call
                width = [int(w) for w in call.attrs.pad_width]
                pairs = [width[2 * a:2 * a + 2] for a in TO_NHWC]
                return self.to_nchw(relax.op.nn.pad(y, [w for pair in pairs for w in pair],
                                                    pad_value=call.attrs.pad_value))
            if name in _POOLS and str(call.attrs.layout) == "NCHW" and str(call.attrs.out_layout) == "NCHW":
                y = self.nhwc_of(call.args[0])
                if y is None:
                    return call
                pool = getattr(relax.op.nn, name.rsplit(".", 1)[1])
                a = call.attrs
                kwargs = {"count_include_pad": bool(a.count_include_pad)} if name.endswith("avg_pool2d") else {}
                return self.to_nchw(pool(y, pool_size=a.pool_size, strides=a.strides, padding=a.padding,
                                         dilation=a.dilation, ceil_mode=bool(a.ceil_mode), layout="NHWC",
                                         out_layout="NHWC", **kwargs))
            if name == "relax.concat" and call.attrs.axis is not None and int(call.attrs.axis) in (1, -3):
                tup = call.args[0]
                tup = self.lookup_binding(tup) if isinstance(tup, relax.Var) else tup
                fields = getattr(tup, "fields", None)
                ys = [self.nhwc_of(f) for f in fields] if fields else [None]
                if any(y is None for y in ys) or getattr(call.ty, "ndim", -1) != 4:
                    return call
                return self.to_nchw(relax.op.concat(ys, axis=3))
            return call

    @tvm.transform.module_pass(opt_level=0, name="SinkTransposes")
    def rewrite(mod, _ctx):  # a cancelled pair leaves a binding of one variable to another: canonicalised away
        mod = relax.transform.CanonicalizeBindings()(mutate_relax_functions(Rewrite(mod), mod))
        return relax.transform.DeadCodeElimination()(mod)

    return rewrite


__all__ = ["TO_NCHW", "TO_NHWC", "sink_transposes"]
