"""Figures several experiments draw, on :mod:`autosearch.plots`' figure set-up."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def profile_points(ratios: Sequence[float], xs: Sequence[float]) -> list[float]:
    """A performance profile (Dolan and Moré): for each x, the share of tasks whose ratio to the best method
    (>= 1; ``inf`` where the method has no result) is at most x."""
    r = np.asarray(ratios, dtype=np.float64)
    return [float((r <= x).mean()) if r.size else math.nan for x in xs]


def performance_profile(ax, ratios: Mapping[str, Sequence[float]], *, x_max: float | None = None,
                        title: str = "") -> None:
    """Draw one step line per method: share of tasks within x of the best method, against x."""
    finite = [v for rs in ratios.values() for v in rs if math.isfinite(v)]
    top = x_max or max(2.0, 1.05 * max(finite, default=2.0))
    xs = np.linspace(1.0, top, 400)
    for label, rs in ratios.items():
        ax.step(xs, profile_points(rs, xs), where="post", label=label, linewidth=1.4)
    ax.set_xlim(1.0, top)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("x: within this factor of the best method's GFLOPS")
    ax.set_ylabel("share of tasks")
    if title:
        ax.set_title(title, fontsize=10)


def step_curves(ax, curves: Mapping[str, Sequence[float]], *, xlabel: str = "trials",
                ylabel: str = "best GFLOPS so far") -> None:
    """Best-so-far curves (one value per trial), one line per label."""
    for label, ys in curves.items():
        if len(ys):
            ax.step(range(1, len(ys) + 1), ys, where="post", label=label, linewidth=1.3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
