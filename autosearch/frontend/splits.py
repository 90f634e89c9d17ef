"""A split that undoes a concatenation made before reshapes, transposes and other concatenations: the pieces taken
from the concatenation's inputs instead.

A YOLOv8 / YOLO11 / YOLO12 detection head concatenates each level's box and class maps on the channels, flattens
and transposes each level, concatenates the levels along the anchors, and splits the result back into boxes and
classes. Fused into one data-movement task, every output element then chooses its level *and* its half of the
channels through a chain of ``if_then_else`` over reshape arithmetic the simplifier cannot fold, and the copy runs at
a third of what the same copy written per output does (``docs/results.md``, "The detection head's copies"). This pass
rewrites ``split(x)`` along an axis as one expression per piece, each built from the inputs of the concatenation the
split undoes, pushed through what lies between:

- ``concat`` along another axis: the piece taken from each of its inputs, concatenated the same way;
- ``permute_dims``: the piece taken along the input's axis it moves there, permuted the same way;
- ``reshape`` that keeps the axis (the same extent after the same number of elements before it): the piece taken
  along the input's axis, reshaped to the piece's shape;
- ``concat`` along the split's axis whose inputs' boundaries include the piece's: those inputs (concatenated when
  the piece spans several).

Anything else, or a piece that cuts an input, leaves the split as it was. Each rewrite takes the same elements in
the same order, so the outputs are unchanged; what the split no longer reads is dropped.
"""

from __future__ import annotations

import math
from typing import Any


def cancel_splits() -> Any:
    """The module pass (module docstring)."""
    import tvm
    from tvm import relax

    from autosearch.relax_util import mutate_relax_functions, static_shape
    from autosearch.tensor_units.activations import op_name

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def bound(self, expr):
            return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

        def fields(self, tup) -> list | None:
            tup = self.bound(tup)
            return list(tup.fields) if isinstance(tup, relax.Tuple) else None

        def take(self, expr, axis: int, start: int, size: int, depth: int = 0):
            """An expression of the elements ``[start, start + size)`` of ``expr`` along ``axis`` built from the
            inputs of a concatenation along it, or None."""
            shape = static_shape(expr)
            value = self.bound(expr)
            name = op_name(value)
            if shape is None or depth > 16 or not name:
                return None
            if name == "relax.concat":
                parts = self.fields(value.args[0])
                cat = int(value.attrs.axis) % len(shape)
                shapes = [static_shape(p) for p in parts or ()]
                if parts is None or any(sh is None or len(sh) != len(shape) for sh in shapes):
                    return None
                if cat == axis:
                    bounds, reach = [], 0
                    for part, sh in zip(parts, shapes):
                        bounds.append((reach, reach + sh[axis], part))
                        reach += sh[axis]
                    inside = [(b - a, p) for a, b, p in bounds if start <= a and b <= start + size]
                    if sum(n for n, _ in inside) != size:
                        return None  # the piece cuts an input
                    inside = [p for _, p in inside]
                    return inside[0] if len(inside) == 1 else relax.op.concat(inside, axis=axis)
                pieces = [self.take(p, axis, start, size, depth + 1) for p in parts]
                if any(p is None for p in pieces):
                    return None
                return relax.op.concat([self.builder_.emit(p) for p in pieces], axis=cat)
            if name == "relax.permute_dims":
                axes = value.attrs.axes
                perm = list(range(len(shape)))[::-1] if axes is None else [int(a) for a in axes]
                inner = self.take(value.args[0], perm[axis], start, size, depth + 1)
                return None if inner is None else relax.op.permute_dims(self.builder_.emit(inner), perm)
            if name == "relax.reshape":
                source = static_shape(value.args[0])
                if source is None:
                    return None
                before = math.prod(shape[:axis])  # the input's axis with as many elements before it, as long
                at = next((j for j, d in enumerate(source) if math.prod(source[:j]) == before and d == shape[axis]),
                          None)
                if at is None:
                    return None
                inner = self.take(value.args[0], at, start, size, depth + 1)
                if inner is None:
                    return None
                return relax.op.reshape(self.builder_.emit(inner), shape[:axis] + [size] + shape[axis + 1:])
            return None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if op_name(call) != "relax.split":
                return call
            shape = static_shape(call.args[0])
            if shape is None:
                return call
            axis = int(call.attrs.axis) % len(shape)
            cuts = call.attrs.indices_or_sections
            if isinstance(cuts, tvm.tirx.IntImm):  # equal sections
                n = int(cuts)
                if shape[axis] % n:
                    return call
                cuts = [shape[axis] // n * i for i in range(1, n)]
            cuts = [0] + [int(c) for c in cuts] + [shape[axis]]
            pieces = [self.take(call.args[0], axis, a, b - a) for a, b in zip(cuts, cuts[1:])]
            if any(p is None for p in pieces):
                return call
            return relax.Tuple([self.builder_.emit(p) for p in pieces])

    @tvm.transform.module_pass(opt_level=0, name="CancelSplits")
    def rewrite(mod, _ctx):
        mod = relax.transform.CanonicalizeBindings()(mutate_relax_functions(Rewrite(mod), mod))
        return relax.transform.DeadCodeElimination()(mod)

    return rewrite


__all__ = ["cancel_splits"]
