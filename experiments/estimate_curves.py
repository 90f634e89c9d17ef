"""Runs side by side as their own estimates saw them: the model's estimated latency after N trials, per log.

Each log's curve is :func:`autosearch.search.estimates.estimate_curve` (what ``run``'s PNG draws: after each trial,
the faster layout's sum of its tasks' best latencies). Runs made in different spells of a shared VM differ in
speed, so each curve is also given relative to its own untuned model (the first point), which the spell moves
alike; the table gives both at fixed trial counts, and the PNG the estimates against trials.

    python -m experiments.estimate_curves --run "no known schedules=experiments/results/user-A/log.jsonl.gz" \\
        --run "known schedules=experiments/results/user-B/log.jsonl.gz" --out estimate-curves-tiny-yolov2
"""

from __future__ import annotations

import argparse
import math
import os

from autosearch.records import read_log
from autosearch.search.estimates import EstimatePoint, estimate_curve
from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_text

CHECKPOINTS = (40, 80, 120, 160, 200, 300, 400)


def at(curve: list[EstimatePoint], trials: int) -> EstimatePoint | None:
    """The estimate once ``trials`` trials had finished (None if the run had fewer)."""
    if not curve or curve[-1].trials < trials:
        return None
    return [p for p in curve if p.trials <= trials][-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", required=True, metavar="LABEL=LOG", help="a run's label and its log")
    ap.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)), help="trial counts of the table")
    ap.add_argument("--out", required=True, help="the name of the table and PNG under experiments/results/")
    args = ap.parse_args(argv)
    curves = {}
    for spec in args.run:
        label, _, path = spec.partition("=")
        if not path or not os.path.exists(path):
            raise SystemExit(f"--run {spec!r}: give LABEL=LOG with an existing log")
        curves[label] = estimate_curve(read_log(path))
    checkpoints = [int(x) for x in args.checkpoints.split(",")]
    rows = []
    for label, curve in curves.items():
        start = curve[0].latency if curve else math.nan
        row = [label, fmt(start * 1e3, 0)]
        for n in checkpoints:
            point = at(curve, n)
            row.append("-" if point is None else f"{point.latency * 1e3:.1f} ({start / point.latency:.0f}x, "
                                                 f"{point.seconds / 60:.1f} min)")
        rows.append(row)
    table = markdown_table(["run", "untuned ms", *(f"after {n} trials" for n in checkpoints)], rows)
    note = ("Estimated model ms after N trials (the faster layout's sum of its tasks' best latencies); in brackets "
            "its speed-up over the run's own untuned model and the minutes the run had taken.")
    write_text(results_path(f"{args.out}.md"), f"{note}\n\n{table}\n")
    print(table)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, curve in curves.items():
        start = curve[0].latency
        axes[0].step([p.trials for p in curve], [p.latency * 1e3 for p in curve], where="post", label=label)
        axes[1].step([p.seconds / 60 for p in curve], [start / p.latency for p in curve], where="post", label=label)
    axes[0].set(xlabel="trials", ylabel="estimated model ms", yscale="log", title="estimate against trials")
    axes[1].set(xlabel="minutes", ylabel="speed-up over its untuned model", title="against minutes")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(results_path(f"{args.out}.png"), dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
