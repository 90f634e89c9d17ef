"""Winograd convolution for 3x3 stride-1 layers: a legalisation of Relax's conv2d that tasks and builds share.

Winograd's minimal filtering F(m x m, 3 x 3) computes an m x m output tile from an (m+2) x (m+2) input
tile with (m+2)^2 multiplications per channel pair instead of 9 m^2: for m = 4, 36 instead of 144. It
trades them for input and output transforms whose cost grows with the channels only linearly, so it
wins on the wide layers that dominate a YOLO's time and loses on the narrow stem. TVM's TOPI has the
compute (``conv2d_winograd_nchw``, the one Ansor tuned); its default CPU legalisation never uses it.

Here the kernel transform is a separate function of the constant weights, so Relax's ``FoldConstant``
computes it at compile time, and the transformed kernel is a layout-free input of the winograd task
(its layout is the schedule's choice, as for direct convolutions).

NHWC convolutions (``--layout NHWC``, OHWI weights) have the same alternative, computed as TOPI's
``conv2d_winograd_nhwc`` (the channels innermost, so the batched GEMM vectorises along the output channels) on a
pre-transformed kernel: NHWC is the layout whose direct kernels are fastest on AVX-512 CPUs, and without it the
wide 13x13 layers had no Winograd there (``docs/results.md``). An NHWC layer is converted only where a measured
choice says so (or for extraction's candidates), never by the FLOP rule: a database tuned before NHWC had the
alternative holds its layers as direct only.

Which layers use it is measured, not guessed: with ``--winograd auto`` every *candidate* layer
(winograd FLOPs at most ``CANDIDATE_RATIO`` of direct, by TVM's own count) is offered to the tuner
twice, as its direct task and its winograd task (a :class:`WinogradPolicy` with mode ``"candidates"``
lowers them all to winograd for the second extraction). ``export`` then picks, per layer, the
algorithm whose tuned tasks are faster (:func:`choose_algorithms`) and records the choice next to the
database; ``compile`` lowers each layer as chosen. Layers never measured fall back to a FLOP rule
(``MAX_FLOP_RATIO``), which picked the slower algorithm for 3 of 14 YOLOv8n layers at 48 trials each
(experiments/winograd_vs_direct.py): FLOPs do not tell which algorithm schedules better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TILE = 4  # F(4x4, 3x3): alpha = 6
MODES = ("auto", "off")
# without measurements, a layer is converted when its winograd FLOPs are at most this share of the direct
# ones (TVM's counts); experiments/winograd_vs_direct.py measures the layers on both sides of it
MAX_FLOP_RATIO = 0.5
# layers up to this ratio are tuned both ways (above it winograd's transforms dominate: 16 -> 32 channels is 1.05)
CANDIDATE_RATIO = 0.75
ALGORITHMS = ("direct", "winograd")
# the algorithms of a layer tuned in both precisions (NHWC): bf16 direct, or, on the dot product, also as bf16
# Winograd (autosearch.tensor_units.winograd)
BF16_WINOGRAD = "bf16-winograd"
PRECISIONS = ("fp32", "bf16", BF16_WINOGRAD)


@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution as Relax states it (NCHW data, OIHW kernel)."""

    batch: int
    in_channels: int
    out_channels: int
    height: int  # output
    width: int  # output
    kernel: tuple[int, int]

    @classmethod
    def from_key(cls, key: str, layout: str = "NCHW") -> ConvShape:
        """The 3x3 stride-1 layer a :func:`layer_key` names (its shapes in ``layout``)."""
        data, out = ([int(d) for d in part.split("x")] for part in key.split("->"))
        if layout == "NHWC":
            return cls(batch=data[0], in_channels=data[3], out_channels=out[3], height=out[1], width=out[2],
                       kernel=(3, 3))
        return cls(batch=data[0], in_channels=data[1], out_channels=out[1], height=out[2], width=out[3],
                   kernel=(3, 3))

    @property
    def direct_flops(self) -> float:
        kh, kw = self.kernel
        return 2.0 * self.batch * self.out_channels * self.height * self.width * self.in_channels * kh * kw

    def winograd_flops(self, tile: int = TILE) -> float:
        """FLOPs of the winograd compute as TVM's ``estimate_tir_flops`` counts them: the input and output
        transforms multiply twice and add once per term (x B x B, x A x A), the batched GEMM multiplies
        and adds; the kernel transform is folded at compile time and not counted."""
        alpha = tile + 2
        tiles = self.batch * math.ceil(self.height / tile) * math.ceil(self.width / tile)
        data_pack = 3 * alpha**4 * self.in_channels * tiles
        bgemm = 2 * alpha**2 * self.out_channels * self.in_channels * tiles
        inverse = 3 * alpha**2 * tile**2 * self.out_channels * tiles
        return float(data_pack + bgemm + inverse)


def layer_key(data_shape, out_shape) -> str:
    """A conv layer's key: its input and output shapes (``1x64x80x80->1x64x80x80``). A fused task of the
    layer has the same first argument and output, whichever algorithm computes it."""
    return "x".join(str(int(d)) for d in data_shape) + "->" + "x".join(str(int(d)) for d in out_shape)


def precision_layer_key(data_shape, out_shape, kernel: int) -> str:
    """An NHWC conv layer's key for its precision alternatives: :func:`layer_key` and its filter height
    (``1x80x80x80->1x80x80x80@3x3``), since a 1x1 and a 3x3 layer can share their input and output shapes (YOLOv8n's
    head has both at 80x80x80) and each keeps its own precision."""
    return f"{layer_key(data_shape, out_shape)}@{int(kernel)}x{int(kernel)}"


def task_layer(name: str, args) -> tuple[str, str] | None:
    """(layer key, algorithm) of a fused conv task from its name and arguments, or None.

    Direct: ``args[1]`` is the 3x3 weight, (out, in, 3, 3) in NCHW and (out, 3, 3, in) in NHWC; winograd: the
    transformed kernel, (alpha, alpha, in, out) in NCHW and (alpha, alpha, out, in) in NHWC. The key holds the
    layout's own shapes. Anything else (1x1 convs, strided or fused differently) is no alternative.
    """
    if "conv2d" not in name or len(args) < 3:
        return None
    data, weight, out = tuple(args[0][0]), tuple(args[1][0]), tuple(args[-1][0])
    if len(data) != 4 or len(out) != 4 or len(weight) != 4:
        return None
    alpha = (TILE + 2, TILE + 2)
    if "winograd" in name:
        ok = weight[:2] == alpha and (weight[2:] == (data[1], out[1]) or weight[2:] == (out[3], data[3]))
        algorithm = "winograd"
    else:
        ok = weight in ((out[1], data[1], 3, 3), (out[3], 3, 3, data[3]))
        algorithm = "direct"
    return (layer_key(data, out), algorithm) if ok else None


def layer_totals(entries) -> dict[str, dict[str, float]]:
    """Per layer tuned both ways, per algorithm: the sum of weight x best latency of its tasks (``inf`` when
    one of them has no valid measurement). ``entries``: (lowering record, weight, best latency or None)."""
    totals: dict[str, dict[str, float]] = {}
    for lowering, weight, latency in entries:
        if "layer" not in lowering:
            continue
        by_algorithm = totals.setdefault(lowering["layer"], {})
        cost = latency * weight if latency is not None else math.inf
        by_algorithm[lowering["algorithm"]] = by_algorithm.get(lowering["algorithm"], 0.0) + cost
    return totals


def choose_algorithms(totals: dict[str, dict[str, float]]) -> dict[str, str]:
    """Per layer, the algorithm with the lower tuned total (sum of weight x best latency of its tasks;
    ``inf`` when one of them has no valid measurement). Layers with nothing measured are left out."""
    out = {}
    for key, by_algorithm in totals.items():
        finite = {a: t for a, t in by_algorithm.items() if math.isfinite(t)}
        if finite:
            out[key] = min(finite, key=lambda a: (finite[a], a))
    return out


@dataclass(frozen=True)
class WinogradPolicy:
    """Which eligible convolutions the lowering turns into winograd, and which into bf16 (the per-layer
    alternatives of a lowering).

    ``mode``: ``off`` (none), ``auto`` (the measured ``choices`` where given, else the FLOP rule) or
    ``candidates`` (every layer worth measuring; task extraction's second lowering).
    ``precision`` (NHWC convolutions, :mod:`autosearch.tensor_units`): ``fp32`` (none in bf16), ``bf16`` (every
    eligible one), ``candidates`` (every eligible one; extraction's second lowering), ``winograd`` (every eligible
    one, as bf16 Winograd where it can be: extraction's third lowering on the dot product) or ``auto`` (the measured
    ``choices``: a layer tuned both ways has algorithm ``fp32``, ``bf16`` or ``bf16-winograd``; unmeasured layers
    stay fp32).
    """

    mode: str = "auto"
    choices: tuple[tuple[str, str], ...] = ()  # (layer key, algorithm), from a database's export
    precision: str = "fp32"

    @classmethod
    def of(cls, mode: str, choices: dict[str, str] | None = None, precision: str = "fp32") -> WinogradPolicy:
        return cls(mode, tuple(sorted((choices or {}).items())), precision)

    def bf16(self, key: str) -> bool:
        """Whether the eligible NHWC convolution ``key`` (:func:`precision_layer_key`) is lowered to bf16. A
        database exported before the filter joined the key names the layer by its shapes alone: looked up so too."""
        if self.precision in ("bf16", "candidates", "winograd"):
            return True
        return self.precision == "auto" and self._chosen(key) in ("bf16", BF16_WINOGRAD)

    def bf16_winograd(self, key: str) -> bool:
        """Whether the eligible NHWC convolution ``key`` is lowered to bf16 Winograd where it can be
        (:func:`autosearch.tensor_units.winograd.winograd_conv`)."""
        if self.precision == "winograd":
            return True
        return self.precision == "auto" and self._chosen(key) == BF16_WINOGRAD

    def _chosen(self, key: str) -> str | None:
        choices = dict(self.choices)
        return choices.get(key, choices.get(key.split("@")[0]))

    def converts(self, shape: ConvShape, key: str, layout: str = "NCHW") -> bool:
        """Whether the layer ``key`` (of ``shape``) is lowered to winograd. NHWC layers: in fp32 only (a layer
        with bf16 alternatives has no third), and without a measured choice never (no FLOP rule: see above)."""
        if self.mode == "off" or (layout == "NHWC" and self.precision != "fp32"):
            return False
        ratio = shape.winograd_flops() / shape.direct_flops
        if self.mode == "candidates":
            return ratio <= CANDIDATE_RATIO
        chosen = dict(self.choices).get(key)
        if chosen is None and layout == "NHWC":
            return False
        return chosen == "winograd" if chosen is not None else ratio <= MAX_FLOP_RATIO

    def uses(self, lowering: dict) -> bool:
        """Whether a task (by its ``lowering`` record) is part of the model this policy compiles: a layer's
        direct or winograd alternative, whichever the policy picks; every other task."""
        if "layer" not in lowering:
            return True
        layer = lowering["layer"]
        if lowering.get("algorithm") in PRECISIONS:  # a layer tuned in fp32 and bf16
            algorithm = (BF16_WINOGRAD if self.bf16_winograd(layer) else "bf16") if self.bf16(layer) else "fp32"
            return lowering["algorithm"] == algorithm
        layout = "NHWC" if "NHWC" in (lowering.get("layouts") or (lowering.get("layout"),)) else "NCHW"
        return (self.converts(ConvShape.from_key(layer, layout), layer, layout)
                == (lowering.get("algorithm") == "winograd"))


LAYOUTS = {("NCHW", "OIHW", "NCHW"): "NCHW", ("NHWC", "OHWI", "NHWC"): "NHWC"}  # (data, kernel, out) -> layout


def conv_layout(call) -> str | None:
    """``NCHW`` or ``NHWC`` for a conv2d call winograd has a form of (NCHW/OIHW or NHWC/OHWI), else None."""
    attrs = call.attrs
    return LAYOUTS.get((str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout)))


def conv_shape(call) -> ConvShape | None:
    """The shape of a Relax ``nn.conv2d`` call if winograd can compute it (NCHW/OIHW or NHWC/OHWI, 3x3, stride 1,
    no dilation, one group, static float32 shapes), else None."""
    attrs = call.attrs
    try:
        data = [int(s) for s in call.args[0].ty.shape]
        weight = [int(s) for s in call.args[1].ty.shape]
        out = [int(s) for s in call.ty.shape]
    except (TypeError, AttributeError, ValueError):  # symbolic shapes
        return None
    layout = conv_layout(call)
    if layout is None or len(data) != 4 or len(weight) != 4 or len(out) != 4:
        return None
    if layout == "NHWC":  # as NCHW / OIHW from here
        data, weight, out = [data[0], data[3], data[1], data[2]], [weight[0], weight[3], weight[1], weight[2]], \
            [out[0], out[3], out[1], out[2]]
    if int(attrs.groups) != 1 or weight[2:] != [3, 3]:
        return None
    if [int(s) for s in attrs.strides] != [1, 1] or [int(s) for s in attrs.dilation] != [1, 1]:
        return None
    if str(call.args[0].ty.dtype) != "float32" or str(call.args[1].ty.dtype) != "float32":
        return None
    if (attrs.out_dtype and str(attrs.out_dtype) not in ("", "float32")) or len(data) != 4:
        return None
    return ConvShape(batch=data[0], in_channels=data[1], out_channels=weight[0], height=out[2], width=out[3],
                     kernel=(3, 3))


def kernel_transform(weight, tile: int, layout: str = "NCHW"):
    """G g G^T of every (out, in) 3x3 filter, laid out as TOPI's winograd of the layout reads it: from OIHW to
    (alpha, alpha, in, out) for NCHW, from OHWI to (alpha, alpha, out, in) for NHWC."""
    from tvm import te
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    if layout == "NHWC":
        out_ch, kh, kw, in_ch = (int(s) for s in weight.shape)
    else:
        out_ch, in_ch, kh, kw = (int(s) for s in weight.shape)
    alpha = tile + kh - 1
    _, _, G = winograd_transform_matrices(tile, kh, str(weight.dtype))
    r_kh = te.reduce_axis((0, kh), "r_kh")
    r_kw = te.reduce_axis((0, kw), "r_kw")
    if layout == "NHWC":
        return te.compute(
            (alpha, alpha, out_ch, in_ch),
            lambda eps, nu, co, ci: te.sum(weight[co, r_kh, r_kw, ci] * G[eps, r_kh] * G[nu, r_kw],
                                           axis=[r_kh, r_kw]),
            name="winograd_kernel",
        )
    return te.compute(
        (alpha, alpha, in_ch, out_ch),
        lambda eps, nu, ci, co: te.sum(weight[co, ci, r_kh, r_kw] * G[eps, r_kh] * G[nu, r_kw], axis=[r_kh, r_kw]),
        name="winograd_kernel",
    )


def _padded_to_tiles(data, padding, tile: int, layout: str):
    """The input padded by the convolution's padding and on to whole tiles (the last tiles would otherwise read
    past it), the output size and tile counts ``(out_h, out_w, n_h, n_w)``, and Winograd's ``(A, B)``."""
    from tvm import topi
    from tvm.topi.nn.utils import get_pad_tuple
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    height, width = (int(s) for s in (data.shape[1:3] if layout == "NHWC" else data.shape[2:4]))
    alpha = tile + 2
    pt, pl, pb, pr = (int(x) for x in get_pad_tuple(padding, (3, 3)))
    out_h, out_w = height + pt + pb - 2, width + pl + pr - 2
    n_h, n_w = math.ceil(out_h / tile), math.ceil(out_w / tile)
    extra_h = max(0, (n_h - 1) * tile + alpha - (height + pt + pb))
    extra_w = max(0, (n_w - 1) * tile + alpha - (width + pl + pr))
    if layout == "NHWC":
        data_pad = topi.nn.pad(data, (0, pt, pl, 0), (0, pb + extra_h, pr + extra_w, 0), name="data_pad",
                               attrs={"schedule_rule": "None"})
    else:
        data_pad = topi.nn.pad(data, (0, 0, pt, pl), (0, 0, pb + extra_h, pr + extra_w), name="data_pad")
    A, B, _ = winograd_transform_matrices(tile, 3, str(data.dtype))
    return data_pad, (out_h, out_w, n_h, n_w), (A, B)


def winograd_conv(data, kernel, padding, tile: int):
    """NCHW winograd convolution on a transformed kernel (alpha, alpha, in, out).

    TOPI's ``conv2d_winograd_nchw`` with one fix: it pads the input by the convolution's padding only,
    so when the output size is not a multiple of the tile (13 x 13 in tiny-YOLOv2) the last tiles read
    past the end of the padded input and the output depends on whatever memory lies there (the
    measurement's correctness check caught it). Here the input is padded to whole tiles, as TOPI's
    NHWC version does. Block names and annotations are TOPI's, so MetaSchedule treats it alike.
    """
    from tvm import te

    batch, in_ch, _, _ = (int(s) for s in data.shape)
    alpha, _, _, out_ch = (int(s) for s in kernel.shape)
    m = tile
    data_pad, (out_h, out_w, n_h, n_w), (A, B) = _padded_to_tiles(data, padding, m, "NCHW")
    tiles = batch * n_h * n_w

    input_tile = te.compute(
        (in_ch, tiles, alpha, alpha),
        lambda ci, p, eps, nu: data_pad[p // (n_h * n_w), ci, ((p // n_w) % n_h) * m + eps, (p % n_w) * m + nu],
        name="input_tile", attrs={"schedule_rule": "None"},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, in_ch, tiles),
        lambda eps, nu, ci, p: te.sum(input_tile[ci, p, r_a, r_b] * B[r_a, eps] * B[r_b, nu], axis=[r_a, r_b]),
        name="data_pack", attrs={"schedule_rule": "conv2d_nchw_winograd_data_pack"},
    )
    ci = te.reduce_axis((0, in_ch), name="ci")
    bgemm = te.compute(
        (alpha, alpha, out_ch, tiles),
        lambda eps, nu, co, p: te.sum(data_pack[eps, nu, ci, p] * kernel[eps, nu, ci, co], axis=[ci]),
        name="bgemm", attrs={"layout_free_placeholders": [kernel]},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (out_ch, tiles, m, m),
        lambda co, p, vh, vw: te.sum(bgemm[r_a, r_b, co, p] * A[r_a, vh] * A[r_b, vw], axis=[r_a, r_b]),
        name="inverse", attrs={"schedule_rule": "conv2d_nchw_winograd_inverse"},
    )
    return te.compute(
        (batch, out_ch, out_h, out_w),
        lambda n, co, h, w: inverse[co, n * n_h * n_w + (h // m) * n_w + w // m, h % m, w % m],
        name="conv2d_winograd",
    )


def winograd_conv_nhwc(data, kernel, padding, tile: int):
    """NHWC winograd convolution on a transformed kernel (alpha, alpha, out, in): TOPI's
    ``conv2d_winograd_nhwc`` on a pre-transformed kernel (TOPI's own pre-computed path is a removed legacy flow),
    the input padded to whole tiles in both dimensions. Block names and annotations are TOPI's, so MetaSchedule's
    CPU rules for the NHWC data pack and inverse transform schedule them."""
    from tvm import te

    batch, _, _, in_ch = (int(s) for s in data.shape)
    alpha, _, out_ch, _ = (int(s) for s in kernel.shape)
    m = tile
    data_pad, (out_h, out_w, n_h, n_w), (A, B) = _padded_to_tiles(data, padding, m, "NHWC")
    tiles = batch * n_h * n_w

    input_tile = te.compute(
        (alpha, alpha, tiles, in_ch),
        lambda eps, nu, p, ci: data_pad[p // (n_h * n_w), ((p // n_w) % n_h) * m + eps, (p % n_w) * m + nu, ci],
        name="input_tile", attrs={"schedule_rule": "None"},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, tiles, in_ch),
        lambda eps, nu, p, ci: te.sum(input_tile[r_a, r_b, p, ci] * B[r_a, eps] * B[r_b, nu], axis=[r_a, r_b]),
        name="data_pack", attrs={"schedule_rule": "conv2d_nhwc_winograd_data_pack"},
    )
    ci = te.reduce_axis((0, in_ch), name="ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, out_ch),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, ci] * kernel[eps, nu, co, ci], axis=[ci]),
        name="bgemm", attrs={"layout_free_placeholders": [kernel]},
    )
    r_a = te.reduce_axis((0, alpha), "r_a")
    r_b = te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (m, m, tiles, out_ch),
        lambda vh, vw, p, co: te.sum(bgemm[r_a, r_b, p, co] * A[r_a, vh] * A[r_b, vw], axis=[r_a, r_b]),
        name="inverse", attrs={"schedule_rule": "conv2d_nhwc_winograd_inverse"},
    )
    return te.compute(
        (batch, out_h, out_w, out_ch),
        lambda n, h, w, co: inverse[h % m, w % m, n * n_h * n_w + (h // m) * n_w + w // m, co],
        name="conv2d_winograd",
    )


def legalize_map(policy: WinogradPolicy) -> dict[str, Any]:
    """``LegalizeOps(customize_legalize_map=...)`` entry: winograd where the policy says so, TVM's own
    conv2d legalisation everywhere else."""
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    def conv2d(bb, call):
        shape, layout = conv_shape(call), conv_layout(call)
        if shape is None or not policy.converts(shape, layer_key(call.args[0].ty.shape, call.ty.shape), layout):
            return _nn_conv2d(bb, call)
        kernel = bb.emit_te(kernel_transform, call.args[1], TILE, layout,
                            primfunc_name_hint="winograd_kernel_transform")
        padding = [int(p) for p in call.attrs.padding]
        compute = winograd_conv_nhwc if layout == "NHWC" else winograd_conv
        return bb.call_te(compute, call.args[0], kernel, padding, TILE, primfunc_name_hint="conv2d_winograd")

    return {"relax.nn.conv2d": conv2d}


__all__ = ["ALGORITHMS", "BF16_WINOGRAD", "MODES", "PRECISIONS", "TILE", "ConvShape", "WinogradPolicy",
           "choose_algorithms", "conv_layout", "conv_shape", "kernel_transform", "layer_key", "layer_totals",
           "legalize_map", "precision_layer_key", "task_layer", "winograd_conv", "winograd_conv_nhwc"]
