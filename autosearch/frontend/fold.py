"""Relax's constant folding of weight transforms, with each transform compiled once per model, not once per call.

The lowering folds every function of the weights alone into a constant at compile time (the layout conversion's
transposes, bias reshapes, the Winograd kernel transform, the bf16 packing for the tensor units, the tuned
kernels' prepacking). Relax's ``FoldConstant`` compiles each such TIR function as an LLVM module of its own and
JIT-loads it, with a cache that lives for one call of the pass, while a model's task extraction lowers it several
times (two layouts, direct and Winograd, fp32 and bf16) over the same weights: those compilations were most of a
task extraction's time (docs/results.md, "Setting a model up"). :class:`ConstantFolder` is the same folding for
``call_tir`` of constant arguments (a static single-tensor result: what ``FoldConstant`` folds after
legalisation), with one cache for all the lowerings of a model, and the functions a module needs compiled
together, in one LLVM module. ``FoldConstant`` still runs after it, for what it folds besides (shape
computations), and then finds no ``call_tir`` of constants left to compile.
"""

from __future__ import annotations

from typing import Any

PASS_NAME = "ConstantFolderOncePerFunction"


class ConstantFolder:
    """Folds ``call_tir`` of constant arguments in a module's Relax functions into constants; compiled functions are
    kept (by structural equality) for every module this folder folds. They run here, on the host CPU, built for
    plain ``llvm`` as ``FoldConstant`` builds them."""

    def __init__(self) -> None:
        self._built: dict[int, list[tuple[Any, Any]]] = {}  # structural hash -> [(PrimFunc, packed function)]
        self.compiled = 0  # functions compiled so far (each once)

    def pass_(self):
        """A module pass running this folder (and sharing its compiled functions with its other passes)."""
        import tvm

        @tvm.transform.module_pass(opt_level=0, name=PASS_NAME)
        def fold(mod, _ctx):
            return self.fold(mod)

        return fold

    def fold(self, mod):
        from tvm import relax

        foldable = _foldable_calls(mod)
        if not foldable:
            return mod
        self._compile([mod[gv] for gv in {call.args[0]: None for call in foldable}])
        out = mod
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                out = _fold_function(out, gv, func, self._lookup)
        return out

    def _lookup(self, prim_func):
        import tvm_ffi

        for func, packed in self._built.get(tvm_ffi.structural_hash(prim_func), ()):
            if tvm_ffi.structural_equal(func, prim_func):
                return packed
        return None

    def _compile(self, funcs: list[Any]) -> None:
        """Compiles the functions not compiled yet, all in one module."""
        import tvm
        import tvm_ffi

        todo, seen = [], []
        for func in funcs:
            if self._lookup(func) is None and not any(tvm_ffi.structural_equal(func, s) for s in seen):
                todo.append(func)
                seen.append(func)
        if not todo:
            return
        names = [f"fold_{self.compiled + i}" for i in range(len(todo))]
        mod = tvm.IRModule({name: func.with_attr("global_symbol", name) for name, func in zip(names, todo)})
        target = tvm.target.Target("llvm")
        try:
            lib = tvm.tirx.build(mod, target=target)
        except Exception:  # noqa: BLE001 - as FoldConstant: a function that does not build for the CPU stays a call
            lib = None
        for name, func in zip(names, todo):
            packed = lib[name] if lib is not None else None
            if packed is None:
                packed = _build_one(func, target)
            self._built.setdefault(tvm_ffi.structural_hash(func), []).append((func, packed))
        self.compiled += len(todo)


def _build_one(func, target):
    import tvm

    try:
        return tvm.tirx.build(tvm.IRModule({"f": func.with_attr("global_symbol", "f")}), target=target)["f"]
    except Exception:  # noqa: BLE001
        return False  # not foldable on the CPU (``FoldConstant`` skips it too)


def _is_const(expr) -> bool:
    import tvm

    return isinstance(expr, tvm.ir.GenericConst) and hasattr(expr.value, "shape")


def _static_tensor(ty) -> bool:
    from tvm import relax

    shape = getattr(ty, "shape", None)
    return isinstance(ty, relax.TensorType) and shape is not None and all(
        hasattr(s, "value") for s in getattr(shape, "values", shape))


def _foldable_calls(mod) -> list[Any]:
    """The ``call_tir`` calls whose arguments are constants or results of such calls (in binding order)."""
    import tvm
    from tvm import relax

    calls = []
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        const: set[Any] = set()
        for block in func.body.blocks:
            for binding in block.bindings:
                value = getattr(binding, "value", None)
                if _is_const(value):
                    const.add(binding.var)
                elif (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir"
                      and isinstance(value.args[1], relax.Tuple) and len(value.ty_args) == 1
                      and _static_tensor(value.ty_args[0])
                      and isinstance(mod.functions.get(value.args[0]), tvm.tirx.PrimFunc)
                      and all(_is_const(a) or a in const for a in value.args[1].fields)):
                    const.add(binding.var)
                    calls.append(value)
    return calls


def _fold_function(mod, gv, func, lookup):
    """``mod`` with the Relax function ``gv`` (``func``) folded: each ``call_tir`` of constants whose PrimFunc
    ``lookup`` has compiled becomes the constant it computes, variables bound to constants are replaced by them, and
    bindings left unused go."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Folder(relax.PyExprMutator):
        def visit_var_(self, var):
            value = self.lookup_binding(var)
            return value if _is_const(value) else super().visit_var_(var)

        def visit_dataflow_var_(self, var):
            value = self.lookup_binding(var)
            return value if _is_const(value) else super().visit_dataflow_var_(var)

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.call_tir" or len(call.ty_args) != 1:
                return call
            args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else None
            prim = mod.functions.get(call.args[0])
            out_ty = call.ty_args[0]
            if (not args or not all(_is_const(a) for a in args) or not isinstance(prim, tvm.tirx.PrimFunc)
                    or not _static_tensor(out_ty)):
                return call
            packed = lookup(prim)
            if not packed:  # it did not build for the CPU: left to run in the model, as FoldConstant leaves it
                return call
            shape = [int(s) for s in getattr(out_ty.shape, "values", out_ty.shape)]
            out = tvm.runtime.empty(shape, str(out_ty.dtype), tvm.cpu())
            packed(*[a.value for a in args], out)
            return relax.const(out)

    folder = Folder(mod)
    folder.builder_.update_func(gv, relax.analysis.remove_all_unused(folder.visit_expr(func)))
    return folder.builder_.get()


__all__ = ["PASS_NAME", "ConstantFolder"]
