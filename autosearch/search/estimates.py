"""The model's estimated latency as a run went, read back from its log: what the run's plot shows.

A user tunes a model, not 40 kernels: the question a run answers is how fast the model got, and how soon. The
estimate after each trial is the one the tuner steers by and ``export`` keeps: per task the faster of its best
valid trial so far and its untuned kernel, weight x latency summed over the tasks of the faster layout, a layer
tuned in two forms (direct / Winograd, fp32 / bf16) counted by its faster (:mod:`autosearch.frontend.alternatives`),
and in fp32 each convolution in its faster layout where ``export`` would keep one layout per convolution
(:mod:`autosearch.frontend.layer_layouts`). It is read from the log rather than kept during the run, so a resumed
run, or any log, is drawn the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from autosearch.frontend.alternatives import choose_layout, layout_totals, model_latency, model_total
from autosearch.records import LogContents


@dataclass(frozen=True)
class EstimatePoint:
    """The estimate after a trial: ``trials`` finished trials, ``seconds`` since the run began."""

    trials: int
    seconds: float
    latency: float  # seconds, the estimated model


@dataclass(frozen=True)
class TaskShare:
    """One task's part of the final estimate (weight x latency), in the model the estimate is of."""

    name: str
    seconds: float


def _entries(contents: LogContents, best: dict[str, float | None], untuned: dict[str, float]):
    return [(header.get("lowering") or {}, int(header.get("weight", 1)), model_latency(best.get(key), untuned.get(key)))
            for key, header in contents.tasks.items()]


def untuned_latencies(contents: LogContents) -> dict[str, float]:
    """Each task's untuned latency (its last valid baseline record), in one pass over the log."""
    last = {r.task_key: r for r in contents.records if r.kind == "baseline"}  # the last one logged, as baseline()
    return {key: r.latency for key, r in last.items() if r.ok}


def _geometries(contents: LogContents) -> dict[str, tuple[str, str]]:
    """(geometry, layout) of each convolution task one layout's model runs alone, by task key, where export may
    keep one layout per convolution (:func:`autosearch.frontend.layer_layouts.header_layer`); {} otherwise."""
    from autosearch.frontend.layer_layouts import applies, header_layer

    if not applies(h.get("lowering") or {} for h in contents.tasks.values()):
        return {}
    layers = {key: header_layer(header) for key, header in contents.tasks.items()}
    return {key: layer for key, layer in layers.items() if layer is not None}


def _layers(contents: LogContents, geometries: dict[str, tuple[str, str]], best: dict[str, float | None]):
    """The per-layer choice (:func:`autosearch.frontend.layer_layouts.choose`) on these bests."""
    from autosearch.frontend.layer_layouts import choose

    return choose((geometry, layout, best[key] * int(contents.tasks[key].get("weight", 1))
                   if best.get(key) is not None else None) for key, (geometry, layout) in geometries.items())


def _estimate(entries, layers=None) -> float:
    """The faster layout's model, or one layout per convolution where export would keep it (``layers``: the
    per-layer choice and costs, None without it)."""
    from autosearch.frontend.layer_layouts import mixed_seconds, worth_mixing

    totals = layout_totals(entries)
    if totals:
        leader = choose_layout(totals)
        if leader is None:
            return math.inf
        if layers is not None and worth_mixing(*layers, leader, totals[leader]):
            return mixed_seconds(*layers, leader, totals[leader])
        return totals[leader]
    return model_total(entries)


def estimate_curve(contents: LogContents) -> list[EstimatePoint]:
    """The estimate after each trial that changed it (and after the last trial), in the order trials finished;
    [] until every task has a latency (its untuned kernel is measured first)."""
    untuned = untuned_latencies(contents)
    geometries = _geometries(contents)
    trials = sorted(contents.trials(), key=lambda r: r.finished)
    starts = [float(run["started"]) for run in contents.runs if "started" in run]
    start = min(starts + [r.started for r in trials]) if trials else 0.0
    best: dict[str, float] = {}
    points: list[EstimatePoint] = []
    for done, record in enumerate(trials, 1):
        if record.ok and record.latency < best.get(record.task_key, math.inf):
            best[record.task_key] = record.latency
        latency = _estimate(_entries(contents, best, untuned),
                            _layers(contents, geometries, best) if geometries else None)
        if math.isfinite(latency) and (not points or latency != points[-1].latency or done == len(trials)):
            points.append(EstimatePoint(trials=done, seconds=record.finished - start, latency=latency))
    return points


def task_shares(contents: LogContents, keys: Iterable[str]) -> list[TaskShare]:
    """Each task's weight x latency in the final estimate, largest first: of ``keys``, the tasks of the model export
    keeps (:func:`autosearch.deploy.database.compiled_tasks`), each at its best as export reads it (re-timed where its
    finalists were: :meth:`~autosearch.records.LogContents.best_seconds`) or its untuned kernel. Not at its fastest
    trial: a task whose trials all read slow while the machine was busy, and whose re-times in fresh processes made
    it export's choice, would show at its slow trial as a large share of a model that does not spend it."""
    untuned = untuned_latencies(contents)
    shares = []
    for key in keys:
        latency = model_latency(contents.best_seconds(key), untuned.get(key))
        if latency is not None:
            header = contents.tasks[key]
            shares.append(TaskShare(name=str(header.get("name", key)), seconds=latency * int(header.get("weight", 1))))
    return sorted(shares, key=lambda s: -s.seconds)


__all__ = ["EstimatePoint", "TaskShare", "estimate_curve", "task_shares", "untuned_latencies"]
