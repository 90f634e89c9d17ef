"""What LLVM's -O3 buys the untuned kernels a run builds before its first trial, against -O2.

Before a task's first trial a run builds its unscheduled kernel (TVM's naive loop nest), computes the reference
output every candidate is checked against, and times it (the baseline). On the NHWC convolutions LLVM's -O3 took
4-5 s to compile such a kernel where -O2 took 0.2 s. This builds every task's unscheduled kernel both ways (the
target as a run has it, and the same target with ``opt-level`` 2), computes each one's reference and times it as a
run's baseline does (:class:`autosearch.measure.kernels.KernelRunner` in this process, one kernel at a time), and
compares::

    python -m experiments.baseline_build --model tiny-yolov2

Writes ``experiments/results/baseline-build-MODEL.{md,json}``: build seconds and untuned milliseconds of each
task both ways, and whether the two references are the same bytes. A few minutes.

Runs still build the baseline at the target's own level: -O2 kept every reference but lost the loop vectoriser on
a few kernels, whose untuned latency (what a run's estimate counts for a task it never tuned) then doubled
(docs/findings.md, tried and not kept).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.machine import describe, fingerprint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-yolov2")
    parser.add_argument("--opt-level", type=int, default=2, help="the level set against the target's own")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import tvm

    from autosearch import api
    from autosearch.frontend.target import target_to_json
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.kernels import KernelRunner, build
    from autosearch.measure.policy import MeasurePolicy

    model = api.load_tasks(args.model)
    target = target_to_json(model.target)
    ways = {"as run": target, f"opt-level {args.opt_level}": {**target, "opt-level": args.opt_level}}
    evaluator = MeasurePolicy(evaluator=EvaluatorConfig(), run_timeout=60.0).reference_evaluator()
    runner = KernelRunner()
    rows, table = [], []
    for task in model.tasks:
        row = {"task": task.name, "workload_key": task.workload_key, "gflop": task.flops / 1e9}
        references = {}
        for way, spec in ways.items():
            artifact, secs = build(tvm.ir.save_json(task.mod), spec)
            reply = runner.reference(f"{task.workload_key}-{way}", artifact, task.args, 0, evaluator)
            references[way] = reply["reference"]
            row[way] = {"build_s": secs, "untuned_ms": reply["median"] * 1e3}
        row["same_reference"] = len(set(references.values())) == 1
        rows.append(row)
        first, second = ways
        table.append([task.index, task.name[:48], fmt(row[first]["build_s"], 2), fmt(row[second]["build_s"], 2),
                      fmt(row[first]["untuned_ms"], 2), fmt(row[second]["untuned_ms"], 2),
                      "yes" if row["same_reference"] else "NO"])
    first, second = ways
    build_sum = [sum(r[w]["build_s"] for r in rows) for w in ways]
    ratio = [r[first]["untuned_ms"] / r[second]["untuned_ms"] for r in rows]
    table.append(["", "all tasks", fmt(build_sum[0], 1), fmt(build_sum[1], 1),
                  f"median ratio {fmt(statistics.median(ratio), 3)}",
                  f"range {fmt(min(ratio), 2)}-{fmt(max(ratio), 2)}",
                  f"{sum(r['same_reference'] for r in rows)} of {len(rows)}"])
    header = ["#", "task", f"build s, {first}", f"build s, {second}", f"untuned ms, {first}",
              f"untuned ms, {second}", "same reference"]
    machine = fingerprint(model.target)
    text = (f"# Untuned kernels of {args.model}: the target's LLVM level against opt-level {args.opt_level}\n\n"
            f"{describe(machine)}; `python -m experiments.baseline_build --model {args.model}`; each task's "
            f"unscheduled kernel built both ways, its reference computed and timed as a run's baseline (one kernel "
            f"at a time, in this process).\n\n" + markdown_table(header, table))
    out = args.out or f"baseline-build-{args.model}"
    write_text(results_path(f"{out}.md"), text + "\n")
    write_json(results_path(f"{out}.json"), {"machine": machine, "opt_level": args.opt_level, "tasks": rows})
    sys.stdout.write(text + "\n")
    return 0 if all(r["same_reference"] for r in rows) and np.isfinite(ratio).all() else 1


if __name__ == "__main__":
    sys.exit(main())
