"""One layout per convolution: a lowering that takes some convolutions to NHWC and leaves the rest NCHW, and the
choice of each layer's layout from a ``--layout auto`` run's tuned tasks.

``--layout auto`` tunes the model twice, NCHW (with its Winograd alternatives) and NHWC, and compiles the faster
whole model (:mod:`autosearch.frontend.alternatives`). The two models' kernels win different layers (on an Intel
Xeon in fp32, NCHW's Winograd kernels the narrow images with many channels, NHWC's direct kernels the wide images:
``docs/results.md``), and both layouts' tasks are tuned already, so a model that takes each convolution in its
faster layout costs no trial. Relax's ``ConvertLayout`` with a per-call callback lowers it and puts layout
transforms where consecutive layers differ: those transforms are the only kernels of such a model no task
measured, which is why the choice is checked by timing the model (``experiments/layer_layouts.py``).

A convolution is named by its geometry as imported (NCHW), :func:`call_key`, and a tuned task by the same geometry
read from its arguments in its own layout, :func:`task_key`; layers of one geometry share their tasks, so they
share a layout too. fp32 only: bf16 convolutions are NHWC (:mod:`autosearch.tensor_units`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

NCHW, NHWC = "NCHW", "NHWC"
_DESIRED = {NCHW: [NCHW, "OIHW"], NHWC: [NHWC, "OHWI"]}


def conv_key(cin: int, h: int, w: int, cout: int, ho: int, wo: int, kh: int, kw: int, groups: int = 1) -> str:
    """A convolution's geometry, layout-free: ``CINxHxW->COUTxHOxWO/KHxKW`` (and ``/gG`` when grouped)."""
    return f"{cin}x{h}x{w}->{cout}x{ho}x{wo}/{kh}x{kw}" + (f"/g{groups}" if groups != 1 else "")


def call_key(call) -> str | None:
    """The geometry of a Relax ``nn.conv2d`` call with NCHW data and OIHW weights (as ONNX gives it), else None."""
    attrs = call.attrs
    if str(attrs.data_layout) != NCHW or str(attrs.kernel_layout) != "OIHW":
        return None
    try:
        data, weight, out = ([int(s) for s in arg.ty.shape] for arg in (call.args[0], call.args[1], call))
    except (TypeError, AttributeError, ValueError):  # symbolic shapes
        return None
    if len(data) != 4 or len(weight) != 4 or len(out) != 4:
        return None
    return conv_key(data[1], data[2], data[3], out[1], out[2], out[3], weight[2], weight[3], int(attrs.groups))


def task_key(name: str, args, layout: str) -> str | None:
    """The geometry of a convolution task (direct or Winograd, by its name and ``args``: data, weight, ..., output)
    in its own ``layout``, as :func:`call_key` names the call it came from; None for anything else."""
    if "conv2d" not in name or len(args) < 3 or layout not in _DESIRED:
        return None
    data, weight, out = (tuple(int(s) for s in args[i][0]) for i in (0, 1, -1))
    if len(data) != 4 or len(weight) != 4 or len(out) != 4:
        return None
    if layout == NHWC:
        data, out = (data[0], data[3], data[1], data[2]), (out[0], out[3], out[1], out[2])
    cin, cout = data[1], out[1]
    if "winograd" in name:  # the transformed kernel: (alpha, alpha, in, out) in NCHW, (alpha, alpha, out, in) in NHWC
        ok = weight[2:] == ((cin, cout) if layout == NCHW else (cout, cin))
        kh = kw = 3
        groups = 1
    else:  # OIHW / OHWI
        kh, kw, per_group = (weight[2], weight[3], weight[1]) if layout == NCHW else (weight[1], weight[2], weight[3])
        ok = weight[0] == cout and per_group > 0 and cin % per_group == 0
        groups = cin // per_group if ok else 1
    return conv_key(cin, data[2], data[3], cout, out[2], out[3], kh, kw, groups) if ok else None


def choose(entries: Iterable[tuple[str, str, float | None]]) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    """Each layer's faster layout. ``entries``: (geometry, layout, weight x latency in seconds, or None when not
    measured) per convolution task; a layer tuned direct and as Winograd counts its faster algorithm. Returns the
    choice per geometry measured in both layouts (ties: NCHW, the model as imported) and the costs it compared."""
    costs: dict[str, dict[str, float]] = {}
    for key, layout, cost in entries:
        by_layout = costs.setdefault(key, {})
        value = cost if cost is not None else math.inf
        by_layout[layout] = min(by_layout.get(layout, math.inf), value)
    chosen = {}
    for key, by_layout in costs.items():
        finite = {layout: c for layout, c in by_layout.items() if math.isfinite(c)}
        if len(finite) == 2:
            chosen[key] = min(finite, key=lambda layout: (finite[layout], layout != NCHW))
    return chosen, costs


# one layout per convolution is kept when its layers' tuned costs beat the whole model's by this share of it; the
# layout transforms it adds between layers are counted where the run timed them (autosearch.deploy.transitions)
MIN_GAIN = 0.02


def applies(lowerings: Iterable[dict[str, Any]]) -> bool:
    """Whether one layout per convolution can be kept for tasks of these lowering records: not where a layer has
    a bf16 alternative (bf16 convolutions are NHWC)."""
    from autosearch.frontend.winograd import PRECISIONS

    return not any(lowering.get("algorithm") in PRECISIONS for lowering in lowerings)


def layer_of(name: str, args, lowering: dict[str, Any]) -> tuple[str, str] | None:
    """(geometry, layout) of a convolution task one layout's model of a ``--layout auto`` run runs alone (its
    ``name``, ``args`` and lowering record, as a task or its log header has them); None for any other task."""
    from autosearch.frontend.alternatives import task_layouts

    if "layouts" not in lowering:
        return None
    layouts = task_layouts(lowering)
    geometry = task_key(name, args, layouts[0]) if len(layouts) == 1 else None
    return (geometry, layouts[0]) if geometry is not None else None


def header_layer(header: dict) -> tuple[str, str] | None:
    """:func:`layer_of` a task header of a tuning log."""
    return layer_of(str(header.get("name", "")), header.get("args") or (), header.get("lowering") or {})


def header_entries(headers: dict[str, dict], bests: dict[str, float | None]) -> list[tuple[str, str, float | None]]:
    """:func:`choose`'s entries from a ``--layout auto`` log: (geometry, layout, weight x best seconds) of every
    convolution task one layout's model runs alone. ``headers``: task headers by workload key (the log's);
    ``bests``: each task's best seconds (re-timed where its finalists were), None when not measured."""
    entries = []
    for key, header in headers.items():
        layer = header_layer(header)
        if layer is not None:
            best = bests.get(key)
            entries.append((*layer, best * int(header.get("weight", 1)) if best is not None else None))
    return entries


def mixed_seconds(chosen: dict[str, str], costs: dict[str, dict[str, float]], layout: str,
                  model_seconds: float) -> float:
    """The estimate of one layout per convolution (``chosen``, from :func:`choose`): the whole model in ``layout``
    (``model_seconds``) with each chosen layer at its cost in its chosen layout. The layout transforms between
    layers are measured by no task and not counted."""
    return model_seconds - sum(costs[key][layout] - costs[key][chosen[key]] for key in chosen)


def worth_mixing(chosen: dict[str, str], costs: dict[str, dict[str, float]], layout: str, model_seconds: float,
                 *, extra: float = 0.0) -> bool:
    """Whether one layout per convolution (``chosen``, from :func:`choose`) is kept over the whole model in
    ``layout`` (estimated at ``model_seconds``): its layers take both layouts and their tuned costs, plus ``extra``
    seconds (the layout transforms between them, where timed: :mod:`autosearch.deploy.transitions`), gain at least
    ``MIN_GAIN`` of the model."""
    if len(set(chosen.values())) < 2 or not math.isfinite(model_seconds) or model_seconds <= 0:
        return False
    mixed = mixed_seconds(chosen, costs, layout, model_seconds) + extra
    return model_seconds - mixed >= MIN_GAIN * model_seconds


def layout_counts(layer_layouts: dict[str, str]) -> str:
    """How many convolutions take each layout: "4 NCHW, 5 NHWC"."""
    from collections import Counter

    return ", ".join(f"{n} {layout}" for layout, n in sorted(Counter(layer_layouts.values()).items()))


def convert_passes(layouts: dict[str, str], default: str = NCHW) -> list[Any]:
    """The lowering's layout step for one layout per convolution: ``layouts`` maps geometries (:func:`call_key`) to
    NCHW or NHWC, and a convolution not in it takes ``default``. A leaky ReLU after an NHWC convolution is written as
    ``maximum(x, a * x)``, as the NHWC lowering writes it (:func:`autosearch.frontend.lowering.leaky_relu_as_maximum`),
    so its layer fuses into the NHWC task tuned for it; after an NCHW one it stays as the NCHW task has it."""
    from tvm import relax

    from autosearch.frontend.lowering import leaky_relu_as_maximum

    def layout_of(call) -> str:
        return layouts.get(call_key(call) or "", default)

    def desired(call) -> dict[str, list[str]]:
        if getattr(call.op, "name", "") == "relax.nn.conv2d":
            return {"relax.nn.conv2d": _DESIRED[layout_of(call)]}
        return {}

    return [leaky_relu_as_maximum(after=lambda conv: conv is not None and layout_of(conv) == NHWC),
            relax.transform.ConvertLayout({}, layout_cb=desired)]


__all__ = ["MIN_GAIN", "NCHW", "NHWC", "applies", "call_key", "choose", "conv_key", "convert_passes", "header_entries",
           "header_layer", "layer_of", "layout_counts", "mixed_seconds", "task_key", "worth_mixing"]
