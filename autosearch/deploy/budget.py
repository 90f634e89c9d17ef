"""``export --memory-budget``: the fastest model the log can compile whose predicted peak memory fits a budget.

Speed alone (``export`` without a budget) takes, per layer tuned both ways, the faster algorithm, and the faster
layout's model. Winograd costs memory: its transformed kernel holds (4 + 2)^2 = 36 values per 3x3 filter where
the direct one holds 9 (:mod:`autosearch.deploy.memory`). Under a budget the choice is:

- per **layout** tuned (``--layout auto`` logs: NCHW with its Winograd alternatives, and NHWC), one model;
  a layout is a whole-model choice (:mod:`autosearch.frontend.alternatives`);
- in the NCHW model, per layer measured both ways, **Winograd or direct**: a 0/1 knapsack. Each layer where
  Winograd is the faster has a gain (weight x latency of its direct tasks minus its winograd tasks', from the
  log's best records) and a cost (the extra bytes of its transformed kernels); every other layer stays direct,
  which is both faster and smaller. The predicted peak grows with the weights only (activations and their
  planning are the same for both algorithms: the convolution's input and output tensors do not change), so
  the budget is a capacity on the extra bytes. It is solved **exactly**, as a mixed-integer program (SciPy's
  HiGHS): a layer count of 6 (tiny-YOLOv2) to 14 (YOLOv8n) costs milliseconds, and the greedy rule (best gain
  per byte first) can miss the best set whenever a big layer with a big gain nearly fills the budget.

Memory is computed, not measured: each candidate model is lowered, the log's best schedules applied (the
layers' kernel scratch depends on them) and its weights and planned activations read from the module
(:func:`autosearch.deploy.memory.estimate_memory`); the NCHW model twice, all direct and every layer as Winograd, and
the kernel scratch taken as the larger of the two, so the prediction for a mix is an upper bound. The model
chosen is estimated again as it will be compiled: the prediction ``report`` prints beside the measured peak.
Latency is predicted as the sum of weight x latency of the model's tasks (untuned ones at their untuned
latency), as ``export`` compares layouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autosearch.deploy.memory import MIB, MemoryEstimate, mib
from autosearch.errors import UserError
from autosearch.records import LogContents


@dataclass(frozen=True)
class LayerOption:
    """A layer measured both ways: its direct and Winograd time in the model (seconds, weight x latency summed
    over its tasks) and the bytes its Winograd kernels add."""

    layer: str
    direct_secs: float
    winograd_secs: float
    extra_bytes: int


@dataclass(frozen=True)
class ModelOption:
    """One model the log can compile: a layout, its memory with every alternative layer direct, and its time."""

    layout: str
    memory: MemoryEstimate  # every layer direct; kernel scratch: the most of any choice
    fixed_secs: float  # the tasks that are no layer's alternative (inf when one is unmeasured)
    layers: tuple[LayerOption, ...] = ()
    # the layers tuned in fp32 and bf16 -> the faster: precision costs no memory a budget could trade (bf16 weights
    # take less), so export's speed rule decides it, and the memory is predicted with it
    precisions: tuple[tuple[str, str], ...] = ()

    def capacity(self, budget_bytes: int) -> int:
        """The most weight bytes a model with these activations and scratch may hold under the budget."""
        m = self.memory
        return budget_bytes - m.planned_bytes - m.scratch_bytes


@dataclass(frozen=True)
class BudgetChoice:
    """What ``export --memory-budget`` compiles: a layout and per layer an algorithm, with its predictions."""

    budget_bytes: int
    layout: str
    choices: dict[str, str]  # every layer measured both ways -> "direct" | "winograd" (| "fp32" | "bf16")
    predicted: MemoryEstimate  # the chosen model as it will be compiled
    predicted_secs: float

    def lowering(self, base: dict) -> dict:
        """The lowering record ``export`` writes (``base``: the log's,
        :func:`autosearch.deploy.database.lowering_of`): one layout's model, whose memory the budget computed (never
        one layout per convolution)."""
        base = {k: v for k, v in base.items() if k != "layer_layouts"}
        return {**base, "layout": self.layout, "choices": dict(self.choices),
                "memory_budget": {"budget_bytes": self.budget_bytes, "predicted_bytes": self.predicted.peak_bytes(),
                                  "predicted_secs": self.predicted_secs, "estimate": self.predicted.to_json()}}


def best_subset(gains: list[float], sizes: list[int], capacity: int) -> set[int]:
    """The items of largest total gain whose sizes sum to at most ``capacity`` (0/1 knapsack, exact)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    items = [i for i, (g, s) in enumerate(zip(gains, sizes)) if g > 0 and s <= capacity]
    if not items:
        return set()
    scale = max(gains[i] for i in items)
    result = milp(c=-np.array([gains[i] / scale for i in items]), integrality=np.ones(len(items)),
                  bounds=Bounds(0, 1), constraints=LinearConstraint(np.array([[float(sizes[i]) for i in items]]),
                                                                    -np.inf, float(capacity)),
                  options={"mip_rel_gap": 0.0})
    if result.x is None:
        raise RuntimeError(f"knapsack not solved: {result.message}")
    chosen = {i for i, x in zip(items, result.x) if x > 0.5}
    if sum(sizes[i] for i in chosen) > capacity:  # a solver tolerance must not break the budget
        raise RuntimeError("knapsack solution over capacity")
    return chosen


def _winograd_extra_bytes(layer: str, occurrences: int, *, layout: str = "NCHW", value_bytes: int = 4) -> int:
    """Bytes the transformed kernels of ``occurrences`` convolutions of a layer add over their 3x3 kernels."""
    from autosearch.frontend.winograd import TILE, ConvShape

    shape = ConvShape.from_key(layer, layout)
    return occurrences * shape.in_channels * shape.out_channels * ((TILE + 2) ** 2 - 9) * value_bytes


def model_options(contents: LogContents, relax_mod, target, database, *, fast_math: str,
                  precision: str = "fp32") -> list[ModelOption]:
    """The models the log can compile under a budget, one per layout it was tuned in, with their memory
    (computed with ``database``, the log's best records: :func:`autosearch.deploy.database.memory_database`;
    ``fast_math``, ``precision``: as the log was tuned)."""
    from autosearch.deploy.memory import estimate_memory
    from autosearch.frontend.alternatives import model_latency, task_layouts
    from autosearch.frontend.fold import ConstantFolder
    from autosearch.frontend.lowering import tuned_module
    from autosearch.frontend.winograd import PRECISIONS, WinogradPolicy, choose_algorithms, layer_totals

    layouts = sorted({layout for h in contents.tasks.values() for layout in task_layouts(h.get("lowering") or {})})
    options = []
    folder = ConstantFolder()  # the model's lowerings share their weight transforms' compiled functions
    for layout in layouts:
        headers = {k: h for k, h in contents.tasks.items() if layout in task_layouts(h.get("lowering") or {})}
        fixed, alternatives, occurrences = 0.0, [], {}
        for key, h in headers.items():
            lowering, weight = h.get("lowering") or {}, int(h.get("weight", 1))
            best, untuned = contents.best(key), contents.baseline(key)
            if "layer" in lowering:
                alternatives.append((lowering, weight, best.latency if best is not None else None))
                if lowering["algorithm"] == "direct":
                    occurrences[lowering["layer"]] = occurrences.get(lowering["layer"], 0) + weight
                continue
            latency = model_latency(best.latency if best is not None else None,
                                    untuned.latency if untuned is not None and untuned.ok else None)
            fixed += latency * weight if latency is not None else math.inf
        totals = layer_totals(alternatives)
        by_precision = {k: totals.pop(k) for k in [k for k, by in totals.items() if set(by) <= set(PRECISIONS)]}
        fixed += sum(min(by.values()) for by in by_precision.values())  # inf while one is unmeasured
        precisions = choose_algorithms(by_precision)
        layers = tuple(LayerOption(layer, by.get("direct", math.inf), by.get("winograd", math.inf),
                                   _winograd_extra_bytes(layer, occurrences.get(layer, 0), layout=layout))
                       for layer, by in sorted(totals.items()))

        direct, *winograd = (estimate_memory(tuned_module(relax_mod, target, database,
                                                          winograd=WinogradPolicy.of(mode, precisions, precision),
                                                          layout=layout, fast_math=fast_math, folder=folder), target)
                             for mode in ("off", *(("candidates",) if layers else ())))
        if winograd:  # the scratch of every layer as winograd too: the prediction of any mix is then an upper bound
            direct = MemoryEstimate(direct.weight_bytes, direct.planned_bytes, direct.unplanned_bytes,
                                    max(direct.scratch_bytes, winograd[0].scratch_bytes))
        options.append(ModelOption(layout, direct, fixed, layers, tuple(sorted(precisions.items()))))
    return options


def choose(options: list[ModelOption], budget_bytes: int) -> tuple[ModelOption, dict[str, str], float]:
    """The fastest (option, per-layer algorithms, predicted seconds) whose predicted peak fits the budget; a
    one-line error naming the smallest model when none does."""
    found = []
    for option in options:
        room = option.capacity(budget_bytes) - option.memory.weight_bytes
        if room < 0:
            continue
        layers = option.layers
        gains = [layer.direct_secs - layer.winograd_secs if math.isfinite(layer.winograd_secs) else 0.0
                 for layer in layers]
        chosen = best_subset(gains, [layer.extra_bytes for layer in layers], room)
        choices = {layer.layer: "winograd" if i in chosen else "direct" for i, layer in enumerate(layers)}
        secs = option.fixed_secs + sum(layer.winograd_secs if i in chosen else layer.direct_secs
                                       for i, layer in enumerate(layers))
        found.append((option, choices, secs))
    if not found:
        smallest = min(options, key=lambda o: o.memory.peak_bytes())
        m = smallest.memory
        raise UserError(f"--memory-budget {mib(budget_bytes)} MiB: no choice fits; the smallest model "
                        f"({smallest.layout}, every layer direct) needs a predicted peak of {mib(m.peak_bytes())} MiB "
                        f"(weights {mib(m.weight_bytes)} MiB, activations {mib(m.planned_bytes)} MiB, kernel scratch "
                        f"{mib(m.scratch_bytes)} MiB)")
    return min(found, key=lambda f: (f[2], f[0].layout))


def import_tuned_model(contents: LogContents, model: str, target, *, input_shape: str | None = None):
    """The model the log was tuned on, imported (:class:`autosearch.frontend.importer.ImportedModel`), as ``export
    --memory-budget`` needs it to compute memory; a one-line error if the log has none of its tasks."""
    from autosearch.deploy.database import lowering_of
    from autosearch.frontend.importer import import_model

    base = lowering_of(contents) or {}
    imported = import_model(model, target, input_shape=input_shape, winograd="off", layout=base.get("layout", "NCHW"),
                            fast_math=base.get("fast_math", "on"))
    if not {t.workload_key for t in imported.tasks} & set(contents.tasks):
        raise UserError(f"{contents.path} has none of the tasks of {imported.name} (as lowered for "
                        f"{target.kind.name}): give --model (and --input-shape, --target) as the log was tuned")
    return imported


def budget_choice(contents: LogContents, relax_mod, target, budget_mib: float) -> tuple[BudgetChoice, dict]:
    """The fastest model of the log whose predicted peak memory is at most ``budget_mib`` MiB (see the module
    docstring) and the lowering record ``export`` writes for it; ``relax_mod``: the model the log was tuned on,
    imported (:func:`import_tuned_model`)."""
    from autosearch.deploy.database import lowering_of, memory_database
    from autosearch.deploy.memory import estimate_memory
    from autosearch.frontend.lowering import tuned_module
    from autosearch.frontend.winograd import WinogradPolicy

    if not budget_mib > 0:
        raise UserError(f"--memory-budget must be a positive number of MiB, not {budget_mib}")
    base = lowering_of(contents)
    if not base:
        raise UserError(f"{contents.path} mixes lowerings (--winograd, --layout or --fast-math differ between its "
                        "tasks): --memory-budget needs one model")
    budget_bytes = int(budget_mib * MIB)
    database = memory_database(contents)
    options = model_options(contents, relax_mod, target, database, fast_math=base["fast_math"],
                            precision=base["precision"])
    option, choices, secs = choose(options, budget_bytes)
    choices = {**dict(option.precisions), **choices}
    # every measured layer named: no FLOP rule decides
    policy = WinogradPolicy.of(base["winograd"], choices, base["precision"])
    predicted = estimate_memory(tuned_module(relax_mod, target, database, winograd=policy, layout=option.layout,
                                             fast_math=base["fast_math"]), target)
    if predicted.peak_bytes() > budget_bytes:  # a layer the log never measured, lowered by the FLOP rule
        raise UserError(f"--memory-budget {mib(budget_bytes)} MiB: the model as compiled would need "
                        f"{mib(predicted.peak_bytes())} MiB (layers the log has no measurement of are lowered "
                        "by the FLOP rule): tune every layer, or raise the budget")
    choice = BudgetChoice(budget_bytes=budget_bytes, layout=option.layout, choices=choices, predicted=predicted,
                          predicted_secs=secs)
    return choice, choice.lowering(base)


__all__ = ["BudgetChoice", "LayerOption", "ModelOption", "best_subset", "budget_choice", "choose",
           "import_tuned_model", "model_options"]
