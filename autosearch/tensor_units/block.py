"""One accumulator block of the flattened convolution (:mod:`.conv`), and the TIR description of its whole
reduction: what a tensor unit's intrinsic computes, whichever unit computes it.

A block is ``rows`` output rows x ``pixels`` pixels of each x ``cols`` output channels, accumulated over every
filter tap and input channel: ``C[h, w, j] += sum over (r, g, k) of A[(s h + r) row + s w + tap, c] * B[r, g,
k // 2, j, k % 2]``. With ``group`` = 1 the tap is ``g`` and ``c`` = ``k``; with tap groups (a pixel's channels
fill less than 32 bf16: :attr:`.conv.FlatConv.group`) the reduction value ``k`` of group ``g`` is channel
``k % channels`` of tap ``g * group + k // channels``. The AMX tiles (:mod:`.amx`) and the AVX512-BF16 dot
product (:mod:`.dpbf16`) describe their intrinsics with it, so the same block of the same task matches either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autosearch.tensor_units.conv import BLOCK_N
from autosearch.tensor_units.intrinsics import register_once

KEY_PATTERN = r"k(\d+)x(\d+)_g(\d+)_r(\d+)_c(\d+)_s(\d+)"  # Geometry.key: kh, kw, group, row, channels, stride


@dataclass(frozen=True, kw_only=True)
class Geometry:
    """A flattened convolution as its blocks see it: ``kh x kw`` filter, stride ``stride``, flat rows ``row`` apart,
    ``channels`` (padded) input channels per flat pixel, ``group`` taps per reduction group."""

    kh: int
    kw: int
    row: int
    channels: int
    stride: int
    group: int = 1
    packed: int = BLOCK_N  # output channels per block of the packed weights (conv.FlatConv.block_n): rows' width

    @property
    def key(self) -> str:
        """The geometry in an intrinsic's name (:data:`KEY_PATTERN` reads it back)."""
        return f"k{self.kh}x{self.kw}_g{self.group}_r{self.row}_c{self.channels}_s{self.stride}"

    @property
    def geometry(self) -> Geometry:
        """The geometry alone (of a block or a unit's tile)."""
        return Geometry(kh=self.kh, kw=self.kw, row=self.row, channels=self.channels, stride=self.stride,
                        group=self.group, packed=self.packed)

    @property
    def groups(self) -> int:
        """Tap groups along the filter's width."""
        return -(-self.kw // self.group)

    @property
    def depth(self) -> int:
        """Reduction length of one tap group: its pixels' channels (one 32-value tile row on AMX)."""
        return self.channels * self.group


@dataclass(frozen=True, kw_only=True)
class Block(Geometry):
    """One block: ``rows`` output rows x ``pixels`` pixels x ``cols`` output channels."""

    rows: int
    pixels: int
    cols: int

    @property
    def span(self) -> int:
        """Flat input rows the block reads."""
        s = self.stride
        return (s * (self.rows - 1) + self.kh - 1) * self.row + s * (self.pixels - 1) + self.groups * self.group


def parse_key(numbers) -> Geometry:
    """The geometry of :data:`KEY_PATTERN`'s groups (strings or numbers)."""
    kh, kw, group, row, channels, stride = (int(v) for v in numbers)
    return Geometry(kh=kh, kw=kw, row=row, channels=channels, stride=stride, group=group)


def describe(block: Block):
    """The description PrimFunc of ``block``: TVMScript written for its loops, since TVM drops loops of extent 1
    from the block it matches (one output row per block, one tap group per filter row) and the description must
    have exactly the block's loops."""
    from tvm.script import from_source
    from tvm.script import tirx as T

    w_i, n_i, s = block.pixels, block.cols, block.stride
    loops = [("h", block.rows, "S"), ("i", w_i, "S"), ("j", n_i, "S"), ("r", block.kh, "R"),
             ("g", block.groups, "R"), ("k", block.depth, "R")]
    loops = [loop for loop in loops if loop[1] > 1]
    names = {name for name, _, _ in loops}
    h, r, tap = (f"v{name}" if name in names else "0" for name in ("h", "r", "g"))
    if block.group == 1:
        a_index = f"({h} * {s} + {r}) * {block.row} + vi * {s} + {tap}, vk"
    else:
        a_index = (f"({h} * {s} + {r}) * {block.row} + vi * {s} + {tap} * {block.group} + vk // {block.channels}, "
                   f"vk % {block.channels}")
    b_shape = f"{block.kh}, {block.groups}, {block.depth // 2}, {n_i}, 2"
    source = f"""
@T.prim_func(s_tir=True)
def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
    A = T.match_buffer(a, ({block.span}, {block.channels}), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
    B = T.match_buffer(b, ({b_shape}), "bfloat16", offset_factor=1, strides=[T.int32(), T.int32(), T.int32(), 2, 1])
    C = T.match_buffer(c, ({block.rows}, {w_i}, {n_i}), "float32", offset_factor=1, strides=[T.int32(), T.int32(), 1])
    with T.sblock("root"):
        T.reads(C[0:{block.rows}, 0:{w_i}, 0:{n_i}], A[0:{block.span}, 0:{block.channels}],
                B[0:{block.kh}, 0:{block.groups}, 0:{block.depth // 2}, 0:{n_i}, 0:2])
        T.writes(C[0:{block.rows}, 0:{w_i}, 0:{n_i}])
        for {", ".join(name for name, _, _ in loops)} in T.grid({", ".join(str(n) for _, n, _ in loops)}):
            with T.sblock("update"):
                {", ".join("v" + name for name, _, _ in loops)} = T.axis.remap(
                    "{"".join(kind for _, _, kind in loops)}", [{", ".join(name for name, _, _ in loops)}])
                C[{h}, vi, vj] = C[{h}, vi, vj] + T.cast(A[{a_index}], "float32") * T.cast(
                    B[{r}, {tap}, vk // 2, vj, vk % 2], "float32")
"""
    return from_source(source, extra_vars={"T": T})


def register_zero(unit: str, rows: int, pixels: int, cols: int) -> str:
    """Register ``{unit}_acc_zero_{rows}x{pixels}x{cols}`` (``unit``: ``amx`` or ``dpbf16``), the init of a block
    whose unit's call starts its accumulators at zero, once per process; returns its name (:func:`_zero_funcs`)."""
    return register_once(f"{unit}_acc_zero_{rows}x{pixels}x{cols}", lambda: _zero_funcs(rows, pixels, cols))


def register_zeros(unit: str, text: str) -> None:
    """Register the inits of ``unit`` that ``text`` (a trace, a database file) names."""
    for rows, pixels, cols in set(re.findall(unit + r"_acc_zero_(\d+)x(\d+)x(\d+)", text)):
        register_zero(unit, int(rows), int(pixels), int(cols))


def _zero_funcs(rows: int, pixels: int, cols: int):
    """(description, implementation) PrimFuncs of the init of a ``rows x pixels x cols`` block whose unit's call
    starts its accumulators at zero in registers (AMX tiles: ``tilezero``; the dot product: zeroed vectors), so the
    init stores nothing: its description is the GEMM's init block (C = 0 over the block), its implementation empty.
    The intrinsic call that follows it over the same block computes the whole reduction (:func:`describe`), so
    wherever the pair matches, C is the init's zeros when the call begins, and the call's result is C = A B, as the
    init and the reduction compute it: C's zeros are neither stored nor loaded again (4-12% of an AMX layer's time,
    docs/results.md). Only for an init right before such a call (the sketch's, :mod:`.sketch`); the measurement
    checks every kernel against its unscheduled reference. TVMScript written for the init's loops, which leave out
    loops of extent 1 (one output row per block), as :func:`describe` does."""
    from tvm.script import from_source
    from tvm.script import tirx as T

    loops = [(name, n) for name, n in (("h", rows), ("i", pixels), ("j", cols)) if n > 1]
    names, extents = ", ".join(name for name, _ in loops), ", ".join(str(n) for _, n in loops)
    h = "vh" if rows > 1 else "0"
    head = f"""
    C = T.match_buffer(c, ({rows}, {pixels}, {cols}), "float32", offset_factor=1, strides=[T.int32(), T.int32(), 1])
    with T.sblock("root"):
        T.reads()
        T.writes(C[0:{rows}, 0:{pixels}, 0:{cols}])"""
    desc = f"""
@T.prim_func(s_tir=True)
def desc(c: T.handle) -> None:{head}
        for {names} in T.grid({extents}):
            with T.sblock("init"):
                {", ".join("v" + name for name, _ in loops)} = T.axis.remap("{"S" * len(loops)}", [{names}])
                C[{h}, vi, vj] = T.float32(0)
"""
    impl = f"""
@T.prim_func(s_tir=True)
def impl(c: T.handle) -> None:{head}
        T.evaluate(0)
"""
    return from_source(desc, extra_vars={"T": T}), from_source(impl, extra_vars={"T": T})


__all__ = ["KEY_PATTERN", "Block", "Geometry", "describe", "parse_key", "register_zero", "register_zeros"]
