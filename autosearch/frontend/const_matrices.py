"""TOPI's constant matrices as nested selections, at build time.

``topi.utils.const_matrix`` writes a matrix (Winograd's transforms A, B and G) as one flat chain of ``Select``, an
entry per link, each testing two ``floormod`` indices: ``Select(i % 6 == 5 and j % 6 == 5, 1.0, Select(i % 6 == 5
and j % 6 == 4, 0.0, ...))``, 36 links for a 6 x 6 matrix. The Winograd schedules unroll the transforms, so every
unrolled product carries one or two such chains, and TVM's simplifier folds each link of each: on a Winograd trial
the build's single most expensive pass. Written as a selection of the row, then of the column within it, entries
equal to the chain's end left out, the unrolled indices fold in a few tests each, and the kernel compiles to the
same code in less time (``experiments/winograd_build.py``).

The rewrite runs on the scheduled TIR of every kernel as it is built, the tuning's builds and the model's alike
(:func:`autosearch.measure.kernels.build`, :func:`autosearch.frontend.lowering.build_module`), as
:mod:`autosearch.frontend.reciprocal` does: the tasks, their workload keys, their loop features and so every log,
known schedule, database and cost model stay as they were. For every value of the two indices the nested form
selects the same constant the chain does (the chain's conditions are distinct row and column pairs, so at most one
holds; where none does, both give the chain's end), so a kernel computes the same values. Chains of any other form
are left alone.
"""

from __future__ import annotations

import math
from typing import Any

# Shorter chains cost the simplifier little; TOPI's smallest matrix (F(2x2, 3x3)'s A) has 8 entries
MIN_ENTRIES = 4


def _constant(expr) -> bool:
    from tvm.ir.prim.expr import FloatImm, IntImm

    return isinstance(expr, FloatImm | IntImm)


def _same_constant(x, y) -> bool:
    """Two immediates of one type, dtype and value (0.0 and -0.0 differ: a product's zero keeps its sign)."""
    if type(x) is not type(y) or str(x.ty) != str(y.ty) or x.value != y.value:
        return False
    return not isinstance(x.value, float) or math.copysign(1.0, x.value) == math.copysign(1.0, y.value)


def _index_test(expr) -> tuple[Any, int, int] | None:
    """``(floormod(x, n), n, k)`` of ``floormod(x, n) == k`` with ``n`` and ``k`` constants, else None."""
    from tvm.ir.prim.expr import EQ, FloorMod, IntImm

    if not (isinstance(expr, EQ) and isinstance(expr.a, FloorMod) and isinstance(expr.b, IntImm)
            and isinstance(expr.a.b, IntImm)):
        return None
    return expr.a, expr.a.b.value, expr.b.value


def chain_entries(expr) -> tuple[Any, Any, dict[tuple[int, int], Any], Any] | None:
    """``(row index, column index, {(row, column): value}, end)`` of a flat ``const_matrix`` chain at ``expr``
    (the ``floormod`` expressions of its two tests, its entries, the value where no test holds), else None."""
    import tvm_ffi
    from tvm.ir.prim.expr import And, Select

    rows = cols = None
    entries: dict[tuple[int, int], Any] = {}
    while isinstance(expr, Select):
        cond = expr.condition
        if not isinstance(cond, And):
            return None
        row, col = _index_test(cond.a), _index_test(cond.b)
        if row is None or col is None or not _constant(expr.true_value):
            return None
        if rows is None:
            rows, cols = row[0], col[0]
        elif not (tvm_ffi.structural_equal(row[0], rows) and tvm_ffi.structural_equal(col[0], cols)):
            return None
        key = (row[2], col[2])
        if not (0 <= key[0] < row[1] and 0 <= key[1] < col[1]) or key in entries:
            return None
        entries[key] = expr.true_value
        expr = expr.false_value
    if rows is None or not _constant(expr) or len(entries) < MIN_ENTRIES:
        return None
    return rows, cols, entries, expr


def nested(rows, cols, entries: dict[tuple[int, int], Any], end):
    """The chain's matrix as a selection of the row, then the column; entries equal to ``end`` left out."""
    from tvm import tirx

    def test(index, value: int):
        return tirx.EQ(index, tirx.const(value, str(index.ty)))

    out = end
    for r in sorted({r for r, _ in entries}, reverse=True):
        row = end
        for c in sorted((c for rr, c in entries if rr == r), reverse=True):
            if not _same_constant(entries[(r, c)], end):
                row = tirx.Select(test(cols, c), entries[(r, c)], row)
        if row is not end:
            out = tirx.Select(test(rows, r), row, out)
    return out


def rewrite_func(func):
    """``func`` with each flat constant-matrix chain nested; ``func`` itself where there is none."""
    import tvm_ffi
    from tvm.ir.prim.expr import Select

    def select(node):
        found = chain_entries(node)
        return node if found is None else nested(*found)

    body = tvm_ffi.structural_map(func.body, [(Select, select)], order="pre")
    return func if body.same_as(func.body) else func.with_body(body)


def nest_const_matrices(mod):
    """``mod`` with :func:`rewrite_func` applied to each of its PrimFuncs (Relax functions as they are)."""
    from autosearch.tvm_compat import map_prim_funcs

    return map_prim_funcs(mod, rewrite_func)
