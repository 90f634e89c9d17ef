"""Activations between bf16 convolutions kept in bf16: half the memory traffic, the same numerics.

A bf16 convolution (:mod:`.conv`) rounds its input to bf16 as it reads it. When every reader of an activation is
such a convolution, rounding it once where it is written gives the convolutions the same values, and the
activation is written, and read, in half the bytes. Operations that only select or move values (max pooling,
concatenation, nearest-neighbour resizing, a constant pad) commute with the rounding (it is monotonic), so an
activation may reach its convolutions through them, and they then run on bf16 too; so may a split along the channels
(YOLO's C2f and C3k2 blocks halve a convolution's output, one half to a convolution, both to a concatenation), whose
parts are read through ``TupleGetItem``. The rounding (``astype``) is placed right after the
operation that computes the activation, where ``FuseOps`` fuses it into that operation's epilogue.

Which activations qualify depends on the graph only: on which convolutions *can* run on the tile unit
(:func:`.conv.flat_conv`), not on which the tuner chose. So the lowering of every precision choice has the same
fused tasks, and a layer tuned in fp32 reads its bf16 input through a cast inlined into its own kernel
(:func:`conv2d_cast_input`). Where an activation has any other reader (the model's output, an operation that
computes), it stays fp32, unless the convolutions or transparent operations read it in bf16 anyway: then a residual
add, or a convolution the tile unit cannot run, reads it in bf16 too (:func:`bf16_region`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from autosearch.tensor_units.pooling import emit_window_max

# operations whose output elements are input elements (moved or selected by comparison) or a constant (a pad's,
# rounded as a convolution reading it would round it): exact in bf16
TRANSPARENT = ("relax.nn.max_pool2d", "relax.concat", "relax.image.resize2d", "relax.split", "relax.nn.pad")


def op_name(value) -> str | None:
    import tvm
    from tvm import relax

    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    return None


def _inputs(value) -> list[Any] | None:
    """The tensor inputs of a transparent operation (the tuple, for a part of one), or None when it is not one (or
    its inputs are not plain variables, or it is a resize that interpolates). A part of a tuple is transparent only
    where the tuple is a split's: :func:`bf16_region` admits no other tuple."""
    from tvm import relax

    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value] if isinstance(value.tuple_value, relax.Var) else None
    name = op_name(value)
    if name not in TRANSPARENT:
        return None
    if name == "relax.image.resize2d" and str(value.attrs.method) != "nearest_neighbor":
        return None
    if name == "relax.nn.pad" and str(value.attrs.pad_mode) != "constant":
        return None
    first = value.args[0]
    fields = list(first.fields) if name == "relax.concat" and isinstance(first, relax.Tuple) else [first]
    return fields if all(isinstance(f, relax.Var) for f in fields) else None


def referenced(expr) -> list[Any]:
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(expr, lambda e: found.append(e) if isinstance(e, relax.Var) else None)
    return found


def _is_float32(var) -> bool:
    return str(getattr(var.ty, "dtype", "")) == "float32"


def _is_split(var, value_of) -> bool:
    """Whether ``var`` is the tuple of fp32 parts a split computes."""
    fields = getattr(var.ty, "fields", None)
    return (op_name(value_of.get(var)) == "relax.split" and bool(fields)
            and all(str(getattr(f, "dtype", "")) == "float32" for f in fields))


def _dataflow(func) -> tuple[dict[Any, Any], dict[Any, list[Any]], set[Any], set[Any]]:
    """(variable -> its value, variable -> the bindings that read it, the variables the function returns, the
    convolutions the tile unit can run) of ``func``'s bindings (``func`` without unused ones: see
    :func:`keep_bf16_activations`). Values computed from constants alone (a batch norm's scale, before
    ``FoldConstant``) are left out, as constants are."""
    from tvm import relax

    from autosearch.tensor_units.conv import flat_conv

    bindings = [b for block in func.body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)]
    constant: set[Any] = set()
    for b in bindings:
        if all(v in constant for v in referenced(b.value)):
            constant.add(b.var)
    bindings = [b for b in bindings if b.var not in constant]
    value_of = {b.var: b.value for b in bindings}
    readers: dict[Any, list[Any]] = defaultdict(list)
    for b in bindings:
        for var in dict.fromkeys(referenced(b.value)):
            readers[var].append(b)
    convs = {b.var for b in bindings if op_name(b.value) == "relax.nn.conv2d" and flat_conv(b.value) is not None}
    return value_of, readers, set(referenced(func.body.body)), convs


def _residual_add(binding, value_of) -> bool:
    """Whether ``binding`` adds two activations of its own shape (a residual connection; not a bias, a constant)."""
    value = binding.value
    if op_name(value) != "relax.add" or not all(a in value_of for a in value.args):
        return False
    shapes = {str(getattr(v.ty, "shape", None)) for v in (*value.args, binding.var)}
    return len(shapes) == 1 and "None" not in shapes


def _other_conv(binding, var, convs) -> bool:
    """Whether ``binding`` is a convolution the tile unit cannot run (too few channels, :func:`.conv.flat_conv`)
    reading ``var`` as its data: it reads a bf16 activation through a cast in its own kernel
    (:func:`conv2d_cast_input`)."""
    value = binding.value
    return (op_name(value) == "relax.nn.conv2d" and binding.var not in convs and value.args[0].same_as(var)
            and not value.args[1].same_as(var))


def bf16_region(func, flow=None) -> tuple[set[Any], set[Any]]:
    """(the activations of ``func`` to keep in bf16, the convolutions that read one): the largest set of fp32
    variables each of whose readers is a convolution the tile unit can run (reading it as data) or a transparent
    operation whose output and inputs are all in the set. A split's tuple is in it only with its input: a tuple is
    not rounded, its parts are.

    One reader computes: a residual add whose sum is in the set may read an activation in bf16 that another reader
    (a convolution, a transparent operation) keeps there anyway. The sum then differs from the fp32 one by less than
    a bf16 rounding of that input, before being rounded itself; in exchange the activation is written once in half
    the bytes, and the sum too (YOLO's C2f and C3k2 blocks with shortcuts). So may a convolution the tile unit cannot
    run (its input then rounded as the bf16 convolutions' is): YOLO11's and YOLO26's first C3k2 block halves 32
    channels and its bottleneck narrows 16 to 8, which kept the block's split, sum and concatenation in fp32.
    ``flow``: ``_dataflow(func)``, when already made."""
    value_of, readers, escaping, convs = flow or _dataflow(func)

    region = {v for v in value_of if readers[v] and v not in escaping and (_is_float32(v) or _is_split(v, value_of))}
    changed = True
    while changed:
        changed = False
        for v in list(region):
            if _is_split(v, value_of) and not all(i in region for i in _inputs(value_of[v]) or [None]):
                region.discard(v)
                changed = True
                continue
            kept = False  # read in bf16 by a convolution or a transparent operation
            for reader in readers[v]:
                if reader.var in convs and reader.value.args[0].same_as(v) and not reader.value.args[1].same_as(v):
                    kept = True
                    continue
                inputs = _inputs(reader.value)
                if inputs is not None and reader.var in region and all(i in region for i in inputs):
                    kept = True
                    continue
                if (reader.var in region and _residual_add(reader, value_of)) or _other_conv(reader, v, convs):
                    continue
                break
            else:
                if kept:
                    continue
            region.discard(v)
            changed = True
    readers_in = {c for c in convs if value_of[c].args[0] in region}
    return region, readers_in


def fused_pools(func, region: set[Any], flow=None) -> dict[Any, int]:
    """The max poolings of ``region`` to fuse into the convolution before them (:mod:`.pooling`): variable ->
    window size. ``flow``: ``_dataflow(func)``, when already made."""
    from autosearch.tensor_units.pooling import fed_by_convolution, window

    value_of, readers, _, convs = flow or _dataflow(func)
    found = {}
    for var in region:
        value = value_of[var]
        if op_name(value) == "relax.nn.max_pool2d" and value.args[0] in region:
            k = window(value)
            if k is not None and fed_by_convolution(value.args[0], var, value_of, readers, convs):
                found[var] = k
    return found


def keep_bf16_activations():
    """The pass: every activation of :func:`bf16_region` rounded to bf16 where it is computed, the transparent
    operations between it and its convolutions run on bf16, and the convolutions read it as bf16."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def __init__(self, mod, region, convs, pools):
            super().__init__(mod)
            self.region, self.convs, self.pools = region, convs, pools
            self.low: dict[Any, Any] = {}  # an fp32 activation -> its bf16 variable

        def visit_var_binding_(self, binding):
            var, value = binding.var, binding.value
            inputs = _inputs(value) if var in self.region else None
            if var in self.pools:  # a max pooling the convolution before it will compute
                self.low[var] = emit_window_max(self.builder_, self.low[value.args[0]], self.pools[var])
                return
            if inputs is not None and all(i in self.low for i in inputs):  # a transparent operation, on bf16
                if isinstance(value, relax.TupleGetItem):  # a part of a split, on bf16
                    part = relax.TupleGetItem(self.low[inputs[0]], value.index)
                    self.low[var] = self.builder_.emit(part, f"{var.name}_bf16")
                    return
                args = list(value.args)
                low = [self.low[i] for i in inputs]
                args[0] = relax.Tuple(low) if isinstance(args[0], relax.Tuple) else low[0]
                call = relax.Call(value.op, args, value.attrs, value.ty_args)
                self.low[var] = self.builder_.emit(call, f"{var.name}_bf16")
                return
            if var in self.convs or op_name(value) == "relax.nn.conv2d" and value.args[0] in self.low:
                # a bf16 convolution, or another reading a bf16 activation (legalised with the cast in its kernel)
                a = value.attrs
                conv = relax.op.nn.conv2d(self.low[value.args[0]], self.visit_expr(value.args[1]), strides=a.strides,
                                          padding=a.padding, dilation=a.dilation, groups=a.groups,
                                          data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                                          out_layout=a.out_layout, out_dtype="float32")
                new = self.builder_.emit(conv, var.name)
                self.set_var_remap(var, new)
            elif op_name(value) == "relax.add" and var in self.region and any(a in self.low for a in value.args):
                # a residual add (bf16_region) reading an activation the convolutions read in bf16
                args = [relax.op.astype(self.low[a], "float32") if a in self.low else self.visit_expr(a)
                        for a in value.args]
                self.set_var_remap(var, self.builder_.emit(relax.Call(value.op, args, value.attrs, value.ty_args),
                                                           var.name))
            else:
                super().visit_var_binding_(binding)
            if var in self.region:  # computed in fp32 here: rounded once, in this operation's epilogue
                self.low[var] = self.builder_.emit(relax.op.astype(self.visit_expr(var), "bfloat16"),
                                                   f"{var.name}_bf16")

    @tvm.transform.module_pass(opt_level=0, name="KeepBf16Activations")
    def rewrite(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            func = relax.analysis.remove_all_unused(func)  # e.g. the tuple a batch norm returns, unread
            flow = _dataflow(func)
            region, convs = bf16_region(func, flow)
            if convs:
                mutator = Rewrite(mod, region, convs, fused_pools(func, region, flow))
                mutator.builder_.update_func(gv, relax.analysis.remove_all_unused(mutator.visit_expr(func)))
                mod = mutator.builder_.get()  # with the window-max kernels it added
        return mod

    return rewrite


def conv2d_cast_input(bb, call):
    """TVM's own conv2d legalisation for a convolution computed in fp32 whose input is bf16 (an activation of
    :func:`bf16_region` in a layer the tuner kept in fp32): the cast is a block of the convolution's own kernel,
    which MetaSchedule inlines into its input reads."""
    from tvm import topi

    def conv(inp, filt, **kwargs):
        return topi.nn.conv(topi.cast(inp, "float32"), filt, **kwargs)

    attrs = call.attrs
    return bb.call_te(conv, inp=call.args[0], filt=call.args[1], stride=attrs.strides, padding=attrs.padding,
                      dilation=attrs.dilation, groups=attrs.groups, data_layout=attrs.data_layout,
                      kernel_layout=attrs.kernel_layout,
                      out_dtype=attrs.out_dtype if attrs.out_dtype != "" else None, primfunc_name_hint="conv2d")


__all__ = ["TRANSPARENT", "bf16_region", "conv2d_cast_input", "fused_pools", "keep_bf16_activations", "op_name",
           "referenced"]
