"""A tuned model's kernels in the flow of a forward pass against the same calls alone: what the pass costs beyond
the sum of its kernels as a tuner times them, and whether the code, the VM or the caches make the difference.

``layer_profile`` found YOLOv8n's AMX convolutions running 1.14-1.17x their tuned times in the model. Here the
model's own calls are captured from one pass (each kernel with the tensors the VM gave it) and timed in five ways,
taking turns in rounds so that a slow spell of the machine hits every way alike::

    python -m experiments.in_flow --model yolov8n --db experiments/results/user-yolov8n-15min-xeon-amx-v10/db \\
        --out in-flow-yolov8n-xeon-amx

- **the pass**: the Relax VM's ``main``, as ``report`` times it;
- **replayed**: the captured kernel calls run in the pass's order from Python, no VM between them (each call timed);
- **alone, warm**: each call repeated on its own tensors, the median of each summed (a tuner's warm repeats);
- **alone, flushed**: each call after every one of its arguments is evicted from the caches (``clflushopt``);
- **alone, after a dirty 8 MiB**: each call after this thread wrote a buffer larger than a core's L2, which leaves
  the caches full of modified lines that the kernel's own reads must first write back.

Writes ``experiments/results/OUT.md`` / ``.json`` / ``.png``: the five totals per round and their medians, and the
kernels that lose most in the flow against alone, warm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import host_label

WAYS = ("the pass", "replayed", "alone, warm", "alone, flushed", "alone, after a dirty 8 MiB")
DIRTY_BYTES = 8 << 20  # more than a core's L2 on every CPU measured (1-4 MiB)


class Calls:
    """One forward pass of a compiled model, its kernel calls captured (symbol, function, arguments) in order."""

    def __init__(self, model: str, db: str, inputs: dict[str, np.ndarray], library: str) -> None:
        import tvm

        import autosearch
        from autosearch.deploy.artifact import load_model

        autosearch.compile(model, db, library)
        self.model = load_model(library)
        self.inputs = [tvm.runtime.tensor(v, tvm.cpu()) for v in inputs.values()]
        for _ in range(3):  # the weights' first touch, the workspace
            self.run()
        captured: list[tuple[str, Callable, list]] = []

        def instrument(func, symbol, before_run, ret_value, *args):
            if before_run and not symbol.startswith("vm."):  # the VM's builtins (allocations) are not kernels
                captured.append((symbol, func, list(args)))
            return 0  # VMInstrumentReturnKind.NO_OP

        self.model.vm.set_instrument(tvm.runtime.convert(instrument))
        try:
            self.run()
        finally:
            self.model.vm.set_instrument(None)
        self.calls = captured
        from autosearch.measure.flush import flush_function

        self._flush = tvm.get_global_func(flush_function())
        self._first = tvm.runtime.tensor(np.zeros(1, "float32"), tvm.cpu())  # the flush leaves its first argument
        self._dirty = np.zeros(DIRTY_BYTES, np.uint8)

    def run(self) -> None:
        self.model(*self.inputs)

    def flush(self, args: list) -> None:
        self._flush(self._first, *args)

    def dirty(self) -> None:
        self._dirty += 1  # read and write every line: the caches end full of modified lines

    def the_pass(self) -> tuple[float, list[float]]:
        started = time.perf_counter()
        self.run()
        return time.perf_counter() - started, []

    def replayed(self) -> tuple[float, list[float]]:
        each = []
        for _, func, args in self.calls:
            started = time.perf_counter()
            func(*args)
            each.append(time.perf_counter() - started)
        return sum(each), each

    def alone(self, before: Callable[[list], None] | None, repeats: int) -> tuple[float, list[float]]:
        each = []
        for _, func, args in self.calls:
            times = []
            for _ in range(repeats):
                if before is not None:
                    before(args)
                started = time.perf_counter()
                func(*args)
                times.append(time.perf_counter() - started)
            each.append(statistics.median(times))
        return sum(each), each


def measure(calls: Calls, *, rounds: int, passes: int, repeats: int) -> dict:
    """Per way, its total milliseconds in each round (the median of ``passes`` passes; alone: the sum of each call's
    median of ``repeats``) and each call's milliseconds (median over rounds); the ways take turns, the order
    reversed every other round."""
    from autosearch.deploy.timing import turn_order

    ways: dict[str, Callable[[], tuple[float, list[float]]]] = {
        "the pass": calls.the_pass,
        "replayed": calls.replayed,
        "alone, warm": lambda: calls.alone(None, repeats),
        "alone, flushed": lambda: calls.alone(calls.flush, repeats),
        "alone, after a dirty 8 MiB": lambda: calls.alone(lambda args: calls.dirty(), repeats),
    }
    totals: dict[str, list[float]] = {w: [] for w in WAYS}
    per_call: dict[str, list[list[float]]] = {w: [] for w in WAYS}
    for r in range(rounds):
        for way in turn_order(list(WAYS), r):
            n = passes if way in ("the pass", "replayed") else 1
            results = [ways[way]() for _ in range(n)]
            totals[way].append(statistics.median(t for t, _ in results) * 1e3)
            if results[0][1]:
                per_call[way].append([statistics.median(e[i] for _, e in results) * 1e3
                                      for i in range(len(calls.calls))])
    each = {w: [statistics.median(r[i] for r in rows) for i in range(len(calls.calls))]
            for w, rows in per_call.items() if rows}
    return {"totals": totals, "each": each, "symbols": [s for s, _, _ in calls.calls]}


def kernels_table(out: dict, top: int) -> str:
    """The kernels whose calls lose most in the flow (replayed) against alone, warm, summed per symbol."""
    sums: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for i, symbol in enumerate(out["symbols"]):
        row = sums.setdefault(symbol, {})
        counts[symbol] = counts.get(symbol, 0) + 1
        for way, values in out["each"].items():
            row[way] = row.get(way, 0.0) + values[i]
    ranked = sorted(sums, key=lambda s: -(sums[s]["replayed"] - sums[s]["alone, warm"]))[:top]
    ways = [w for w in WAYS if w in out["each"]]
    rows = [[s[:70], counts[s], *(fmt(sums[s][w], 3) for w in ways),
             f"{sums[s]['replayed'] / sums[s]['alone, warm']:.2f}x"] for s in ranked]
    return markdown_table(["kernel", "calls", *(f"{w} ms" for w in ways), "replayed / alone, warm"], rows,
                          align="lr" + "r" * (len(ways) + 1))


def totals_table(out: dict) -> str:
    totals = out["totals"]
    rounds = len(totals[WAYS[0]])
    warm = statistics.median(totals["alone, warm"])
    rows = [[w, *(fmt(t, 3) for t in totals[w]), f"**{fmt(statistics.median(totals[w]), 3)}**",
             f"{statistics.median(totals[w]) / warm:.2f}x"] for w in WAYS]
    return markdown_table(["way", *(f"round {r + 1} ms" for r in range(rounds)), "median ms", "/ alone, warm"], rows,
                          align="l" + "r" * (rounds + 2))


def plot(out: dict, path: str, title: str) -> None:
    from autosearch.plots import figure, save

    fig, axes = figure(size=(8, 3.0), grid="x")
    ax = axes[0][0]
    medians = [statistics.median(out["totals"][w]) for w in WAYS]
    ax.barh(list(WAYS), medians, color=["C0", "C0", "C2", "C3", "C1"])
    for y, ms in enumerate(medians):
        ax.text(ms, y, f" {ms:.2f}", va="center", fontsize=8)
    ax.set_xlabel("ms per forward pass (kernels only; medians over rounds)")
    ax.set_title(title, fontsize=8)
    ax.invert_yaxis()
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="built-in model or .onnx")
    p.add_argument("--db", required=True, help="the tuned database (export's output)")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md, .json and .png")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="the ways take turns in this many rounds")
    p.add_argument("--passes", type=int, default=30, help="passes per round of the pass and of the replay")
    p.add_argument("--repeats", type=int, default=20, help="repeats of each call alone, per round")
    p.add_argument("--top", type=int, default=12, help="kernels listed")
    args = p.parse_args(argv)
    if min(args.threads, args.rounds, args.passes, args.repeats) < 1:
        p.error("--threads, --rounds, --passes and --repeats must be at least 1")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool

    from autosearch.frontend.importer import load_onnx, resolve_input_shapes

    name, proto = load_onnx(args.model)
    rng = np.random.default_rng(0)
    inputs = {k: rng.uniform(0, 1, s).astype("float32") for k, s in resolve_input_shapes(proto, {}).items()}
    print(f"building {name} from {args.db} ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        calls = Calls(args.model, args.db, inputs, os.path.join(tmp, "model.so"))
        print(f"{len(calls.calls)} kernel calls a pass; {args.rounds} rounds ...", file=sys.stderr, flush=True)
        out = measure(calls, rounds=args.rounds, passes=args.passes, repeats=args.repeats)
    title = f"{name}: kernels in the flow and alone, {args.threads} threads ({host_label()})"
    caption = f"{name}: kernels in the flow and alone, {args.threads} threads\n{host_label()}"
    text = (f"**{title}**; database `{args.db}`; {len(out['symbols'])} kernel calls a pass, the ways taking turns in "
            f"{args.rounds} rounds\n\n{totals_table(out)}\n\n**The kernels that lose most in the flow** (each call's "
            f"median over the rounds, summed per kernel)\n\n{kernels_table(out, args.top)}\n")
    base = results_path(args.out)
    publish(base, data={"model": name, "db": args.db, "threads": args.threads, "host": host_label(), **out},
            text=text, plot=lambda path: plot(out, path, caption))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
