"""An extra sketch for softmax tasks on CPU: one row at a time, its reductions vectorised.

A softmax over the last axis is four passes over each row: its maximum, the exponentials, their sum, and each
exponential divided by the sum. MetaSchedule's CPU space schedules the blocks of TOPI's softmax one by one: the
maximum and the sum reduce along the row one element at a time (a scalar dependency chain the vector units
cannot take), and the exponentials are written out for the whole tensor before the sum reads them back. The
attention of an area-attention model (YOLO12's ``A2C2f``) runs softmaxes over 400 x 400 score matrices, several
megabytes each, and there the tuned kernels were the largest non-convolution cost of the model.

This sketch computes each row to the end before the next, its exponentials in a row-sized buffer that stays in
the cache, and splits both reductions with ``rfactor`` into 16 (or fewer) independent partial results, so the
maximum and the sum run as vector instructions; the rows are the parallel loop. The vector widths of the
exponentials and the quotients are ``SamplePerfectTile`` decisions, so every strategy measures them like any
other; the schedule is plain TVM primitives, so the exported trace replays in TVM as it is. Numerics: the sum adds
in another order (partial sums), which the measurement's check against the unscheduled kernel covers like any
reordering.
"""

from __future__ import annotations

from typing import Any

MAX_BLOCK, SUM_BLOCK, NORM_BLOCK = "T_softmax_maxelem", "T_softmax_expsum", "T_softmax_norm"
EXP_BLOCKS = ("T_fast_exp", "T_softmax_exp")  # TOPI's fast_softmax and softmax
INLINED = ("T_softmax_delta",)  # fast_softmax's x - max, computed inside the exponential
LANES = 16  # fp32 lanes of the widest vectors the sketch asks for (a 512-bit register)


def partial_lanes(row: int) -> int:
    """How many partial results a row's reductions keep: the largest divisor of the row up to :data:`LANES`. Fixed,
    not a decision: one partial (a split of 1) leaves a unit loop that TVM's trace replay drops, so such a record
    would not replay, and the widest vector is the point of the split."""
    return max(d for d in range(1, min(row, LANES) + 1) if row % d == 0)


def _exp_block(names: set[str]) -> str | None:
    found = [n for n in EXP_BLOCKS if n in names]
    return found[0] if len(found) == 1 else None


def _softmax_blocks(mod, target, seed: int) -> tuple[Any, dict[str, Any], str, Any] | None:
    """(a traced Schedule of ``mod``, its blocks by name, the exponential's block name, the quotients' block) when
    ``mod`` is one softmax (TOPI's blocks and nothing else) and the target a CPU; else None."""
    from tvm.s_tir import Schedule

    if target.kind.name != "llvm":
        return None
    try:
        sch = Schedule(mod, seed=seed, debug_mask=0)
        blocks = {sch.get(rv).name_hint: rv for rv in sch.get_child_blocks(sch.get_sblock("root"))}
    except Exception:  # not a single PrimFunc with a root block
        return None
    names = set(blocks)
    exp = _exp_block(names)
    if exp is None or not {MAX_BLOCK, SUM_BLOCK, NORM_BLOCK} <= names or names - {MAX_BLOCK, SUM_BLOCK, NORM_BLOCK,
                                                                                     exp, *INLINED}:
        return None
    return sch, blocks, exp, sch.get(blocks[NORM_BLOCK])


def _axis(norm) -> int | None:
    """The axis the softmax of the quotients' block ``norm`` runs over (TOPI's annotation), or None."""
    axis = norm.annotations.get("axis")
    return None if axis is None else int(axis)


def softmax_sketch(mod, target, *, seed: int) -> Any | None:
    """Our sketch of a softmax task, found once: :func:`row_softmax_sketch`'s over the last axis,
    :func:`column_softmax_sketch`'s over another; None for any other task or target."""
    found = _softmax_blocks(mod, target, seed)
    if found is None or _axis(found[3]) is None:
        return None
    return (_row_schedule if _axis(found[3]) == len(found[3].iter_vars) - 1 else _column_schedule)(*found)


def row_softmax_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for ``mod`` when it is one softmax over its last axis (TOPI's blocks and nothing else),
    on a CPU; else None."""
    found = _softmax_blocks(mod, target, seed)
    if found is None or _axis(found[3]) != len(found[3].iter_vars) - 1:
        return None  # a softmax over another axis: its rows are not the inner loop
    return _row_schedule(*found)


def _row_schedule(sch, blocks: dict[str, Any], exp: str, norm) -> Any | None:
    if len(norm.iter_vars) < 2:
        return None
    lanes = partial_lanes(int(norm.iter_vars[-1].dom.extent))
    if lanes < 2:
        return None
    try:
        for name in INLINED:
            if name in blocks:
                sch.compute_inline(blocks[name])
        partials = []
        for name in (MAX_BLOCK, SUM_BLOCK):  # rfactor first: it needs the reduction's own loop nest
            k = sch.get_loops(blocks[name])[-1]
            _, inner = sch.split(k, [None, lanes])
            partials.append(sch.rfactor(inner, factor_axis=0))
        loops = sch.get_loops(blocks[NORM_BLOCK])
        row = sch.fuse(*loops[:-1])
        sch.parallel(row)
        for rv in (blocks[SUM_BLOCK], partials[1], blocks[exp], blocks[MAX_BLOCK], partials[0]):
            sch.compute_at(rv, row)
        for rv in (blocks[exp], blocks[NORM_BLOCK]):
            last = sch.get_loops(rv)[-1]
            _, vector = sch.split(last, sch.sample_perfect_tile(last, n=2, max_innermost_factor=LANES))
            sch.vectorize(vector)
        for rv in partials:  # loops (partial, step along the row): the steps outside, the partials as the vector
            partial, step = sch.get_loops(rv)[-2:]
            sch.reorder(step, partial)
            sch.vectorize(partial)
    except Exception:  # a block TVM cannot move or split here: no such sketch for this task
        return None
    return sch


COLUMN_VECTOR = 64  # the widest vector a column softmax's inner loop may take: four 512-bit registers of fp32


def column_block(columns: int) -> int:
    """The columns a column softmax computes as one vector: the widest multiple of :data:`LANES` up to
    :data:`COLUMN_VECTOR` that divides ``columns`` (48 of YOLOv8's 8,400 anchors), else the widest divisor up to it."""
    divisors = [d for d in range(1, min(columns, COLUMN_VECTOR) + 1) if columns % d == 0]
    return max((d for d in divisors if d % LANES == 0), default=max(divisors))


def column_softmax_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for ``mod`` when it is one softmax over an axis other than its last (TOPI's blocks and
    nothing else), on a CPU; else None.

    YOLOv8's and YOLO11's box decoding (DFL) takes a softmax over 16 bins of a (1, 16, 4, 8400) tensor: along the
    softmax's axis the values are 33,600 floats apart, and TVM's sketches run each of the 33,600 columns as a scalar
    loop. Here the columns go in blocks of the last axis, contiguous in memory: the block (:func:`column_block`) is
    the vector, and the maximum, the exponentials, the sum and the quotients of a block are computed one after
    another, the block's rows of exponentials in cache between them; the blocks are the parallel loop. The block is
    fixed, not a decision: a block of one column leaves a unit loop TVM's trace replay drops, and widths that are no
    multiple of 16 vectorise into partial registers; so the sketch has one config, which the tuner measures first
    (:attr:`autosearch.search.space.DecisionSpace.measure_first`)."""
    found = _softmax_blocks(mod, target, seed)
    if found is None or _axis(found[3]) is None or _axis(found[3]) >= len(found[3].iter_vars) - 1:
        return None  # over the last axis: the row sketch's
    return _column_schedule(*found)


def _column_schedule(sch, blocks: dict[str, Any], exp: str, norm) -> Any | None:
    axis, columns = _axis(norm), int(norm.iter_vars[-1].dom.extent)
    if columns < LANES:
        return None
    try:
        for name in INLINED:
            if name in blocks:
                sch.compute_inline(blocks[name])
        loops = sch.get_loops(blocks[NORM_BLOCK])
        outer, vector = sch.split(loops[-1], [None, column_block(columns)])
        others = [loop for i, loop in enumerate(loops[:-1]) if i != axis]
        sch.reorder(*others, outer, loops[axis], vector)
        block = sch.fuse(*others, outer)
        sch.parallel(block)
        for name in (SUM_BLOCK, exp, MAX_BLOCK):  # consumers first: each one's readers are under the block
            sch.compute_at(blocks[name], block)
        for name in (MAX_BLOCK, SUM_BLOCK):  # (columns, bins) under the block: the bins outside, the columns inside
            columns, bins = sch.get_loops(blocks[name])[-2:]
            sch.reorder(bins, columns)
            sch.vectorize(columns)
        for name in (exp, NORM_BLOCK):
            sch.vectorize(sch.get_loops(blocks[name])[-1])
    except Exception:  # a block TVM cannot move or split here: no such sketch for this task
        return None
    return sch


__all__ = ["COLUMN_VECTOR", "LANES", "column_block", "column_softmax_sketch", "partial_lanes", "row_softmax_sketch",
           "softmax_sketch"]
