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
           grid: Literal["both", "x", "y", "none"] = "both") -> tuple[Any, Any]:
    """A new figure of ``size`` inches and its axes as a (rows x cols) array, each with a light grid."""
    fig, axes = pyplot().subplots(rows, cols, figsize=size, dpi=DPI, squeeze=False)
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


def plot_tuning_curves(curves: dict[str, Sequence[tuple[int, float]]], path: str, *, title: str = "") -> str:
    """Best-so-far GFLOPS against trials, one line per task; returns the path written."""
    fig, axes = figure()
    ax = axes[0, 0]
    for label, points in curves.items():
        if not points:
            continue
        xs, ys = zip(*points)
        ax.step(xs, ys, where="post", label=label, linewidth=1.5)
    ax.set_xlabel("trials of the task")
    ax.set_ylabel("best GFLOPS so far")
    ax.set_title(title or "Tuning progress")
    if len(curves) <= 20:
        ax.legend(fontsize=7, loc="lower right")
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
