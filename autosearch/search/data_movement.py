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
"""

from __future__ import annotations

from typing import Any


def blocked_copy_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for ``mod`` (one PrimFunc of spatial blocks only), or None when the task computes
    anything (a reduction block), is not for a CPU, or does not inline."""
    if target.kind.name != "llvm":
        return None
    found = _spatial_blocks(mod, seed)
    if found is None:
        return None
    sch, blocks, outputs = found
    try:
        for rv in blocks:
            if not any(rv.same_as(o) for o in outputs):
                sch.compute_inline(rv)
        for rv in outputs:
            loops = sch.get_loops(rv)
            extent = int(sch.get(loops[-1]).extent)
            if len(loops) < 2 or extent < 2:
                return None
            factors = sch.sample_perfect_tile(loops[-1], n=2, max_innermost_factor=extent)
            outer, inner = sch.split(loops[-1], factors)
            sch.reorder(outer, *loops[:-1], inner)
            sch.parallel(sch.fuse(outer, *loops[:-1]))
    except Exception:  # a block TVM cannot inline or loops it cannot reorder: no such sketch for this task
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
    if target.kind.name != "llvm":
        return None
    bounds = concat_boundaries(mod)
    found = _spatial_blocks(mod, seed) if bounds is not None else None
    if found is None:
        return None
    sch, blocks, outputs = found
    if len(outputs) != 1:
        return None
    try:
        for rv in blocks:
            if not rv.same_as(outputs[0]):
                sch.compute_inline(rv)
        loops = sch.get_loops(outputs[0])
        if len(loops) < 2 or int(sch.get(loops[-1]).extent) != bounds[-1]:
            return None
        sch.parallel(sch.fuse(*loops[:-1]))
        sizes = [b - a for a, b in zip([0] + bounds[:-1], bounds)]
        sch.loop_partition(loops[-1], sizes[:-1] + [None])
    except Exception:  # a block TVM cannot inline, or loops it cannot fuse or partition: no such sketch
        return None
    return sch


__all__ = ["blocked_copy_sketch", "concat_boundaries", "partitioned_concat_sketch"]
