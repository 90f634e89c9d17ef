"""How far behind the layout that won a ``--layout auto`` run had been along the way: can a run drop the other sooner?

The task scheduler drops an alternative more than ``BEHIND_LIMIT`` times behind its rival after the probes, and
otherwise only scales its gain down; a YOLOv8n run in fp32 on a Xeon spent 38-44% of its trials on the NCHW model
it lost by 1.7-1.9x. A tighter limit later in the run is safe only if the winner is never that far behind then.
This replays each log: after every trial, each layout's model total as the scheduler sees it
(:func:`autosearch.frontend.alternatives.layout_totals`: each task's best valid measurement, else its untuned
kernel), and reports the winner's largest lag (its total over the other's) after 10%, 25% and 50% of the trials,
beside the loser's final lag.

    python -m experiments.layout_lag experiments/results/user-*/log.jsonl.gz --out layout-lag

``--narrowing`` checks the scheduler's answer, a limit that narrows as the run goes
(:func:`autosearch.search.scheduler.layout_limit`): per run, the trials the losing layout took, how many of them came
picked while that limit would have dropped it (and the constant limit would not), and the winner's closest
call (its largest lag over the limit at that point, once the narrowing has begun: above 1 it would have been dropped
itself)::

    python -m experiments.layout_lag experiments/results/user-*/log.jsonl.gz --narrowing --out layout-lag-narrowing
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from autosearch.frontend.alternatives import layout_totals, model_latency, task_layouts
from autosearch.records import LogContents, read_log
from autosearch.search.estimates import untuned_latencies
from autosearch.search.scheduler import BEHIND_LIMIT, NARROWING, layout_limit
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
    loser_trials: int = 0  # trials of the tasks only the losing layout runs
    freed: int = 0  # of those, the ones picked while the narrowing limit, not the constant one, would have dropped it
    closest_call: float = math.nan  # the winner's largest lag over the narrowing limit, once it narrows


def totals_by_trial(contents: LogContents) -> list[tuple[int, dict[str, float]]]:
    """(trials so far, {layout: model seconds}) after each trial once both layouts' totals are known."""
    headers = contents.tasks
    untuned = untuned_latencies(contents)
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
    # losers[i]: trial i + 1 ran a task of the loser's alone; a trial is freed when, as it was picked (the totals
    # after the trial before it), the loser was further behind than the narrowing limit but not the constant one
    losers = [task_layouts((contents.tasks.get(r.task_key) or {}).get("lowering") or {}) == (loser,)
              for r in contents.trials()]
    before = dict(series)
    freed = 0
    for n, theirs in enumerate(losers, start=1):
        totals = before.get(n - 1)
        if theirs and totals is not None and layout_limit((n - 1) / trials) < 1.0 / lag(totals) <= BEHIND_LIMIT:
            freed += 1
    closest = max((lag(t) / layout_limit(n / trials) for n, t in series if n / trials > NARROWING[0]),
                  default=math.nan)
    return LayoutLag(run, trials, winner, 1.0 / lag(final), winner_lag, sum(losers), freed, closest)


def layer_calls(contents: LogContents) -> tuple[int, int]:
    """(layers tuned in two forms or more, those whose winning form the narrowing limit would have dropped): the
    same replay per layer (direct or Winograd, fp32 or bf16), each form at its best valid measurement, else its
    untuned kernel. Why the scheduler keeps a layer's forms to the constant limit."""
    trials = contents.trials()
    forms: dict[tuple, dict[str, str]] = {}
    for key, task in contents.tasks.items():
        lowering = task.get("lowering") or {}
        if "layer" in lowering:
            forms.setdefault((lowering["layer"], task_layouts(lowering)), {})[lowering["algorithm"]] = key
    untuned = untuned_latencies(contents)
    layers = dropped = 0
    for by_form in (f for f in forms.values() if len(f) > 1):
        keys, best, series = set(by_form.values()), {}, []
        for n, record in enumerate(trials, start=1):
            if record.task_key in keys and record.ok:
                best[record.task_key] = min(best.get(record.task_key, math.inf), record.result.median)
            latency = {form: model_latency(best.get(key), untuned.get(key)) for form, key in by_form.items()}
            if all(v is not None and math.isfinite(v) for v in latency.values()):
                series.append((n, latency))
        if not series:
            continue
        layers += 1
        winner = min(series[-1][1], key=series[-1][1].get)
        dropped += any(n / len(trials) > NARROWING[0] and t[winner] > layout_limit(n / len(trials)) * min(t.values())
                       for n, t in series)
    return layers, dropped


def table(lags: Sequence[LayoutLag]) -> str:
    header = ["run", "trials", "winner", "loser behind at the end",
              *(f"winner's largest lag after {int(f * 100)}%" for f in FRACTIONS)]
    rows = [[x.run, x.trials, x.winner, f"{x.final_loser_lag:.2f}x",
             *(f"{x.winner_lag[f]:.2f}x" for f in FRACTIONS)] for x in lags]
    return markdown_table(header, rows)


def narrowing_table(lags: Sequence[LayoutLag]) -> str:
    """Per run, what the narrowing limit would have changed; a last row sums them."""
    header = ["run", "trials", "winner", "loser behind at the end", "loser's trials", "of them while the narrowing "
              "limit would have dropped it", "winner's closest call (lag / limit)"]
    rows = [[x.run, x.trials, x.winner, f"{x.final_loser_lag:.2f}x", x.loser_trials, x.freed,
             f"{x.closest_call:.2f}"] for x in lags]
    rows.append([f"**{len(lags)} runs**", sum(x.trials for x in lags), "", "", sum(x.loser_trials for x in lags),
                 sum(x.freed for x in lags), f"{max((x.closest_call for x in lags), default=math.nan):.2f}"])
    return markdown_table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("logs", nargs="+", help="tuning logs of --layout auto runs (.jsonl or .jsonl.gz)")
    p.add_argument("--out", help="write the table to experiments/results/OUT.md")
    p.add_argument("--narrowing", action="store_true", help="what the scheduler's narrowing limit would have changed")
    args = p.parse_args(argv)
    lags, layers, dropped = [], 0, 0
    for path in args.logs:
        contents = read_log(path)
        found = layout_lag(contents, os.path.basename(os.path.dirname(os.path.abspath(path))))
        if found is not None:
            lags.append(found)
        if args.narrowing:
            counted = layer_calls(contents)
            layers, dropped = layers + counted[0], dropped + counted[1]
    text = table(lags)
    if args.narrowing:
        text = (narrowing_table(lags) + f"\n\nA layer's forms under the same limit: {layers} layers tuned in two forms "
                f"or more in these logs; the limit would have dropped the form that won in {dropped} of them.")
    print(text)
    if args.out:
        write_text(results_path(f"{args.out}.md"), text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
