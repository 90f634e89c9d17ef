"""Measurement pipeline benchmark (issue: decision space, safe build-and-measure).

Per-trial time split (ask, apply, build, run, framework overhead) and trials per minute of
autosearch on one tiny-YOLOv2 conv task, next to MetaSchedule's ``ms.tune_tir`` on the same task with
the same measurement settings (number/repeat/min_repeat_ms, cache flush, threads), once with its
default builder and once with a builder that skips the tensor-intrinsic import. All in one script,
one after the other (never two measurements at once).

    python -m experiments.bench_pipeline [--task 1x64x52x52->1x128x52x52/direct] [--trials 32] [--skip-default-builder]

Writes experiments/results/bench_pipeline.json and .md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from autosearch.frontend.importer import import_model
from autosearch.frontend.target import parse_target
from autosearch.measure.base import EvaluatorConfig
from autosearch.measure.local import LocalRunner
from autosearch.records import TuningLog
from autosearch.search.tuner import Tuner
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.metaschedule import tune_tir
from experiments.lib.tasks import TaskSpec, pick_task


def bench_autosearch(task, target, trials: int, batch: int, evaluator: EvaluatorConfig, strategy: str) -> dict:
    work = tempfile.mkdtemp(prefix="bench-as-")
    start = time.perf_counter()
    runner = LocalRunner(target=target, evaluator=evaluator)
    runner.warm_up()
    warm = time.perf_counter() - start
    with TuningLog(os.path.join(work, "log.jsonl")) as log:
        tuner = Tuner(tasks=[task], runner=runner, log=log, strategy=strategy, budget=trials, batch=batch, seed=1)
        t0 = time.perf_counter()
        summary = tuner.run()
        wall = time.perf_counter() - t0
    runner.close()
    setup = tuner.timing["setup"]  # space + strategy + baseline (reference) of the task, once per task
    loop = wall - setup
    build, run = runner.phase_secs["build"], runner.phase_secs["run"]
    parts = {"ask": tuner.timing["ask"], "apply": tuner.timing["apply"], "build": build, "run": run,
             "log": tuner.timing["log"], "tell": tuner.timing["tell"]}
    overhead = loop - build - run
    state = summary.states[0]
    shutil.rmtree(work, ignore_errors=True)
    return {
        "tool": f"autosearch ({strategy})", "trials": summary.trials, "wall_secs": wall, "loop_secs": loop,
        "setup_secs": setup, "worker_start_secs": warm,
        "trials_per_min": 60 * summary.trials / wall, "loop_trials_per_min": 60 * summary.trials / loop,
        "per_trial_secs": {k: v / summary.trials for k, v in parts.items()},
        "overhead_share": overhead / loop, "best_gflops": state.best_gflops,
        "baseline_ms": state.baseline.median * 1e3 if state.baseline and state.baseline.ok else None,
    }


def bench_metaschedule(task, target, trials: int, batch: int, evaluator: EvaluatorConfig, fast: bool) -> dict:
    work = tempfile.mkdtemp(prefix="bench-ms-")
    run = tune_tir(task.mod, target, work, trials, per_iter=batch, fast_builder=fast, evaluator=evaluator, seed=1)
    from autosearch.frontend.database_files import read_database

    contents = read_database(work)
    ok = [r for r in contents.records if r.ok]
    failed = len(contents.records) - len(ok)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "tool": f"ms.tune_tir ({'fast' if fast else 'default'} builder)", "trials": len(contents.records),
        "wall_secs": run.wall_secs, "trials_per_min": 60 * len(contents.records) / run.wall_secs,
        "failed_trials": failed, "best_gflops": task.flops / run.best_secs / 1e9 if ok else 0.0,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-yolov2")
    p.add_argument("--task", default="1x64x52x52->1x128x52x52/direct",
                   help="LAYER/ALGORITHM, index or name fragment (default: the direct conv 64->128 at 52x52, "
                        "0.40 GFLOP)")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--skip-default-builder", action="store_true")
    args = p.parse_args()
    target = parse_target(None)
    spec = TaskSpec.parse(f"{args.model}:{args.task}")
    task = pick_task(import_model(spec.model, target, layout=spec.layout).tasks, spec.which, layout=spec.layout)
    evaluator = EvaluatorConfig()
    rows = [bench_autosearch(task, target, args.trials, args.batch, evaluator, "random")]
    rows.append(bench_metaschedule(task, target, args.trials, args.batch, evaluator, fast=True))
    if not args.skip_default_builder:
        rows.append(bench_metaschedule(task, target, args.trials, args.batch, evaluator, fast=False))
    ours = rows[0]
    out = {"task": {"model": args.model, "index": task.index, "name": task.name, "gflop": task.gflop},
           "target": str(target), "evaluator": evaluator.to_json(), "rows": rows,
           "ratios": {r["tool"]: ours["trials_per_min"] / r["trials_per_min"] for r in rows[1:]}}
    write_json(results_path("bench_pipeline.json"), out)
    table = [[r["tool"], r["trials"], f"{r['wall_secs']:.1f}", f"{r['trials_per_min']:.1f}", f"{r['best_gflops']:.1f}",
              r.get("failed_trials", 0)] for r in rows]
    lines = [f"Task {task.index} of {args.model} ({task.name}, {task.gflop:.3f} GFLOP), {args.trials} trials, "
             f"batch {args.batch}, target {target}", "",
             markdown_table(["tool", "trials", "wall s", "trials/min", "best GFLOPS", "failed"], table)]
    split = ours["per_trial_secs"]
    lines += ["", "autosearch per-trial split (s): " + ", ".join(f"{k} {v:.3f}" for k, v in split.items())
              + f"; framework overhead {100 * ours['overhead_share']:.1f}% of the loop; task set-up "
              f"(space, strategy, untuned baseline) {ours['setup_secs']:.1f} s once",
              "", "throughput ratios (autosearch / MetaSchedule): "
              + ", ".join(f"{k}: {v:.2f}x" for k, v in out["ratios"].items())]
    write_text(results_path("bench_pipeline.md"), "\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
