"""How far behind the layout that won a ``--layout auto`` run had been along the way: can a run drop the other sooner?

The task scheduler drops an alternative more than ``BEHIND_LIMIT`` times behind its rival after the probes, and
otherwise only scales its gain down; a YOLOv8n run in fp32 on a Xeon spent 38-44% of its trials on the NCHW model
it lost by 1.7-1.9x. A tighter limit later in the run is safe only if the winner is never that far behind then.
This replays each log: after every trial, each layout's model total as the scheduler sees it
(:func:`autosearch.frontend.alternatives.layout_totals`: each task's best valid measurement, else its untuned
kernel), and reports the winner's largest lag (its total over the other's) after 10%, 25% and 50% of the trials,
beside the loser's final lag.

    python -m experiments.layout_lag experiments/results/user-*/log.jsonl.gz --out layout-lag
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from autosearch.frontend.alternatives import layout_totals, model_latency
from autosearch.records import LogContents, read_log
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_text

FRACTIONS = (0.1, 0.25, 0.5)


@dataclass(frozen=True)
class LayoutLag:
    """One ``--layout auto`` run: who won, by how much, and the winner's largest lag after each fraction."""

    run: str
    trials: int
    winner: str
    final_loser_lag: float  # the loser's total over the winner's at the end
    winner_lag: dict[float, float]  # fraction of the trials -> the winner's largest lag from there on


def totals_by_trial(contents: LogContents) -> list[tuple[int, dict[str, float]]]:
    """(trials so far, {layout: model seconds}) after each trial once both layouts' totals are known."""
    headers = contents.tasks
    untuned = {}
    for key in headers:
        baseline = contents.baseline(key)
        untuned[key] = baseline.result.median if baseline is not None and baseline.ok else None
    best: dict[str, float] = {}
    out = []
    for n, record in enumerate(contents.trials(), start=1):
        if record.ok:
            best[record.task_key] = min(best.get(record.task_key, math.inf), record.result.median)
        totals = layout_totals((task.get("lowering") or {}, int(task.get("weight", 1)),
                                model_latency(best.get(key), untuned.get(key))) for key, task in headers.items())
        if len(totals) == 2 and all(math.isfinite(v) for v in totals.values()):
            out.append((n, totals))
    return out


def layout_lag(contents: LogContents, run: str) -> LayoutLag | None:
    """The run's :class:`LayoutLag`; None for a log of one layout, or whose layouts were never both known."""
    series = totals_by_trial(contents)
    if not series:
        return None
    trials, final = len(contents.trials()), series[-1][1]
    winner = min(final, key=final.get)
    loser = next(layout for layout in final if layout != winner)

    def lag(totals: dict[str, float]) -> float:
        return totals[winner] / totals[loser]

    winner_lag = {f: max((lag(t) for n, t in series if n >= f * trials), default=math.nan) for f in FRACTIONS}
    return LayoutLag(run, trials, winner, 1.0 / lag(final), winner_lag)


def table(lags: Sequence[LayoutLag]) -> str:
    header = ["run", "trials", "winner", "loser behind at the end",
              *(f"winner's largest lag after {int(f * 100)}%" for f in FRACTIONS)]
    rows = [[x.run, x.trials, x.winner, f"{x.final_loser_lag:.2f}x",
             *(f"{x.winner_lag[f]:.2f}x" for f in FRACTIONS)] for x in lags]
    return markdown_table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("logs", nargs="+", help="tuning logs of --layout auto runs (.jsonl or .jsonl.gz)")
    p.add_argument("--out", help="write the table to experiments/results/OUT.md")
    args = p.parse_args(argv)
    lags = []
    for path in args.logs:
        found = layout_lag(read_log(path), os.path.basename(os.path.dirname(os.path.abspath(path))))
        if found is not None:
            lags.append(found)
    text = table(lags)
    print(text)
    if args.out:
        write_text(results_path(f"{args.out}.md"), text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
