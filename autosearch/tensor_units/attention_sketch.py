"""The design space of a fused attention task (:mod:`.attention`): sketches of our own, one per tile shape on AMX,
one per block of rows and register blocks of the products on the AVX512-BF16 dot product.

Each sketch makes the block of query rows the parallel loop, batches x row blocks of 16 or 32 rows, and computes
everything a block needs under it: its rows of q flattened, its scores on the tiles, the softmax over them, its
probabilities and its part of the output, so a block's scores stay in cache between the products. k and v are
packed once, before the blocks. Both products are tensorised onto the convolution's whole-reduction intrinsic of
the unit (:func:`.amx.register_conv`, :func:`.dpbf16.register`; a 1x1 filter), their inits onto the init that
stores nothing.

The sketch's structure is fixed by its tile shape: query tiles per block (1 or 2) and the column tiles of each
product's accumulator (1 or 2: an accumulator of up to 2 x 2 tiles, as the convolution's); on the dot product the
block's rows (16 or 32) and each product's register block (8 rows x 32 columns or 16 x 16: 16 accumulators, as the
convolution's rows of whole tiles have them, :data:`.dpbf16.SHAPES`); every strategy then
searches the vector widths of the exponentials and the probabilities (``SamplePerfectTile``). The maximum and the
sum reduce each row into 16 partial results first (``rfactor``), as the row-softmax sketch does
(:mod:`autosearch.tensor_units.softmax`), so they run as vector instructions.

The probabilities are allocated in ``local`` scope: TVM's ``StorageRewrite`` would otherwise place the bf16
buffer, once the scores are dead, in the scores' fp32 allocation, and the tile load's 16-bit address of it no
longer type-checks (the build fails).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from autosearch.tensor_units import attention as at
from autosearch.tensor_units.amx import TILE_ROWS, ConvTile, register_conv
from autosearch.tensor_units.block import Block, Geometry, register_zero
from autosearch.tensor_units.softmax import LANES, partial_lanes

EXP_BLOCKS = ("T_fast_exp", "T_exp")
# the dot product's accumulator blocks of a product, (query rows, 16-column vectors): 16 accumulators each, the
# shapes of a 1x1 convolution's rows of whole 16-pixel tiles (:data:`.dpbf16.SHAPES` with one row)
DOT_SHAPES = ((8, 2), (16, 1))  # TOPI's block of the exponential, inlined into the masked one


def is_attention_task(mod) -> bool:
    """Whether ``mod`` (one PrimFunc) is a fused attention of :mod:`.attention`."""
    from tvm.s_tir import Schedule

    try:
        sch = Schedule(mod, debug_mask=0)
        sch.get_sblock(at.SCORES_BLOCK)
        sch.get_sblock(at.GEMM_BLOCK)
    except Exception:  # no such block (TVM raises when the name is unknown)
        return False
    return True


def attention_sketches(mod, target, *, seed: int) -> list[Any]:
    """Traced Schedules for ``mod``, one per tile shape its extents allow on AMX, else one per block of rows and
    accumulator shapes of each product on the AVX512-BF16 dot product (:func:`_dot_sketch`); [] for other tasks or
    targets with neither unit."""
    from autosearch.tensor_units.cpu import has_amx_bf16, has_avx512_bf16

    if not is_attention_task(mod):
        return []
    if has_amx_bf16(target):
        candidates = [partial(_sketch, mod, seed, mt, nt1, nt2) for mt in (1, 2) for nt1 in (1, 2) for nt2 in (1, 2)]
    elif has_avx512_bf16(target):
        candidates = [partial(_dot_sketch, mod, seed, rows, first, second) for rows in (16, 32)
                      for first in DOT_SHAPES for second in DOT_SHAPES]
    else:
        return []
    return [sch for sch in (make() for make in candidates) if sch is not None]


def _extent(sch, loop) -> int:
    return int(sch.get(loop).extent)


def _sketch(mod, seed: int, mt: int, nt1: int, nt2: int):
    """One sketch on AMX: blocks of ``16 mt`` query rows, accumulators of ``mt x nt1`` tiles for the scores and
    ``mt x nt2`` for the output; None where the extents do not divide."""
    rows = TILE_ROWS * mt

    def tensorize(sch, gemm, rows_loop, rows, cols, row, depth):
        intrin = register_conv(ConvTile(mh=1, mw=mt, nt=cols // TILE_ROWS, **vars(_geometry(row, depth))))
        _tensorize(sch, gemm, rows_loop, register_zero("amx", 1, rows, cols), intrin)

    return _schedule(mod, seed, rows, (rows, TILE_ROWS * nt1), (rows, TILE_ROWS * nt2), tensorize)


def _dot_sketch(mod, seed: int, block_rows: int, first: tuple[int, int], second: tuple[int, int]):
    """One sketch on the dot product: blocks of ``block_rows`` query rows, the scores computed in accumulator blocks
    of ``first`` = (rows, 16-column vectors), the output in blocks of ``second``; None where the extents do not
    divide."""
    return _schedule(mod, seed, block_rows, (first[0], LANES * first[1]), (second[0], LANES * second[1]),
                     _dot_tensorize)


def _schedule(mod, seed: int, block_rows: int, first: tuple[int, int], second: tuple[int, int], tensorize):
    """The sketch of either unit: blocks of ``block_rows`` query rows in parallel, each computing its scores, their
    softmax and its part of the output; each product in accumulator blocks of (rows, columns) ``first`` (the scores)
    and ``second`` (the output), each block computed by ``tensorize(sch, gemm, rows_loop, rows, cols, flat_row,
    depth)``'s intrinsic; None where the extents do not divide. Where a product's block is all of the block's rows
    (AMX's tiles) its rows are not split again, so an AMX sketch's trace is the one it always was."""
    from tvm.s_tir import Schedule

    (rows1, cols1), (rows2, cols2) = first, second
    sch = Schedule(mod, seed=seed, debug_mask=0)
    gemm = sch.get_sblock(at.GEMM_BLOCK)
    b, h, w, co, rh, rk = sch.get_loops(gemm)
    rows, cols, depth = _extent(sch, w), _extent(sch, co), _extent(sch, rk)
    scores_cols = _extent(sch, sch.get_loops(sch.get_sblock(at.SCORES_BLOCK))[3])
    d_pad = _extent(sch, sch.get_loops(sch.get_sblock(at.SCORES_BLOCK))[-1])
    if rows % block_rows or block_rows % rows1 or block_rows % rows2 or cols % cols2 or scores_cols % cols1:
        return None
    lanes = partial_lanes(_extent(sch, sch.get_loops(sch.get_sblock(at.MAX_BLOCK))[-1]))
    for name in (at.DELTA_BLOCK, *[n for n in EXP_BLOCKS if _has(sch, n)]):
        sch.compute_inline(sch.get_sblock(name))
    partials = []
    for name in (at.MAX_BLOCK, at.SUM_BLOCK):  # rfactor first: it needs the reduction's own loop nest
        j = sch.get_loops(sch.get_sblock(name))[-1]
        _, inner = sch.split(j, [None, lanes])
        partials.append(sch.rfactor(inner, factor_axis=0))

    w_o, w_i = sch.split(w, [None, block_rows])
    co_o, co_i = sch.split(co, [None, cols2])
    w_blocks = sch.split(w_i, [None, rows2]) if rows2 < block_rows else [w_i]
    sch.reorder(b, h, w_o, co_o, *w_blocks, co_i, rh, rk)
    sch.fuse(rh, rk)
    block = sch.fuse(b, h, w_o)
    sch.parallel(block)
    for rv in (sch.get_sblock(at.PROBS_BLOCK), sch.get_sblock(at.SUM_BLOCK), partials[1],
               sch.get_sblock(at.EXP_BLOCK), sch.get_sblock(at.MAX_BLOCK), partials[0],
               sch.get_sblock(at.SCORES_BLOCK), sch.get_sblock(at.Q_BLOCK)):
        sch.compute_at(rv, block)
    _epilogue(sch, block)

    # the scores: (rows, columns, reduction) under the block, in accumulator blocks of rows1 x cols1
    scores = sch.get_sblock(at.SCORES_BLOCK)
    s_w, s_co, s_k = sch.get_loops(scores)[-3:]
    s_co_o, s_co_i = sch.split(s_co, [None, cols1])
    s_blocks = sch.split(s_w, [None, rows1]) if rows1 < block_rows else [s_w]
    sch.reorder(s_co_o, *s_blocks, s_co_i, s_k)
    tensorize(sch, scores, s_blocks[-1], rows1, cols1, rows, d_pad)
    tensorize(sch, gemm, w_blocks[-1], rows2, cols2, rows, depth)
    sch.set_scope(sch.get_sblock(at.PROBS_BLOCK), 0, "local")  # after the match: the intrinsic's A is global

    for name in (at.K_BLOCK, at.V_BLOCK):  # once per call, up front: parallel rows, a row's 32 pairs one vector
        *outer, c, pair = sch.get_loops(sch.get_sblock(name))
        sch.parallel(sch.fuse(*outer))
        sch.vectorize(sch.fuse(c, pair))
    sch.vectorize(sch.get_loops(sch.get_sblock(at.Q_BLOCK))[-1])
    for rv in partials:  # loops (partial, row, step): the partials innermost, as the vector
        partial_, row, step = sch.get_loops(rv)[-3:]
        sch.reorder(row, step, partial_)
        sch.vectorize(partial_)
    for name in (at.EXP_BLOCK, at.PROBS_BLOCK):
        last = sch.get_loops(sch.get_sblock(name))[-1]
        _, vector = sch.split(last, sch.sample_perfect_tile(last, n=2, max_innermost_factor=LANES))
        sch.vectorize(vector)
    return sch


def _dot_tensorize(sch, gemm, pixels_loop, pixels: int, cols: int, row: int, depth: int) -> None:
    """The product's init onto the dot product's init that stores nothing, its accumulator blocks (``pixels`` query
    rows x ``cols`` columns) onto the dot-product intrinsic over the whole reduction (a 1x1 convolution's)."""
    from autosearch.tensor_units.dpbf16 import register as register_dot

    intrin = register_dot(Block(rows=1, pixels=pixels, cols=cols, **vars(_geometry(row, depth))))
    _tensorize(sch, gemm, pixels_loop, register_zero("dpbf16", 1, pixels, cols), intrin)


def _has(sch, name: str) -> bool:
    try:
        sch.get_sblock(name)
    except Exception:  # TVM raises when the name is unknown
        return False
    return True


def _epilogue(sch, block) -> None:
    """The output block, and anything fused after it (inlined into the last), on each block of rows."""
    root = sch.get_sblock("root")
    blocks = list(sch.get_child_blocks(root))
    names = [sch.get(b).name_hint for b in blocks]
    after = blocks[names.index(at.OUT_BLOCK):]
    for rv in after[:-1]:
        sch.compute_inline(rv)
    sch.reverse_compute_at(after[-1], block, preserve_unit_loops=True)
    sch.vectorize(sch.get_loops(after[-1])[-1])


def _geometry(row: int, depth: int) -> Geometry:
    """A product as a 1x1 convolution: flat rows ``row`` apart, ``depth`` reduction values."""
    return Geometry(kh=1, kw=1, row=row, stride=1, group=1, channels=depth)


def _tensorize(sch, gemm, rows_loop, zero: str, intrin: str) -> None:
    """The product's init onto ``zero`` (the unit's init that stores nothing), its accumulator blocks onto
    ``intrin`` (the unit's intrinsic over the whole reduction)."""
    name = sch.get(gemm).name_hint
    sch.decompose_reduction(gemm, rows_loop)
    init = sch.get_sblock(f"{name}_init")
    sch.tensorize(sch.get_loops(init)[-2], zero)
    sch.tensorize(rows_loop, intrin)


__all__ = ["attention_sketches", "is_attention_task"]
