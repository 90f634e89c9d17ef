"""An ONNX ``Pad`` as Relax's ``nn.pad``, so that the pad and what follows it keep the convolutions' layout.

TVM's ONNX importer writes a constant ``Pad`` as a call of TOPI's pad already lowered to TIR (``call_tir``), which
``ConvertLayout`` cannot look into: in an NHWC model each such pad is wrapped in transposes to NCHW and back, and
the operators reading it (a pooling, a concatenation) stay NCHW until the next convolution's transpose. An HGNet
stem (RT-DETR's backbone) pads twice, a pooling and a concatenation after it, so its widest images went to NCHW and
back three times. Written as ``nn.pad`` a pad has a layout rule, and the stem stays NHWC.

A call is rewritten only when TOPI's pad with the widths and value read from its PrimFunc gives that PrimFunc again
(structural equality): anything else the importer wrote, reflect and edge pads among them, is left as it is.
"""

from __future__ import annotations

from typing import Any


def pad_of(func, in_shape: list[int], dtype: str) -> tuple[list[int], list[int], float] | None:
    """``(before, after, value)`` when the PrimFunc ``func`` is TOPI's constant pad of a ``dtype`` tensor of
    ``in_shape`` (as the ONNX importer emits it), else None."""
    import tvm_ffi
    from tvm import relax, sym, tirx, topi
    from tvm.ir.expr import Call, TensorLoad
    from tvm.ir.prim.expr import FloatImm, IntImm

    stores: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tirx.stmt.BufferStore, stores.append)])
    if len(stores) != 1:
        return None
    store = stores[0]
    value = store.value
    if not (isinstance(value, Call) and getattr(value.op, "name", "") == "prim.if_then_else"):
        return None
    load, fill = value.args[1], value.args[2]
    if not (isinstance(load, TensorLoad) and isinstance(fill, (FloatImm, IntImm))
            and len(load.indices) == len(store.indices) == len(in_shape)):
        return None
    out_shape = [int(d) for d in store.buffer.shape]
    analyzer = sym.Analyzer()
    before = []
    for out_index, in_index in zip(store.indices, load.indices, strict=True):
        offset = analyzer.simplify(out_index - in_index)
        if not isinstance(offset, IntImm):
            return None
        before.append(int(offset.value))
    after = [o - i - b for o, i, b in zip(out_shape, in_shape, before, strict=True)]
    if min(before + after) < 0:
        return None
    builder = relax.BlockBuilder()  # built as the importer builds it (its index types included)
    data = relax.Var("data", relax.TensorType(in_shape, dtype))
    with builder.function("main", [data]):
        builder.emit_func_output(builder.emit_te(topi.nn.pad, data, before, after, fill.value))
    expected = next(f for f in builder.get().functions.values() if isinstance(f, tirx.PrimFunc))
    if not tvm_ffi.structural_equal(expected.body, func.body, map_free_vars=True):
        return None
    return before, after, float(fill.value)


def pads_as_ops() -> Any:
    """The module pass writing each ``call_tir`` of TOPI's constant pad as ``relax.nn.pad`` (module docstring); the
    PrimFuncs left unused are dropped."""
    import tvm
    from tvm import relax

    from autosearch.relax_util import mutate_relax_functions, static_shape

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.mod = mod

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir"):
                return call
            callee, args = call.args[0], call.args[1]
            func = self.mod[callee] if isinstance(callee, tvm.ir.GlobalVar) else None
            fields = getattr(args, "fields", None)
            if not isinstance(func, tvm.tirx.PrimFunc) or fields is None or len(fields) != 1:
                return call
            data = fields[0]
            shape = static_shape(data)
            found = None if shape is None else pad_of(func, shape, str(data.ty.dtype))
            if found is None:
                return call
            before, after, value = found
            width = [w for pair in zip(before, after, strict=True) for w in pair]
            return relax.op.nn.pad(data, width, pad_value=value)

    @tvm.transform.module_pass(opt_level=0, name="PadsAsOps")
    def rewrite(mod, _ctx):
        return relax.transform.DeadCodeElimination()(mutate_relax_functions(Rewrite(mod), mod))

    return rewrite


__all__ = ["pad_of", "pads_as_ops"]
