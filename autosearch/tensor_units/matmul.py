"""A batch matmul of two activations (an attention's ``q @ k`` and ``p @ v``) lowered to bf16 on the tensor units.

A GEMM is a 1x1 convolution of an image one row high: ``C[m, n] = sum_k A[m, k] B[k, n]`` is the flattened
convolution of :mod:`.conv` with the M rows of A as its pixels, K as its input channels and N as its output
channels. So the matmul is written here in exactly that convolution's form, one image per batch (its own B), and
the convolution's intrinsics (AMX tiles, the AVX512-BF16 dot product), sketches and cost-model features apply as
they are: no second kernel to keep right. The blocks:

- ``amx_flat``: A rounded to bf16, its rows padded to the unit's GEMM width and K to whole tile rows (or vectors);
- ``amx_pack_b``: B rounded to bf16 in the layout ``tdpbf16ps`` and ``vdpbf16ps`` read, pairs of K innermost, in
  blocks of 32 columns. A convolution's weights are constants packed at compile time; B here is an activation, so
  its packing is a block of the task, run each time (K x N per batch: small beside the GEMM for an attention);
- ``amx_gemm``: fp32 accumulation, ``(batches, 1, rows, columns)``; ``amx_matmul``: the real rows and columns in
  the matmul's own shape (a reshape after the task would fuse into the next one, which then differed from the fp32
  lowering's, and both would be tuned).

A linear layer, ``(..., m, k) @ (k, n)`` with one B for all of A's rows (a transformer's projections and feed-forward
layers: RT-DETR's decoder), is one GEMM over all of A's rows; its B is packed by a function of B alone
(``amx_pack_weight``, as a convolution's weights are), which the lowering folds at compile time where B is a
constant, so the task reads it packed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from autosearch.tensor_units.conv import (
    BLOCK_N,
    FLAT_BLOCK,
    GEMM_BLOCK,
    GROUP_ATTR,
    KERNEL_ATTR,
    MIN_CHANNELS,
    ROW_ATTR,
    STRIDE_ATTR,
    FlatConv,
)

TASK_NAME = "matmul_bf16"  # the PrimFunc's name hint: every fused task of such a matmul contains it
PACK_B_BLOCK = "amx_pack_b"
OUT_BLOCK = "amx_matmul"
MIN_ROWS = 16  # fewer rows of A would leave most of a tile, or of the dot product's pixel block, empty


@dataclass(frozen=True)
class FlatMatmul:
    """``(*batch, m, k) @ (*batch, k, n)``: the batch dimensions equal (no broadcasting), as a flattened 1x1
    convolution on ``unit`` (``amx`` or ``dpbf16``, :attr:`.conv.FlatConv.unit`)."""

    batch: tuple[int, ...]
    m: int
    k: int
    n: int
    unit: str = "amx"
    # a linear layer's (one B for every row of A): A's dimensions before K, whose rows are the GEMM's ``m``; the
    # batch is then empty
    lead: tuple[int, ...] = ()

    @property
    def batches(self) -> int:
        return math.prod(self.batch)

    @property
    def conv(self) -> FlatConv:
        """The 1x1 convolution of one batch: an image one row of ``m`` pixels, ``k`` channels in, ``n`` out."""
        return FlatConv(batch=1, height=1, width=self.m, in_channels=self.k, out_channels=self.n, kernel=(1, 1),
                        padding=(0, 0, 0, 0), unit=self.unit)

    @property
    def width(self) -> int:
        """The rows of A the GEMM computes (the convolution's pixels per GEMM row): one GEMM row, not the pair of
        rows AMX computes for a convolution, since a matmul has one."""
        return self.conv.gemm_hw[1]


def layer_key(a_shape, b_shape) -> str:
    """A matmul's key for its precision alternatives: both operands' shapes (``4x2x400x32@4x2x32x400``), which its
    fp32 and bf16 tasks both take as their first two arguments."""
    return "@".join("x".join(str(int(d)) for d in shape) for shape in (a_shape, b_shape))


def flat_matmul(call) -> FlatMatmul | None:
    """The geometry of a Relax ``matmul`` call this lowering computes, else None: two fp32 operands, at least
    :data:`MIN_ROWS` rows and :data:`.conv.MIN_CHANNELS` columns and reduction values, and either of rank 3 or more
    with the same static batch dimensions, neither a constant (an attention's products), or a linear layer: A of
    rank 2 or more, B a matrix (:attr:`FlatMatmul.lead`)."""
    import tvm

    a, b = call.args
    if isinstance(a, tvm.ir.expr.Constant):
        return None
    try:
        a_shape = [int(s) for s in a.ty.shape]
        b_shape = [int(s) for s in b.ty.shape]
    except (TypeError, AttributeError, ValueError):  # symbolic or unknown shapes
        return None
    if any(str(x.ty.dtype) != "float32" for x in (a, b)) or str(call.ty.dtype) != "float32":
        return None
    if len(b_shape) == 2 and len(a_shape) >= 2:  # a linear layer: one GEMM over all of A's rows
        m, (k, n) = math.prod(a_shape[:-1]), b_shape
        if a_shape[-1] != k or m < MIN_ROWS or k < MIN_CHANNELS or n < MIN_CHANNELS:
            return None
        if sum(d != 1 for d in a_shape[:-1]) > 1:  # rows along two axes: see :func:`linear_bf16`
            return None
        return FlatMatmul(batch=(), m=m, k=k, n=n, lead=tuple(a_shape[:-1]))
    if isinstance(b, tvm.ir.expr.Constant):
        return None
    if len(a_shape) < 3 or len(a_shape) != len(b_shape) or a_shape[:-2] != b_shape[:-2]:
        return None
    (m, k), n = a_shape[-2:], b_shape[-1]
    if b_shape[-2] != k or m < MIN_ROWS or k < MIN_CHANNELS or n < MIN_CHANNELS:
        return None
    return FlatMatmul(batch=tuple(a_shape[:-2]), m=m, k=k, n=n)


def batch_index(n, batch: tuple[int, ...]) -> list:
    """The batch dimensions' indices of flat batch ``n``."""
    out = []
    for size in reversed(batch):
        out.append(n % size)
        n = n // size
    return out[::-1]


def pack_b(b, *, batch: tuple[int, ...], k: int, n: int, k_pad: int, n_pad: int, name: str):
    """B ``(*batch, k, n)`` rounded to bf16 and packed as a 1x1 convolution's weights (:func:`.conv.pack_weight`),
    one set per batch: ``(batches, n_pad / 32, 1, 1, k_pad / 2, 32, 2)``, zero-padded; the unit dimensions are
    the filter's row and tap group."""
    from tvm import te, tirx

    def value(i, cb, h, g, k2, co, e):
        col, row = cb * BLOCK_N + co, k2 * 2 + e
        load = b[(*batch_index(i, batch), tirx.min(row, k - 1), tirx.min(col, n - 1))]
        return tirx.if_then_else(tirx.all(col < n, row < k), load, tirx.const(0, b.dtype)).astype("bfloat16")

    return te.compute((math.prod(batch), -(-n_pad // BLOCK_N), 1, 1, k_pad // 2, BLOCK_N, 2), value, name=name)


def batch_flat(index, batch: tuple[int, ...]):
    """The flat batch of the batch dimensions' indices ``index`` (:func:`batch_index`'s inverse)."""
    n = 0
    for i, size in zip(index, batch, strict=True):
        n = n * size + i
    return n


def flatten_a(a, *, batch: tuple[int, ...], m: int, k: int, rows: int, k_pad: int, name: str, index=None):
    """A ``(*batch, m, k)`` rounded to bf16 as the flattened input of a 1x1 convolution, one image per batch:
    ``(batches, rows, k_pad)``, zero-padded. ``index(n, i, c)``: A's index of batch ``n``'s row ``i``, column ``c``,
    where A has another shape (a linear layer's, :func:`linear_bf16`)."""
    from tvm import te, tirx

    index = index or (lambda n, i, c: (*batch_index(n, batch), i, c))

    def value(n, i, c):
        load = a[index(n, tirx.min(i, m - 1), tirx.min(c, k - 1))]
        return tirx.if_then_else(tirx.all(i < m, c < k), load, tirx.const(0, a.dtype)).astype("bfloat16")

    return te.compute((math.prod(batch), rows, k_pad), value, name=name)


def gemm_1x1(flat, packed, *, rows: int, depth: int, cols: int, name: str, block_n: int = BLOCK_N,
             attrs: dict | None = None):
    """The flattened convolution's GEMM with a 1x1 filter and stride 1 (:func:`.conv.conv2d_nhwc`), one image per
    batch, fp32: ``(batches, 1, rows, cols)``, in exactly the form the tile and dot-product intrinsics describe;
    ``packed`` in blocks of ``block_n`` columns, ``attrs`` added to the block's annotations."""
    from tvm import te

    rh = te.reduce_axis((0, 1), name="rh")
    rk = te.reduce_axis((0, depth), name="rk")

    def product(n, h, w, co):
        return (flat[n, (h + rh) * rows + w, rk].astype("float32")
                * packed[n, co // block_n, rh, 0, rk // 2, co % block_n, rk % 2].astype("float32"))

    return te.compute((int(flat.shape[0]), 1, rows, cols),
                      lambda n, h, w, co: te.sum(product(n, h, w, co), axis=[rh, rk]),
                      name=name, attrs={ROW_ATTR: rows, STRIDE_ATTR: 1, GROUP_ATTR: 1, KERNEL_ATTR: [1, 1],
                                        **(attrs or {})})


def matmul_bf16(a, b, *, mm: FlatMatmul):
    """``a @ b`` (fp32) through bf16 operands on the unit, fp32 out."""
    from tvm import te

    conv = mm.conv
    width, k_pad, n_pad = mm.width, conv.in_padded, conv.out_padded
    flat = flatten_a(a, batch=mm.batch, m=mm.m, k=mm.k, rows=width, k_pad=k_pad, name=FLAT_BLOCK)
    packed = pack_b(b, batch=mm.batch, k=mm.k, n=mm.n, k_pad=k_pad, n_pad=n_pad, name=PACK_B_BLOCK)
    gemm = gemm_1x1(flat, packed, rows=width, depth=k_pad, cols=n_pad, name=GEMM_BLOCK)
    return te.compute((*mm.batch, mm.m, mm.n), lambda *i: gemm[batch_flat(i[:-2], mm.batch), 0, i[-2], i[-1]],
                      name=OUT_BLOCK)


def linear_bf16(a, packed, *, mm: FlatMatmul):
    """A linear layer ``a @ b`` (fp32; :attr:`FlatMatmul.lead`) through bf16 operands on the unit, fp32 out, ``b``
    packed already (:func:`pack_b` with no batch): all of A's rows one GEMM.

    A's rows lie along one axis of its (the others 1: ``(1, tokens, k)``, ``(tokens, 1, k)``), and the GEMM's row is
    that axis' index alone. A row computed from two (``i0 * 50 + i1``) is what the sketches' ``reverse_compute_at``
    of the output block got wrong in TVM 0.27: it covered 14 of 50 rows and left the rest unwritten."""
    from tvm import te

    conv = mm.conv
    width, k_pad, n_pad = mm.width, conv.in_padded, conv.out_padded
    axis = next((d for d, size in enumerate(mm.lead) if size != 1), 0)

    def a_index(n, row, c):
        return tuple(row if d == axis else 0 for d in range(len(mm.lead))) + (c,)

    flat = flatten_a(a, batch=(), m=mm.m, k=mm.k, rows=width, k_pad=k_pad, name=FLAT_BLOCK, index=a_index)
    gemm = gemm_1x1(flat, packed, rows=width, depth=k_pad, cols=n_pad, name=GEMM_BLOCK)
    return te.compute((*mm.lead, mm.n), lambda *i: gemm[0, 0, i[axis], i[-1]], name=OUT_BLOCK)


def legalize(bb, call, *, unit: str = "amx"):
    """``LegalizeOps`` entry for a matmul that :func:`flat_matmul` accepts, its GEMM shaped for ``unit``; None for
    any other matmul. A linear layer's B is packed by a function of its own (``amx_pack_weight``), folded at compile
    time where B is a constant."""
    from dataclasses import replace

    mm = flat_matmul(call)
    if mm is None:
        return None
    mm = replace(mm, unit=unit)
    if mm.lead:
        conv = mm.conv
        packed = bb.emit_te(partial(pack_b, batch=(), k=mm.k, n=mm.n, k_pad=conv.in_padded, n_pad=conv.out_padded,
                                    name="amx_pack_weight"), call.args[1], primfunc_name_hint="amx_pack_weight")
        return bb.call_te(partial(linear_bf16, mm=mm), call.args[0], packed, primfunc_name_hint=TASK_NAME)
    return bb.call_te(partial(matmul_bf16, mm=mm), *call.args, primfunc_name_hint=TASK_NAME)


__all__ = ["FlatMatmul", "MIN_ROWS", "OUT_BLOCK", "PACK_B_BLOCK", "TASK_NAME", "batch_flat", "batch_index",
           "flat_matmul", "flatten_a", "gemm_1x1", "layer_key", "legalize", "linear_bf16", "matmul_bf16", "pack_b"]
