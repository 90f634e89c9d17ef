"""The task scheduler: which task gets the next batch, how large it is, and when the budget is spent.

Every task first gets a warm-up (in proportion to its FLOPs, see :meth:`TaskScheduler.first_pass`), then each
next batch goes to the task with the largest expected gain in model latency per trial
(:meth:`TaskState.expected_gain`), Ansor's gradient-based allocation: ``weight x best latency x (ALPHA x recent
relative improvement per trial + (1 - ALPHA) / trials so far)``. The backward term rewards tasks that are still
improving; the forward term is Ansor's optimistic guess that the task's latency could still be halved in as many
trials again, so it fades as a task's trials grow and a heavy task whose best stays flat stops taking every batch.
Alternatives the model runs only one of (a layer direct or Winograd, fp32 or bf16, the model in two layouts)
compete: :meth:`TaskScheduler.rivalry` (in fp32 a convolution tuned in both layouts races its own layer, since
export can keep one layout per convolution). Their warm-up comes in two rounds: every task is probed first
(``MIN_FIRST_PASS`` trials for an alternative, its whole warm-up otherwise), then an alternative gets the rest of
its warm-up while it is less than ``BEHIND_LIMIT`` times behind its rival; one further behind is dropped (no
trial while it stays that far behind). Scaled down by the rivalry alone, such an alternative (a model in NCHW
against NHWC with AMX) still took a large share of a run: its tasks, with few trials and slow kernels, have the
largest optimistic gains (docs/findings.md). The model's two layouts are held to a limit that narrows as the run
goes (:meth:`TaskScheduler.layout_limit`): early a layout may trail far and still win, late it does not, and a run
whose losing layout took trials to the end spends them on the one it keeps.

The run stops at its trial budget, or at its time limit (``seconds``: wall time of this process's search, checked
between rounds), whichever comes first; with a time limit the warm-up is planned for the trials the limit is
expected to hold (at most the budget): those measured so far and the rest of the time at the run's own pace (a prior
pace, :data:`PLANNED_TRIALS_PER_CORE_MINUTE`, until :data:`PACE_AFTER_TRIALS` are measured), and the search goes on
past any plan while time and trials remain.

Under a time limit the currency is seconds, not trials: the expected gain is divided by what a trial of the task
costs (:meth:`TaskScheduler.seconds_per_trial`, its rounds' wall time so far). A Winograd layer's trial (a larger
kernel to compile, four times the weights) cost 3-4 times a direct one's on a 2-vCPU Xeon: counted in trials, the
gradient bought its gains at that price. Under a trial budget the currency stays trials, as in Ansor: a study
compares strategies by the measurements they need. With both, the currency is the one expected to run out first at
the run's pace (:meth:`TaskScheduler.time_binds`): the quick start's 400 trials or 10 minutes are trials on a fast
machine and minutes on a slow one.

The scheduler only reads the tasks' states; the loop (:mod:`autosearch.search.tuner`) measures and records.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autosearch.frontend.task import TuningTask
from autosearch.search.space import DecisionSpace
from autosearch.search.strategy import Strategy
from autosearch.types import Config, MeasureResult

ALPHA = 0.2  # Ansor's weight of the backward (observed) gradient against the forward (optimistic) one
MIN_FIRST_PASS = 2
# With a time limit and no trial budget: the trials a minute is expected to hold per build core, which sizes
# each task's warm-up until the run has measured its own pace (PACE_AFTER_TRIALS). A prior from the quick start's
# pace on the development machines (docs/results.md); models of many small tasks measure faster. Only the warm-up
# depends on it.
PLANNED_TRIALS_PER_CORE_MINUTE = 20
PACE_AFTER_TRIALS = 32  # trials of this run after which its own pace replaces the prior one
# An alternative more than this many times slower than its rival (model totals, TaskScheduler.rivalry) after the
# probes is dropped: no more warm-up, no share of the gradient. In the logs of earlier runs (docs/findings.md) the
# layout that won in fp32 was at most 2.5x behind after its first trials; the NCHW model that lost to NHWC on AMX
# was 3.5-5x behind.
BEHIND_LIMIT = 3.0
# The model's layouts (--layout auto) are held to a limit that narrows with the run's progress (the share of its trial
# budget or time limit spent, whichever is further): BEHIND_LIMIT until NARROWING[0], then falling linearly to
# LATE_LAYOUT_LIMIT at NARROWING[1], and that to the end. Replayed on the logs of such runs on Intel and AMD
# (experiments/layout_lag.py --narrowing; docs/results.md), the losing layouts had taken many trials late in the run,
# and the layout that won was never further behind than this limit once NARROWING[0] of the run was spent but in one
# run, which it won by little. At the end the limit is 1: the end of a run goes to the model that leads, the one
# export would keep. Layouts that close are close in what either gives, and kept both to the end they split the
# trials between them. A layer's alternatives (direct or Winograd, fp32 or bf16) keep BEHIND_LIMIT: a layer's lead
# changed hands late in those logs, a model's did not.
NARROWING = (0.3, 0.8)
LATE_LAYOUT_LIMIT = 1.0


def layout_limit(progress: float) -> float:
    """How many times behind the other the model's layout may be and still get trials when ``progress`` (0 to 1) of
    the run is spent: :data:`BEHIND_LIMIT` until ``NARROWING[0]``, then linearly down to :data:`LATE_LAYOUT_LIMIT` at
    ``NARROWING[1]``."""
    start, end = NARROWING
    share = min(1.0, max(0.0, (progress - start) / (end - start)))
    return BEHIND_LIMIT + (LATE_LAYOUT_LIMIT - BEHIND_LIMIT) * share


def gain_factor(own: float, leader: float, limit: float = BEHIND_LIMIT) -> float:
    """What an alternative's gain is scaled by when its total is ``own`` and the faster one's ``leader``: 1 for the
    leader (or an unknown total), ``(leader / own) ** 2`` behind it, 0 (dropped) more than ``limit`` times behind."""
    if not (math.isfinite(own) and leader < own):
        return 1.0
    return 0.0 if own > limit * leader else (leader / own) ** 2


@dataclass
class TaskState:
    """Everything the loop knows about one task while tuning."""

    task: TuningTask
    space: DecisionSpace | None = None
    strategy: Strategy | None = None
    scorer: Any = None
    baseline: MeasureResult | None = None
    prepared: MeasureResult | None = None  # this run's untuned timing (Runner.prepare), set up ahead of activation
    measured: dict[Config, MeasureResult] = field(default_factory=dict)  # effective config -> result
    asked: dict[Config, Config] = field(default_factory=dict)  # requested -> effective
    trials: int = 0  # measured in this log (budget units), resumed ones included
    failures: int = 0
    best: MeasureResult | None = None
    best_trial: int = 0
    history: list[float] = field(default_factory=list)  # the best latency after each trial (inf before an ok one)
    done: str = ""  # why the task stopped ("early stop", "exhausted", ...)
    # (config, result) of the re-times that count (autosearch.ranking.current_retimes): the timings of the current
    # finalists (this run's rounds, and an earlier run's if --resume added no trial) and every failure
    finalist_results: list[tuple[Config, MeasureResult]] = field(default_factory=list)
    empty_rounds: int = 0
    resumed: int = 0  # trials loaded from the log by --resume
    warm_up: int = 0  # warm-up rounds given: 0 none, 1 probed (an alternative), 2 warmed up (TaskScheduler.next_round)
    seconds: float = 0.0  # wall time of this run's rounds of the task (ask, apply, build, time, log, tell)
    timed_trials: int = 0  # the trials those rounds measured
    active: bool = False  # set up (Tuner._activate): baseline logged, scorer made
    known: list[Config] = field(default_factory=list)  # known schedules still to measure before the strategy asks
    known_order: list[Config] | None = None  # every known config in the order to measure it (None: not yet ordered)
    # the best's score over its re-times in fresh processes (autosearch.ranking.score; None: not re-timed). Unlike
    # best.median it is no minimum over the run's trials, so it carries no winner's curse
    best_retimed: float | None = None

    @property
    def best_latency(self) -> float:
        return self.best.median if self.best is not None else math.inf

    @property
    def retimed_model_seconds(self) -> float | None:
        """:attr:`model_seconds` with the best at its re-timed score where its finalists were re-timed."""
        from autosearch.frontend.alternatives import model_latency

        if self.best_retimed is None:
            return self.model_seconds
        untuned = self.baseline.median if self.baseline is not None and self.baseline.ok else None
        return model_latency(self.best_retimed, untuned)

    @property
    def model_seconds(self) -> float | None:
        """What this task costs its model (:func:`autosearch.frontend.alternatives.model_latency`): the faster of
        its best valid measurement and the untuned kernel; None while neither is known."""
        from autosearch.frontend.alternatives import model_latency

        untuned = self.baseline.median if self.baseline is not None and self.baseline.ok else None
        return model_latency(self.best_latency, untuned)

    @property
    def best_gflops(self) -> float:
        return self.best.gflops(self.task.flops) if self.best is not None else 0.0

    @property
    def speedup(self) -> float:
        if self.best is None or self.baseline is None or not self.baseline.ok:
            return 0.0
        return self.baseline.median / self.best.median

    def record(self, config: Config, result: MeasureResult) -> bool:
        """Account one new measurement; True if it is a new best."""
        self.measured[config] = result
        self.trials += 1
        if not result.ok:
            self.failures += 1
        improved = result.ok and result.median < self.best_latency
        if improved:
            self.best, self.best_trial = result, self.trials
        self.history.append(self.best_latency)
        return improved

    def expected_gain(self, window: int) -> float:
        """Ansor's gradient: model seconds saved per further trial of this task (estimated).

        ``weight x latency x (ALPHA x backward + (1 - ALPHA) x forward)``: backward is the relative
        improvement per trial over the last ``window`` trials, forward is ``1 / trials``.
        """
        latency = self.best_latency if math.isfinite(self.best_latency) else (
            self.baseline.median if self.baseline is not None and self.baseline.ok else 1.0)
        if len(self.history) > window and math.isfinite(self.history[-1]):
            # the latency's relative fall (1 where the window began with no working kernel): in latency, not in
            # GFLOPS, which a task that only moves data has none of (its GFLOPS stay 0, as if always improving)
            backward = (1.0 - self.history[-1] / self.history[-window - 1]) / window
        else:
            backward = 1.0 / max(1, window)
        forward = 1.0 / max(1, self.trials)
        return self.task.weight * latency * (ALPHA * backward + (1 - ALPHA) * forward)


class TaskScheduler:
    """Spreads a trial budget or a time limit over the tasks of ``states`` (see the module docstring).

    ``cores``: the build workers, which set the prior pace of a run bounded by time alone. The clock starts at
    construction (:attr:`started`, ``time.perf_counter`` seconds); :meth:`start_counting` marks the trials already
    measured (loaded by ``--resume``) as not this run's, so the run's own pace counts its own trials alone.
    """

    def __init__(self, states: Sequence[TaskState], *, budget: int | None = None, seconds: float | None = None,
                 batch: int = 16, cores: int = 1) -> None:
        if budget is None and seconds is None:
            raise ValueError("a trial budget, a time limit or both")
        if budget is not None and budget <= 0:
            raise ValueError("budget must be positive")
        if seconds is not None and not seconds > 0:
            raise ValueError("the time limit must be positive")
        self.states = list(states)
        self.budget = budget
        self.seconds = seconds
        self.batch = batch
        self.prior_pace = PLANNED_TRIALS_PER_CORE_MINUTE * cores / 60  # trials per second
        self.started = time.perf_counter()
        self._earlier_trials = 0
        from autosearch.frontend.alternatives import task_layouts

        self._auto_layouts = {layout for s in self.states if "layouts" in s.task.lowering
                              for layout in task_layouts(s.task.lowering)}
        self.order = self._probe_order()

    def _probe_order(self) -> list[TaskState]:
        """The order tasks are set up and probed in: with ``--layout auto``, every task the first-named layout's
        model runs (its own and those both layouts share), then the other layout's; otherwise the tasks' own order.
        Probed in turns, neither layout's model had a latency for every task until the last probe (minutes into a
        run on a slow machine), so a run stopped before then had nothing to export; one layout first has a model
        halfway through the probes. Every task is still probed before any warm-up or gradient batch."""
        from autosearch.frontend.alternatives import in_model, task_layouts

        first = next((task_layouts(s.task.lowering)[0] for s in self.states if self._in_one_layout(s.task.lowering)),
                     None)
        if first is None:
            return list(self.states)
        return sorted(self.states, key=lambda s: not in_model(s.task.lowering, first))  # stable: groups keep order

    def start_counting(self) -> None:
        """The trials measured so far are an earlier run's (``--resume``): the pace counts later ones only."""
        self._earlier_trials = self.trials_done

    @property
    def trials_done(self) -> int:
        return sum(s.trials for s in self.states)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def planned(self) -> int:
        """The trials the warm-up is planned for (:meth:`first_pass`): with a time limit the trials measured so far
        and what the rest of the limit should hold at this run's pace, at most the budget; the budget otherwise.
        (With both, on a machine slow enough for the limit to come first, a warm-up planned for the budget took
        the whole run.)"""
        if self.seconds is None:
            assert self.budget is not None
            return self.budget
        held = self._trials_the_limit_holds()
        return held if self.budget is None else min(self.budget, held)

    def _trials_the_limit_holds(self) -> int:
        assert self.seconds is not None
        elapsed = self.elapsed()
        measured = self.trials_done - self._earlier_trials
        pace = measured / elapsed if measured >= PACE_AFTER_TRIALS and elapsed > 0 else self.prior_pace
        return max(1, self.trials_done + math.ceil(pace * max(0.0, self.seconds - elapsed)))

    def time_binds(self) -> bool:
        """Whether the time limit, not the trial budget, is expected to end the run (at this run's pace): then
        seconds are the currency of :meth:`next_task`, otherwise trials."""
        return self.seconds is not None and (self.budget is None or self._trials_the_limit_holds() < self.budget)

    def has_budget(self) -> bool:
        """Whether another round may start: time left and trials left."""
        time_left = self.seconds is None or self.elapsed() < self.seconds
        return time_left and (self.budget is None or self.trials_done < self.budget)

    def first_pass(self, state: TaskState) -> int:
        """Warm-up trials of a task before the gradient scheduler takes over.

        Half the budget (or of the trials a time limit is planned to hold) at most is spent warming up,
        shared in proportion to each task's FLOPs x weight (a prior for its share of the model's time), at
        least ``MIN_FIRST_PASS`` trials (enough to see whether any schedule beats the untuned kernel) and at
        most one batch. A YOLOv8n has 66 tasks, a third of them copies, splits and concatenations with no
        FLOPs: an equal split of the warm-up spent most of a 400-trial budget on them.
        """
        total = sum(s.task.flops * s.task.weight for s in self.states) or 1.0
        share = state.task.flops * state.task.weight / total
        planned = self.planned  # read once: with a time limit it is computed from the clock
        even = planned // (2 * max(1, len(self.states)))
        by_share = int(round(planned / 2 * share))
        return max(1, min(self.batch, max(min(MIN_FIRST_PASS, even), by_share)))

    def is_alternative(self, state: TaskState) -> bool:
        """Whether the model runs ``state``'s task or a rival instead: a layer tuned in two algorithms or
        precisions, or a task of one layout of a ``--layout auto`` model (not one both layouts run)."""
        lowering = state.task.lowering
        return "layer" in lowering or self._in_one_layout(lowering)

    def _in_one_layout(self, lowering: dict[str, Any]) -> bool:
        """Whether a task of a ``--layout auto`` model runs in one layout's model only (not one both share)."""
        from autosearch.frontend.alternatives import task_layouts

        return "layouts" in lowering and len(task_layouts(lowering)) < len(self._auto_layouts)

    def batch_for(self, state: TaskState) -> int:
        """The size of ``state``'s next batch: its probe (the whole warm-up unless it is an alternative), the rest
        of its warm-up, or a batch; never beyond the budget; 0 when its warm-up round is already measured
        (``--resume``)."""
        first = self.first_pass(state)
        if state.warm_up == 0:
            n = (min(first, MIN_FIRST_PASS) if self.is_alternative(state) else first) - state.trials
        elif state.warm_up == 1:
            n = first - state.trials
        else:
            n = self.batch
        n = max(0, n)
        return min(n, self.budget - self.trials_done) if self.budget is not None else n

    def next_task(self) -> TaskState | None:
        """The task that gets the next batch: a task not yet probed, in :attr:`order`; then an alternative still
        warming up that is not dropped (``BEHIND_LIMIT``), in the tasks' order; then the largest expected gain. None
        when every task is done."""
        live = [s for s in self.states if not s.done]
        if not live:
            return None
        unprobed = [s for s in self.order if s.warm_up == 0 and not s.done]
        if unprobed:
            return unprobed[0]
        rivalry = self.rivalry()
        warming = [s for s in live if s.warm_up == 1 and s.trials < self.first_pass(s)
                   and rivalry.get(id(s), 1.0) > 0]
        if warming:
            return warming[0]
        cost = self.seconds_per_trial if self.time_binds() else (lambda s: 1.0)  # time: per second
        return max(live, key=lambda s: s.expected_gain(window=2 * self.batch) * rivalry.get(id(s), 1.0) / cost(s))

    def seconds_per_trial(self, state: TaskState) -> float:
        """Wall seconds a further trial of ``state`` is expected to cost: its rounds' time over their trials; for a
        task not yet timed (its trials all resumed), the mean over the timed ones (1 when none is)."""
        if state.timed_trials:
            return max(state.seconds / state.timed_trials, 1e-6)
        timed = [s for s in self.states if s.timed_trials]
        if not timed:
            return 1.0
        return max(sum(s.seconds for s in timed) / sum(s.timed_trials for s in timed), 1e-6)

    def next_round(self) -> tuple[TaskState, int] | None:
        """The next task and the size of its batch, its warm-up advanced by this round; None when every task is
        done. A warm-up round already measured (``--resume``) is skipped."""
        while True:
            state = self.next_task()
            if state is None:
                return None
            n = self.batch_for(state)
            stage = state.warm_up
            if stage == 0:
                state.warm_up = 1 if self.is_alternative(state) else 2
            elif stage == 1:
                state.warm_up = 2
            if n > 0:
                return state, n
            if stage == 2:  # no trial left in the budget
                return None

    def progress(self) -> float:
        """How far the run is, 0 to 1: the share of its trial budget or of its time limit spent, whichever is
        further (a ``--resume``'s trials count toward its budget, as they do toward ending it)."""
        shares = []
        if self.budget is not None:
            shares.append(self.trials_done / self.budget)
        if self.seconds is not None:
            shares.append(self.elapsed() / self.seconds)
        return min(1.0, max(shares))

    def layout_limit(self) -> float:
        """How many times behind the other the model's layout may be and still get trials, at this point of the run
        (:func:`layout_limit`)."""
        return layout_limit(self.progress())

    def dropped_layouts(self) -> dict[str, float]:
        """With ``--layout auto``: the layouts taking no trials now (more than :meth:`layout_limit` times behind the
        other), each with how many times behind it is; {} where the convolutions race layer by layer
        (:meth:`layer_layout_costs`): a layout's model then stops, its faster layers do not."""
        layouts = self.layout_totals()
        if len(layouts) < 2 or self.layer_layout_costs():
            return {}
        leader, limit = min(layouts.values()), self.layout_limit()
        return {layout: total / leader for layout, total in layouts.items() if gain_factor(total, leader, limit) == 0}

    def layout_totals(self) -> dict[str, float]:
        """With ``--layout auto``: each layout's model seconds as tuned so far ({} otherwise)."""
        from autosearch.frontend.alternatives import layout_totals

        return layout_totals((s.task.lowering, s.task.weight, s.model_seconds) for s in self.states)

    def layer_layout_costs(self) -> dict[int, tuple[float, float]]:
        """With ``--layout auto`` in fp32: for each convolution task of one layout's model whose layer (its
        geometry) both layouts tune, (its layer's cost in its own layout, the faster layout's), each weight x best
        latency of the layer's faster algorithm there (:func:`autosearch.frontend.layer_layouts.choose`); {}
        otherwise. ``export`` keeps one layout per convolution where that gains (:mod:`~autosearch.frontend.
        layer_layouts`), so a layout's convolutions race the other layout's same layer, not its whole model: raced
        as models, the slower model's faster layers stopped taking trials late in the run and export then kept
        them. Keys are ``id(state)``."""
        from autosearch.frontend.layer_layouts import choose

        _, costs = choose((geometry, layout, s.task.weight * s.best_latency) for s, geometry, layout in self._layers)
        return {id(s): (costs[geometry][layout], min(costs[geometry].values()))
                for s, geometry, layout in self._layers if len(costs[geometry]) > 1}

    @functools.cached_property
    def _layers(self) -> list[tuple[TaskState, str, str]]:
        """(state, geometry, layout) of each convolution task one layout's model runs alone, where export may keep
        one layout per convolution (:func:`autosearch.frontend.layer_layouts.layer_of`); fixed for the run."""
        from autosearch.frontend.layer_layouts import applies, layer_of

        if not applies(s.task.lowering for s in self.states):
            return []
        layers = [(s, layer_of(s.task.name, s.task.args, s.task.lowering)) for s in self.states]
        return [(s, *layer) for s, layer in layers if layer is not None]

    def rivalry(self) -> dict[int, float]:
        """Gain factors for alternatives the model runs only one of: a layer tuned both ways (direct and
        winograd), and with ``--layout auto`` the whole model in two layouts (:mod:`autosearch.frontend.alternatives`).
        The slower alternative's gain is scaled by ``(faster total / own total) ** 2`` (totals: weight x latency
        of the alternative's tasks): its own latency counts only once it overtakes, and that gets less likely
        the further behind it is; more than ``BEHIND_LIMIT`` times behind (a layout: :meth:`layout_limit`), by 0:
        dropped. The leader keeps its gain; a task both layouts run is no layout's rival. In fp32 a convolution
        both layouts tune races its own layer in the other layout instead (:meth:`layer_layout_costs`), under the
        same narrowing limit. Keys are ``id(state)``."""
        from autosearch.frontend.alternatives import task_layouts
        from autosearch.frontend.winograd import layer_totals

        totals = layer_totals((s.task.lowering, s.task.weight, s.best_latency) for s in self.states)
        layouts = self.layout_totals()
        narrowed = self.layout_limit() if len(layouts) > 1 else BEHIND_LIMIT
        by_layer = self.layer_layout_costs() if len(layouts) > 1 else {}
        out = {}
        for s in self.states:
            factor = 1.0
            if "layer" in s.task.lowering:
                by_algorithm = totals[s.task.lowering["layer"]]
                factor *= gain_factor(by_algorithm[s.task.lowering["algorithm"]], min(by_algorithm.values()))
            if len(layouts) > 1 and "layouts" in s.task.lowering:
                if id(s) in by_layer:  # a convolution export can take in either layout: its layer's race
                    own, leader = by_layer[id(s)]
                else:
                    own, leader = min(layouts[layout] for layout in task_layouts(s.task.lowering)), min(
                        layouts.values())
                factor *= gain_factor(own, leader, narrowed)
            if factor != 1.0:
                out[id(s)] = factor
        return out
