"""The design space of a bf16 AMX convolution task (:mod:`.conv`): sketches of our own, one per tile shape.

TVM's auto-tensorising rule (``MultiLevelTilingWithIntrin``) maps a block onto an intrinsic whose operands are
dense; the flattened convolution's A operand is a strided window of the input, which it does not map. So the
schedule is written here, with TVM's primitives, and its open choices are TVM sampling instructions, so every
strategy and cost model searches it like any MetaSchedule sketch and the exported trace replays in TVM:

- the sketch: one per accumulator shape ``(mt, nt)`` (tiles along pixels and along channels) and loop order,
  as MetaSchedule makes one sketch per structure. One intrinsic call computes an accumulator block over the
  whole reduction, every filter tap and channel (``amx.register_conv``), so the accumulators stay in tile
  registers and the tile configuration and the accumulator's load and store come once per block (a 1x1 filter
  calls the plain tile multiply, up to 512 channels per call). The two orders: pixel tiles outside channel
  tiles (an input window stays in cache across the channel tiles) or channel tiles outside pixel tiles (a block
  of weights stays in cache across the pixel tiles: the wide, small layers whose weights are megabytes);
- ``SamplePerfectTile`` of the pixel tiles and of the channel tiles into an outer (parallel) and an inner loop.

The padding/flattening block and the epilogue (bias, activation, the slice back to the real pixels) are
parallel over rows and vectorised over channels.
"""

from __future__ import annotations

from typing import Any

from autosearch.tensor_units.amx import SHAPES, TILE_K, TILE_ROWS, register, register_conv
from autosearch.tensor_units.conv import FLAT_BLOCK, GEMM_BLOCK


def is_amx_task(mod) -> bool:
    """Whether ``mod`` (one PrimFunc) holds the flattened bf16 GEMM block of :mod:`.conv`."""
    from tvm.s_tir import Schedule

    try:
        Schedule(mod, debug_mask=0).get_sblock(GEMM_BLOCK)
    except Exception:  # no such block (TVM raises when the name is unknown)
        return False
    return True


def amx_sketches(mod, target, *, seed: int) -> list[Any]:
    """Traced Schedules for ``mod``, one per tile shape the GEMM's extents allow; [] for other tasks or targets
    without AMX-BF16."""
    from autosearch.tensor_units.cpu import has_amx_bf16

    if not has_amx_bf16(target) or not is_amx_task(mod):
        return []
    out = []
    for mt, nt in sorted({(mt, nt) for mt, nt, _ in SHAPES}):
        for weights_outer in (False, True):
            sch = _sketch(mod, seed, mt, nt, weights_outer)
            if sch is not None:
                out.append(sch)
    return out


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _sketch(mod, seed: int, mt: int, nt: int, weights_outer: bool):
    from tvm.s_tir import Schedule

    sch = Schedule(mod, seed=seed, debug_mask=0)
    _schedule_epilogue(sch)
    gemm = sch.get_sblock(GEMM_BLOCK)
    n, q, co, rh, rw, rc = sch.get_loops(gemm)
    kh, kw, channels, rows = (_extent(sch, loop) for loop in (rh, rw, rc, q))
    legal = [kt for _, _, kt in SHAPES if channels % (TILE_K * kt) == 0]
    if rows % (TILE_ROWS * mt) or _extent(sch, co) % (TILE_ROWS * nt) or not legal:
        return None
    q_o, q_i = sch.split(q, [None, TILE_ROWS * mt])
    co_o, co_i = sch.split(co, [None, TILE_ROWS * nt])
    q1, q2 = sch.split(q_o, sch.sample_perfect_tile(q_o, n=2, max_innermost_factor=16))
    c1, c2 = sch.split(co_o, sch.sample_perfect_tile(co_o, n=2, max_innermost_factor=16))
    inner = (c2, q2) if weights_outer else (q2, c2)
    if kh > 1 and kw > 1:  # the whole reduction in one call (TVM drops unit loops, which the description has)
        flat = next(b for b in sch.get(sch.get_sblock("root")).alloc_buffers if b.name == FLAT_BLOCK)
        row = (int(flat.shape[1]) - rows - (kw - 1)) // (kh - 1)  # the flat length is rows + (kh-1) R + kw-1
        sch.reorder(n, q1, c1, *inner, q_i, co_i, rh, rw, rc)
        intrin, reduction = register_conv(mt, nt, kh, kw, row, channels), q_i
    else:  # a 1x1 (or 1xk) filter: as many tile multiplies per call as the channels allow
        kt = max(legal)
        rc_o, rc_i = sch.split(rc, [None, TILE_K * kt])
        sch.reorder(n, q1, c1, *inner, rh, rw, rc_o, q_i, co_i, rc_i)
        intrin, reduction = register(mt, nt, kt), rh
    sch.parallel(sch.fuse(n, q1, c1))
    sch.decompose_reduction(gemm, reduction)
    init = sch.get_sblock(f"{GEMM_BLOCK}_init")
    sch.vectorize(sch.get_loops(init)[-1])
    _schedule_elementwise(sch, sch.get_sblock(FLAT_BLOCK))
    sch.tensorize(q_i, intrin)
    return sch


def _schedule_elementwise(sch, block) -> None:
    """Parallel over all but the last loop, the last vectorised (a block of spatial loops)."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]))
    sch.vectorize(loops[-1])


def _schedule_epilogue(sch) -> None:
    """Inline everything after the GEMM into the task's last block, which is then parallel and vectorised."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    names = [sch.get(b).name_hint for b in blocks]
    after = blocks[names.index(GEMM_BLOCK) + 1:]
    for block in after[:-1]:
        sch.compute_inline(block)
    if after:
        _schedule_elementwise(sch, after[-1])


__all__ = ["amx_sketches", "is_amx_task"]
