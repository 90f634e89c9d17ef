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
import sys

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
    from tvm.s_tir import TensorIntrin

    name = intrin_name(mt, nt, kt)
    try:
        TensorIntrin.get(name)
    except Exception:  # not registered yet: TVM raises when the name is unknown
        TensorIntrin.register(name, *_intrin_funcs(mt, nt, kt))
    return name


def conv_intrin_name(mh: int, mw: int, nt: int, kh: int, kw: int, row: int, channels: int, stride: int) -> str:
    return f"amx_conv_bf16_{mh}x{mw}x{nt}_k{kh}x{kw}_r{row}_c{channels}_s{stride}"


def register_conv(mh: int, mw: int, nt: int, kh: int, kw: int, row: int, channels: int, stride: int) -> str:
    """Register the whole-reduction intrinsic of one flattened convolution (:mod:`.conv`) and tile shape, once per
    process; returns its name.

    ``C[h, w, j] += sum over (kh, kw, c) of A[(s h + kh) row + s w + kw, c] * B[kh, kw, c // 2, j, c % 2]`` for
    an accumulator block of ``mh`` output rows x ``16 mw`` pixels x ``16 nt`` channels (``mh * mw`` <= 2 pixel
    tiles): all the filter taps and channels of the block in one call, so the accumulators stay in tile registers
    for the whole reduction and the tile configuration, the accumulator load and its store happen once per block
    rather than once per tap and channel slice (which dominated the narrow layers: 16 or 32 channels make one tile
    multiply per tap). ``row`` (the padded input width) and the stride ``s`` are part of the description, so each
    layer has its own."""
    from tvm.s_tir import TensorIntrin

    name = conv_intrin_name(mh, mw, nt, kh, kw, row, channels, stride)
    try:
        TensorIntrin.get(name)
    except Exception:  # not registered yet: TVM raises when the name is unknown
        TensorIntrin.register(name, *_conv_intrin_funcs(mh, mw, nt, kh, kw, row, channels, stride))
    return name


def register_for(text: str) -> None:
    """Register the intrinsics ``text`` (a trace, a database file) names: TVM looks a tensorising trace's
    intrinsic up when it reads the trace, and registering all of them would cost about a second."""
    import re

    for mt, nt, kt in set(re.findall(r"amx_bf16_(\d+)x(\d+)x(\d+)", text)):
        register(int(mt), int(nt), int(kt))
    for found in set(re.findall(r"amx_conv_bf16_(\d+)x(\d+)x(\d+)_k(\d+)x(\d+)_r(\d+)_c(\d+)_s(\d+)", text)):
        register_conv(*(int(v) for v in found))


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
            # palette 1; 8 tiles of 16 rows x 64 bytes (bytes 16-31: bytes per row, 48-55: rows)
            cfg = T.decl_buffer((16,), "uint32", scope="local")
            for w in T.unroll(16):
                cfg[w] = T.if_then_else(
                    w == 0, T.uint32(1), T.if_then_else(
                        4 <= w and w < 8, T.uint32(0x00400040),
                        T.if_then_else(12 <= w and w < 14, T.uint32(0x10101010), T.uint32(0))))
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
                        C.access_ptr("w", offset=mi * 16 * sc + ni * 16), T.int64(sc * 4)))

    return desc, impl


def _conv_intrin_funcs(mh: int, mw: int, nt: int, kh: int, kw: int, row: int, channels: int, stride: int):
    """(description, implementation) PrimFuncs of one whole-reduction convolution intrinsic. The pixel tiles of a
    block lie side by side in one output row (``mw`` = 2) or one above the other (``mh`` = 2): the second A tile
    starts 16 pixels or one output row further (``16 s`` input rows or ``s`` image rows), the second C tile 16
    pixels or one output row further; a tile's input rows are ``s`` rows apart."""
    from tvm.script import tirx as T

    w_i, n_i = TILE_ROWS * mw, TILE_ROWS * nt
    s_ = stride
    span = (s_ * (mh - 1) + kh - 1) * row + s_ * (w_i - 1) + kw  # input rows one accumulator block reads
    k_tiles = channels // TILE_K
    a_step = s_ * row if mh == 2 else s_ * TILE_ROWS  # input rows from one pixel tile to the next
    by_row, by_pixels = (1, 0) if mh == 2 else (0, TILE_ROWS)  # C offset of the next pixel tile: sh or 16 sw

    @T.prim_func(s_tir=True)
    def desc_1(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (span, channels), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (kh, kw, channels // 2, n_i, 2), "bfloat16", offset_factor=1,
                           strides=[T.int32(), T.int32(), T.int32(), 2, 1])
        C = T.match_buffer(c, (mh, w_i, n_i), "float32", offset_factor=1, strides=[T.int32(), T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:mh, 0:w_i, 0:n_i], A[0:span, 0:channels], B[0:kh, 0:kw, 0:channels // 2, 0:n_i, 0:2])
            T.writes(C[0:mh, 0:w_i, 0:n_i])
            for i, j, r, s, k in T.grid(w_i, n_i, kh, kw, channels):
                with T.sblock("update"):
                    vi, vj, vr, vs, vk = T.axis.remap("SSRRR", [i, j, r, s, k])
                    C[0, vi, vj] = C[0, vi, vj] + T.cast(A[vr * row + vi * s_ + vs, vk], "float32") * T.cast(
                        B[vr, vs, vk // 2, vj, vk % 2], "float32")

    @T.prim_func(s_tir=True)
    def desc_2(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (span, channels), "bfloat16", offset_factor=1, strides=[T.int32(), 1])
        B = T.match_buffer(b, (kh, kw, channels // 2, n_i, 2), "bfloat16", offset_factor=1,
                           strides=[T.int32(), T.int32(), T.int32(), 2, 1])
        C = T.match_buffer(c, (mh, w_i, n_i), "float32", offset_factor=1, strides=[T.int32(), T.int32(), 1])
        with T.sblock("root"):
            T.reads(C[0:mh, 0:w_i, 0:n_i], A[0:span, 0:channels], B[0:kh, 0:kw, 0:channels // 2, 0:n_i, 0:2])
            T.writes(C[0:mh, 0:w_i, 0:n_i])
            for h, i, j, r, s, k in T.grid(mh, w_i, n_i, kh, kw, channels):
                with T.sblock("update"):
                    vh, vi, vj, vr, vs, vk = T.axis.remap("SSSRRR", [h, i, j, r, s, k])
                    C[vh, vi, vj] = C[vh, vi, vj] + T.cast(
                        A[(vh * s_ + vr) * row + vi * s_ + vs, vk], "float32") * T.cast(
                        B[vr, vs, vk // 2, vj, vk % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa = T.int32()
        sb0 = T.int32()
        sb1 = T.int32()
        sb2 = T.int32()
        sh = T.int32()
        sw = T.int32()
        A = T.match_buffer(a, (span, channels), "bfloat16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (kh, kw, channels // 2, n_i, 2), "bfloat16", offset_factor=1,
                           strides=[sb0, sb1, sb2, 2, 1])
        C = T.match_buffer(c, (mh, w_i, n_i), "float32", offset_factor=1, strides=[sh, sw, 1])
        with T.sblock("root"):
            T.reads(C[0:mh, 0:w_i, 0:n_i], A[0:span, 0:channels], B[0:kh, 0:kw, 0:channels // 2, 0:n_i, 0:2])
            T.writes(C[0:mh, 0:w_i, 0:n_i])
            # palette 1; 8 tiles of 16 rows x 64 bytes (bytes 16-31: bytes per row, 48-55: rows)
            cfg = T.decl_buffer((16,), "uint32", scope="local")
            for w in T.unroll(16):
                cfg[w] = T.if_then_else(
                    w == 0, T.uint32(1), T.if_then_else(
                        4 <= w and w < 8, T.uint32(0x00400040),
                        T.if_then_else(12 <= w and w < 14, T.uint32(0x10101010), T.uint32(0))))
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.ldtilecfg", cfg.access_ptr("r")))
            for mi in T.unroll(mh * mw):
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(mi * nt + ni),
                        C.access_ptr("r", offset=mi * (by_row * sh + by_pixels * sw) + ni * 16), T.int64(sw * 4)))
            for r, s, ko in T.grid(kh, kw, k_tiles):
                for mi in T.unroll(mh * mw):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(4 + mi),
                        T.tvm_access_ptr(T.type_annotation("uint16"), A.data,
                                         A.elem_offset + (mi * a_step + r * row + s) * sa + ko * 32, 16 * s_ * sa, 1),
                        T.int64(sa * 2 * s_)))
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tileloadd64", T.uint8(6 + ni),
                        T.tvm_access_ptr(T.type_annotation("uint16"), B.data,
                                         B.elem_offset + r * sb0 + s * sb1 + ko * 16 * sb2 + ni * 32, 16 * sb2, 1),
                        T.int64(sb2 * 2)))
                for mi in T.unroll(mh * mw):
                    for ni in T.unroll(nt):
                        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tdpbf16ps", T.uint8(mi * nt + ni),
                                                      T.uint8(4 + mi), T.uint8(6 + ni)))
            for mi in T.unroll(mh * mw):
                for ni in T.unroll(nt):
                    T.evaluate(T.call_llvm_intrin(
                        "void", "llvm.x86.tilestored64", T.uint8(mi * nt + ni),
                        C.access_ptr("w", offset=mi * (by_row * sh + by_pixels * sw) + ni * 16), T.int64(sw * 4)))

    return (desc_2 if mh == 2 else desc_1), impl


__all__ = ["KT_CHOICES", "SHAPES", "TILE_K", "TILE_ROWS", "conv_intrin_name", "intrin_name", "register",
           "register_conv", "register_for", "request_permission"]
