"""Division by a kernel's constant input as multiplication by its reciprocal, at build time.

An ONNX BatchNormalization that no exporter folded (tiny-YOLOv2's, YOLOv3-tiny's: every convolution) reaches the
kernels as ``(x - mean) / sqrt(var + eps) * gamma + beta``, one division per output element by a per-channel
weight. A vector division takes several times a multiply's throughput, and LLVM may not turn ``x / c`` into
``x * (1 / c)`` on its own (the two can differ in the last bit). Rewritten so, the reciprocal depends on the
weight alone: LLVM hoists it out of the loops over pixels, and the epilogue multiplies.

The rewrite runs on the scheduled TIR of every kernel as it is built, the tuning's builds and the model's alike
(:func:`autosearch.measure.kernels.build`, :func:`autosearch.frontend.lowering.build_module`), so a run times
the code the model runs. It is not part of the lowering: the tasks, their workload keys and so every log, known
schedule and database stay as they were. Only float32 and float64 divisions whose divisor is read from an input
the kernel never writes (its weights) are rewritten; a bf16 or fp16 reciprocal would round too coarsely. The
result is within an ulp or two of the division, inside every tolerance the kernels are checked against.
"""

from __future__ import annotations

from typing import Any

REWRITTEN_DTYPES = ("float32", "float64")


def _written(func) -> set[Any]:
    """The buffer variables a PrimFunc may write: stored to, named in a block's writes, or passed to a call as a
    pointer (a buffer's data, as ``tvm_access_ptr`` takes it, or ``address_of`` an element), through which an
    intrinsic may write. A value read inside a call (``if_then_else``'s operands) is not a pointer."""
    import tvm
    import tvm_ffi
    from tvm import s_tir, tirx
    from tvm.ir.expr import Call, TensorLoad, Var

    written: set[Any] = set()
    address_of = tvm.ir.Op.get("tirx.address_of")

    def call(node) -> None:
        for arg in node.args:
            if isinstance(arg, Var):
                written.add(arg)
            elif isinstance(arg, TensorLoad) and node.op.same_as(address_of):
                written.add(arg.source)

    def block(node) -> None:
        written.update(region.source for region in node.writes)

    tvm_ffi.structural_walk(func.body, [(tirx.stmt.BufferStore, lambda s: written.add(s.buffer)),
                                        (s_tir.stmt.SBlock, block), (Call, call)])
    return written


def rewrite_func(func):
    """``func`` with each float division by a value of a read-only input (through a cast or not) written as a
    multiplication by its reciprocal; ``func`` itself where there is none."""
    import tvm_ffi
    from tvm import tirx
    from tvm.ir.expr import TensorLoad
    from tvm.ir.prim.expr import Cast, Div

    written = _written(func)
    readonly = [p for p in func.params if not any(p.same_as(w) for w in written)]
    if not readonly:
        return func

    def constant(expr) -> bool:
        value = expr.value if isinstance(expr, Cast) else expr
        return isinstance(value, TensorLoad) and any(value.source.same_as(p) for p in readonly)

    def divide(node):
        dtype = str(node.ty)
        if dtype not in REWRITTEN_DTYPES or not constant(node.b):
            return node
        return node.a * (tirx.const(1.0, dtype) / node.b)

    body = tvm_ffi.structural_map(func.body, [(Div, divide)])
    return func if body.same_as(func.body) else func.with_body(body)


def reciprocal_divisors(mod):
    """``mod`` with :func:`rewrite_func` applied to each of its PrimFuncs (Relax functions as they are)."""
    from autosearch.tvm_compat import map_prim_funcs

    return map_prim_funcs(mod, rewrite_func)
