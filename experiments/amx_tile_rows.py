"""Whether an AMX tile multiply of fewer rows is cheaper: ``tdpbf16ps`` timed with its A and C tiles configured
with 16, 13, 10 and 8 rows.

A short image row (13 or 20 pixels) fills part of a 16-row pixel tile of the flattened convolution
(:mod:`autosearch.tensor_units.conv`); configuring the tiles with as many rows as the row has pixels would only pay
if a multiply of fewer rows took less time. One thread runs a loop of ``--iterations`` x four independent tile
multiplies (four accumulators, two A tiles, two B tiles), for each row count in turn, taking turns over ``--rounds``
so a slow spell of the machine meets every count::

    python -m experiments.amx_tile_rows

Writes ``experiments/results/amx-tile-rows.md`` (ns per multiply and per row, the CPU named). Needs AMX-BF16.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from autosearch.frontend.target import cpu_model, parse_target
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_text

ROWS = (16, 13, 10, 8)


def kernel(rows: int, iterations: int):
    """The timed PrimFunc: the tile configuration (A and C tiles of ``rows`` rows, B tiles of 16), four
    accumulators zeroed, the operands loaded once, then ``iterations`` x four multiplies, the accumulators stored."""
    from tvm.script import tirx as T

    low = rows * 0x01010101  # rows of tiles 0-3 (the accumulators), one byte each
    high = rows | (rows << 8) | (16 << 16) | (16 << 24)  # tiles 4-5 (A) and 6-7 (B)

    @T.prim_func(s_tir=True)
    def main(a: T.handle, b: T.handle, c: T.handle):
        A = T.match_buffer(a, (32, 32), "uint16")
        B = T.match_buffer(b, (16, 32), "uint16")
        C = T.match_buffer(c, (64, 16), "float32")
        cfg = T.decl_buffer((16,), "uint32", scope="local")
        for w in T.unroll(16):
            cfg[w] = T.if_then_else(w == 0, T.uint32(1), T.if_then_else(
                w >= 4 and w < 8, T.uint32(0x00400040), T.if_then_else(
                    w == 12, T.uint32(low), T.if_then_else(w == 13, T.uint32(high), T.uint32(0)))))
        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.ldtilecfg", cfg.access_ptr("r")))
        for t in T.unroll(4):
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tilezero", T.uint8(t)))
        for t in T.unroll(2):
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tileloadd64", T.uint8(4 + t),
                                          A.access_ptr("r", offset=t * 16 * 32), T.int64(64)))
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tileloadd64", T.uint8(6 + t), B.access_ptr("r"),
                                          T.int64(64)))
        for _ in range(iterations):
            for t in T.unroll(4):
                T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tdpbf16ps", T.uint8(t), T.uint8(4 + t // 2),
                                              T.uint8(6 + t % 2)))
        for t in T.unroll(4):
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tilestored64", T.uint8(t),
                                          C.access_ptr("w", offset=t * 16 * 16), T.int64(64)))
        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tilerelease"))

    return main


def measure(*, iterations: int, rounds: int) -> dict[int, float]:
    """Nanoseconds per tile multiply for each row count (the median over the rounds)."""
    import tvm

    from autosearch.tensor_units.amx import request_permission
    from autosearch.tensor_units.cpu import has_amx_bf16

    target = parse_target(None)
    if not has_amx_bf16(target) or not request_permission():
        raise SystemExit("this CPU has no AMX-BF16 (or the kernel refused the tile state)")
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.zeros(shape, dtype), dev)
            for shape, dtype in (((32, 32), "uint16"), ((16, 32), "uint16"), ((64, 16), "float32"))]
    timers = {rows: tvm.compile(tvm.IRModule({"main": kernel(rows, iterations)}), target=target).mod.time_evaluator(
        "main", dev, number=3, repeat=1) for rows in ROWS}
    seen: dict[int, list[float]] = {rows: [] for rows in ROWS}
    for _ in range(rounds):
        for rows, timer in timers.items():
            seen[rows].append(timer(*args).results[0] / (4 * iterations) * 1e9)
    return {rows: statistics.median(ns) for rows, ns in seen.items()}


def table(ns: dict[int, float]) -> str:
    rows = [(r, f"{t:.2f}", f"{t / r:.3f}", f"{t / ns[16]:.2f}") for r, t in ns.items()]
    return markdown_table(["tile rows", "ns per tdpbf16ps", "ns per row", "vs 16 rows"], rows, align="rrrr")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=200_000, help="loop trips of four multiplies per call")
    ap.add_argument("--rounds", type=int, default=7, help="turns over the row counts")
    ap.add_argument("--out", default="amx-tile-rows.md", help="under experiments/results/")
    args = ap.parse_args(argv)
    ns = measure(iterations=args.iterations, rounds=args.rounds)
    from autosearch.tensor_units.cpu import host_flags

    flags = ", ".join(sorted(f for f in host_flags() if f.startswith(("amx", "avx512_bf16"))))
    text = (f"**AMX tile multiply by tile rows** ({cpu_model()}; {flags}; one thread; {args.iterations:,} x 4 "
            f"`tdpbf16ps` per call, medians of {args.rounds} rounds)\n\n{table(ns)}\n")
    print(text)
    write_text(results_path(args.out), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
