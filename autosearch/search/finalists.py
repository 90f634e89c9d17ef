"""Re-timing each task's finalists in fresh measuring processes at the end of a run, and choosing its best.

Each task's top configs (by in-run median) are re-timed in rounds: each round is one fresh measuring process
that times the finalists of every task, each task's in an order rotated from round to round (:func:`rotated`), so a
slow spell or the first-in-a-process position hits every finalist alike. The choice among them is the rule of
:mod:`autosearch.ranking` (median over rounds of the per-round medians; a failed re-time rules a finalist out),
which the log applies too, so ``export`` writes the kernel chosen here.

Cost: every round starts a fresh measuring process and times its finalists again. So a round measures only the
:func:`contenders`, the finalists that can still be chosen whatever the rounds left measure; a task with one
contender left is settled and needs no further round. With three rounds that skips the third round of a task whose
two rounds so far put one finalist ahead of the others in both, and the third round of any finalist behind another
in both.

:class:`Retiming` runs the rounds for the tuning loop (:mod:`autosearch.search.tuner`), which hands it how to
measure, log and start a fresh measuring process, so the rounds and the choice are written here alone.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from autosearch.frontend.target import target_to_json
from autosearch.ranking import failures, rank, scores
from autosearch.types import Record

if TYPE_CHECKING:
    from autosearch.frontend.task import TuningTask
    from autosearch.search.scheduler import TaskState
    from autosearch.search.space import Applied
    from autosearch.types import Config, MeasureResult

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

# A layout's model as tuned (the sum of its tasks' best trials) read 4% high to 9% low against the same kernels
# re-timed in the development runs (docs/results.md): the lowest of many noisy timings is a lucky one. So a model
# within 1.09 / 0.96 of the faster as tuned can be the faster re-timed; both are re-timed, and the choice between
# them (export's, the run's summary) is made on the re-timed kernels.
LAYOUT_RETIME_MARGIN = 1.15


def contending_layouts(totals: dict[str, float]) -> list[str | None]:
    """The layouts whose models are re-timed: of ``totals`` (``--layout auto``: each layout's model as tuned,
    seconds), the faster and those within :data:`LAYOUT_RETIME_MARGIN` of it; ``[None]`` (the one model) without
    layouts to choose from."""
    finite = {layout: t for layout, t in totals.items() if math.isfinite(t)}
    if not finite:
        return [None]
    fastest = min(finite.values())
    return [layout for layout, t in finite.items() if t <= LAYOUT_RETIME_MARGIN * fastest]


def rotated(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` starting at position ``round_index`` (mod its length): round r measures finalist r first."""
    if not items:
        return []
    k = round_index % len(items)
    return [*items[k:], *items[:k]]


def contenders(retimes: Iterable[tuple[K, MeasureResult]], finalists: Sequence[K], rounds_left: int) -> list[K]:
    """The ``finalists`` (in their order) that :func:`~autosearch.ranking.rank` can still put first after
    ``rounds_left`` further rounds, whatever those measure: one whose lowest possible final score is above another's
    highest possible one cannot win, nor can one that failed a re-time. Fewer than two: the task is
    settled. (The bounds: the median with every future round at -inf, and at +inf.)"""
    values: dict[K, list[float]] = {c: [] for c in finalists}
    failed: set[K] = set()
    for config, result in retimes:
        if config in values:
            if result.ok:
                values[config].append(result.median)
            else:
                failed.add(config)
    alive = [c for c in finalists if c not in failed and (values[c] or rounds_left > 0)]

    def bound(c: K, future: float) -> float:
        return statistics.median(values[c] + [future] * rounds_left)

    lowest = {c: bound(c, -math.inf) for c in alive}
    highest = {c: bound(c, math.inf) for c in alive}
    return [c for c in alive if all(lowest[c] <= highest[x] for x in alive if x != c)]


def choose(state: TaskState) -> None:
    """A task's best = first of :func:`~autosearch.ranking.rank` on its re-times so far; a finalist that failed one
    is never best (with no valid config left, there is no best)."""
    ranked = rank({c: r.median for c, r in state.measured.items() if r.ok}, state.finalist_results)
    state.best = state.measured[ranked[0]] if ranked else None
    retimed = scores(state.finalist_results).get(ranked[0]) if ranked else None
    state.best_retimed = retimed if retimed is not None and math.isfinite(retimed) else None


@dataclass
class Retiming:
    """The noise-aware best: each task's finalists re-timed in ``rounds`` fresh measuring processes.

    In-run timings are noisy, and so is one fresh process: a kernel can run much faster in one process than in
    every other. Each round replaces the measuring process once (``refresh``, the runner's: a process start costs
    seconds) and measures the top ``top`` configs of every task that can still be chosen (:func:`contenders`),
    each task's in an order rotated from round to round (:func:`rotated`). The choice is :func:`choose` on the
    rounds so far, the rule ``LogContents.ranked`` applies to the log, so ``export`` writes the kernel chosen here.
    Every re-time is logged (``append``) as ``retime`` with its round, and each task's round is reported
    (``on_round``) after its choice. Only the models that can be exported are re-timed (with ``--layout auto``, each
    layout whose model is within :data:`LAYOUT_RETIME_MARGIN` of the faster as tuned), and of each only the tasks
    with at least ``min_share`` of its estimated latency: a noise-misjudged choice in a smaller task moves the
    model by less than that share. The reported latency stays the in-run one, measured like the baseline.
    """

    top: int  # finalists per task
    rounds: int  # fresh measuring processes
    min_share: float
    measure: Callable[[TuningTask, list[Applied]], list[MeasureResult]]  # the loop's: no build for what not applies
    append: Callable[[list[Record]], None]  # the tuning log's
    refresh: Callable[[], None] | None = None  # a fresh measuring process (None: the runner has no other)
    on_round: Callable[[TaskState, list[MeasureResult]], None] | None = None
    strategy: str = ""  # the run's, logged with each re-time

    def run(self, states: Sequence[TaskState], models: Sequence[str | None],
            layers: Sequence[TaskState] = ()) -> None:
        """Re-time the finalists of ``states`` (of the ``models``: layouts whose model can still be the faster,
        :func:`contending_layouts`; ``[None]``: the run tunes one model) and choose each task's best, also of a
        task whose earlier run's re-times still stand."""
        finalists = self.finalists(states, models, layers)
        for round_no in range(1, self.rounds + 1):
            todo = []
            for state, top in finalists:
                alive = contenders(state.finalist_results, top, self.rounds - round_no + 1)
                if len(alive) > 1:  # else settled: no further round can change its choice
                    todo.append((state, [c for c in rotated(top, round_no - 1) if c in alive]))
            if not todo:
                break
            if self.refresh is not None:
                self.refresh()
            for state, configs in todo:
                self._retime(state, configs, round_no)
        for state in states:
            if state.finalist_results:  # this run's rounds, or an earlier run's re-times that still stand
                choose(state)

    def finalists(self, states: Sequence[TaskState], models: Sequence[str | None],
                  layers: Sequence[TaskState] = ()) -> list[tuple[TaskState, list[Config]]]:
        """The tasks worth re-timing with their finalists, best in-run median first: of each of ``models``, those
        with at least ``min_share`` of its estimate, and of ``layers`` (convolutions export may take from another
        layout's model, one layout per convolution) those with that share of the faster model's. A task tuned
        further since its earlier re-times keeps only their failures (:func:`~autosearch.ranking.failures`); a
        kernel that failed one is no finalist."""
        from autosearch.frontend.alternatives import in_model, model_total

        worth: dict[int, TaskState] = {}  # id -> state, in the order of ``states``; a task two models run, once
        totals = []
        for model in models:
            of_model = [s for s in states if in_model(s.task.lowering, model)]
            total = model_total((s.task.lowering, s.task.weight, s.model_seconds) for s in of_model)
            totals.append(total)
            for state in of_model:  # too small a part of the model for a misjudged finalist to matter: skipped
                share = state.task.weight * (state.model_seconds or 0.0)
                if not math.isfinite(total) or share >= self.min_share * total:
                    worth[id(state)] = state
        fastest = min(totals, default=math.inf)
        for state in layers:
            share = state.task.weight * (state.model_seconds or 0.0)
            if not math.isfinite(fastest) or share >= self.min_share * fastest:
                worth[id(state)] = state
        out: list[tuple[TaskState, list[Config]]] = []
        for state in (s for s in states if id(s) in worth):
            if state.trials > state.resumed:  # tuned further: timings from before --resume were of other finalists
                state.finalist_results = failures(state.finalist_results)
            failed = {c for c, _ in failures(state.finalist_results)}  # in an earlier run's re-times: stay out
            top = sorted((c for c, r in state.measured.items() if r.ok and c not in failed),
                         key=lambda c: state.measured[c].median)
            if state.space is not None and len(top) > 1:  # set up in this run: the runner has its reference
                out.append((state, top[: self.top]))
        return out

    def _retime(self, state: TaskState, configs: list[Config], round_no: int) -> None:
        """One round of one task: measure its finalists, log the re-times, choose on the rounds so far."""
        assert state.space is not None
        task = state.task
        results = self.measure(task, [state.space.apply(c) for c in configs])
        target_json = target_to_json(task.target)
        self.append([
            Record(kind="retime", task_key=task.workload_key, task_name=task.name, target=target_json, config=c,
                   result=r, flops=task.flops, strategy=self.strategy, round=round_no,
                   started=time.time() - r.build_secs - r.run_secs)
            for c, r in zip(configs, results)
        ])
        state.finalist_results.extend(zip(configs, results))
        choose(state)
        if self.on_round is not None:
            self.on_round(state, results)

