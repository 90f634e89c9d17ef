"""The statistics experiments report, each defined once.

- :func:`bootstrap_ci`: a percentile bootstrap interval of the median (or another statistic) of a few runs.
- :func:`pairs_by_ratio` / :func:`close_share`: how well an order agrees with measured throughputs by how far
  apart a pair is, and how many pairs are close (``ratio=1.1``: within 10%, mostly noise). The accuracy on the
  pairs more than a ratio apart is :func:`autosearch.cost_models.evaluate.pairwise_accuracy` with ``ratio``; its
  tie rule (a tie in the order being judged counts half, :func:`~autosearch.cost_models.evaluate.agreeing`) is
  the one here.
- :func:`trials_to_reach`, :func:`median_trials`: the first trial whose result reaches a target, and the median
  over runs where "never" counts as more than any number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from autosearch.cost_models.evaluate import agreeing

NEVER = math.inf  # trials (or seconds) to a target that a run never reached


def median(values: Sequence[float]) -> float:
    """Median of the finite values; NaN when there are none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def mean(values: Sequence[float]) -> float:
    """Mean of the finite values; NaN when there are none (a metric undefined on every row: no warning)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the finite values' mean; NaN with fewer than two."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.std(finite, ddof=1) / math.sqrt(len(finite))) if len(finite) > 1 else math.nan


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, resamples: int = 2000, seed: int = 0,
                 statistic: Callable[[np.ndarray], float] = np.median) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values`` (NaNs dropped): ``(lo, hi)``, NaN when
    empty. With three runs the interval is no finer than their range; it is reported to show the spread, not
    to claim significance."""
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if data.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(resamples, data.size))
    stats = np.apply_along_axis(statistic, 1, data[picks])
    tail = (1.0 - level) / 2.0
    return float(np.quantile(stats, tail)), float(np.quantile(stats, 1.0 - tail))


def _apart(truth: np.ndarray, ratio: float) -> np.ndarray:
    """Pairs (i, j) with ``truth[i] > ratio * truth[j]``: i is measured faster by more than the ratio."""
    return truth[:, None] > ratio * truth[None, :]


def pairs_by_ratio(truth: Sequence[float], order: Sequence[float],
                   edges: Sequence[float]) -> dict[tuple[float, float], tuple[int, float]]:
    """For each bucket (lo, hi] of consecutive ``edges``: the pairs whose ``truth`` ratio (faster / slower) falls in
    it, and how many of them ``order`` puts the same way round (:func:`autosearch.cost_models.evaluate.agreeing`)."""
    t = np.asarray(truth, dtype=np.float64)
    o = np.asarray(order, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = t[:, None] / t[None, :]
    out = {}
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (ratio > lo) & (ratio <= hi)
        out[(lo, hi)] = (int(sel.sum()), agreeing(o, sel))
    return out


def close_share(truth: Sequence[float], *, ratio: float = 1.1) -> float:
    """Share of the pairs with different ``truth`` that are within ``ratio`` of each other (NaN without pairs)."""
    t = np.asarray(truth, dtype=np.float64)
    differ = (t[:, None] > t[None, :]).sum()
    return float(1.0 - _apart(t, ratio).sum() / differ) if differ else math.nan


def trials_to_reach(latencies: Sequence[float], target: float) -> float:
    """1-based index of the first latency (seconds; ``inf`` for a failed trial) at or below ``target``;
    :data:`NEVER` if none is."""
    return next((i + 1.0 for i, lat in enumerate(latencies) if lat <= target), NEVER)


def median_trials(values: Sequence[float]) -> float:
    """The median of trials (or seconds) to a target over runs, :data:`NEVER` counting as more than any number:
    the upper middle of an even count, so half the runs reached the target by then (never a mean with NEVER)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.nan


def share(flags: Sequence[bool | None]) -> float:
    """Share of True among the flags that are not None (NaN without any)."""
    known = [f for f in flags if f is not None]
    return sum(known) / len(known) if known else math.nan
