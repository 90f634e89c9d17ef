"""Measure a cost-model dataset on this machine: random configs and mutations of the best, per task, into a log.

A ranker needs, per task, the spread of configs it must order (random ones) and the good configs where search needs
it to be right (mutations of the best measured so far, one decision changed: a search-free stand-in for what a tuner
visits late in a run). Each trial is measured by the real pipeline (import, DecisionSpace, LocalRunner) and logged
with its applied trace, so ``train-model`` featurises it like any tuning log.

:func:`measure_dataset` spreads a time budget over its tasks round-robin, a batch per task at a time, so a short
budget still covers every task; when those are done before the budget is, more tasks join one at a time, so the
minutes a user gives buy records rather than end early. It resumes a log an interrupted call wrote (nothing is
measured twice: the configs logged, requested and effective, are not proposed again).
``experiments/make_dataset.py`` (the study datasets) measures task by task with the same :class:`TaskSampler`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from autosearch.frontend.lowering import LAYOUTS
from autosearch.records import TuningLog
from autosearch.search.disturbed import measure_steadily
from autosearch.types import Config, Record

log = logging.getLogger(__name__)

RANDOM_FRACTION = 0.6  # the rest: mutations of the best configs measured so far
DATASET_FILE = "dataset.jsonl"  # train-model --measure: the log inside the model directory


def propose(space, measured: dict[Config, float], seen: set[Config], n: int, random_left: int,
            rng: np.random.Generator) -> list[tuple[Config, str]]:
    """The next batch: random configs first, then mutations of the best few measured so far."""
    out: list[tuple[Config, str]] = []
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        if random_left > 0 or not measured:
            cfg, kind = space.sample(rng), "random"
        else:
            best = sorted(measured, key=measured.get)[: max(1, min(4, len(measured) // 4))]
            cfg, kind = space.mutate(best[int(rng.integers(len(best)))], rng), "mutation"
        if cfg in seen:
            continue
        seen.add(cfg)
        out.append((cfg, kind))
        random_left -= kind == "random"
    return out


class TaskSampler:
    """One task's dataset trials, a batch at a time: its header and baseline logged once, its logged trials (of an
    interrupted call) counted and never proposed again."""

    def __init__(self, task, runner, tuning_log: TuningLog, *, per_task: int, random_fraction: float = RANDOM_FRACTION,
                 rng: np.random.Generator, logged: Sequence[Record] = (), models: Sequence[str] = (),
                 sketch_store=None) -> None:
        from autosearch.frontend.target import target_to_json
        from autosearch.search.space import DecisionSpace

        self.task, self.runner, self.log, self.rng = task, runner, tuning_log, rng
        self.per_task = per_task
        self.target = target_to_json(task.target)
        trials = [r for r in logged if r.kind == "trial" and r.config is not None]
        if not logged:
            tuning_log.write_task({**task.to_json(), "models": list(models)})
        self.baseline = runner.prepare(task)
        if not any(r.kind == "baseline" for r in logged):
            tuning_log.append([Record(kind="baseline", task_key=task.workload_key, task_name=task.name,
                                      target=self.target, config=None, result=self.baseline, flops=task.flops)])
        self.space = DecisionSpace(task.mod, task.target, store=sketch_store)
        self.measured: dict[Config, float] = {r.config: r.result.median for r in trials if r.result.ok}
        self.seen: set[Config] = {r.config for r in trials} | {r.requested for r in trials if r.requested is not None}
        self.random_left = round(per_task * random_fraction) - sum(r.strategy == "random" for r in trials)
        self.effective: set[Config] = {r.config for r in trials}
        self.done = len(trials)
        self.exhausted = False  # no new config could be proposed

    @property
    def finished(self) -> bool:
        return self.exhausted or self.done >= self.per_task

    def step(self, batch: int) -> int:
        """Measure and log one batch; returns the trials logged."""
        task = self.task
        batch_cfgs = propose(self.space, self.measured, self.seen, min(batch, self.per_task - self.done),
                             self.random_left, self.rng)
        if not batch_cfgs:
            self.exhausted = True
            return 0
        self.random_left -= sum(kind == "random" for _, kind in batch_cfgs)
        applied = [self.space.apply(cfg) for cfg, _ in batch_cfgs]
        ok = []
        for i, a in enumerate(applied):
            if a.ok and a.config not in self.effective:  # TVM may map two requests onto one program
                self.effective.add(a.config)
                ok.append(i)
        results = dict(zip(ok, measure_steadily(self.runner, task, [applied[i].mod for i in ok])))
        records = []
        for i, ((requested, kind), app) in enumerate(zip(batch_cfgs, applied)):
            if i not in results:
                continue  # not applicable: nothing measured, nothing to learn from
            result = results[i]
            self.done += 1
            if result.ok:
                self.measured[app.config] = result.median
            records.append(Record(kind="trial", task_key=task.workload_key, task_name=task.name, target=self.target,
                                  config=app.config, requested=requested, result=result, flops=task.flops,
                                  trace=app.trace_json(), strategy=kind, trial=self.done))
        self.log.append(records)
        return len(records)


def spread(tasks: Sequence, count: int) -> list:
    """``count`` tasks spread evenly over ``tasks`` ordered by FLOPs (cheapest to costliest), each once."""
    ordered = sorted(tasks, key=lambda t: t.flops)
    if count >= len(ordered):
        return ordered
    picks = np.linspace(0, len(ordered) - 1, count).round().astype(int)
    return [ordered[i] for i in dict.fromkeys(picks.tolist())]


def spread_order(tasks: Sequence) -> list:
    """All of ``tasks``, ordered so that every prefix spreads over their FLOPs: the cheapest and the costliest,
    then the middle, then the quarters, and so on (bisection order over the FLOPs ranking)."""
    ordered = sorted(tasks, key=lambda t: t.flops)
    n = len(ordered)
    if n <= 2:
        return ordered
    out, seen, parts = [], set(), 1
    while len(out) < n:
        for k in range(parts + 1):
            i = round(k * (n - 1) / parts)
            if i not in seen:
                seen.add(i)
                out.append(ordered[i])
        parts *= 2
    return out


def dataset_lowerings(target, precision: str = "auto", *, layouts: Sequence[str] = LAYOUTS) -> list[dict[str, str]]:
    """The lowerings whose conv tasks a run on ``target`` tunes under the defaults (``--layout auto --precision
    auto``): fp32 in both layouts (NCHW direct and Winograd, NHWC; ``layouts``: the ones such a run tunes, see
    :func:`run_layouts`) and, where the CPU has a bf16 unit, the bf16 convolutions tensorised onto it. A
    pre-trained model guides a bf16 unit's tasks only if its records hold them. ``precision`` ``fp32`` or ``bf16``
    keeps one side (a model for the unit alone spends no minutes on fp32 tasks; ``bf16`` where the target has no
    unit is a one-line error, as for ``run``)."""
    from autosearch.frontend.lowering import resolve_precision

    fp32 = [{"layout": layout, "precision": "fp32"} for layout in LAYOUTS if layout in layouts]
    if resolve_precision(precision, target, "NHWC")[0] == "fp32":
        return fp32
    bf16 = [{"layout": "NHWC", "precision": "bf16"}]
    return bf16 if precision == "bf16" else fp32 + bf16


def tensorised(name: str) -> bool:
    """Whether a task (by its name) computes on a bf16 unit: a convolution, a matmul or a fused attention."""
    from autosearch.tensor_units import attention, conv, matmul

    return any(kind in name for kind in (conv.TASK_NAME, matmul.TASK_NAME, attention.TASK_NAME))


def run_layouts(model: str, target) -> tuple[str, ...]:
    """The layouts whose models a default run of ``model`` on ``target`` tunes: both, but where the target's bf16
    unit doubles its fp32 rate, as :func:`autosearch.frontend.importer.extract_tasks` decides (the model imported
    once more to ask it)."""
    from autosearch.frontend.importer import import_model
    from autosearch.tensor_units.cpu import bf16_doubles_fp32

    if not bf16_doubles_fp32(target):
        return LAYOUTS
    return import_model(model, target, layout="auto", precision="auto").layouts


def dataset_tasks(model: str, target, *, count: int, precision: str = "auto") -> tuple[list, list]:
    """The tasks a dataset for ``model`` measures, from each lowering a tuning run of it on ``target`` guides
    (:func:`dataset_lowerings` of ``precision``, in the layouts of :func:`run_layouts`): the fp32 convolutions, and
    in bf16 every task on the unit (convolutions, matmuls, attentions: a ranker of convolutions alone ranks a fused
    attention's schedules at chance); one task per workload: (``count`` per lowering spread over FLOPs, measured
    from the start; the rest, in :func:`spread_order`, to join while the budget lasts)."""
    from autosearch.frontend.importer import import_model

    first: dict[str, object] = {}
    rest: dict[str, object] = {}
    layouts = run_layouts(model, target) if precision == "auto" else LAYOUTS
    for lowering in dataset_lowerings(target, precision, layouts=layouts):
        wanted = (lambda name: "conv2d" in name) if lowering["precision"] == "fp32" else tensorised
        chosen = [t for t in import_model(model, target, **lowering).tasks if wanted(t.name)]
        for task in spread(chosen, count):
            first.setdefault(task.workload_key, task)
        for task in spread_order(chosen):
            rest.setdefault(task.workload_key, task)
    return list(first.values()), [t for key, t in rest.items() if key not in first]


def measure_dataset(tasks: Sequence, out_path: str, *, runner, seconds: float, per_task: int, batch: int = 8,
                    seed: int = 0, more: Sequence = (), on_progress: Callable[[int, int], None] | None = None,
                    sketch_store=None) -> int:
    """Measure ``tasks`` round-robin, a batch each in turn, for ``seconds`` or until each has ``per_task`` trials,
    into the log ``out_path`` (continued when it exists); returns the trials logged now. When every task is done
    and time is left, the tasks of ``more`` join in order, one each time the ones measuring are all done.
    ``runner``: a runner of :mod:`autosearch.measure` for the tasks' target (the caller opens and closes it, as
    for the tuner). ``on_progress(trials in the log, trials of every task of ``tasks`` and ``more``)`` after each
    batch. ``sketch_store``: a :class:`~autosearch.search.sketch_store.SketchStore` the tasks' sketches are kept in
    (None: built afresh)."""
    import os

    from autosearch.records import read_log

    resume = os.path.exists(out_path)
    logged: dict[str, list[Record]] = {}
    if resume:
        for rec in read_log(out_path).records:
            logged.setdefault(rec.task_key, []).append(rec)
    deadline = time.monotonic() + seconds
    total = 0
    waiting = list(more)
    wanted = per_task * (len(tasks) + len(waiting))  # every task's configs: what the minutes may or may not reach
    with TuningLog(out_path, resume=resume) as tuning_log:
        tuning_log.write_run({"dataset": "train-model --measure", "tasks": len(tasks), "more_tasks": len(waiting),
                              "per_task": per_task, "seconds": seconds, "seed": seed, "resumed": resume})
        samplers: list[TaskSampler] = []

        def join(task) -> None:
            previous = logged.get(task.workload_key, [])
            samplers.append(TaskSampler(task, runner, tuning_log, per_task=per_task, logged=previous,
                                        rng=np.random.default_rng([seed, len(samplers), len(previous)]),
                                        sketch_store=sketch_store))

        for task in tasks:
            if time.monotonic() >= deadline:
                break
            join(task)
        # a resumed call first takes back the extra tasks an earlier call had begun, in the same order
        while waiting and waiting[0].workload_key in logged and time.monotonic() < deadline:
            join(waiting.pop(0))
        while time.monotonic() < deadline:
            if all(s.finished for s in samplers):
                if not waiting:
                    break
                join(waiting.pop(0))
                continue
            for sampler in samplers:
                if sampler.finished or time.monotonic() >= deadline:
                    continue
                total += sampler.step(batch)
                if on_progress is not None:
                    on_progress(sum(s.done for s in samplers), wanted)
    log.info("dataset %s: %d trials logged now", out_path, total)
    return total


__all__ = ["DATASET_FILE", "RANDOM_FRACTION", "TaskSampler", "dataset_lowerings", "dataset_tasks", "measure_dataset",
           "propose", "run_layouts", "spread", "spread_order", "tensorised"]
