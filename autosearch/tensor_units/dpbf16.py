"""AVX512-BF16: a block of the flattened convolution (:mod:`.conv`) on ``vdpbf16ps``, as a tensor intrinsic for TVM.

``vdpbf16ps`` adds to each of 16 fp32 lanes the two products of a pair of bf16 values: with the weights packed in
pairs of reduction values (the layout the AMX tiles read too, :func:`.conv.pack_weight`), one instruction takes a
pixel's pair of input channels, broadcast, times the pairs of 16 output channels. CPUs with this dot product but no
AMX (AMD Zen 4) then compute bf16 convolutions too; there it multiplies twice as many values per cycle as an fp32
FMA (on Intel's cores as many), and the operands are half the bytes.

Why a micro-kernel in LLVM IR: TVM's BF16 legalisation rewrites every bf16 *value* to fp32 before code
generation, so the LLVM intrinsic called from TIR gets ``<32 x float>`` where LLVM wants ``<32 x bfloat>``. The
intrinsic's implementation calls a function written here as LLVM IR text instead, attached with the
``pragma_import_llvm`` attribute: TVM's LLVM code generator parses it, links it into the module and inlines it
(it marks imported functions always-inline). TIR passes only addresses (``uint16`` pointers, as the AMX tile loads
do); the IR loads the bf16 pairs itself.

The kernel keeps a block's ``rows x pixels x 16 nv`` fp32 accumulators in vector registers over the whole
reduction, every filter tap and channel (:class:`.block.Block`): per filter row and pair of reduction values,
``nv`` loads of 16 weight pairs and, per pixel, one broadcast input pair and ``nv`` dot products. The geometry (flat
row, stride, channels, filter) is compiled in as constants, so every input address is one pointer plus an
immediate; the flat input and the packed weights must then be dense, which the impl's buffer strides state (TVM
checks them where it lowers a tensorised block: other strides fail to build rather than compute wrongly).
"""

from __future__ import annotations

import re

from autosearch.tensor_units.block import KEY_PATTERN, Block, describe, parse_key, register_zeros
from autosearch.tensor_units.conv import BLOCK_N
from autosearch.tensor_units.intrinsics import register_once

LANES = 16  # fp32 accumulators per zmm register: the output channels of one dot product
# Accumulator vectors of a block (rows x pixels x 16-channel vectors): at most MAX_ACCUMULATORS, and with the block's
# weight vectors and a broadcast no more than the REGISTERS zmm registers; at least MIN_ACCUMULATORS hides the dot
# product's latency (an accumulator's next dot product waits for its last). A block's pixels divide the GEMM's row
# (MIN_PIXELS or more), its rows the GEMM's pairs of rows, and its channels lie within one block of the packed
# weights (conv.FlatConv.block_n: 32 channels, or all of them where they are no multiple of 32).
MIN_ACCUMULATORS, MAX_ACCUMULATORS, REGISTERS = 12, 28, 32
MIN_PIXELS, MAX_PIXEL_BLOCK = 4, 16
# the shapes of a GEMM row of 16 pixels (or a multiple), in the order of their sketches
SHAPES = ((1, 8, 2), (1, 16, 1), (2, 4, 2), (2, 8, 1))
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"


def gemm_width(out_w: int) -> int:
    """The pixels per row the GEMM computes for an output ``out_w`` pixels wide: the narrowest width from ``out_w``
    on that a block of :data:`MIN_PIXELS` to :data:`MAX_PIXEL_BLOCK` pixels divides. AMX computes whole 16-row
    tiles (:attr:`.conv.FlatConv.gemm_hw`), which at 13, 26 and 52 pixels (tiny-YOLOv2's widest layers) computes
    1.23-1.33x the pixels it keeps; the dot product's block is any number of pixels (registers, not tile rows), so
    those rows are computed as they are, in blocks of 13."""
    width = max(out_w, MIN_PIXELS)
    while not any(width % p == 0 for p in range(MIN_PIXELS, MAX_PIXEL_BLOCK + 1)):
        width += 1
    return width


def shapes_for(width: int, cols: int, packed: int = BLOCK_N) -> list[tuple[int, int, int]]:
    """The (rows, pixels, 16-channel vectors) blocks of a GEMM ``width`` pixels a row with ``cols`` output channels,
    packed in blocks of ``packed`` (:attr:`.conv.FlatConv.block_n`): for rows of whole 16-pixel tiles, the
    :data:`SHAPES` that fit (the design space as it was, its sketches in the same order), then the blocks of more
    than two vectors (80 channels packed as one block: five); for others, every block whose pixels divide the row
    with :data:`MIN_ACCUMULATORS` to :data:`MAX_ACCUMULATORS` vectors (the fullest block alone where none has as
    many). A block's vectors divide the packed block's, and its accumulators, weight vectors and broadcast fit in
    the :data:`REGISTERS`."""
    fits = [(rows, pixels, nv) for rows in (1, 2) for pixels in range(MIN_PIXELS, MAX_ACCUMULATORS + 1)
            for nv in range(1, packed // LANES + 1) if width % pixels == 0 and packed % (LANES * nv) == 0
            and cols % (LANES * nv) == 0 and rows * pixels * nv <= min(MAX_ACCUMULATORS, REGISTERS - nv - 1)]
    wide = [s for s in fits if s[0] * s[1] * s[2] >= MIN_ACCUMULATORS]
    if width % LANES == 0:
        return [s for s in SHAPES if s in fits] + [s for s in wide if s[2] > 2]
    return wide or ([max(fits, key=lambda s: s[0] * s[1] * s[2])] if fits else [])


def intrin_name(block: Block) -> str:
    """The intrinsic's name: the block's rows x pixels x 16-channel vectors, and its geometry (and the packed
    weights' block width where it is not 32, the names' only width before it could be another)."""
    packed = f"_n{block.packed}" if block.packed != BLOCK_N else ""
    return f"dpbf16_conv_{block.rows}x{block.pixels}x{block.cols // LANES}_{block.key}{packed}"


def symbol(block: Block) -> str:
    """The micro-kernel's function name."""
    return f"autosearch_{intrin_name(block)}"


def pairs(block: Block) -> int:
    """Pairs of reduction values per filter row: the tap groups' values lie one after another in the flat input (a
    group's taps are neighbouring flat pixels) and in the packed weights."""
    return block.groups * block.depth // 2


_NAME = re.compile(r"dpbf16_conv_(\d+)x(\d+)x(\d+)_" + KEY_PATTERN + r"(?:_n(\d+))?")


def register(block: Block) -> str:
    """Register the intrinsic of ``block`` (whose ``cols`` are whole 16-channel vectors) with TVM, once per
    process; returns its name."""
    return register_once(intrin_name(block), lambda: (describe(block), _impl(block)))


def register_for(text: str) -> None:
    """Register the intrinsics ``text`` (a trace, a database file) names: TVM looks a tensorising trace's
    intrinsic up when it reads the trace."""
    for found in set(_NAME.findall(text)):
        rows, pixels, nv = (int(v) for v in found[:3])
        geo = {**vars(parse_key(found[3:9])), "packed": int(found[9] or BLOCK_N)}
        register(Block(rows=rows, pixels=pixels, cols=LANES * nv, **geo))
    register_zeros("dpbf16", text)


def names_any(text: str) -> bool:
    """Whether ``text`` names an intrinsic of this module."""
    return _NAME.search(text) is not None


def kernel_ir(block: Block) -> str:
    """The micro-kernel of ``block`` as LLVM IR text: ``void @autosearch_<name>(ptr C, i64 C's row stride, i64
    C's pixel stride, ptr A, ptr B)``, strides in floats, A and B at their block's first bf16 value. The
    accumulators start at zero, not from C: the call is the block's whole reduction, so C holds the init's zeros
    (the init before it is ``dpbf16_acc_zero_*``, which stores nothing: :func:`.block.register_zero`)."""
    s, ch, row, nv = block.stride, block.channels, block.row, block.cols // LANES
    packed_row = 2 * block.packed  # bf16 values per row of the packed weights: its channels x a pair
    pixels = [(h, w) for h in range(block.rows) for w in range(block.pixels)]
    accs = [(h, w, v) for h, w in pixels for v in range(nv)]
    a_at = {(h, w): (h * s * row + w * s) * ch for h, w in pixels}  # bf16 offsets, per pixel
    lines = [f"define void @{symbol(block)}(ptr noalias %c, i64 %ch, i64 %cw, ptr noalias %a, ptr noalias %b) {{",
             "entry:"]
    for h, w, v in accs:
        t = f"{h}.{w}.{v}"
        lines += [f"  %ch.{t} = mul i64 %ch, {h}", f"  %cw.{t} = mul i64 %cw, {w}",
                  f"  %chw.{t} = add i64 %ch.{t}, %cw.{t}", f"  %co.{t} = add i64 %chw.{t}, {LANES * v}",
                  f"  %cp.{t} = getelementptr float, ptr %c, i64 %co.{t}"]
    lines += ["  br label %row", "row:", "  %r = phi i64 [0, %entry], [%r.next, %row.end]"]
    lines += [f"  %accr.{h}.{w}.{v} = phi <16 x float> [zeroinitializer, %entry], [%acc.{h}.{w}.{v}, %row.end]"
              for h, w, v in accs]
    lines += [f"  %ar = mul i64 %r, {row * ch}", f"  %br = mul i64 %r, {pairs(block) * packed_row}",
              "  br label %pair", "pair:", "  %k = phi i64 [0, %row], [%k.next, %pair]"]
    lines += [f"  %acck.{h}.{w}.{v} = phi <16 x float> [%accr.{h}.{w}.{v}, %row], [%acc.{h}.{w}.{v}, %pair]"
              for h, w, v in accs]
    lines += ["  %k2 = shl i64 %k, 1", "  %ak = add i64 %ar, %k2", f"  %bkk = mul i64 %k, {packed_row}",
              "  %bk = add i64 %br, %bkk"]
    for v in range(nv):
        lines += [f"  %bo.{v} = add i64 %bk, {2 * LANES * v}", f"  %bp.{v} = getelementptr i16, ptr %b, i64 %bo.{v}",
                  f"  %bv.{v} = load <32 x bfloat>, ptr %bp.{v}, align 2"]
    for h, w in pixels:
        t = f"{h}.{w}"
        lines += [f"  %ao.{t} = add i64 %ak, {a_at[h, w]}", f"  %ap.{t} = getelementptr i16, ptr %a, i64 %ao.{t}",
                  f"  %as.{t} = load i32, ptr %ap.{t}, align 2",
                  f"  %ai.{t} = insertelement <16 x i32> poison, i32 %as.{t}, i64 0",
                  f"  %ab.{t} = shufflevector <16 x i32> %ai.{t}, <16 x i32> poison, <16 x i32> zeroinitializer",
                  f"  %av.{t} = bitcast <16 x i32> %ab.{t} to <32 x bfloat>"]
        lines += [f"  %acc.{t}.{v} = call <16 x float> @{DPBF16}(<16 x float> %acck.{t}.{v}, <32 x bfloat> %av.{t}, "
                  f"<32 x bfloat> %bv.{v})" for v in range(nv)]
    lines += ["  %k.next = add i64 %k, 1", f"  %k.done = icmp eq i64 %k.next, {pairs(block)}",
              "  br i1 %k.done, label %row.end, label %pair", "row.end:", "  %r.next = add i64 %r, 1",
              f"  %r.done = icmp eq i64 %r.next, {block.kh}", "  br i1 %r.done, label %exit, label %row", "exit:"]
    lines += [f"  store <16 x float> %acc.{h}.{w}.{v}, ptr %cp.{h}.{w}.{v}, align 4" for h, w, v in accs]
    lines += ["  ret void", "}", f"declare <16 x float> @{DPBF16}(<16 x float>, <32 x bfloat>, <32 x bfloat>)"]
    return "\n".join(lines) + "\n"


def _impl(block: Block):
    """The implementation PrimFunc of ``block``: one call of its micro-kernel, imported where it is called."""
    from tvm.script import tirx as T

    rows, pixels, n_i, kh, groups, half = block.rows, block.pixels, block.cols, block.kh, block.groups, block.depth // 2
    span, channels = block.span, block.channels
    packed_row = 2 * block.packed
    b_strides = [pairs(block) * packed_row, half * packed_row, packed_row, 2, 1]  # dense packed weights
    ir, name = kernel_ir(block), symbol(block)

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sh = T.int32()
        sw = T.int32()
        A = T.match_buffer(a, (span, channels), "bfloat16", offset_factor=1, strides=[channels, 1])
        B = T.match_buffer(b, (kh, groups, half, n_i, 2), "bfloat16", offset_factor=1, strides=b_strides)
        C = T.match_buffer(c, (rows, pixels, n_i), "float32", offset_factor=1, strides=[sh, sw, 1])
        with T.sblock("root"):
            T.reads(C[0:rows, 0:pixels, 0:n_i], A[0:span, 0:channels], B[0:kh, 0:groups, 0:half, 0:n_i, 0:2])
            T.writes(C[0:rows, 0:pixels, 0:n_i])
            with T.attr(0, "pragma_import_llvm", ir):
                T.evaluate(T.call_extern(
                    "void", name, C.access_ptr("rw"), T.int64(sh), T.int64(sw),
                    T.tvm_access_ptr(T.type_annotation("uint16"), A.data, A.elem_offset, span * channels, 1),
                    T.tvm_access_ptr(T.type_annotation("uint16"), B.data, B.elem_offset, kh * groups * half * n_i * 2,
                                     1)))

    return impl


__all__ = ["LANES", "SHAPES", "gemm_width", "intrin_name", "kernel_ir", "names_any", "pairs",
           "register", "register_for", "shapes_for", "symbol"]
