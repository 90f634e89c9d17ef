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

from autosearch.tensor_units.amx import SHAPES, TILE_K, TILE_ROWS, ConvTile, register, register_conv
from autosearch.tensor_units.conv import FLAT_BLOCK, GEMM_BLOCK, GROUP_ATTR, KERNEL_ATTR, ROW_ATTR, STRIDE_ATTR


def is_amx_task(mod) -> bool:
    """Whether ``mod`` (one PrimFunc) holds the flattened bf16 GEMM block of :mod:`.conv`."""
    from tvm.s_tir import Schedule

    try:
        Schedule(mod, debug_mask=0).get_sblock(GEMM_BLOCK)
    except Exception:  # no such block (TVM raises when the name is unknown)
        return False
    return True


def amx_sketches(mod, target, *, seed: int) -> list[Any]:
    """Traced Schedules for ``mod``, one per tile shape the GEMM's extents allow and loop order; [] for other tasks
    or targets without AMX-BF16."""
    from autosearch.tensor_units.cpu import has_amx_bf16

    if not has_amx_bf16(target) or not is_amx_task(mod):
        return []
    out = []
    for pixels in ((1, 1), (1, 2), (2, 1)):
        for nt in (1, 2):
            for weights_outer in (False, True):
                sch = _sketch(mod, seed, pixels, nt, weights_outer)
                if sch is not None:
                    out.append(sch)
    return out


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _sketch(mod, seed: int, pixels: tuple[int, int], nt: int, weights_outer: bool):
    """One sketch: accumulator blocks of ``pixels`` = (rows, 16-pixel tiles per row) x ``nt`` channel tiles."""
    from tvm.s_tir import Schedule

    mh, mw = pixels
    sch = Schedule(mod, seed=seed, debug_mask=0)
    epilogue = _inline_epilogue(sch)
    gemm = sch.get_sblock(GEMM_BLOCK)
    n, h, w, co, *reduction = sch.get_loops(gemm)
    annotations = sch.get(gemm).annotations
    kh, kw = (int(v) for v in annotations[KERNEL_ATTR])
    group = int(annotations[GROUP_ATTR])
    channels = _extent(sch, reduction[-1]) if group == 1 else TILE_K // group  # per flat pixel
    whole = kh > 1 and kw > 1  # the whole reduction in one call
    legal = [kt for _, _, kt in SHAPES if channels % (TILE_K * kt) == 0]
    if (_extent(sch, h) % 2 or _extent(sch, w) % (TILE_ROWS * mw) or _extent(sch, co) % (TILE_ROWS * nt)
            or not (whole or legal) or (mh > 1 and not whole)):
        return None
    # rows go in pairs (the GEMM has an even number), so a parallel block never has a single row: loops of
    # extent 1 vanish, and a trace must find the same loops whatever its tile sizes
    h_o, h_p = sch.split(h, [None, 2])
    w_o, w_i = sch.split(w, [None, TILE_ROWS * mw])
    co_o, co_i = sch.split(co, [None, TILE_ROWS * nt])
    h1, h2 = sch.split(h_o, sch.sample_perfect_tile(h_o, n=2, max_innermost_factor=16))
    c1, c2 = sch.split(co_o, sch.sample_perfect_tile(co_o, n=2, max_innermost_factor=16))
    pair = () if mh > 1 else (h_p,)  # two rows of pixel tiles: the pair is the tile's; else a loop over it
    inner = (c2, h2, *pair, w_o) if weights_outer else (h2, *pair, w_o, c2)
    tile = ((h_p,) if mh > 1 else ()) + (w_i, co_i)
    if whole:
        sch.reorder(n, h1, c1, *inner, *tile, *reduction)
        conv = ConvTile(mh=mh, mw=mw, nt=nt, kh=kh, kw=kw, row=int(annotations[ROW_ATTR]), channels=channels,
                        stride=int(annotations[STRIDE_ATTR]), group=group)
        intrin, decompose_at = register_conv(conv), tile[0]
    else:  # a 1x1 (or 1xk) filter: as many tile multiplies per call as the channels allow
        kt = max(legal)
        *taps, rc = reduction
        rc_o, rc_i = sch.split(rc, [None, TILE_K * kt])
        sch.reorder(n, h1, c1, *inner, *taps, rc_o, *tile, rc_i)
        intrin, decompose_at = register(mw, nt, kt), (taps or [rc_o])[0]
    block = sch.fuse(n, h1, c1)
    sch.parallel(block)
    sch.decompose_reduction(gemm, decompose_at)
    init = sch.get_sblock(f"{GEMM_BLOCK}_init")
    sch.vectorize(sch.get_loops(init)[-1])
    flat = sch.get_sblock(FLAT_BLOCK)
    if weights_outer:  # the whole input once, up front: each parallel block reads all of it
        _schedule_elementwise(sch, flat)
    else:  # the input rows of each parallel block, converted where they are read (in cache)
        sch.compute_at(flat, block)
        sch.vectorize(sch.get_loops(flat)[-1])
    if epilogue is not None:  # bias, activation and the slice to the real pixels, on each block as it is done
        sch.reverse_compute_at(epilogue, block)
        sch.vectorize(sch.get_loops(epilogue)[-1])
    sch.tensorize(tile[0], intrin)
    return sch


def _schedule_elementwise(sch, block) -> None:
    """Parallel over all but the last loop, the last vectorised (a block of spatial loops)."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]))
    sch.vectorize(loops[-1])


def _inline_epilogue(sch):
    """Inline everything after the GEMM into the task's last block; that block (None if there is none)."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    names = [sch.get(b).name_hint for b in blocks]
    after = blocks[names.index(GEMM_BLOCK) + 1:]
    for block in after[:-1]:
        sch.compute_inline(block)
    return after[-1] if after else None


__all__ = ["amx_sketches", "is_amx_task"]
