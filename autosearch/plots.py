"""PNG figures for people: tuning curves per task, and bar charts of end-to-end latency."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_tuning_curves(curves: dict[str, Sequence[tuple[int, float]]], path: str, *, title: str = "") -> str:
    """Best-so-far GFLOPS against trials, one line per task; returns the path written."""
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for label, points in curves.items():
        if not points:
            continue
        xs, ys = zip(*points)
        ax.step(xs, ys, where="post", label=label, linewidth=1.5)
    ax.set_xlabel("trials of the task")
    ax.set_ylabel("best GFLOPS so far")
    ax.set_title(title or "Tuning progress")
    ax.grid(True, alpha=0.3)
    if len(curves) <= 20:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_bars(labels: Sequence[str], values: Sequence[float], path: str, *, ylabel: str, title: str,
              log_scale: bool = False, errors: Sequence[float] | None = None) -> str:
    """A simple bar chart (e.g. end-to-end latency: untuned vs tuned vs ONNX Runtime)."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    colors = ["#b0b0b0", "#2a7ab9", "#e07b39", "#5aa05a", "#9467bd"][: len(labels)]
    bars = ax.bar(labels, values, yerr=errors, capsize=4, color=colors)
    for i, (bar, value) in enumerate(zip(bars, values)):
        top = bar.get_height() + (errors[i] if errors is not None else 0.0)  # above the error bar
        ax.annotate(f"{value:.3g}", (bar.get_x() + bar.get_width() / 2, top), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=9)
    if log_scale:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
