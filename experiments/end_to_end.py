"""Tune whole YOLO models, export the database, compile and report (issue: export/compile/report).

Runs the product's own commands, one model after the other:
``run --strategy optuna`` over all tasks -> ``export`` -> ``report`` (TVM untuned vs tuned vs ONNX
Runtime, same threads, each timed in its own process). Tables go to experiments/results/.

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

from experiments.lib.cli import autosearch
from experiments.lib.io import read_json, results_path, write_json


def cli(*args: str):
    return autosearch(*args, echo=True)


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
        cli("run", "--strategy", args.strategy, "--model", model, "--trials", trials, "--batch", str(args.batch),
            "--layout", layout, "--log", log, *(["--resume"] if args.resume and os.path.exists(log) else []))
        tune_secs = time.perf_counter() - start
        shutil.rmtree(db, ignore_errors=True)
        cli("export", "--log", log, "--out", db)
        cli("report", "--model", model, "--db", db, "--log", log, "--runs", str(args.runs),
            "--markdown", stem + "-report.md", "--plot", stem + "-report.png")
        summary[name] = {"trials": int(trials), "tuning_wall_secs": tune_secs, "strategy": args.strategy,
                         "layout": layout}
        write_json(summary_path, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
