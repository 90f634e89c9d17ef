"""PNG figures for people, and the one plotting set-up every figure of the project uses.

:func:`figure` and :func:`save` are what every module and ``experiments/`` script draws with: the
headless backend is chosen before pyplot is first imported (tuning machines have no display), and all
figures share one size unit, grid, layout and resolution. Drawing on the axes stays with the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

DPI = 110  # dots per inch of every PNG


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (writes files, needs no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(rows: int = 1, cols: int = 1, *, size: tuple[float, float] = (8.0, 5.0),
           grid: Literal["both", "x", "y", "none"] = "both",
           heights: Sequence[float] | None = None) -> tuple[Any, Any]:
    """A new figure of ``size`` inches and its axes as a (rows x cols) array, each with a light grid; ``heights``: the
    rows' relative heights (equal by default), for panels of unequal content."""
    fig, axes = pyplot().subplots(rows, cols, figsize=size, dpi=DPI, squeeze=False,
                                  gridspec_kw={"height_ratios": list(heights)} if heights else None)
    if grid != "none":
        for ax in axes.flat:
            ax.grid(True, axis=grid, alpha=0.3)
    return fig, axes


def save(fig, path: str, *, rect: tuple[float, float, float, float] | None = None) -> str:
    """Lay out (inside ``rect``, figure coordinates, when room is kept for a legend or title), write the
    PNG, free the figure; returns ``path``."""
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def plot_run(curve: Sequence[Any], shares: Sequence[Any], path: str, *, title: str = "", top: int = 10,
             final: float | None = None, final_label: str = "export's model") -> str:
    """A run at a glance: the model's estimated latency against minutes and against trials
    (:func:`autosearch.search.estimates.estimate_curve`), and the tasks' shares of the final estimate
    (:func:`autosearch.search.estimates.task_shares`, the ``top`` largest, the rest as one bar); returns the path
    written. ``final`` (seconds), drawn as a point at the curve's end: the estimate of the model export keeps, which
    the curve cannot hold (the finalists re-timed, the layout transforms between layers timed after the search)."""
    fig, axes = figure(1, 3, size=(18.0, 5.0))
    ms = [p.latency * 1e3 for p in curve]
    for ax, xs, label in ((axes[0, 0], [p.seconds / 60 for p in curve], "minutes"),
                          (axes[0, 1], [p.trials for p in curve], "trials")):
        ax.step(xs, ms, where="post", linewidth=1.8, color="#2a7ab9", label="sum of the best trials")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("estimated model latency (ms, log)")
        if ms:
            ax.annotate(f"{ms[-1]:.3g} ms", (xs[-1], ms[-1]), xytext=(-4, 6), textcoords="offset points", ha="right")
        if ms and final is not None:
            ax.plot([xs[-1]], [final * 1e3], marker="D", linestyle="none", color="#c0392b",
                    label=f"{final_label}: {final * 1e3:.3g} ms")
            ax.legend(loc="upper right", fontsize=8)
    axes[0, 0].set_title(title or "Tuning progress")
    axes[0, 1].set_title("the sum over tasks of weight x best latency")
    ax = axes[0, 2]
    total = sum(s.seconds for s in shares) or 1.0
    shown = list(shares[:top])
    labels = [s.name[:40] for s in shown] + (["other tasks"] if len(shares) > top else [])
    values = [100 * s.seconds / total for s in shown] + (
        [100 * sum(s.seconds for s in shares[top:]) / total] if len(shares) > top else [])
    ax.barh(labels[::-1], values[::-1], color="#e07b39")
    ax.set_xlabel("share of the final estimate (%)")
    ax.set_title("where the model's time goes")
    ax.tick_params(axis="y", labelsize=7)
    return save(fig, path)


@dataclass(frozen=True)
class Bars:
    """One panel of :func:`plot_bars`: a value per label (NaN: no bar), with optional error bars."""

    values: Sequence[float]
    ylabel: str
    log_scale: bool = False
    errors: Sequence[float] | None = None


def plot_bars(labels: Sequence[str], panels: Sequence[Bars], path: str, *, title: str) -> str:
    """Bar charts side by side over the same labels (e.g. end-to-end latency and peak memory: untuned vs tuned
    vs ONNX Runtime); returns the path written."""
    fig, axes = figure(1, len(panels), size=(7.0 * len(panels), 4.5), grid="y")
    colors = ["#b0b0b0", "#2a7ab9", "#e07b39", "#5aa05a", "#9467bd"][: len(labels)]
    for ax, panel in zip(axes[0], panels):
        bars = ax.bar(labels, panel.values, yerr=panel.errors, capsize=4, color=colors)
        for i, (bar, value) in enumerate(zip(bars, panel.values)):
            if not math.isfinite(value):
                continue
            top = bar.get_height() + (panel.errors[i] if panel.errors is not None else 0.0)  # above the error bar
            ax.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, top), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=9)
        if panel.log_scale:
            ax.set_yscale("log")
        ax.set_ylabel(panel.ylabel)
    fig.suptitle(title)
    return save(fig, path)
