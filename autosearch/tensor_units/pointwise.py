"""A 1x1 convolution of a narrow image computed as one of an image 16 or 32 pixels wide.

The flattened convolution (:mod:`.conv`) computes each output row in whole 16-pixel tiles, so a width that is not a
multiple of 16 computes pixels it drops: 48 for 40 (1.2x the work), 32 for 20 (1.6x). A 1x1 filter with stride 1
and no padding reads no neighbour, so the image's pixels may be laid out in any rows: the same convolution of
the ``H * W`` pixels as ``H * W / W'`` rows of ``W'`` (16 or 32) computes no pixel it drops. The reshapes are free
(Relax makes a reshape alone in its kernel a view of the same memory: ``RewriteDataflowReshape``).

The elementwise operations after the convolution (bias, activation, the rounding to bf16) follow it onto the new
shape, so ``FuseOps`` still fuses them into its epilogue; the image takes its shape back where something else
reads it (a widening back to fp32 is such a reader's, and fuses into its kernel). An operand of such an operation
may only vary along the channels (a bias), or the pixels would move under it. Which convolutions qualify depends
on the graph only, so every precision choice lowers to the same tasks.
"""

from __future__ import annotations

from typing import Any

from autosearch.relax_util import static_shape

TILE = 16  # pixels per tile row of the flattened convolution
# operations applied value by value: a chain of them after a convolution follows it onto the new shape
ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
               "relax.sigmoid", "relax.astype", "relax.clip", "relax.nn.relu", "relax.nn.silu", "relax.tanh",
               "relax.exp", "relax.negative")


def new_width(call) -> int | None:
    """The width ``W'`` a 1x1 convolution ``call`` is computed at (:mod:`.pointwise`), or None where it stays: a
    tile unit's convolution (:func:`.conv.flat_conv`) with a 1x1 filter, stride 1, no padding, whose width is not a
    multiple of 16 and whose pixels are. 32 where that gives an even number of rows (the GEMM takes rows in pairs)."""
    from autosearch.tensor_units.conv import flat_conv

    conv = flat_conv(call)
    if conv is None or conv.kernel != (1, 1) or conv.stride != 1 or any(conv.padding):
        return None
    pixels = conv.height * conv.width
    if conv.width % TILE == 0 or pixels % TILE:
        return None
    return 2 * TILE if pixels % (4 * TILE) == 0 else TILE


def _follows(value, chain: set[Any], pixels: tuple[int, int]) -> bool:
    """Whether ``value`` is an elementwise operation on a member of ``chain`` whose other operands vary along the
    channels only (their height and width, ``pixels``, broadcast)."""
    import tvm
    from tvm import relax

    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name in ELEMENTWISE):
        return False
    if not any(isinstance(a, relax.Var) and a in chain for a in value.args):
        return False
    if value.op.name == "relax.astype" and str(value.attrs.dtype) == "float32":
        # a bf16 activation widened for a reader that computes in fp32 (a residual add): the widening fuses into
        # that reader's kernel, so it stays on the reader's shape
        return False
    out = static_shape(value)
    if out is None or len(out) != 4 or tuple(out[1:3]) != pixels:
        return False
    for arg in value.args:
        if isinstance(arg, relax.Var) and arg in chain:
            continue
        shape = static_shape(arg)
        if shape is None or len(shape) > 4:
            return False
        if len(shape) >= 3 and shape[-3:-1] != [1, 1] or len(shape) == 2 and shape[0] != 1:
            return False
    return True


def flatten_pointwise():
    """The pass: each convolution :func:`new_width` names, and the elementwise chain after it, computed on the
    image of ``W'``-pixel rows, reshaped back for every other reader."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.chains: list[tuple[set[Any], tuple[int, int], list[int]]] = []  # members, (H, W), the new shape
            self.flat: dict[Any, Any] = {}  # a member -> its value on the new shape

        def visit_var_binding_(self, binding):
            var, value = binding.var, binding.value
            width = new_width(value) if _is_conv(value) else None
            if width is not None:
                n, h, w, c = static_shape(value.args[0])
                self.chains.append(({var}, (h, w), [n, h * w // width, width]))
                a = value.attrs
                data = self.builder_.emit(relax.op.reshape(self.visit_expr(value.args[0]), (n, h * w // width, width,
                                                                                            c)))
                conv = relax.op.nn.conv2d(data, self.visit_expr(value.args[1]), strides=a.strides, padding=a.padding,
                                          dilation=a.dilation, groups=a.groups, data_layout=a.data_layout,
                                          kernel_layout=a.kernel_layout, out_layout=a.out_layout,
                                          out_dtype=a.out_dtype)
                self.flat[var] = self.builder_.emit(conv, f"{var.name}_rows")
                return self._restore(var)
            chain = next((c for c in self.chains if _follows(value, c[0], c[1])), None)
            if chain is None:
                return super().visit_var_binding_(binding)
            members, _, shape = chain
            members.add(var)
            args = [self.flat[a] if isinstance(a, relax.Var) and a in self.flat else self.visit_expr(a)
                    for a in value.args]
            self.flat[var] = self.builder_.emit(relax.Call(value.op, args, value.attrs, value.ty_args),
                                                f"{var.name}_rows")
            return self._restore(var)

        def _restore(self, var) -> None:
            """The original variable as the reshape of its value on the new shape: every reader outside the
            chain reads that (a reshape nobody reads is removed afterwards)."""
            back = self.builder_.emit(relax.op.reshape(self.flat[var], static_shape(var)), var.name)
            self.set_var_remap(var, back)

    @tvm.transform.module_pass(opt_level=0, name="FlattenPointwiseConvs")
    def rewrite(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            mutator = Rewrite(mod)
            new = mutator.visit_expr(func)
            if mutator.chains:
                mutator.builder_.update_func(gv, relax.analysis.remove_all_unused(new))
                mod = mutator.builder_.get()
        return mod

    return rewrite


def _is_conv(value) -> bool:
    import tvm
    from tvm import relax

    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.nn.conv2d"


__all__ = ["ELEMENTWISE", "flatten_pointwise", "new_width"]
