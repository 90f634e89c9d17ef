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
"""

from __future__ import annotations

from typing import Any


def blocked_copy_sketch(mod, target, *, seed: int) -> Any | None:
    """A traced Schedule for ``mod`` (one PrimFunc of spatial blocks only), or None when the task computes
    anything (a reduction block), is not for a CPU, or does not inline."""
    from tvm.s_tir import Schedule
    from tvm.tirx import IterVar

    if target.kind.name != "llvm":
        return None
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


__all__ = ["blocked_copy_sketch"]
