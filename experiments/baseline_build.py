"""The untuned kernels a run builds and times before its first trial: LLVM's level for them, and their first call.

Before a task's first trial a run builds its unscheduled kernel (TVM's naive loop nest), computes the reference
output every candidate is checked against, and times it (the baseline). This builds every task's unscheduled kernel
two ways (the target as a run has it, and the same target with ``opt-level`` 2), calls each twice on the same
arguments (the first call computes the reference) and compares, one kernel at a time, in this process::

    python -m experiments.baseline_build --model tiny-yolov2

Writes ``experiments/results/baseline-build-MODEL.{md,json}``: build seconds both ways, the first and second calls
at the target's level, the second at -O2, and whether the outputs are the same bytes. A few minutes.

What it decided: a slow untuned kernel is timed by its first call (``KernelRunner.reference`` in
:mod:`autosearch.measure.kernels`: the first and second calls agree within their noise); the build stays at the
target's own level: -O2 kept every output but lost the loop vectoriser on a few kernels, whose untuned latency
(what a run's estimate counts for a task it never tuned) then doubled (docs/findings.md, tried and not kept).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.machine import describe, fingerprint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-yolov2")
    parser.add_argument("--opt-level", type=int, default=2, help="the LLVM level set against the target's own")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import tvm

    from autosearch import api
    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import build, make_inputs
    from autosearch.measure.prepack import unpack_artifact

    model = api.load_tasks(args.model)
    target = target_to_json(model.target)
    ways = {"as run": target, f"opt-level {args.opt_level}": {**target, "opt-level": args.opt_level}}
    dev = tvm.cpu()
    rows, table = [], []
    for task in model.tasks:
        row = {"task": task.name, "workload_key": task.workload_key, "gflop": task.flops / 1e9}
        outputs = {}
        for way, spec in ways.items():
            artifact, secs = build(tvm.ir.save_json(task.mod), spec)
            library, _ = unpack_artifact(artifact)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "kernel.so")
                with open(path, "wb") as fh:
                    fh.write(library)
                func = tvm.runtime.load_module(path)["main"]
            arrays = [tvm.runtime.tensor(a, dev) for a in make_inputs(task.args, 0)]
            calls = []
            for _ in range(2):
                clock = time.perf_counter()
                func(*arrays)
                dev.sync()
                calls.append(time.perf_counter() - clock)
                if not outputs.get(way):
                    outputs[way] = b"".join(a.numpy().tobytes() for a in arrays)
            row[way] = {"build_s": secs, "first_ms": calls[0] * 1e3, "second_ms": calls[1] * 1e3}
        row["same_outputs"] = len(set(outputs.values())) == 1
        rows.append(row)
        first, second = ways
        table.append([task.index, task.name[:48], fmt(row[first]["build_s"], 2), fmt(row[second]["build_s"], 2),
                      fmt(row[first]["first_ms"], 2), fmt(row[first]["second_ms"], 2), fmt(row[second]["second_ms"], 2),
                      "yes" if row["same_outputs"] else "NO"])
    first, second = ways
    build_sum = [sum(r[w]["build_s"] for r in rows) for w in ways]
    ratio = [r[first]["second_ms"] / r[second]["second_ms"] for r in rows]
    slow = [r[first]["first_ms"] / r[first]["second_ms"] for r in rows if r[first]["second_ms"] > 100]
    table.append(["", "all tasks", fmt(build_sum[0], 1), fmt(build_sum[1], 1),
                  f"first / second over 100 ms: median {fmt(statistics.median(slow), 3)}, "
                  f"{fmt(min(slow), 3)}-{fmt(max(slow), 3)}", "",
                  f"{first} / {second}: median {fmt(statistics.median(ratio), 3)}, {fmt(min(ratio), 2)}-"
                  f"{fmt(max(ratio), 2)}", f"{sum(r['same_outputs'] for r in rows)} of {len(rows)}"])
    header = ["#", "task", f"build s, {first}", f"build s, {second}", f"first call ms, {first}",
              f"second call ms, {first}", f"second call ms, {second}", "same outputs"]
    machine = fingerprint(model.target)
    text = (f"# Untuned kernels of {args.model}: the target's LLVM level against opt-level {args.opt_level}\n\n"
            f"{describe(machine)}; `python -m experiments.baseline_build --model {args.model}`; each task's "
            f"unscheduled kernel built both ways and called twice on the same arguments (one kernel at a time, in this "
            f"process; 2 threads).\n\n" + markdown_table(header, table))
    out = args.out or f"baseline-build-{args.model}"
    write_text(results_path(f"{out}.md"), text + "\n")
    write_json(results_path(f"{out}.json"), {"machine": machine, "opt_level": args.opt_level, "tasks": rows})
    sys.stdout.write(text + "\n")
    return 0 if all(r["same_outputs"] for r in rows) and np.isfinite(ratio).all() else 1


if __name__ == "__main__":
    sys.exit(main())
