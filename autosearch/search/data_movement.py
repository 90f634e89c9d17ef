"""An extra sketch for pure data-movement tasks on CPU (concatenate / transpose / reshape / split chains).

MetaSchedule's CPU space gives such a task one schedule: every intermediate inlined, the output loops
parallelised and vectorised in their own order. When an output is a transpose of its input (YOLOv8n's
detection head gathers three NHWC feature maps into a channel-major (1, 144, 8400) tensor and splits it),
that order reads the input with a stride of 144 floats: every load misses the cache line the previous one
used, and that sketch is slower than TVM's naive loop nest. This sketch inlines the same way, then tiles each
output's last axis and moves the tile loop outermost: one iteration copies a (channels x tile) block whose
source rows sit together in the cache. The tile size is a ``SamplePerfectTile`` decision, so the tuner
measures it like any other; the schedule is plain TVM primitives, so the exported trace replays in TVM as-is.
The timings of the three schedules on that task are in README ("Decision space").

A concatenation along the last axis (NHWC's channels: YOLOv8n's C2f and SPPF blocks) gets a sketch of its own
besides: TOPI computes each output element as a chain of ``if_then_else`` over the inputs, so along the channels,
the innermost loop, every element chooses its input, and LLVM vectorises none of it. The sketch partitions that loop
at the inputs' boundaries (``loop_partition``): each input's slice becomes a loop of its own whose condition the
simplifier folds, a plain copy LLVM vectorises. It has no decisions; the tuner measures it first, before the known
schedules (:attr:`autosearch.search.space.DecisionSpace.measure_first`), since a short run gives such a task
too few trials to draw it (``docs/results.md``, "Concatenations along the channels"). A nearest-neighbour resize
fused into such a concatenation (YOLO's necks) is partitioned alike: its slice reads the smaller input, a gather
along the rows but a plain copy along the channels, which the partition leaves to LLVM to vectorise.

Where an output chooses its source by an outer index after the inlining, not being a concatenation itself (an
NMS-free head concatenates the three levels' anchors, then transposes and splits the result into boxes and scores,
each anchor-major), :func:`partitioned_choice_sketch` partitions that index where the choice changes.
"""

from __future__ import annotations

import math
from typing import Any


def blocked_copy_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for ``mod`` (one PrimFunc of spatial blocks only), or None when the task computes
    anything (a reduction block), is not for a CPU, or does not inline."""
    found = _inlined(mod, target, seed)
    if found is None:
        return None
    sch, outputs = found
    try:
        for rv in outputs:
            loops = sch.get_loops(rv)
            extent = int(sch.get(loops[-1]).extent)
            if len(loops) < 2 or extent < 2:
                return None
            factors = sch.sample_perfect_tile(loops[-1], n=2, max_innermost_factor=extent)
            outer, inner = sch.split(loops[-1], factors)
            sch.reorder(outer, *loops[:-1], inner)
            sch.parallel(sch.fuse(outer, *loops[:-1]))
    except Exception:  # loops TVM cannot reorder: no such sketch for this task
        return None
    return sch


def _spatial_blocks(mod, seed: int) -> tuple[Any, list, list] | None:
    """(a traced Schedule of ``mod``, its blocks, the blocks that write an output), or None unless ``mod`` is one
    PrimFunc of spatial blocks only."""
    from tvm.s_tir import Schedule
    from tvm.tirx import IterVar

    try:
        sch = Schedule(mod, seed=seed, debug_mask=0)
        root = sch.get_sblock("root")
    except Exception:  # not a single PrimFunc with a root block
        return None
    blocks = list(sch.get_child_blocks(root))
    if not blocks:
        return None
    intermediates = list(sch.get(root).alloc_buffers)  # what a block writes that is not one is an output
    outputs = []
    for rv in blocks:
        block = sch.get(rv)
        if any(int(iv.iter_type) != IterVar.DataPar for iv in block.iter_vars) or not block.iter_vars:
            return None
        if not any(w.source.same_as(b) for w in block.writes for b in intermediates):
            outputs.append(rv)
    return sch, blocks, outputs


def _inline_intermediates(sch, blocks, outputs) -> None:
    """Every block of ``blocks`` but the ``outputs`` inlined into its consumers: what each of these sketches starts
    from (raises where TVM cannot inline one; the sketch then does not exist)."""
    for rv in blocks:
        if not any(rv.same_as(o) for o in outputs):
            sch.compute_inline(rv)


def _inlined(mod, target, seed: int) -> tuple[Any, list] | None:
    """(a traced Schedule of ``mod`` with every block but the outputs inlined, the output blocks), or None unless
    ``mod`` is one PrimFunc of spatial blocks for a CPU that TVM can inline so: where the sketches that start from
    the inlined outputs start."""
    if target.kind.name != "llvm":
        return None
    found = _spatial_blocks(mod, seed)
    if found is None:
        return None
    sch, blocks, outputs = found
    from autosearch.frontend.sampling import NO_INLINE_KEY

    if any(str(sch.get(rv).annotations.get(NO_INLINE_KEY, "")) == "disable" for rv in blocks):
        return None  # a block kept out of inlining (MetaSchedule's AutoInline honours it too): not copies alone
    try:
        _inline_intermediates(sch, blocks, outputs)
    except Exception:  # a block TVM cannot inline
        return None
    return sch, outputs


def concat_boundaries(mod) -> list[int] | None:
    """Where a concatenation along the last axis passes from one input to the next (the running sums of the inputs'
    last extents, the output's last), or None unless ``mod``'s function reads two or more inputs of the output's
    rank whose last extents add up to its last, and whose other extents each equal the output's or divide it: an
    input smaller by whole factors is one a nearest-neighbour resize fused into the concatenation enlarges (the
    upsampling in YOLO's necks: 40 x 40 to 80 x 80, then concatenated on the channels)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        shapes = [[int(d) for d in a.shape] for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]
    except Exception:  # not one PrimFunc of buffers of constant shapes
        return None
    *inputs, out = shapes
    if len(inputs) < 2 or not out or any(len(s) != len(out) for s in inputs):
        return None
    if any(d < 1 or o % d for s in inputs for d, o in zip(s[:-1], out[:-1])):
        return None
    if sum(s[-1] for s in inputs) != out[-1] or min(s[-1] for s in inputs) < 1:
        return None
    bounds, total = [], 0
    for s in inputs:
        total += s[-1]
        bounds.append(total)
    return bounds


def partitioned_concat_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for a concatenation along the last axis (:func:`concat_boundaries`): intermediates inlined,
    the outer loops fused and parallel, the last loop partitioned at the inputs' boundaries; None for any other
    task, or one not for a CPU."""
    bounds = concat_boundaries(mod)
    found = _inlined(mod, target, seed) if bounds is not None else None
    if found is None or len(found[1]) != 1:
        return None
    sch, outputs = found
    try:
        loops = sch.get_loops(outputs[0])
        if len(loops) < 2 or int(sch.get(loops[-1]).extent) != bounds[-1]:
            return None
        sch.parallel(sch.fuse(*loops[:-1]))
        sizes = [b - a for a, b in zip([0] + bounds[:-1], bounds)]
        sch.loop_partition(loops[-1], sizes[:-1] + [None])
    except Exception:  # loops TVM cannot fuse or partition: no such sketch
        return None
    return sch


# the tile of the last axis an axis concatenation's sketch measures first: 16 floats, a cache line, the tile whose
# timings led (docs/results.md, "Concatenations along an outer axis")
AXIS_CONCAT_TILE = 16


def block_concat(sch, block) -> tuple[int, list[int]] | None:
    """(axis, sizes) where ``block`` (of ``sch``) writes the concatenation of what it reads along one axis, the sizes
    of the pieces in order along it; None for any other block. Read from the block's read regions: each read of the
    output's rank equals it in every extent but the axis's, starts at a constant offset along it, and the pieces
    tile the axis without gap or overlap. TOPI computes such a block as a chain of ``if_then_else`` over the axis
    index, and an intermediate concatenation (not the function's arguments) is what
    :func:`concat_boundaries` cannot see."""
    import tvm
    from tvm.sym import Analyzer

    stmt = sch.get(block)
    if len(stmt.writes) != 1 or len(stmt.reads) < 2:
        return None
    out = [int(d) for d in stmt.writes[0].source.shape]
    analyzer = Analyzer()
    pieces, axes = [], set()
    for region in stmt.reads:
        shape = [int(d) for d in region.source.shape]
        if len(shape) != len(out):
            return None
        differ = [d for d, (a, b) in enumerate(zip(shape, out)) if a != b]
        if len(differ) != 1:
            return None
        axis = differ[0]
        axes.add(axis)
        if axis >= len(stmt.iter_vars):
            return None
        start = analyzer.simplify(stmt.iter_vars[axis].var - region.region[axis].min)
        if not isinstance(start, tvm.tirx.IntImm):
            return None
        pieces.append((int(start.value), shape[axis]))
    if len(axes) != 1:
        return None
    (axis,) = axes
    pieces.sort()
    reach = 0
    for start, size in pieces:
        if start != reach:
            return None
        reach += size
    return (axis, [size for _, size in pieces]) if reach == out[axis] else None


def _axis_concat_sketch(mod, target, seed: int, schedule) -> Any | None:
    """``schedule(sch, output, loops, axis, sizes)`` applied to a traced Schedule of ``mod`` with every block but its
    one output inlined, that output block, its loops, the axis it concatenates along and the pieces' sizes, where
    ``mod``'s one output concatenates along an axis other than its last (:func:`block_concat`), for a CPU: the
    Schedule, or None for any other task, or where ``schedule`` returns False or TVM cannot inline, split, reorder or
    partition."""
    if target.kind.name != "llvm":
        return None
    found = _spatial_blocks(mod, seed)
    if found is None or len(found[2]) != 1:
        return None
    sch, blocks, outputs = found
    concat = block_concat(sch, outputs[0])
    if concat is None:
        return None
    try:
        _inline_intermediates(sch, blocks, outputs)
        loops = sch.get_loops(outputs[0])
        if concat[0] >= len(loops) - 1:  # along the last axis: partitioned_concat_sketch's case
            return None
        return sch if schedule(sch, outputs[0], loops, *concat) is not False else None
    except Exception:  # no such sketch for this task
        return None


def partitioned_axis_concat_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for a task whose one output is a concatenation along an axis other than its last
    (:func:`block_concat`): YOLO's decode heads gather boxes, class scores and (oriented boxes) angles into one
    channel-major tensor, (1, 4 + 80 + 1, anchors). TVM's sketches inline every producer into that block, where
    vectorised, each ``if_then_else`` becomes a select that computes every branch for every element: the angle's
    sine and cosine and the class sigmoid for all 85 rows. Here the producers are inlined the same way, the last
    axis is tiled (a ``SamplePerfectTile`` decision, :data:`AXIS_CONCAT_TILE` first), the tile loop moved outermost
    and parallel with the axes before the concatenation's, and the concatenation's loop partitioned at its pieces:
    each piece a loop of its own whose condition the simplifier folds, computing its own branch alone. None for any
    other task, or one not for a CPU."""
    def schedule(sch, _output, loops, axis: int, sizes: list[int]) -> None:
        extent = int(sch.get(loops[-1]).extent)
        tile = min((d for d in range(1, extent + 1) if extent % d == 0),
                   key=lambda d: (abs(d - AXIS_CONCAT_TILE), d))
        factors = sch.sample_perfect_tile(loops[-1], n=2, max_innermost_factor=extent, decision=[extent // tile, tile])
        outer, inner = sch.split(loops[-1], factors)
        sch.reorder(outer, *loops[:-1], inner)
        sch.parallel(sch.fuse(outer, *loops[:axis]))
        sch.loop_partition(loops[axis], sizes[:-1])  # the last piece is the rest (a None there does not replay)

    return _axis_concat_sketch(mod, target, seed, schedule)


def partitioned_levels_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for an axis concatenation's task (:func:`partitioned_axis_concat_sketch`'s) whose output
    also chooses its source along its last axis (:func:`choice_points`): a decode head's (1, 4 + 80, anchors), each
    anchor from one of three levels' NHWC maps, transposed into place. The axis sketch tiles the anchors but leaves
    the level's choice (two ``if_then_else`` on the anchor) in every element, with the reshape arithmetic of each
    level's index in both of its branches. Here the tile is the largest that keeps every level whole (the greatest
    common divisor of the levels' boundaries and the anchors), the tile loop outermost and partitioned at the levels'
    boundaries, each piece parallel, and the concatenation's axis partitioned in each: each piece copies one level's
    map and computes one branch, conditions folded. No decisions: another tile would cut a level. None for any other
    task, or one not for a CPU."""
    def schedule(sch, output, loops, axis: int, sizes: list[int]) -> bool:
        last = len(loops) - 1
        cuts = choice_points(sch.get(output)).get(last)
        if not cuts:
            return False
        extent = int(sch.get(loops[last]).extent)
        tile = math.gcd(extent, *cuts)
        outer, inner = sch.split(loops[last], [extent // tile, tile])
        sch.reorder(outer, *loops[:last], inner)
        levels = [(b - a) // tile for a, b in zip([0, *cuts[:-1]], cuts)]  # the rest is the last piece
        for piece in sch.loop_partition(outer, levels):
            sch.parallel(piece)
            piece_loops = sch.get_loops(sch.get_child_blocks(piece)[0])
            sch.loop_partition(piece_loops[1 + axis], sizes[:-1])
        return True

    return _axis_concat_sketch(mod, target, seed, schedule)


_BINARY = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE", "LT", "LE", "GT", "GE",
           "And", "Or")


def _conditions(expr, conditions: list, variables: list) -> None:
    """The conditions of ``expr``'s ``if_then_else`` and ``Select`` nodes into ``conditions``, its variables into
    ``variables`` (TVM 0.27's Python has no expression visitor: the nodes are walked by their fields)."""
    kind = type(expr).__name__
    if kind == "Var":
        variables.append(expr)
        return
    if kind in ("BufferLoad", "TensorLoad"):
        children = list(expr.indices)
    elif kind == "Call":
        if getattr(expr.op, "name", "") == "prim.if_then_else":
            conditions.append(expr.args[0])
        children = list(expr.args)
    elif kind == "Select":
        conditions.append(expr.condition)
        children = [expr.condition, expr.true_value, expr.false_value]
    elif kind in _BINARY:
        children = [expr.a, expr.b]
    elif kind == "Not":
        children = [expr.a]
    elif kind == "Cast":
        children = [expr.value]
    else:
        children = []
    for child in children:
        _conditions(child, conditions, variables)


def choice_points(block) -> dict[int, list[int]]:
    """{axis: the indices where the choice changes} of a spatial block whose value chooses among sources by conditions
    on one of its iteration variables each (a concatenation inlined into what reads it: ``if_then_else(6400 <= a,
    ...)``): the axes by their position among the block's iteration variables, each condition's point the first
    index at which it flips (found by bisection; a condition of one variable over a concatenation is monotone).
    Conditions on several variables, or true or false throughout, give none."""
    import tvm
    from tvm.sym import Analyzer

    extents = [(iv.var, int(iv.dom.extent)) for iv in block.iter_vars]
    conditions: list = []
    _conditions(block.body.value, conditions, [])
    points: dict[int, set[int]] = {}
    for condition in conditions:
        used: list = []
        _conditions(condition, [], used)
        axes = {i for i, (var, _) in enumerate(extents) if any(u.same_as(var) for u in used)}
        if len(axes) != 1 or not all(any(u.same_as(var) for var, _ in extents) for u in used):
            continue
        (axis,) = axes
        var, extent = extents[axis]

        def holds(index: int, condition=condition, var=var) -> int | None:
            analyzer = Analyzer()
            analyzer.bind(var, tvm.tirx.const(index, str(var.ty)))
            value = analyzer.simplify(condition)
            return int(value.value) if isinstance(value, tvm.tirx.IntImm) else None

        first, last = holds(0), holds(extent - 1)
        if first is None or last is None or first == last:
            continue
        low, high = 0, extent - 1
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if holds(middle) == first else (low, middle)
        points.setdefault(axis, set()).add(high)
    return {axis: sorted(found) for axis, found in sorted(points.items())}


def partitioned_choice_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for a data-movement task one of whose outputs, once every producer is inlined into it,
    chooses its source by an index other than its last (:func:`choice_points`): an NMS-free head's boxes and scores,
    (1, anchors, 4) and (1, anchors, 80), each anchor from one of three levels. TVM's sketches compute such an
    output with the choice (a chain of ``if_then_else``) in every element, and its sigmoid's twenty-odd references to
    the logit each carry the whole chain, so every trial was slower than the unscheduled loop nest. Here each such
    output's outermost chosen axis is partitioned where the choice changes, each piece a loop of its own, parallel,
    whose conditions the simplifier folds: a plain copy with its arithmetic that LLVM vectorises along the last
    axis. The other outputs are parallel over all but their last axis. No decisions. None for any other task, one
    not for a CPU, or one whose outputs choose along their last axis alone (the concatenation sketches' case)."""
    found = _inlined(mod, target, seed)
    if found is None:
        return None
    sch, outputs = found
    partitioned = False
    try:
        for output in outputs:
            loops = sch.get_loops(output)
            block = sch.get(output)
            if len(loops) != len(block.iter_vars) or len(loops) < 2:
                return None
            points = choice_points(block)
            axis = next((a for a in points if a < len(loops) - 1 and int(sch.get(loops[a]).extent) > 1), None)
            if axis is None:
                sch.parallel(sch.fuse(*loops[:-1]))
                continue
            cuts = points[axis]
            pieces = sch.loop_partition(loops[axis], [b - a for a, b in zip([0] + cuts[:-1], cuts)])  # rest last
            for piece in pieces:
                sch.parallel(piece)
            partitioned = True
    except Exception:  # loops TVM cannot fuse or partition: no such sketch
        return None
    return sch if partitioned else None


__all__ = ["block_concat", "blocked_copy_sketch", "choice_points", "concat_boundaries",
           "partitioned_axis_concat_sketch", "partitioned_choice_sketch", "partitioned_concat_sketch",
           "partitioned_levels_sketch"]
