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

from autosearch.tvm_compat import build_context

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

    def _lookup(self, prim_func, key: int | None = None):
        """The compiled ``prim_func`` (False: it does not build for the CPU), or None: not compiled yet. ``key``: its
        structural hash, when the caller has it."""
        import tvm_ffi

        key = tvm_ffi.structural_hash(prim_func) if key is None else key
        for func, packed in self._built.get(key, ()):
            if tvm_ffi.structural_equal(func, prim_func):
                return packed
        return None

    def _compile(self, funcs: list[Any]) -> None:
        """Compiles the functions not compiled yet, all in one module."""
        import tvm
        import tvm_ffi

        todo: list[tuple[int, Any]] = []  # (structural hash, function), each function once
        for func in funcs:
            key = tvm_ffi.structural_hash(func)
            if self._lookup(func, key) is None and not any(k == key and tvm_ffi.structural_equal(func, f)
                                                           for k, f in todo):
                todo.append((key, func))
        if not todo:
            return
        names = [f"fold_{self.compiled + i}" for i in range(len(todo))]
        mod = tvm.IRModule({name: func.with_attr("global_symbol", name) for name, (_, func) in zip(names, todo)})
        target = tvm.target.Target("llvm")
        try:
            with build_context():  # only index arithmetic differs from TVM's pipeline: the same constants
                lib = tvm.tirx.build(mod, target=target)
        except Exception:  # noqa: BLE001 - as FoldConstant: a function that does not build for the CPU stays a call
            lib = None  # each then built alone, so one such function does not keep the others from folding
        for name, (key, func) in zip(names, todo):
            packed = lib[name] if lib is not None else _build_one(func, target)
            self._built.setdefault(key, []).append((func, packed))
        self.compiled += len(todo)


def _build_one(func, target):
    import tvm

    try:
        with build_context():
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


def _foldable(call, mod, is_const) -> Any:
    """The PrimFunc of ``call`` if it is a ``call_tir`` that folds (every argument ``is_const``, one static tensor
    out), else None."""
    import tvm
    from tvm import relax

    if not (isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.call_tir"
            and isinstance(call.args[1], relax.Tuple) and len(call.ty_args) == 1 and _static_tensor(call.ty_args[0])
            and all(is_const(a) for a in call.args[1].fields)):
        return None
    prim = mod.functions.get(call.args[0])
    return prim if isinstance(prim, tvm.tirx.PrimFunc) else None


def _foldable_calls(mod) -> list[Any]:
    """The ``call_tir`` calls whose arguments are constants or results of such calls (in binding order)."""
    from tvm import relax

    calls = []
    for _, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        const: set[Any] = set()  # the variables bound to constants or to foldable calls

        def known(arg, const=const) -> bool:
            return _is_const(arg) or arg in const

        for block in func.body.blocks:
            for binding in block.bindings:
                value = getattr(binding, "value", None)
                if _is_const(value):
                    const.add(binding.var)
                elif _foldable(value, mod, known) is not None:
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
            prim = _foldable(call, mod, _is_const)
            packed = lookup(prim) if prim is not None else None
            if not packed:  # not foldable, or it did not build for the CPU: left to run in the model, as FoldConstant
                return call
            out_ty = call.ty_args[0]
            shape = [int(s) for s in getattr(out_ty.shape, "values", out_ty.shape)]
            out = tvm.runtime.empty(shape, str(out_ty.dtype), tvm.cpu())
            packed(*[a.value for a in call.args[1].fields], out)
            return relax.const(out)

    folder = Folder(mod)
    folder.builder_.update_func(gv, relax.analysis.remove_all_unused(folder.visit_expr(func)))
    return folder.builder_.get()


__all__ = ["PASS_NAME", "ConstantFolder"]
