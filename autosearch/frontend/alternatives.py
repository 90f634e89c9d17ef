"""The model-level alternative of ``--layout auto``: the whole model lowered NCHW (with its Winograd
alternatives) and NHWC, tuned side by side, and the faster kept.

The model runs one layout, so the two are compared as models: per layout, weight x latency summed over the
tasks its model runs, each layer tuned both direct and as Winograd counted by its faster algorithm
(:func:`autosearch.frontend.winograd.layer_totals`). One layout per convolution is a third model, with layout
transforms between layers that no task measures: ``export`` keeps it in fp32 where its layers gain enough
(:mod:`autosearch.frontend.layer_layouts`).

The scheduler spends less on the layout behind (:meth:`autosearch.search.scheduler.TaskScheduler.rivalry`);
``export`` keeps the faster layout and records it for ``compile`` and ``report``. A task's latency here is what
its model would run: the best valid measurement where it beats the untuned kernel, else the untuned kernel (as
``export`` leaves it to TVM's default code); unknown (``inf``) until one of them is measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from autosearch.frontend.lowering import LAYOUTS, OLD_LOWERING
from autosearch.frontend.winograd import layer_totals

AUTO = "auto"
# --layout auto where --precision auto found a bf16 unit: bf16 is lowered in NHWC only, so the NCHW model would run
# all in fp32. Where that unit multiplies at least twice as fast as fp32 (tensor_units.cpu.bf16_doubles_fp32) and the
# layers with a bf16 alternative hold at least this share of the model's FLOPs, the NCHW model is not tuned at all:
# with this share in bf16 the NHWC model needs at most 1 - share / 2 of its fp32 time, so NCHW would have to lead
# NHWC by 1 / (1 - share / 2) in fp32, more than it ever did in the logs (docs/findings.md). Every YOLO model has
# nearly all its FLOPs in such layers; a model that has not (depthwise convolutions) keeps both.
NHWC_ONLY_BF16_SHARE = 0.9


def task_layouts(lowering: dict) -> tuple[str, ...]:
    """The concrete layouts whose model runs a task: ``lowering["layouts"]`` with ``--layout auto`` (a task both
    lowerings share runs in both), else its own layout."""
    return tuple(lowering.get("layouts") or (str(lowering.get("layout", OLD_LOWERING["layout"])),))


def concrete_layouts(lowerings: Iterable[dict]) -> tuple[str, ...]:
    """The concrete layouts whose models run any of these tasks (their lowering records), in ``LAYOUTS``' order."""
    found = {layout for lowering in lowerings for layout in task_layouts(lowering)}
    return tuple(layout for layout in LAYOUTS if layout in found)


def in_model(lowering: dict, leader: str | None) -> bool:
    """Whether the ``leader`` layout's model runs a task of this lowering record: every task when the run tunes
    one model (``leader`` None) or the task has a fixed layout, else the tasks ``--layout auto`` made for it."""
    return leader is None or "layouts" not in lowering or leader in task_layouts(lowering)


def model_latency(best: float | None, untuned: float | None) -> float | None:
    """What a task costs its model (seconds): the faster of its best valid measurement and the untuned kernel."""
    known = [x for x in (best, untuned) if x is not None and math.isfinite(x)]
    return min(known) if known else None


def model_total(entries: Iterable[tuple[dict, int, float | None]]) -> float:
    """One model's estimated latency (seconds): weight x latency summed over its tasks, a layer tuned both
    direct and as Winograd counted by its faster algorithm; ``inf`` while one of its tasks has no latency.
    ``entries``: (lowering record, weight, latency or None) per task the model runs."""
    total = 0.0
    both_ways = []
    for lowering, weight, latency in entries:
        if "layer" in lowering:  # counted below by its faster algorithm
            both_ways.append((lowering, weight, latency))
        else:
            total += latency * weight if latency is not None else math.inf
    return total + sum(min(by_algorithm.values()) for by_algorithm in layer_totals(both_ways).values())


def layout_totals(entries: Iterable[tuple[dict, int, float | None]]) -> dict[str, float]:
    """Per concrete layout of a ``--layout auto`` task set: the model's estimated latency (seconds, see
    :func:`model_total`). ``entries``: (lowering record, weight, latency or None) per task; tasks of a fixed
    layout are left out ({} when there is no auto task)."""
    auto = [e for e in entries if "layouts" in e[0]]
    layouts = dict.fromkeys(layout for lowering, _, _ in auto for layout in lowering["layouts"])
    return {layout: model_total(e for e in auto if layout in e[0]["layouts"]) for layout in layouts}


def bf16_share(tasks) -> float:
    """The share of an NHWC model's fp32 FLOPs (weight x FLOPs) in layers that have a bf16 alternative: the tasks
    ``--precision auto`` labels ``algorithm`` ``fp32``, over every task but the other algorithms (0 without tasks)."""
    fp32 = [t for t in tasks if t.lowering.get("algorithm") in (None, "fp32")]
    total = sum(t.flops * t.weight for t in fp32)
    either = sum(t.flops * t.weight for t in fp32 if t.lowering.get("algorithm") == "fp32")
    return either / total if total > 0 else 0.0


def choose_layout(totals: dict[str, float]) -> str | None:
    """The layout with the lower finite total (ties: the first in ``LAYOUTS``); None while none is known."""
    finite = {layout: t for layout, t in totals.items() if math.isfinite(t)}
    if not finite:
        return None
    return min(finite, key=lambda layout: (finite[layout], LAYOUTS.index(layout) if layout in LAYOUTS else 99))


__all__ = ["AUTO", "NHWC_ONLY_BF16_SHARE", "bf16_share", "choose_layout", "concrete_layouts", "in_model",
           "layout_totals", "model_latency", "model_total", "task_layouts"]
