"""AMX: the process's permission for tile state, and bf16 tile-multiply tensor intrinsics for TVM.

Linux grants the AMX tile registers per process, on request (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``); the first tile instruction of a process that did not ask kills it with SIGILL. So every
process that runs an AMX kernel asks first: the measuring workers, ``compile`` / ``report``, and a deployed
module's loader (:func:`request_permission` is the one call they make).

The intrinsic ``amx_bf16_{mt}x{nt}x{kt}`` computes ``C[16 mt, 16 nt] += A[16 mt, 32 kt] * B`` with A and B in
bf16 and C in fp32, on ``mt x nt`` accumulator tiles (at most 4: tmm0-3) fed by ``mt`` A tiles (tmm4-5) and ``nt``
B tiles (tmm6-7). B is read in the layout ``tdpbf16ps`` wants, ``B[k // 2, n, k % 2]`` (pairs of k innermost);
its rows and A's may have any stride, so A can be a window of a larger activation and B a slice of packed weights.
The tile configuration is the same for all of them (8 tiles of 16 rows x 64 bytes) and is loaded at the start of
each call: calls with more ``kt`` amortise it and the accumulator's load and store over more tile multiplies.

Operands are addressed through ``uint16`` pointers: TVM's bf16 legalisation rewrites bf16 *values* to fp32, but
the tile loads only take addresses, so no bf16 value ever reaches the code generator.
"""

from __future__ import annotations

import ctypes
import platform
import re
import sys
from dataclasses import dataclass

from autosearch.tensor_units.block import KEY_PATTERN, Block, Geometry, describe, parse_key, register_zeros
from autosearch.tensor_units.intrinsics import register_once

_SYS_ARCH_PRCTL = 158
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

TILE_ROWS = 16  # rows of every tile
TILE_K = 32  # bf16 values per 64-byte tile row
KT_CHOICES = (1, 2, 4, 8, 16)  # tile multiplies per call along the reduction: K = 32 to 512 per call
SHAPES = tuple((mt, nt, kt) for mt in (1, 2) for nt in (1, 2) for kt in KT_CHOICES)


def request_permission() -> bool:
    """Ask Linux for this process's AMX tile state; True when granted (asking again is harmless)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


def intrin_name(mt: int, nt: int, kt: int) -> str:
    return f"amx_bf16_{mt}x{nt}x{kt}"


def register(mt: int, nt: int, kt: int) -> str:
    """Register the intrinsic of one tile shape with TVM, once per process; returns its name."""
    return register_once(intrin_name(mt, nt, kt), lambda: _intrin_funcs(mt, nt, kt))


@dataclass(frozen=True, kw_only=True)
class ConvTile(Geometry):
    """One whole-reduction convolution intrinsic: an accumulator block of ``mh`` output rows x ``16 mw`` pixels x
    ``16 nt`` channels (``mh * mw`` <= 2 pixel tiles) of a flattened convolution (:mod:`.conv`) of the
    :class:`.block.Geometry` it extends.

    ``group`` taps per tile multiply: 1, or ``32 / channels`` when a pixel's channels fill less than a tile row
    (16, 8 or 4 of them): a tile row of 32 bf16 is then ``group`` neighbouring pixels, the taps ``(kh, kw ...
    kw + group - 1)`` of one output pixel, and the taps past the filter's width meet zero weights."""

    mh: int
    mw: int
    nt: int

    @property
    def name(self) -> str:
        return f"amx_conv_bf16_{self.mh}x{self.mw}x{self.nt}_{self.key}"

    @property
    def block(self) -> Block:
        """The block of the flattened convolution one call computes (:mod:`.block`)."""
        return Block(rows=self.mh, pixels=TILE_ROWS * self.mw, cols=TILE_ROWS * self.nt, **vars(self.geometry))


_CONV_TILE = re.compile(r"amx_conv_bf16_(\d+)x(\d+)x(\d+)_" + KEY_PATTERN)


def register_conv(tile: ConvTile) -> str:
    """Register the intrinsic of one :class:`ConvTile`, once per process; returns its name.

    ``C[h, w, j] += sum over the filter's taps and the channels of A[(s h + kh) row + s w + kw, c] * B[...]``: all
    of a block's reduction in one call, so the accumulators stay in tile registers for the whole reduction and the
    tile configuration, the accumulator load and its store happen once per block rather than once per tap and
    channel slice (which dominated the narrow layers: 16 or 32 channels make one tile multiply per tap). The
    geometry (``row``, the stride, the filter) is part of the description, so each layer has its own.

    The accumulators start at zero (``tilezero``), not from C: the description is the whole reduction, so wherever
    it matches, the reduction's init (C = 0) comes right before the call, and C holds zeros there. Loading those
    zeros cost each block its C tiles' loads, and, with the init storing them first, 4-12% of a layer's time
    (docs/results.md); the init is tensorised onto ``amx_acc_zero_*``, which stores nothing
    (:func:`.block.register_zero`)."""
    return register_once(tile.name, lambda: (describe(tile.block), _conv_impl(tile)))


def register_for(text: str) -> None:
    """Register the intrinsics ``text`` (a trace, a database file) names: TVM looks a tensorising trace's
    intrinsic up when it reads the trace, and registering all of them would cost about a second."""
    for mt, nt, kt in set(re.findall(r"amx_bf16_(\d+)x(\d+)x(\d+)", text)):
        register(int(mt), int(nt), int(kt))
    for found in set(_CONV_TILE.findall(text)):
        mh, mw, nt = (int(v) for v in found[:3])
        register_conv(ConvTile(mh=mh, mw=mw, nt=nt, **vars(parse_key(found[3:]))))
    register_zeros("amx", text)


def names_any(text: str) -> bool:
    """Whether ``text`` names an intrinsic of this module."""
    return bool(re.search(r"amx_bf16_\d|amx_conv_bf16_\d|amx_acc_zero_\d", text))


def _tile_config_word(w):
    """Word ``w`` of the 64-byte tile configuration every intrinsic here loads: palette 1, 8 tiles of 16 rows x 64
    bytes (bytes 16-31: bytes per row, 48-55: rows)."""
    from tvm import tirx
    from tvm.script import tirx as T

    return T.if_then_else(w == 0, T.uint32(1), T.if_then_else(
        tirx.all(4 <= w, w < 8), T.uint32(0x00400040),
        T.if_then_else(tirx.all(12 <= w, w < 14), T.uint32(0x10101010), T.uint32(0))))


def _intrin_funcs(mt: int, nt: int, kt: int):
    """(description, implementation) PrimFuncs of one tile-multiply intrinsic."""
    from tvm.script import tirx as T

    m_i, n_i, k_i = TILE_ROWS * mt, TILE_ROWS * nt, TILE_K * kt

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (m_i, k_i), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (k_i // 2, n_i, 2), "bfloat16", offset_factor=1, strides=[T.int32(), 2, 1])
        C = T.match_buffer(c, (m_i, n_i), "float32", offset_factor=1, strides=[T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:m_i, 0:n_i], A[0:m_i, 0:k_i], B[0:k_i // 2, 0:n_i, 0:2])
            T.writes(C[0:m_i, 0:n_i])
            for i, j, k in T.grid(m_i, n_i, k_i):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], "float32") * T.cast(B[vk // 2, vj, vk % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa = T.int32()
        sb = T.int32()
        sc = T.int32()
        A = T.match_buffer(a, (m_i, k_i), "bfloat16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (k_i // 2, n_i, 2), "bfloat16", offset_factor=1, strides=[sb, 2, 1])
        C = T.match_buffer(c, (m_i, n_i), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m_i, 0:n_i], A[0:m_i, 0:k_i], B[0:k_i // 2, 0:n_i, 0:2])
            T.writes(C[0:m_i, 0:n_i])
            cfg = T.decl_buffer((16,), "uint32", scope="local")
            for w in T.unroll(16):
                cfg[w] = _tile_config_word(w)
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.ldtilecfg", cfg.access_ptr("r")))
            for mi in T.unroll(mt):
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(mi * nt + ni),
                        C.access_ptr("r", offset=mi * 16 * sc + ni * 16), T.int64(sc * 4)))
            for ko in range(kt):
                for mi in T.unroll(mt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(4 + mi),
                        T.tvm_access_ptr(T.type_annotation("uint16"), A.data,
                                         A.elem_offset + mi * 16 * sa + ko * 32, 16 * sa, 1),
                        T.int64(sa * 2)))
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(6 + ni),
                        T.tvm_access_ptr(T.type_annotation("uint16"), B.data,
                                         B.elem_offset + ko * 16 * sb + ni * 32, 16 * sb, 1),
                        T.int64(sb * 2)))
                for mi in T.unroll(mt):
                    for ni in T.unroll(nt):
                        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tdpbf16ps", T.uint8(mi * nt + ni),
                                                      T.uint8(4 + mi), T.uint8(6 + ni)))
            for mi in T.unroll(mt):
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tilestored64", T.uint8(mi * nt + ni),
                        T.address_of(C[mi * 16, ni * 16]), T.int64(sc * 4)))

    return desc, impl


def _conv_impl(tile: ConvTile):
    """The implementation PrimFunc of a :class:`ConvTile`: tile configuration, accumulators zeroed, then per filter
    row, tap group and channel slice the A tiles (16 flat rows ``s`` apart), the B tiles and the multiplies, then
    the accumulator stores. The pixel tiles of a block lie side by side in one output row (``mw`` = 2) or one above
    the other (``mh`` = 2): the second A tile starts ``16 s`` flat rows or ``s`` image rows further, the second C
    tile 16 pixels or one output row further.

    The accumulators are stored through ``address_of`` of an fp32 element of C, not a typed ``access_ptr``: TVM's
    StorageRewrite may place C's buffer in one allocation with the bf16 input's, and LowerIntrin then refuses an
    fp32 ``access_ptr`` into it (some schedules of 13x13 layers did not build)."""
    from tvm.script import tirx as T

    mh, mw, nt, kh, row, s_ = tile.mh, tile.mw, tile.nt, tile.kh, tile.row, tile.stride
    block = tile.block
    w_i, n_i, span, channels, groups, depth = block.pixels, block.cols, block.span, tile.channels, block.groups, (
        block.depth)
    k_tiles = depth // TILE_K
    tap_step = tile.group  # flat rows from one tap group to the next
    a_step = s_ * row if mh == 2 else s_ * TILE_ROWS  # flat rows from one pixel tile to the next
    by_row, by_pixels = (1, 0) if mh == 2 else (0, TILE_ROWS)  # C offset of the next pixel tile: sh or 16 sw

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa = T.int32()
        sb0 = T.int32()
        sb1 = T.int32()
        sb2 = T.int32()
        sh = T.int32()
        sw = T.int32()
        A = T.match_buffer(a, (span, channels), "bfloat16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (kh, groups, depth // 2, n_i, 2), "bfloat16", offset_factor=1,
                           strides=[sb0, sb1, sb2, 2, 1])
        C = T.match_buffer(c, (mh, w_i, n_i), "float32", offset_factor=1, strides=[sh, sw, 1])
        with T.sblock("root"):
            T.reads(C[0:mh, 0:w_i, 0:n_i], A[0:span, 0:channels], B[0:kh, 0:groups, 0:depth // 2, 0:n_i, 0:2])
            T.writes(C[0:mh, 0:w_i, 0:n_i])
            cfg = T.decl_buffer((16,), "uint32", scope="local")
            for w in T.unroll(16):
                cfg[w] = _tile_config_word(w)
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.ldtilecfg", cfg.access_ptr("r")))
            for mi in T.unroll(mh * mw):  # the whole reduction: C is the init's zeros here (register_conv)
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tilezero", T.uint8(mi * nt + ni)))
            for r, g, ko in T.grid(kh, groups, k_tiles):
                for mi in T.unroll(mh * mw):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(4 + mi),
                        T.tvm_access_ptr(T.type_annotation("uint16"), A.data,
                                         A.elem_offset + (mi * a_step + r * row + g * tap_step) * sa + ko * 32,
                                         16 * s_ * sa + 32, 1),
                        T.int64(sa * 2 * s_)))
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(6 + ni),
                        T.tvm_access_ptr(T.type_annotation("uint16"), B.data,
                                         B.elem_offset + r * sb0 + g * sb1 + ko * 16 * sb2 + ni * 32, 16 * sb2, 1),
                        T.int64(sb2 * 2)))
                for mi in T.unroll(mh * mw):
                    for ni in T.unroll(nt):
                        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tdpbf16ps", T.uint8(mi * nt + ni),
                                                      T.uint8(4 + mi), T.uint8(6 + ni)))
            for mi in T.unroll(mh * mw):
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tilestored64", T.uint8(mi * nt + ni),
                        T.address_of(C[mi * by_row, mi * by_pixels, ni * 16]), T.int64(sw * 4)))

    return impl


__all__ = ["KT_CHOICES", "SHAPES", "TILE_K", "TILE_ROWS", "ConvTile", "intrin_name", "register",
           "names_any", "register_conv", "register_for", "request_permission"]
