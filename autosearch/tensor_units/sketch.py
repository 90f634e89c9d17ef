"""The design space of a bf16 convolution task (:mod:`.conv`): sketches of our own, one per accumulator shape, on
the target's bf16 unit (AMX tiles, else the AVX512-BF16 dot product).

TVM's auto-tensorising rule (``MultiLevelTilingWithIntrin``) maps a block onto an intrinsic whose operands are
dense; the flattened convolution's A operand is a strided window of the input, which it does not map. So the
schedule is written here, with TVM's primitives, and its open choices are TVM sampling instructions, so every
strategy and cost model searches it like any MetaSchedule sketch and the exported trace replays in TVM:

- the sketch: one per accumulator shape (output rows, pixels along a row, channels) and loop order, as
  MetaSchedule makes one sketch per structure. One intrinsic call computes an accumulator block over the
  whole reduction, every filter tap and channel (``amx.register_conv``, ``dpbf16.register``), so the accumulators
  stay in registers (tiles or vectors) and, on AMX, the tile configuration and the accumulator's load and store
  come once per block. A 1x1 filter too: it once called the plain tile multiply (``amx.register``) for up to 512
  channels at a time, paying the tile configuration and the accumulators' load and store per slice, and ran up to
  1.4x slower on YOLOv8n's 1x1 layers of 80-384 channels. The shapes are the unit's: up to 2 x 2 tiles of 16
  pixels x 16 channels on AMX, 12-28 vector accumulators of 16 channels for the dot product, their pixels dividing
  the GEMM's row (:func:`.dpbf16.shapes_for`). The two orders: pixel tiles outside channel tiles (an input window
  stays in cache across the channel tiles) or channel tiles outside pixel tiles (a block of weights stays in cache
  across the pixel tiles: the wide, small layers whose weights are megabytes);
- ``SamplePerfectTile`` of the pixel tiles and of the channel tiles into an outer (parallel) and an inner loop.

The padding/flattening block and the epilogue (bias, activation, the slice back to the real pixels) are
parallel over rows and vectorised over channels; the flattening copy at most 64 channels per vector
(:func:`_vectorize`). A bf16 Winograd task (:mod:`.winograd`) has the same GEMM with a batch axis, sketched alike; its
padded input is computed whole before the input transform, and its epilogue (the output transform) whole after the
GEMM, since each output reads all the transform positions.
"""

from __future__ import annotations

from typing import Any

from autosearch.tensor_units.amx import TILE_ROWS, ConvTile, register_conv
from autosearch.tensor_units.block import Block, Geometry, register_zero
from autosearch.tensor_units.conv import FLAT_BLOCK, GEMM_BLOCK, GROUP_ATTR, KERNEL_ATTR, ROW_ATTR, STRIDE_ATTR
from autosearch.tensor_units.dpbf16 import LANES, shapes_for
from autosearch.tensor_units.dpbf16 import register as register_dot
from autosearch.tensor_units.matmul import PACK_B_BLOCK
from autosearch.tensor_units.winograd import PAD_BLOCK, WINOGRAD_ATTR


def is_bf16_unit_task(mod) -> bool:
    """Whether ``mod`` (one PrimFunc) holds the flattened bf16 GEMM block of :mod:`.conv` (a convolution's or a
    matmul's), or is a fused attention (:mod:`.attention`): a task on a bf16 unit."""
    from autosearch.tensor_units.attention_sketch import is_attention_task

    return _has_gemm(mod) or is_attention_task(mod)


def amx_sketches(mod, target, *, seed: int) -> list[Any]:
    """Traced Schedules for ``mod``, one per tile shape the GEMM's extents allow and loop order; [] for other tasks
    or targets without AMX-BF16."""
    from autosearch.tensor_units.cpu import has_amx_bf16

    if not has_amx_bf16(target) or not _has_gemm(mod):
        return []
    shapes = [(mh, TILE_ROWS * mw, TILE_ROWS * nt) for mh, mw in ((1, 1), (1, 2), (2, 1)) for nt in (1, 2)]
    return _sketches(mod, seed, shapes, _amx_plan, "amx")


def dpbf16_sketches(mod, target, *, seed: int) -> list[Any]:
    """Traced Schedules for ``mod`` on the AVX512-BF16 dot product (:mod:`.dpbf16`), one per accumulator shape the
    GEMM's extents allow and loop order; [] for other tasks, and for targets without AVX512-BF16 or with AMX-BF16
    (whose tiles multiply many times faster)."""
    from autosearch.tensor_units.cpu import has_amx_bf16, has_avx512_bf16

    if has_amx_bf16(target) or not has_avx512_bf16(target) or not _has_gemm(mod):
        return []
    from tvm.s_tir import Schedule

    sch = Schedule(mod, debug_mask=0)
    _, h, w, co, *_ = sch.get_loops(sch.get_sblock(GEMM_BLOCK))
    shapes = [(rows, pixels, LANES * nv)
              for rows, pixels, nv in shapes_for(_extent(sch, w), _extent(sch, co), _packed_cols(sch))
              if rows == 1 or _extent(sch, h) % 2 == 0]
    return _sketches(mod, seed, shapes, _dot_plan, "dpbf16")


def bf16_sketches(mod, target, *, seed: int) -> list[Any]:
    """The sketches of a bf16 convolution or matmul task on the target's bf16 unit (AMX tiles, else the AVX512-BF16
    dot product), or of a fused attention on either (:mod:`.attention_sketch`); [] for other tasks or targets with
    neither unit."""
    from autosearch.tensor_units.attention_sketch import attention_sketches

    return (amx_sketches(mod, target, seed=seed) or dpbf16_sketches(mod, target, seed=seed)
            or attention_sketches(mod, target, seed=seed))


def _has_gemm(mod) -> bool:
    """Whether ``mod`` holds the flattened GEMM block of :mod:`.conv`."""
    from tvm.s_tir import Schedule

    try:
        Schedule(mod, debug_mask=0).get_sblock(GEMM_BLOCK)
    except Exception:  # no such block (TVM raises when the name is unknown)
        return False
    return True


def _amx_plan(geo: Geometry, mh: int, w_i: int, n_i: int) -> str:
    """The tile intrinsic of one block over the whole reduction, whatever the filter."""
    return register_conv(ConvTile(mh=mh, mw=w_i // TILE_ROWS, nt=n_i // TILE_ROWS, **vars(geo)))


def _dot_plan(geo: Geometry, mh: int, w_i: int, n_i: int) -> str:
    """The dot-product intrinsic of one block over the whole reduction, whatever the filter."""
    return register_dot(Block(rows=mh, pixels=w_i, cols=n_i, **vars(geo)))


def _sketches(mod, seed: int, shapes, plan, unit: str) -> list[Any]:
    out = []
    for mh, w_i, n_i in shapes:
        for weights_outer in (False, True):
            sch = _sketch(mod, seed, (mh, w_i, n_i), weights_outer, plan, unit)
            if sch is not None:
                out.append(sch)
    return out


def _packed_cols(sch) -> int:
    """Output channels per block of the packed weights the GEMM reads (:attr:`.conv.FlatConv.block_n`): the width of
    the packed buffer's rows, its last axis but the pair (a convolution's ``(O / N, KH, groups, depth / 2, N, 2)``,
    a matmul's with a batch axis in front)."""
    for region in sch.get(sch.get_sblock(GEMM_BLOCK)).reads:
        shape = region.source.shape  # the region of a buffer (TensorRegion in TVM 0.27)
        if len(shape) >= 6 and int(shape[-1]) == 2:
            return int(shape[-2])
    raise ValueError("the GEMM block reads no packed weights")


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _sketch(mod, seed: int, shape: tuple[int, int, int], weights_outer: bool, plan, unit: str):
    """One sketch: accumulator blocks of ``shape`` = (rows, pixels per row, channels), computed as ``plan`` says
    (``plan(geometry, *shape)``: the name of the intrinsic that computes one block). The block's init is tensorised
    onto ``unit``'s init that stores nothing: the unit's call starts its accumulators at zero in registers
    (:func:`.block.register_zero`)."""
    from tvm.s_tir import Schedule

    mh, w_i, n_i = shape
    sch = Schedule(mod, seed=seed, debug_mask=0)
    epilogue = _inline_epilogue(sch)
    gemm = sch.get_sblock(GEMM_BLOCK)
    n, h, w, co, *reduction = sch.get_loops(gemm)
    annotations = sch.get(gemm).annotations
    kh, kw = (int(v) for v in annotations[KERNEL_ATTR])
    group = int(annotations[GROUP_ATTR])
    geo = Geometry(kh=kh, kw=kw, row=int(annotations[ROW_ATTR]), stride=int(annotations[STRIDE_ATTR]), group=group,
                   channels=_extent(sch, reduction[-1]) // group, packed=_packed_cols(sch))
    odd = _extent(sch, h) % 2  # only the dot product's GEMM has an odd number of rows (conv.FlatConv.gemm_hw)
    if odd and mh > 1 or _extent(sch, w) % w_i or _extent(sch, co) % n_i:
        return None
    intrin = plan(geo, mh, w_i, n_i)
    # rows go in pairs where the GEMM has an even number (AMX rounds its rows up to one), so a parallel block
    # never has a single row; an odd number of rows is tiled as it is
    h_o, h_p = (h, None) if odd else sch.split(h, [None, 2])
    w_o, w_i_loop = sch.split(w, [None, w_i])
    co_o, co_i = sch.split(co, [None, n_i])
    h1, h2 = sch.split(h_o, sch.sample_perfect_tile(h_o, n=2, max_innermost_factor=16))
    c1, c2 = sch.split(co_o, sch.sample_perfect_tile(co_o, n=2, max_innermost_factor=16))
    pair = () if mh > 1 or odd else (h_p,)  # two rows of pixel tiles: the pair is the tile's; else a loop over it
    inner = (c2, h2, *pair, w_o) if weights_outer else (h2, *pair, w_o, c2)
    tile = ((h_p,) if mh > 1 else ()) + (w_i_loop, co_i)
    sch.reorder(n, h1, c1, *inner, *tile, *reduction)  # the whole reduction in one call
    _fuse_unit_loops(sch, reduction)
    block = sch.fuse(n, h1, c1)
    sch.parallel(block)
    sch.decompose_reduction(gemm, tile[0])
    flat = sch.get_sblock(FLAT_BLOCK)
    if weights_outer:  # the whole input once, up front: each parallel block reads all of it
        _schedule_elementwise(sch, flat)
    else:  # the input rows of each parallel block, converted where they are read (in cache)
        sch.compute_at(flat, block)
        _vectorize(sch, sch.get_loops(flat)[-1])
    _schedule_packing(sch)
    if WINOGRAD_ATTR in annotations:  # the input padded to whole tiles, in full before the transform reads it
        _schedule_elementwise(sch, sch.get_sblock(PAD_BLOCK))
    if epilogue is not None and WINOGRAD_ATTR in annotations:  # reads every transform position: after the GEMM
        _schedule_elementwise(sch, epilogue)
    elif epilogue is not None:  # bias, activation and the slice to the real pixels, on each block as it is done
        # its unit loops kept: a fused pooling of one row pair per block has a row loop of extent 1, and a trace's
        # loops must be the same whatever its tile sizes
        sch.reverse_compute_at(epilogue, block, preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(epilogue)[-1])
    init = sch.get_sblock(f"{GEMM_BLOCK}_init")  # its loops are the tile's: (the row pair,) pixels, channels
    sch.tensorize(sch.get_loops(init)[-len(tile)], register_zero(unit, mh, w_i, n_i))
    sch.tensorize(tile[0], intrin)
    return sch


def _fuse_unit_loops(sch, loops) -> None:
    """Fuse each loop of extent 1 among ``loops`` (adjacent, outer first) into its neighbour: the description of a
    block has no such loop (:func:`.block.describe`), and a filter of one row (1x1, 1xk) has one."""
    loops = list(loops)
    while len(loops) > 1:
        unit = next((i for i, loop in enumerate(loops) if _extent(sch, loop) == 1), None)
        if unit is None:
            return
        pair = (unit, unit + 1) if unit + 1 < len(loops) else (unit - 1, unit)
        loops[pair[0]:pair[1] + 1] = [sch.fuse(loops[pair[0]], loops[pair[1]])]


def _schedule_elementwise(sch, block) -> None:
    """Parallel over all but the last loop, the last vectorised (a block of spatial loops)."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]))
    _vectorize(sch, loops[-1])


def _schedule_packing(sch) -> None:
    """A matmul's packing of its B operand (:mod:`.matmul`), when the task has one: all of it up front, parallel
    over its rows, each row's 32 columns x pairs one vector (the unit dimensions of the 1x1 filter fused away)."""
    try:
        block = sch.get_sblock(PACK_B_BLOCK)
    except Exception:  # a convolution: its weights are packed at compile time
        return
    *outer, cols, pair = sch.get_loops(block)
    sch.parallel(sch.fuse(*outer))
    sch.vectorize(sch.fuse(cols, pair))


VECTOR_LANES = 64  # the widest vector loop the flattening copy is given: 128 bytes of bf16, two zmm registers


def _vectorize(sch, loop) -> None:
    """Vectorise ``loop`` (a channel loop), in chunks of :data:`VECTOR_LANES` (or 32, or 16) when it is wider or no
    power of two: LLVM turns one vector of a width that is no power of two (96, 192, 384 channels: YOLOv8's and
    YOLO11's concatenations; 48 and 80 on the dot product, whose channels are padded to 16, not 32) under the
    flattening's padding condition into code several times slower than the same copy in chunks, while
    power-of-two widths run alike either way (docs/results.md, "The flattening copy in chunks"). The chunks' loop
    stays serial, inside the parallel one."""
    extent = _extent(sch, loop)
    lanes = next((n for n in (VECTOR_LANES, 32, 16) if extent % n == 0 and n < extent), None) if (
        extent > VECTOR_LANES or extent & (extent - 1)) else None
    if lanes is not None:
        loop = sch.split(loop, [None, lanes])[-1]
    sch.vectorize(loop)


def _inline_epilogue(sch):
    """Inline everything after the GEMM into the task's last block; that block (None if there is none)."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    names = [sch.get(b).name_hint for b in blocks]
    after = blocks[names.index(GEMM_BLOCK) + 1:]
    for block in after[:-1]:
        sch.compute_inline(block)
    return after[-1] if after else None


__all__ = ["amx_sketches", "bf16_sketches", "dpbf16_sketches", "is_bf16_unit_task"]
