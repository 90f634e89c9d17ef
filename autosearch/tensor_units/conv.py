"""A conv2d (NHWC data, OHWI weights) lowered to a bf16 implicit GEMM that AMX tiles can compute.

The tile multiply reads 16 rows of A at any fixed stride. A convolution's input rows for 16 consecutive
output pixels of one image row are such rows, but the output width is rarely a multiple of 16 (13, 26, 52 and
104 in tiny-YOLOv2). So the input is padded and *flattened*: with ``R`` the padded input width, output pixel
``(h, w)`` reads flat input row ``h * R + w + kh * R + kw`` for filter tap ``(kh, kw)``. The GEMM computes each
output row in whole 16-pixel tiles (and the rows in pairs): the pixels past the image's right edge read the next
rows' first columns and their results are dropped. Any 16 consecutive pixels of a row are then 16 input rows one
stride apart, whatever the width, and a block of output rows is a block of the GEMM, so the epilogue can run on
each block as soon as it is done. This costs ``16 * ceil(out_w / 16) / out_w`` more multiplies (16/13 at 13x13).
With stride ``s`` the same holds with ``s * h`` and ``s * w`` in place of ``h`` and ``w``: the tile's input rows
are then ``s`` rows apart, a stride the tile load takes as it is (the downsampling convolutions of YOLOv8n).

Three blocks: ``amx_flat`` pads, flattens and rounds the input to bf16 (channels padded to a multiple of 32,
one tile row, or, for 16 channels or fewer, to the power of two of which a tile row holds a group of neighbouring
pixels: :attr:`FlatConv.group`); ``amx_gemm`` accumulates in fp32; ``amx_conv2d_nhwc`` keeps the real pixels and
channels. The weights are a separate function of the constant kernel (``amx_pack_weight``), which Relax's
``FoldConstant`` computes at compile time: bf16, in the layout ``tdpbf16ps`` reads B in (:func:`pack_weight`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

BLOCK_N = 32  # output channels per packed weight block: two 16-column B tiles
BLOCK_K = 32  # input channels are padded to whole 64-byte tile rows
DOT_CHANNELS = 16  # on the dot product, channels in and out are padded to whole 16-lane vectors
TILE = 16  # output pixels per tile (its rows)
MIN_CHANNELS = 16  # narrower outputs (YOLOv8's 1-channel DFL), or inputs of a 1x1 filter, would be mostly padding
GEMM_BLOCK = "amx_gemm"
FLAT_BLOCK = "amx_flat"
OUT_BLOCK = "amx_conv2d_nhwc"
# the GEMM block's annotations: the geometry the tile intrinsics are specialised to
ROW_ATTR, STRIDE_ATTR, GROUP_ATTR, KERNEL_ATTR = "amx_flat_row", "amx_stride", "amx_tap_group", "amx_kernel"
TASK_NAME = "conv2d_bf16"  # the PrimFunc's name hint: every fused task of such a convolution contains it


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class FlatConv:
    """The geometry of one flattened convolution (batch 1 or more, NHWC)."""

    batch: int
    height: int  # input
    width: int
    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    stride: int = 1
    # the bf16 unit the GEMM is shaped for, "amx" or "dpbf16": its rows, pixels per row, tap groups and channel
    # padding (:attr:`gemm_hw`, :attr:`group`, :attr:`in_padded`, :attr:`out_padded`)
    unit: str = "amx"

    @property
    def row(self) -> int:
        """R: the padded input width, the flat distance between two image rows."""
        return self.width + self.padding[1] + self.padding[3]

    @property
    def out_hw(self) -> tuple[int, int]:
        kh, kw = self.kernel
        s = self.stride
        return (self.height + self.padding[0] + self.padding[2] - kh) // s + 1, (self.row - kw) // s + 1

    @property
    def gemm_hw(self) -> tuple[int, int]:
        """The GEMM's output rows and pixels per row. On AMX, the output's rounded up to pairs of rows and to whole
        16-pixel tiles (a tile then never straddles two rows, so each block of rows is a block of the output); on
        the dot product, its rows as they are and a width whose blocks of pixels fill the registers
        (:func:`.dpbf16.gemm_width`): its blocks are registers, not tiles, and at 13 x 13 (tiny-YOLOv2's heaviest
        layers) the tiles computed 1.33x the pixels kept."""
        from autosearch.tensor_units.dpbf16 import gemm_width

        out_h, out_w = self.out_hw
        if self.unit == "dpbf16":
            return out_h, gemm_width(out_w)
        return _round_up(out_h, 2), _round_up(out_w, TILE)

    @property
    def flat_length(self) -> int:
        kh, kw = self.kernel
        gh, gw = self.gemm_hw
        s = self.stride
        return (s * (gh - 1) + kh - 1) * self.row + s * (gw - 1) + self.groups * self.group

    @property
    def group(self) -> int:
        """Filter taps per reduction group: 1, or, when a pixel's channels fill less than half a tile row (16 or
        fewer), several neighbouring pixels, so the multiplies are not mostly zeros: on AMX those one tile row holds
        (the channels padded to a power of two: 2 taps for 16 channels, 8 for the 3-channel stem); on the dot
        product, which multiplies pairs, not tile rows, the filter row's taps (3 taps of 4 channels for the stem: 12
        values for its 9, where the tile row's 32 multiplied 3.6x as many). Taps only group along a filter row of
        more than one tap."""
        kh, kw = self.kernel
        if self.in_channels > BLOCK_K // 2 or kw == 1 or kh == 1:
            return 1
        if self.unit == "dpbf16":
            return kw
        return BLOCK_K // (1 << (self.in_channels - 1).bit_length())

    @property
    def groups(self) -> int:
        """Reduction groups along a filter row: the filter's width in groups of :attr:`group` taps."""
        return -(-self.kernel[1] // self.group)

    @property
    def in_padded(self) -> int:
        """Channels per flat pixel: on AMX whole tile rows (32), on the dot product whole vectors of the flattening
        copy (16: YOLOv8's 48- and 80-channel inputs as they are, not as 64 and 96); with tap groups, on AMX the
        power of two a group packs into one tile row, on the dot product the channels (one more where a group's
        values would be odd: they go in pairs)."""
        if self.group == 1:
            return _round_up(self.in_channels, DOT_CHANNELS if self.unit == "dpbf16" else BLOCK_K)
        if self.unit == "dpbf16":
            return self.in_channels + (self.group * self.in_channels) % 2
        return BLOCK_K // self.group

    @property
    def depth(self) -> int:
        """Reduction length of one tap group (the packed weights' third axis, in bf16 values): its taps' channels."""
        return self.in_padded * self.group

    @property
    def out_padded(self) -> int:
        """The GEMM's output channels: whole 32-channel weight blocks, or one 16-column tile for 16 channels or fewer
        (a stem's; half of each multiply would otherwise compute zeros); on the dot product whole 16-channel vectors
        (YOLOv8's 80-channel heads as 80, not 96: their blocks are one vector wide, half a packed weight block)."""
        if self.unit == "dpbf16":
            return _round_up(self.out_channels, DOT_CHANNELS)
        return TILE if self.out_channels <= TILE else _round_up(self.out_channels, BLOCK_N)

    @property
    def block_n(self) -> int:
        """Output channels per block of the packed weights: :data:`BLOCK_N` (two 16-column B tiles); on the dot
        product, where the channels are no multiple of that (YOLOv8's 80-channel heads, 48, 16), all of them in one
        block. A block of the GEMM reads its weights within one packed block, and in blocks of 32 such a layer's GEMM
        blocks were one 16-lane vector wide, one broadcast input pair per dot product: its 80-channel layers ran
        1.2-1.65x behind oneDNN's on AMD Zen 4 while the layers of 64 or 128 channels ran ahead (docs/results.md).
        In one block of 80, a GEMM block takes all five vectors (:func:`.dpbf16.shapes_for`)."""
        if self.unit == "dpbf16" and self.out_padded % BLOCK_N:
            return self.out_padded
        return BLOCK_N


def pack_weight(weight, *, conv: FlatConv):
    """OHWI fp32 weights -> bf16 ``(O / N, KH, tap groups, depth / 2, N, 2)``, zero-padded (a constant function:
    folded): output channels in blocks of ``N`` (:attr:`FlatConv.block_n`: 32, or on the dot product all of them
    where they are no multiple of 32), pairs of reduction values innermost, the layout ``tdpbf16ps`` reads B in;
    with tap groups, reduction value ``k`` of group ``g`` is tap ``g * group + k // channels``."""
    from tvm import te, tirx

    out_ch, kh, kw, in_ch = (int(s) for s in weight.shape)
    bn = conv.block_n
    shape = (-(-conv.out_padded // bn), kh, conv.groups, conv.depth // 2, bn, 2)
    group, cp = conv.group, conv.in_padded

    def value(cb, h, g, k2, co, e):
        o, k = cb * bn + co, k2 * 2 + e
        tap, c = (g, k) if group == 1 else (g * group + k // cp, k % cp)
        inside = tirx.all(o < out_ch, c < in_ch, tap < kw)
        load = weight[tirx.min(o, out_ch - 1), h, tirx.min(tap, kw - 1), tirx.min(c, in_ch - 1)]
        return tirx.if_then_else(inside, load, tirx.const(0, weight.dtype)).astype("bfloat16")

    return te.compute(shape, value, name="amx_pack_weight")


def conv2d_nhwc(data, packed, *, conv: FlatConv):
    """The flattened bf16 convolution of ``data`` (NHWC, fp32 or bf16) with ``packed`` (:func:`pack_weight`),
    fp32 out."""
    from tvm import te, tirx

    n_, h_, w_, c_ = conv.batch, conv.height, conv.width, conv.in_channels
    pt, pl = conv.padding[0], conv.padding[1]
    r, s = conv.row, conv.stride
    kh_, kw_ = conv.kernel

    def flat_value(n, q, c):
        h, w = q // r - pt, q % r - pl
        inside = tirx.all(h >= 0, h < h_, w >= 0, w < w_, c < c_)
        load = data[n, tirx.max(tirx.min(h, h_ - 1), 0), tirx.max(tirx.min(w, w_ - 1), 0), tirx.min(c, c_ - 1)]
        return tirx.if_then_else(inside, load, tirx.const(0, data.dtype)).astype("bfloat16")

    flat = te.compute((n_, conv.flat_length, conv.in_padded), flat_value, name=FLAT_BLOCK)
    group, cp, bn = conv.group, conv.in_padded, conv.block_n
    rh = te.reduce_axis((0, kh_), name="rh")
    rk = te.reduce_axis((0, conv.depth), name="rk")
    rg = te.reduce_axis((0, conv.groups), name="rg") if conv.groups > 1 else None  # TVM drops unit loops anyway
    g = rg if rg is not None else 0

    def product(n, h, w, co):
        start = (s * h + rh) * r + s * w
        a = flat[n, start + g, rk] if group == 1 else flat[n, start + g * group + rk // cp, rk % cp]
        return a.astype("float32") * packed[co // bn, rh, g, rk // 2, co % bn, rk % 2].astype("float32")

    gemm_h, gemm_w = conv.gemm_hw
    gemm = te.compute((n_, gemm_h, gemm_w, conv.out_padded),
                      lambda n, h, w, co: te.sum(product(n, h, w, co), axis=[x for x in (rh, rg, rk) if x is not None]),
                      name=GEMM_BLOCK, attrs={ROW_ATTR: r, STRIDE_ATTR: s, GROUP_ATTR: group, KERNEL_ATTR: [kh_, kw_]})
    out_h, out_w = conv.out_hw
    return te.compute((n_, out_h, out_w, conv.out_channels), lambda n, h, w, co: gemm[n, h, w, co], name=OUT_BLOCK)


def flat_conv(call) -> FlatConv | None:
    """The geometry of a Relax ``nn.conv2d`` call this lowering computes (NHWC / OHWI, equal strides, no dilation,
    one group, static shapes, fp32 weights and fp32 or bf16 data, at least :data:`MIN_CHANNELS` output channels,
    and as many input channels unless its taps group into tile rows), else None."""
    attrs = call.attrs
    try:
        data = [int(s) for s in call.args[0].ty.shape]
        weight = [int(s) for s in call.args[1].ty.shape]
    except (TypeError, AttributeError, ValueError):  # symbolic shapes
        return None
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout)) != (
            "NHWC", "OHWI", "NHWC"):
        return None
    strides = [int(s) for s in attrs.strides]
    if int(attrs.groups) != 1 or strides[0] != strides[1]:
        return None
    if strides[0] > 1 and (weight[1] == 1 or weight[2] == 1):  # only the whole-reduction intrinsic takes a stride
        return None
    if [int(s) for s in attrs.dilation] != [1, 1] or len(data) != 4:
        return None
    if str(call.args[0].ty.dtype) not in ("float32", "bfloat16") or str(call.args[1].ty.dtype) != "float32":
        return None  # bf16 data: an activation already rounded where it was computed (:mod:`.activations`)
    if attrs.out_dtype and str(attrs.out_dtype) not in ("", "float32"):
        return None
    pad = [int(p) for p in attrs.padding]
    pad = pad * 2 if len(pad) == 2 else pad
    conv = FlatConv(batch=data[0], height=data[1], width=data[2], in_channels=data[3], out_channels=weight[0],
                    kernel=(weight[1], weight[2]), padding=(pad[0], pad[1], pad[2], pad[3]), stride=strides[0])
    if conv.out_channels < MIN_CHANNELS or (conv.in_channels < MIN_CHANNELS and conv.group == 1):
        return None
    return conv


def legalize(bb, call, *, unit: str = "amx"):
    """``LegalizeOps`` entry for a conv2d that :func:`flat_conv` accepts: weights packed (a constant function),
    then the flattened bf16 convolution, its GEMM shaped for ``unit`` (``amx`` or ``dpbf16``, :attr:`FlatConv.unit`).
    Returns None for any other conv2d."""
    from dataclasses import replace

    conv = flat_conv(call)
    if conv is None:
        return None
    conv = replace(conv, unit=unit)
    packed = bb.emit_te(partial(pack_weight, conv=conv), call.args[1], primfunc_name_hint="amx_pack_weight")
    return bb.call_te(partial(conv2d_nhwc, conv=conv), call.args[0], packed, primfunc_name_hint=TASK_NAME)


__all__ = ["BLOCK_K", "BLOCK_N", "FLAT_BLOCK", "FlatConv", "GEMM_BLOCK", "GROUP_ATTR", "KERNEL_ATTR", "MIN_CHANNELS",
           "OUT_BLOCK", "ROW_ATTR", "STRIDE_ATTR", "TASK_NAME", "TILE", "conv2d_nhwc", "flat_conv", "legalize",
           "pack_weight"]
