"""The tuning loop: ask -> apply -> measure -> log -> tell, over a model's tasks; then the finalists re-timed.

Which task gets the next batch, how large it is and when the budget (trials, a time limit or both) is spent is the
task scheduler's (:mod:`autosearch.search.scheduler`); this module sets each task up when it is first scheduled,
measures and logs every batch, tells the strategy and the cost model, and after the search has each task's
finalists re-timed in fresh measuring processes (:class:`autosearch.search.finalists.Retiming`).
A task stops early after ``early_stop`` trials without improvement, or when its space is exhausted.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autosearch.frontend.target import host_cores, target_to_json
from autosearch.frontend.task import TuningTask
from autosearch.ranking import failures
from autosearch.records import LogContents, TuningLog
from autosearch.search.cost_model import guides_unit, pretrained_model
from autosearch.search.disturbed import measure_steadily
from autosearch.search.finalists import Retiming
from autosearch.search.known import SOURCE as KNOWN_SOURCE
from autosearch.search.known import KnownSchedules, by_prediction
from autosearch.search.resized import refit
from autosearch.search.scheduler import TaskScheduler, TaskState
from autosearch.search.siblings import SOURCE as SIBLING_SOURCE
from autosearch.search.siblings import group, lent
from autosearch.search.sketch_store import SketchStore
from autosearch.search.space import Applied, DecisionSpace
from autosearch.search.strategy import make_strategy
from autosearch.tensor_units.cpu import target_mcpu
from autosearch.types import Config, MeasureResult, Record, Status

log = logging.getLogger(__name__)

# Tasks whose weight x latency is below this share of the model's estimated latency keep their in-run best:
# a noise-misjudged choice there moves the model by a fraction of that share, while re-timing them in
# fresh processes (many small copies, pools and transposes) costs as much as re-timing the convolutions.
FINALIST_MIN_SHARE = 0.01
MAX_EMPTY_ROUNDS = 3
# Tasks set up together (:meth:`Tuner._prepare`): their untuned modules build on every build core while their
# design spaces are built here. More overlap per chunk, but tasks a short run never reaches are set up too.
SETUP_CHUNK = 8


@dataclass(frozen=True)
class TuneEvent:
    """Progress report after each batch (what the CLI's progress bar shows)."""

    task: TaskState
    trials_done: int
    budget: int | None  # the trial budget; None when the run is bounded by its time limit alone
    batch_results: Sequence[MeasureResult]
    elapsed: float
    # "baseline" | "batch" | "retime"; "transitions": the layout transforms tuned after the run (api.tune), their own
    # trials and clock counted from 0
    phase: str = "batch"


@dataclass
class TuneSummary:
    states: list[TaskState]
    trials: int
    elapsed: float
    interrupted: bool = False
    timing: dict[str, float] = field(default_factory=dict)  # wall seconds per step of the loop (Tuner.timing)
    setup_timing: dict[str, float] = field(default_factory=dict)  # the set-up's parts (Tuner.setup_timing)
    # --layout auto: a layout taking no trials at the end -> (trials measured when it stopped, the run's progress then,
    # how many times behind the other it was) (TaskScheduler.dropped_layouts)
    layouts_dropped: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    def guidance(self) -> dict[str, float]:
        """Where the cost models' time went, summed over tasks (seconds; counts): featurising configs (apply +
        features), fitting, predicting. Part of the loop's ``ask`` (scoring) and ``tell`` (refit) steps."""
        out = {"featurised": 0.0, "featurise_secs": 0.0, "fits": 0.0, "fit_secs": 0.0, "predict_secs": 0.0}
        for s in self.states:
            stats = getattr(s.scorer, "stats", None)
            if stats is None:
                continue
            out["featurised"] += stats.featurised
            out["featurise_secs"] += stats.featurise_secs
            out["fits"] += stats.fits
            out["fit_secs"] += stats.fit_secs
            out["predict_secs"] += stats.predict_secs
        return out



class Tuner:
    """Tunes a list of tasks with one strategy, writing every measurement to an append-only log."""

    def __init__(
        self,
        *,
        tasks: Sequence[TuningTask],
        runner,
        log: TuningLog,
        strategy: str,
        budget: int | None = None,
        seconds: float | None = None,
        batch: int = 16,
        seed: int = 0,
        strategy_options: dict[str, Any] | None = None,
        cost_model: str | None = None,
        warm_start: Sequence[Any] = (),  # LogContents / log paths / Records for the cost model
        known: KnownSchedules | None = None,  # configs measured elsewhere for these tasks, measured first
        early_stop: int | None = None,
        finalists: int = 3,
        finalist_rounds: int = 3,
        resume: LogContents | None = None,
        on_event: Callable[[TuneEvent], None] | None = None,
        sketch_store: SketchStore | None = None,  # tasks' sketches from earlier set-ups (None: built afresh)
        siblings: bool = False,  # tasks of one loop nest with different epilogues lend each other their best
    ) -> None:
        if finalist_rounds < 0:
            raise ValueError("finalist_rounds must be 0 (no re-timing) or more")
        self.runner = runner
        self.log = log
        self.strategy_name = strategy
        self.strategy_options = dict(strategy_options or {})
        self.cost_model = cost_model
        self.warm_start = list(warm_start)
        self.known = known
        self.budget = budget
        self.batch = batch
        self.seed = seed
        self.early_stop = early_stop
        self.finalists = finalists
        self.finalist_rounds = finalist_rounds  # fresh measuring processes that re-time every task's finalists
        self.on_event = on_event or (lambda event: None)
        self.sketch_store = sketch_store
        self.states = [TaskState(task=t) for t in tasks]
        self._siblings = group(self.states) if siblings else {}  # autosearch.search.siblings
        cores = getattr(runner, "build_workers", None) or host_cores()
        self.scheduler = TaskScheduler(self.states, budget=budget, seconds=seconds, batch=batch, cores=cores)
        self._headers_logged: set[str] = set()
        self._trial_counter = 0
        # wall seconds per step of the loop (benchmarks report the split; measure = build + run)
        self.timing = {"ask": 0.0, "apply": 0.0, "measure": 0.0, "log": 0.0, "tell": 0.0, "setup": 0.0,
                       "finalists": 0.0}
        # where the set-up goes (parts of "setup"): design spaces, untuned reference runs, scorers and strategies
        self.setup_timing = {"space": 0.0, "baseline": 0.0, "strategy": 0.0}
        self.layouts_dropped: dict[str, tuple[int, float, float]] = {}  # TuneSummary.layouts_dropped
        self._ahead: dict[tuple[str, Config], Applied] = {}  # known configs of tasks still to probe, built ahead
        if resume is not None:
            self._load(resume)
        self.scheduler.start_counting()  # the log's trials are not this run's: the pace counts this run's alone

    # ------------------------------------------------------------------ resume
    def _load(self, contents: LogContents) -> None:
        """Continue from an earlier log: its measurements count, none is measured again."""
        by_key = {s.task.workload_key: s for s in self.states}
        self._headers_logged.update(contents.tasks)
        for rec in contents.records:
            state = by_key.get(rec.task_key)
            if state is None:
                continue
            if rec.kind == "baseline":
                state.baseline = rec.result
            elif rec.kind == "retime" and rec.config is not None:
                state.finalist_results.append((rec.config, rec.result))
            elif rec.kind == "trial":
                state.finalist_results = failures(state.finalist_results)  # timings count after the last trial
                if rec.config is not None and rec.config not in state.measured:
                    state.record(rec.config, rec.result)
                    if rec.requested is not None:
                        state.asked[rec.requested] = rec.config
                    self._trial_counter = max(self._trial_counter, rec.trial)
        for state in self.states:
            state.resumed = state.trials
            if state.trials:
                log.info("resumed %s: %d trials, best %.1f GFLOPS", state.task.name, state.trials, state.best_gflops)

    @property
    def trials_done(self) -> int:
        return self.scheduler.trials_done

    # ------------------------------------------------------------------ task set-up
    def _activate(self, state: TaskState) -> None:
        """A task's scorer and known schedules when it is first scheduled, its baseline logged; its design space
        and baseline come from :meth:`_prepare`, set up with the tasks after it. Its strategy is made when the
        known schedules are measured (:meth:`_start_strategy`)."""
        task = state.task
        if task.workload_key not in self._headers_logged:
            self.log.write_task(task.to_json())
            self._headers_logged.add(task.workload_key)
        if state.prepared is None:
            self._prepare(state)
        baseline = state.prepared
        assert baseline is not None and state.space is not None
        clock = time.perf_counter()
        if state.baseline is None or not state.baseline.ok:
            state.baseline = baseline
            self.log.append([Record(kind="baseline", task_key=task.workload_key, task_name=task.name,
                                    target=target_to_json(task.target), config=None, result=baseline,
                                    flops=task.flops)])
        self.on_event(TuneEvent(state, self.trials_done, self.budget, [baseline], self._elapsed(), "baseline"))
        self._scorer(state)
        state.known = self._known_configs(state)
        state.active = True
        self.setup_timing["strategy"] += time.perf_counter() - clock

    def _scorer(self, state: TaskState):
        """The task's scorer (None where the cost model does not guide it), made once: when the task is activated,
        or before, when the next probes' known kernels are built ahead in the order it gives them."""
        task = state.task
        if state.scorer is None and self.cost_model and state.space is not None:
            from autosearch.tensor_units.cpu import bf16_unit
            from autosearch.tensor_units.sketch import is_bf16_unit_task

            if guides_unit(self.cost_model, bf16_unit(task.target) if is_bf16_unit_task(task.mod) else None):
                from autosearch.search.cost_model import make_scorer

                state.scorer = make_scorer(self.cost_model, state.space, task, seed=self._task_seed(state),
                                           warm_start=self.warm_start)
                if state.measured:
                    state.scorer.update(list(state.measured), list(state.measured.values()))
        return state.scorer

    def _known_configs(self, state: TaskState) -> list[Config]:
        """The configs ``state``'s task measures first, not measured yet: those its space asks to be measured first
        (:attr:`DecisionSpace.measure_first`: a probe of one or two kernels would otherwise leave them to a later
        round), then the known schedules that fit its space, in the order a pre-trained cost model gives them
        (:func:`~autosearch.search.known.by_prediction`; a model trained online knows nothing of them yet). A task
        with none of its own takes its layer's at the nearest other shape, re-fitted to its extents."""
        if state.space is None:
            return []
        if state.known_order is None:
            task = state.task
            first = list(state.space.measure_first)
            host = target_mcpu(task.target)
            known = [] if self.known is None else self.known.for_task(
                task.workload_key, host_cpu=host, fits=state.space.replayable)
            if self.known is not None and not known:  # its layer at another shape (autosearch.search.resized)
                space = state.space
                known = self.known.for_layer(task.name, task.args, task.lowering, host_cpu=host,
                                             refit=lambda config: refit(space, config), fits=space.replayable)
            scorer = self._scorer(state) if pretrained_model(self.cost_model or "") and len(known) > 1 else None
            if scorer is not None:
                known = by_prediction(known, scorer.score(known))
            state.known_order = first + [c for c in known if c not in first]
        return [c for c in state.known_order if c not in state.measured and c not in state.asked]

    def _build_ahead(self, state: TaskState, builds: int) -> None:
        """Fill the build workers ``state``'s batch of ``builds`` kernels leaves idle with the next probes' kernels.

        A probe (a task's first batch) is often one or two known configs: a batch of one kernel on two build workers
        leaves one idle for the whole build, and a model of many small tasks probes most of its tasks so. The tasks
        probed next, in the scheduler's order, and the known configs they will measure first are known before their
        turn: their kernels build beside this batch's, and their batch takes the built kernel (with its build
        seconds) instead of building it. Nothing else changes: the same configs are measured in the same order, and
        none is timed while a build runs.
        """
        spare_builds = getattr(self.runner, "spare_builds", None)  # a runner plug-in need not build ahead
        spare = spare_builds(builds) if spare_builds is not None else 0
        mods = []
        for other in self.scheduler.order:
            if len(mods) >= spare:
                break
            if (other is state or other.done or other.warm_up != 0 or other.space is None
                    or other.prepared is None or not other.prepared.ok):
                continue
            known = other.known if other.active else self._known_configs(other)
            for config in known[:max(0, min(spare - len(mods), self.scheduler.batch_for(other)))]:
                key = (other.task.workload_key, config)
                if key in self._ahead:
                    continue
                applied = other.space.apply(config)
                if applied.ok and applied.config not in other.measured:
                    self._ahead[key] = applied
                    mods.append(applied.mod)
        if mods:
            self.runner.prefetch(mods)

    def _task_seed(self, state: TaskState) -> int:
        # a resumed task draws a fresh random stream: the first run's would propose the logged configs again
        return (self.seed * 1_000_003 + state.task.index * 7919 + state.resumed * 104_729) % (2**31 - 1)

    def _start_strategy(self, state: TaskState) -> None:
        """The task's strategy, handed every trial measured before it (a resumed log's, the known schedules')."""
        clock = time.perf_counter()
        task = state.task
        task_seed = self._task_seed(state)
        state.strategy = make_strategy(self.strategy_name, state.space, seed=task_seed, cost_model=state.scorer,
                                       task_id=f"{task.name}-{task.workload_key[:10]}", **self.strategy_options)
        if state.measured:  # measured before: as measured, and as requested where TVM changed them
            history = dict(state.measured)
            for requested, effective in state.asked.items():
                history.setdefault(requested, state.measured[effective])
            state.strategy.resume(list(history), list(history.values()))
        self.setup_timing["strategy"] += time.perf_counter() - clock

    def _prepare(self, state: TaskState) -> None:
        """Design space and untuned baseline of ``state`` and of the next tasks waiting to be activated, at once.

        Set up one at a time, a task's design space was built here while the build workers idled, then its
        untuned module built on one worker while the others idled: on a model of many tasks a large share of a
        short run (``experiments/setup_time.py``). Set up in chunks, the untuned modules build on every build
        worker while the design spaces are built here; the baselines are timed after every build has ended (the
        runner's :meth:`prepare_many`).
        """
        waiting = [s for s in self.scheduler.order  # the order the scheduler probes them in
                   if s is not state and not s.active and s.prepared is None and not s.done]
        chunk = [state] + waiting[: SETUP_CHUNK - 1]
        space_secs = 0.0

        def build_spaces() -> None:
            nonlocal space_secs
            clock = time.perf_counter()
            for s in chunk:
                if s.space is None:
                    s.space = DecisionSpace(s.task.mod, s.task.target, seed=self.seed, store=self.sketch_store)
            space_secs = time.perf_counter() - clock

        clock = time.perf_counter()
        results = self.runner.prepare_many([s.task for s in chunk], meanwhile=build_spaces)
        for s, result in zip(chunk, results):
            s.prepared = result
        self.setup_timing["space"] += space_secs
        self.setup_timing["baseline"] += time.perf_counter() - clock - space_secs

    def _elapsed(self) -> float:
        return self.scheduler.elapsed()

    def run(self) -> TuneSummary:
        interrupted = False
        # every task's header first: a log (or an early export of it) then holds every task, measured or not,
        # so a model with unmeasured tasks is seen as unknown, not as cheaper (--layout auto compares two)
        for state in self.states:
            if state.task.workload_key not in self._headers_logged:
                self.log.write_task(state.task.to_json())
                self._headers_logged.add(state.task.workload_key)
        try:
            while self.scheduler.has_budget():
                picked = self.scheduler.next_round()
                if picked is None:
                    break
                state, n = picked
                if not state.active:
                    t0 = time.perf_counter()
                    self._activate(state)
                    self.timing["setup"] += time.perf_counter() - t0
                self._round(state, n)
                self._note_dropped_layouts()
            if self.finalists > 1 and self.finalist_rounds > 0:
                t0 = time.perf_counter()
                self._retime_finalists()
                self.timing["finalists"] += time.perf_counter() - t0
        except KeyboardInterrupt:
            interrupted = True
            log.warning("interrupted: the log holds every batch measured so far; continue with --resume")
        summary = TuneSummary(states=self.states, trials=self.trials_done, elapsed=self._elapsed(),
                              interrupted=interrupted, timing=dict(self.timing),
                              layouts_dropped=dict(self.layouts_dropped),
                              setup_timing=dict(self.setup_timing))
        return summary

    def _note_dropped_layouts(self) -> None:
        """Record (and log) when each layout stopped taking trials, for the run's summary; a layout taken back (its
        tasks' probes, which run regardless, brought it within the limit) loses its record."""
        dropped = self.scheduler.dropped_layouts()
        for layout in set(self.layouts_dropped) - set(dropped):
            del self.layouts_dropped[layout]
        for layout, behind in dropped.items():
            if layout not in self.layouts_dropped:
                progress = self.scheduler.progress()
                self.layouts_dropped[layout] = (self.trials_done, progress, behind)
                log.info("the %s model takes no more trials: %.2fx behind the other after %d trials, %.0f%% of the run",
                         layout, behind, self.trials_done, 100 * progress)

    def _retime_finalists(self) -> None:
        """The noise-aware best (:class:`autosearch.search.finalists.Retiming`), measured, logged and reported as
        the search's batches are; of the models that can be exported (--layout auto: the faster layout's, and the
        other's when it is close enough for the re-times to reverse the order; in fp32, each convolution that leads
        its layer, which export may keep one layout per convolution)."""
        from autosearch.search.finalists import contending_layouts

        def on_round(state: TaskState, results: list[MeasureResult]) -> None:
            self.on_event(TuneEvent(state, self.trials_done, self.budget, results, self._elapsed(), "retime"))

        retiming = Retiming(top=self.finalists, rounds=self.finalist_rounds, min_share=FINALIST_MIN_SHARE,
                            measure=self._measure, append=self.log.append,
                            refresh=getattr(self.runner, "refresh", None), on_round=on_round,
                            strategy=self.strategy_name)
        by_layer = self.scheduler.layer_layout_costs()  # fp32 --layout auto: each layer's faster layout may be kept
        leaders = [s for s in self.states if id(s) in by_layer and by_layer[id(s)][0] <= by_layer[id(s)][1]]
        retiming.run(self.states, contending_layouts(self.scheduler.layout_totals()), leaders)

    def _round(self, state: TaskState, n: int) -> None:
        """One batch of one task: ask, apply, de-duplicate, measure, log, tell. While the task has known schedules
        to measure, they are the batch; the strategy is made when they are measured, told of them, and asked for
        the rest of the batch. After that, a sibling ahead of the task lends its best config as the batch's first
        (:mod:`autosearch.search.siblings`), the strategy asked for the rest."""
        if not state.known and state.strategy is None:
            clock = time.perf_counter()
            self._start_strategy(state)  # part of the task's set-up (setup_timing["strategy"])
            self.timing["setup"] += time.perf_counter() - clock
        task, space, strategy = state.task, state.space, state.strategy
        assert space is not None
        clock = started = time.perf_counter()
        borrowed: list[Config] = []  # a sibling's best, measured here first (autosearch.search.siblings)
        if state.known:
            asked, state.known = state.known[:n], state.known[n:]
            source = KNOWN_SOURCE
            rest = n - len(asked)
            own = asked
        else:
            assert strategy is not None
            siblings = self._siblings.get(id(state))
            config = lent(state, siblings) if siblings else None
            asked = strategy.ask(n - 1) if config is not None and n > 1 else strategy.ask(n)
            if config is not None and config not in asked and (n > 1 or not asked):
                borrowed = [config]
            source, rest = self.strategy_name, 0
            own = asked
            asked = borrowed + asked
        clock = self._tick("ask", clock)
        if not asked:
            state.done = "exhausted"
            return
        new: list[tuple[Config, Applied]] = []
        told: dict[Config, MeasureResult] = {}
        pending: dict[Config, Config] = {}  # effective -> the requested config measured for it
        built_ahead: set[Config] = set()  # configs whose kernels built beside an earlier batch: nothing to build now
        for config in asked:
            applied = self._ahead.pop((task.workload_key, config), None)
            if applied is not None:
                built_ahead.add(config)
            else:
                applied = space.apply(config)
            effective = applied.config
            state.asked[config] = effective
            if effective in state.measured:  # TVM mapped it onto a config measured before
                told[config] = state.measured[effective]
            elif effective in pending:  # two asks that TVM maps to one schedule: measured once
                continue
            else:
                pending[effective] = config
                new.append((config, applied))
        self._build_ahead(state, sum(a.ok for c, a in new if c not in built_ahead))
        clock = self._tick("apply", clock)
        results = self._measure(task, [a for _, a in new])
        clock = self._tick("measure", clock)
        records = []
        target_json = target_to_json(task.target)
        for (requested, applied), result in zip(new, results):
            self._trial_counter += 1
            records.append(Record(
                kind="trial", task_key=task.workload_key, task_name=task.name,
                target=target_json, config=applied.config, requested=requested,
                result=result, flops=task.flops, trace=applied.trace_json() if applied.ok else None,
                strategy=SIBLING_SOURCE if requested in borrowed else source, trial=self._trial_counter,
                started=time.time() - result.build_secs - result.run_secs, finished=time.time(),
            ))
            state.record(applied.config, result)
            told[requested] = result
        self.log.append(records)  # flushed and fsynced: this batch survives a crash from here on
        clock = self._tick("log", clock)
        if state.scorer is not None and new:
            state.scorer.update([a.config for _, a in new], results)
        for config in asked:  # the duplicates of this batch get the result of the config measured for them
            if config not in told and state.asked.get(config) in pending:
                told[config] = told[pending[state.asked[config]]]
        if strategy is not None:  # what it asked for, not what a sibling lent
            tell_configs = [c for c in own if c in told]
            strategy.tell(tell_configs, [told[c] for c in tell_configs])
        self._tick("tell", clock)
        state.seconds += time.perf_counter() - started
        state.timed_trials += len(new)
        state.empty_rounds = 0 if new else state.empty_rounds + 1
        # After --resume a seeded strategy may first re-ask what the log already holds (told, not
        # measured): allow those rounds before calling the space exhausted.
        if state.empty_rounds >= MAX_EMPTY_ROUNDS + math.ceil(state.resumed / max(1, n)):
            state.done = "exhausted"
        if self.early_stop and state.trials - state.best_trial >= self.early_stop and state.best is not None:
            state.done = f"no improvement in {self.early_stop} trials"
        self.on_event(TuneEvent(state, self.trials_done, self.budget, results, self._elapsed()))
        if rest > 0 and not state.done and self.scheduler.has_budget():
            self._round(state, rest)

    def _tick(self, step: str, since: float) -> float:
        now = time.perf_counter()
        self.timing[step] += now - since
        return now

    def _measure(self, task: TuningTask, applied: list[Applied]) -> list[MeasureResult]:
        """Measure the applicable configs; the rest are ``invalid_config`` without a build."""
        results: list[MeasureResult | None] = [None] * len(applied)
        buildable = [(i, a) for i, a in enumerate(applied) if a.ok]
        for i, a in enumerate(applied):
            if not a.ok:
                results[i] = MeasureResult.failed(Status.INVALID_CONFIG, a.error)
        if buildable:
            measured = measure_steadily(self.runner, task, [a.mod for _, a in buildable])
            for (i, _), result in zip(buildable, measured, strict=True):
                results[i] = result
        return [r for r in results if r is not None]
