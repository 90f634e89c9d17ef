"""Printing results: the per-task summary of a run (table + PNG)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from autosearch.plots import plot_tuning_curves
from autosearch.tuner import TuneSummary


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds and math.isfinite(seconds) else "-"


def print_run_summary(console: Console, summary: TuneSummary, *, log_path: str, png_path: str, title: str) -> None:
    """Per-task table (untuned vs best latency, GFLOPS, speedup, trials, failures), log path, PNG."""
    table = Table(title=f"{title}: {summary.trials} trials in {summary.elapsed / 60:.1f} min")
    for col in ("#", "task", "w", "untuned ms", "best ms", "GFLOPS", "speedup", "trials", "failed", "note"):
        table.add_column(col, justify="left" if col in ("task", "note") else "right")
    total_base = total_best = 0.0
    for s in summary.states:
        if not s.trials and s.baseline is None:
            continue
        base = s.baseline.median if s.baseline is not None and s.baseline.ok else math.nan
        best = s.best_latency
        if math.isfinite(base) and math.isfinite(best):
            total_base += base * s.task.weight
            total_best += best * s.task.weight
        table.add_row(str(s.task.index), s.task.name[:48], str(s.task.weight), _ms(base), _ms(best),
                      f"{s.best_gflops:.1f}" if s.best else "-", f"{s.speedup:.1f}x" if s.speedup else "-",
                      str(s.trials), str(s.failures), s.done)
    console.print(table)
    if total_best > 0:
        console.print(f"tuned tasks, weighted: {total_base * 1e3:.1f} ms untuned -> {total_best * 1e3:.2f} ms "
                      f"({total_base / total_best:.1f}x)")
    curves = {f"#{s.task.index} {s.task.name[:30]}": s.history for s in summary.states if s.history}
    if curves:
        plot_tuning_curves(curves, png_path, title=title)
        console.print(f"log: {log_path}\nplot: {png_path}")
    else:
        console.print(f"log: {log_path}")
