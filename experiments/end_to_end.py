"""Tune whole YOLO models, export the database, compile and report (issue: export/compile/report).

Runs the product through its Python API, one model after the other: ``autosearch.tune`` (``run --strategy
optuna``) over all tasks -> ``autosearch.export`` -> ``autosearch.report`` (TVM untuned vs tuned vs ONNX
Runtime, same threads, each timed in its own process), what the CLI's commands do and print. Tables go to
experiments/results/.

    python -m experiments.end_to_end --models tiny-yolov2:1200,yolov8n:2400:NHWC [--strategy optuna]

``MODEL:TRIALS[:LAYOUT]``: the conv2d layout of the lowering (``run --layout``, default NCHW); a non-default
layout's files are named ``e2e-MODEL-LAYOUT*``, so both layouts' results can sit side by side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import autosearch
from experiments.lib.io import read_json, results_path, write_json


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="tiny-yolov2:1200,yolov8n:2400:NHWC", help="MODEL:TRIALS[:LAYOUT],...")
    p.add_argument("--strategy", default="optuna")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--resume", action="store_true", help="continue the logs of an interrupted run")
    args = p.parse_args()
    summary_path = results_path("end_to_end.json")
    summary = read_json(summary_path) if os.path.exists(summary_path) else {}  # one model at a time: keep the others
    for spec in args.models.split(","):
        model, trials, *rest = spec.split(":")
        layout = rest[0].upper() if rest else "NCHW"
        name = model if layout == "NCHW" else f"{model}-{layout.lower()}"
        stem = results_path(f"e2e-{name}")
        log, db = stem + ".jsonl", stem + "-db"
        if not args.resume:
            for path in (log,):
                if os.path.exists(path):
                    os.unlink(path)
        start = time.perf_counter()
        run = autosearch.tune(model, strategy=args.strategy, trials=int(trials), batch=args.batch, layout=layout,
                              log=log, resume=args.resume and os.path.exists(log))
        tune_secs = time.perf_counter() - start
        print(f"{name}: {run.trials} trials in {tune_secs / 60:.1f} min, tuned tasks {run.untuned_secs * 1e3:.1f} ms "
              f"untuned -> {run.tuned_secs * 1e3:.2f} ms", flush=True)
        if run.interrupted:
            return 130
        shutil.rmtree(db, ignore_errors=True)
        autosearch.export(log, db)
        report = autosearch.report(model, db, log=log, runs=args.runs, markdown=stem + "-report.md",
                                   plot=stem + "-report.png", on_message=lambda line: print(line, flush=True))
        print(", ".join(f"{runtime} {ms:.2f} ms" for runtime, ms in report.median_ms.items()), flush=True)
        summary[name] = {"trials": int(trials), "tuning_wall_secs": tune_secs, "strategy": args.strategy,
                         "layout": layout}
        write_json(summary_path, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
