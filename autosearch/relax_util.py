"""Small Relax helpers the model's lowerings share: the frontend's rewrites and the tensor units' alike.

They sit below both packages (:mod:`autosearch.frontend` lowers with the tensor units' alternatives, whose
rewrites need the same helpers), so neither package reaches into the other for them.
"""

from __future__ import annotations

from typing import Any

ELEMWISE = 0  # Relax's OpPatternKind kElemWise: FuseOps fuses it into a convolution's epilogue (not kBroadcast)
INJECTIVE = 2  # Relax's OpPatternKind kInjective


def static_shape(expr) -> list[int] | None:
    """The shape of the Relax tensor ``expr`` as integers, or None where it is symbolic or unknown."""
    try:
        return [int(d) for d in expr.ty.shape]
    except (TypeError, AttributeError, ValueError):  # a tirx.Var has no int; a tuple or an unknown shape none
        return None


def mutate_relax_functions(mutator, mod):
    """``mod`` with each Relax function visited by ``mutator`` (a ``PyExprMutator`` built on ``mod``)."""
    from tvm import relax

    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def mark_op_pattern(prefix: str, pattern: int, *, name: str) -> Any:
    """The module pass ``name``, run after ``AnnotateTIROpPattern``: every PrimFunc whose name starts with ``prefix``
    given the op pattern ``pattern`` (Relax's ``OpPatternKind``), so that ``FuseOps`` fuses it as a lowering of ours
    knows it may be, where TVM's analysis of its TIR could not tell (a pooling into a convolution's epilogue,
    :mod:`autosearch.tensor_units.pooling`; a gather with its inputs, :mod:`autosearch.frontend.sampling`)."""
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name=name)
    def mark(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            if isinstance(func, tirx.PrimFunc) and gv.name_hint.startswith(prefix):
                mod[gv] = func.with_attr("op_pattern", pattern)
        return mod

    return mark
