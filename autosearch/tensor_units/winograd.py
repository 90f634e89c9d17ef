"""A 3x3 stride-1 convolution (NHWC) as Winograd F(2x2, 3x3) whose batched GEMM runs in bf16 on the dot product.

On a CPU whose bf16 unit is the AVX512-BF16 dot product (AMD Zen 4), the direct bf16 convolution of a wide layer
runs near the unit's peak (tiny-YOLOv2's 13x13x1024 layers: docs/results.md), so only fewer multiplies make it
faster. Winograd's F(2x2, 3x3) computes each 2x2 output tile from a 4x4 input tile with 16 multiplies per channel
pair instead of 36: the batched GEMM is 2.25x smaller, and its 16 GEMMs are 1x1 convolutions of the tiles, so they
are the flattened convolution's GEMM (:mod:`.conv`) with a batch axis, as a matmul's are (:mod:`.matmul`): the
same intrinsics, sketches and cost-model features, no second micro-kernel.

Why F(2x2, 3x3) and not the F(4x4, 3x3) of the fp32 alternative (:mod:`autosearch.frontend.winograd`): the
operands of the GEMM are rounded to bf16 (8 bits of mantissa), and the output transform adds them up with the
transform's coefficients; F(2x2, 3x3)'s are 0, +-1 and 1/2, so the rounding errors add up about as in the direct
convolution, while F(4x4, 3x3)'s (up to 8, and 1/3 and 1/15 in the kernel's) amplify them. At 13x13 the tiles
also waste less: 7x7 tiles of 2 compute 14x14 outputs, 4x4 tiles of 4 compute 16x16, and their kernel in the
transformed domain is 36/16 the size of F(2x2)'s, megabytes streamed at every run.

Blocks of the task: ``winograd_pad`` pads the input to whole tiles; ``amx_flat`` is the input transform
``B^T d B``, computed in fp32 from the (bf16 or fp32) input and rounded to bf16, ``(16, tiles, channels)``: the
GEMM's A, one image per transform position; ``amx_gemm`` accumulates in fp32 (annotated :data:`WINOGRAD_ATTR`: its
blocks each compute one transform position, and the output transform reads all 16, so the epilogue runs after the
whole GEMM, not per block); ``amx_conv2d_nhwc`` is the output transform ``A^T m A``, then the convolution's epilogue.
The kernel's transform ``G g G^T``, rounded to bf16 and packed as the intrinsics read weights, is a separate function
of the constant weights (``winograd_bf16_pack_weight``), folded at compile time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from autosearch.tensor_units.conv import FLAT_BLOCK, GEMM_BLOCK, OUT_BLOCK, FlatConv, flat_conv

TILE = 2  # output pixels per tile side: F(2x2, 3x3)
ALPHA = TILE + 2  # input pixels per tile side
TASK_NAME = "conv2d_winograd_bf16"  # the PrimFunc's name hint: every fused task of such a convolution contains it
PACK_NAME = "winograd_bf16_pack_weight"
PAD_BLOCK = "winograd_pad"  # the input padded to whole tiles, before the input transform
WINOGRAD_ATTR = "amx_winograd"  # on the GEMM block: its batch axis is the alpha x alpha transform positions
# the transforms of F(2x2, 3x3) (Lavin and Gray, 2016): Y = A^T [(G g G^T) * (B^T d B)] A
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


@dataclass(frozen=True)
class WinogradConv:
    """One convolution's geometry as F(2x2, 3x3) sees it (NHWC, 3x3, stride 1)."""

    batch: int
    height: int  # input
    width: int
    in_channels: int
    out_channels: int
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    unit: str = "dpbf16"

    @property
    def out_hw(self) -> tuple[int, int]:
        pt, pl, pb, pr = self.padding
        return self.height + pt + pb - 2, self.width + pl + pr - 2

    @property
    def tiles_hw(self) -> tuple[int, int]:
        out_h, out_w = self.out_hw
        return -(-out_h // TILE), -(-out_w // TILE)

    @property
    def tiles(self) -> int:
        n_h, n_w = self.tiles_hw
        return self.batch * n_h * n_w

    @property
    def gemm(self) -> FlatConv:
        """The 1x1 convolution one transform position computes: an image one row of ``tiles`` pixels; its padding
        of channels and rows, and its packed weights' block width, are the unit's (:class:`.conv.FlatConv`)."""
        return FlatConv(batch=1, height=1, width=self.tiles, in_channels=self.in_channels,
                        out_channels=self.out_channels, kernel=(1, 1), padding=(0, 0, 0, 0), unit=self.unit)

    @property
    def rows(self) -> int:
        """The tiles each GEMM computes (its pixels per row, as the unit's blocks want them)."""
        return self.gemm.gemm_hw[1]

    @property
    def gemm_flops(self) -> float:
        """Multiply-adds x 2 of the batched GEMM, as computed (padding included)."""
        return 2.0 * ALPHA * ALPHA * self.rows * self.gemm.in_padded * self.gemm.out_padded

    @property
    def direct_flops(self) -> float:
        out_h, out_w = self.out_hw
        return 2.0 * self.batch * out_h * out_w * self.in_channels * self.out_channels * 9


# a layer is offered as bf16 Winograd when its GEMM computes at most this share of the direct convolution's
# multiplies (F(2x2) at best 16/36 = 0.44, more where the tiles or channels are padded), and its channels are wide
# enough that the transforms, memory-bound, stay small beside the GEMM: the input transform's share falls with the
# output channels, the output transform's with the input channels. Measured on AMD Zen 4 (docs/results.md), bf16
# Winograd won from 128 -> 256 channels on (tiny-YOLOv2's 26x26 and 13x13 layers) and lost on every layer of 64 to
# 128 channels (tiny-YOLOv2's 52x52x64 -> 128, all of YOLOv8n's, up to 2.6x slower): those are not offered, so a
# run spends no trials on them
MAX_GEMM_RATIO = 0.55
MIN_IN_CHANNELS, MIN_OUT_CHANNELS = 128, 256


def winograd_conv(call, unit: str = "dpbf16") -> WinogradConv | None:
    """The geometry of a Relax ``nn.conv2d`` call this lowering computes: one the direct bf16 lowering takes
    (:func:`.conv.flat_conv`) with a 3x3 filter, stride 1, at least :data:`MIN_IN_CHANNELS` channels in and
    :data:`MIN_OUT_CHANNELS` out, and a GEMM at most :data:`MAX_GEMM_RATIO` of the direct multiplies; else None."""
    conv = flat_conv(call)
    if conv is None or conv.kernel != (3, 3) or conv.stride != 1:
        return None
    if conv.in_channels < MIN_IN_CHANNELS or conv.out_channels < MIN_OUT_CHANNELS:
        return None
    geo = WinogradConv(batch=conv.batch, height=conv.height, width=conv.width, in_channels=conv.in_channels,
                       out_channels=conv.out_channels, padding=conv.padding, unit=unit)
    return geo if geo.gemm_flops <= MAX_GEMM_RATIO * geo.direct_flops else None


def _coefficient(matrix: np.ndarray, row, col):
    """``matrix[row, col]`` as a TIR expression when ``row`` or ``col`` is a loop variable (a chain of selects on
    it: loop-invariant where the channels are the vector loop)."""
    from tvm import tirx

    if isinstance(row, int) and isinstance(col, int):
        return tirx.const(float(matrix[row, col]), "float32")
    if isinstance(row, int):
        values, index = matrix[row, :], col
    else:
        values, index = matrix[:, col], row
    out = tirx.const(float(values[-1]), "float32")
    for i in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == i, tirx.const(float(values[i]), "float32"), out)
    return out


def pack_weight(weight, *, geo: WinogradConv):
    """OHWI fp32 weights -> ``G g G^T`` of every filter in bf16, ``(16, O / N, 1, 1, depth / 2, N, 2)``: per transform
    position the weights of a 1x1 convolution packed as :func:`.conv.pack_weight` packs them (blocks of ``N``
    output channels, pairs of input channels innermost), zero-padded. A constant function: folded."""
    from tvm import te, tirx

    gemm = geo.gemm
    bn, out_ch, in_ch = gemm.block_n, geo.out_channels, geo.in_channels
    shape = (ALPHA * ALPHA, -(-gemm.out_padded // bn), 1, 1, gemm.in_padded // 2, bn, 2)

    def value(n, cb, h, g, k2, co, e):
        eps, nu = n // ALPHA, n % ALPHA
        o, c = cb * bn + co, k2 * 2 + e
        oo, cc = tirx.min(o, out_ch - 1), tirx.min(c, in_ch - 1)
        total = sum(_coefficient(G, eps, kh) * _coefficient(G, nu, kw) * weight[oo, kh, kw, cc].astype("float32")
                    for kh in range(3) for kw in range(3))
        return tirx.if_then_else(tirx.all(o < out_ch, c < in_ch), total, tirx.const(0, "float32")).astype("bfloat16")

    return te.compute(shape, value, name=PACK_NAME)


def conv2d_nhwc(data, packed, *, geo: WinogradConv):
    """The convolution of ``data`` (NHWC, fp32 or bf16) with ``packed`` (:func:`pack_weight`), fp32 out."""
    from tvm import te, tirx

    from autosearch.tensor_units.matmul import gemm_1x1

    _, h_, w_, c_ = (int(s) for s in data.shape)
    pt, pl = geo.padding[:2]
    n_h, n_w = geo.tiles_hw
    rows, gemm = geo.rows, geo.gemm

    # the input padded to whole tiles first, in a block of its own: the transform's 16 reads then need no bounds
    # check each, which made it 2-3x slower (a 4x4 window of conditional loads per value)
    def pad_value(b, y, x, c):
        inside = tirx.all(y >= pt, y < h_ + pt, x >= pl, x < w_ + pl)
        load = data[b, tirx.max(tirx.min(y - pt, h_ - 1), 0), tirx.max(tirx.min(x - pl, w_ - 1), 0), c]
        return tirx.if_then_else(inside, load, tirx.const(0, data.dtype))

    pad = te.compute((geo.batch, n_h * TILE + 2, n_w * TILE + 2, c_), pad_value, name=PAD_BLOCK)

    # channels clamped only where they are padded: a clamped index is no longer affine, and the vector loop over the
    # channels then gathers its loads one by one
    padded = gemm.in_padded != c_

    def flat_value(n, p, c):  # B^T d B at position (eps, nu) of tile p
        eps, nu = n // ALPHA, n % ALPHA
        t = tirx.min(p, geo.tiles - 1)
        b, y0, x0 = t // (n_h * n_w), (t // n_w) % n_h * TILE, t % n_w * TILE
        cc = tirx.min(c, c_ - 1) if padded else c
        total = sum(_coefficient(B_T, eps, ra) * _coefficient(B_T, nu, rb) * pad[b, y0 + ra, x0 + rb, cc].astype(
            "float32") for ra in range(ALPHA) for rb in range(ALPHA))
        inside = tirx.all(p < geo.tiles, c < c_) if padded else p < geo.tiles
        return tirx.if_then_else(inside, total, tirx.const(0, "float32")).astype("bfloat16")

    flat = te.compute((ALPHA * ALPHA, rows, gemm.in_padded), flat_value, name=FLAT_BLOCK)
    product = gemm_1x1(flat, packed, rows=rows, depth=gemm.in_padded, cols=gemm.out_padded, name=GEMM_BLOCK,
                       block_n=gemm.block_n, attrs={WINOGRAD_ATTR: ALPHA})
    out_h, out_w = geo.out_hw

    def out_value(b, y, x, co):  # A^T m A at pixel (y % 2, x % 2) of its tile
        t = b * n_h * n_w + y // TILE * n_w + x // TILE
        vy, vx = y % TILE, x % TILE
        return sum(_coefficient(A_T, vy, ra) * _coefficient(A_T, vx, rb) * product[ra * ALPHA + rb, 0, t, co]
                   for ra in range(ALPHA) for rb in range(ALPHA))

    return te.compute((geo.batch, out_h, out_w, geo.out_channels), out_value, name=OUT_BLOCK)


def legalize(bb, call, *, unit: str = "dpbf16"):
    """``LegalizeOps`` entry for a conv2d that :func:`winograd_conv` accepts: the transformed kernel packed (a
    constant function), then the Winograd convolution. Returns None for any other conv2d."""
    geo = winograd_conv(call, unit)
    if geo is None:
        return None
    packed = bb.emit_te(partial(pack_weight, geo=geo), call.args[1], primfunc_name_hint=PACK_NAME)
    return bb.call_te(partial(conv2d_nhwc, geo=geo), call.args[0], packed, primfunc_name_hint=TASK_NAME)


__all__ = ["ALPHA", "MAX_GEMM_RATIO", "MIN_IN_CHANNELS", "MIN_OUT_CHANNELS", "PACK_NAME", "PAD_BLOCK", "TASK_NAME",
           "TILE", "WINOGRAD_ATTR", "WinogradConv", "conv2d_nhwc", "legalize", "pack_weight",
           "winograd_conv"]
