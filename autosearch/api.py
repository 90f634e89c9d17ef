"""The Python API: what every command of ``python -m autosearch`` does, as functions with typed results.

:func:`load_tasks` (``tasks``), :func:`tune` (``run``), :func:`export`, :func:`compile`, :func:`report`,
:func:`compare_models` and :func:`train_model`; the CLI (:mod:`autosearch.cli`) parses its flags, calls one of
them and prints what it returns, so a script, a notebook or an experiment gets exactly what a user of the CLI
gets, without parsing printed tables. The functions are re-exported by :mod:`autosearch` (``autosearch.tune``).

Arguments are keyword-only past the first (or the first three) and named as the CLI's flags (``--min-repeat-ms``
is ``min_repeat_ms``); a value the CLI would refuse raises :class:`~autosearch.errors.UserError` with the same
one-line message, which names the flag. Nothing here prints: long work reports progress through callbacks
(``on_event``, ``on_progress``, ``on_message``, ``on_warning``), and each function returns a dataclass.

TVM is imported when a function first needs it, so that ``import autosearch`` stays cheap.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from autosearch import plugins
from autosearch.errors import UserError, install_hint, make_writable_dir
from autosearch.frontend.lowering import DEFAULT_FAST_MATH, DEFAULT_LAYOUT, DEFAULT_PRECISION, LAYOUTS, OLD_LOWERING
from autosearch.options import Option, parse

if TYPE_CHECKING:
    from autosearch.cost_models.evaluate import EvaluationReport
    from autosearch.cost_models.pretrained import TrainReport
    from autosearch.deploy.build import CompiledModel
    from autosearch.deploy.database import ExportSummary
    from autosearch.deploy.profile import LayerProfile
    from autosearch.deploy.report import Report
    from autosearch.frontend.importer import ImportedModel
    from autosearch.frontend.task import TuningTask
    from autosearch.frontend.winograd import WinogradPolicy
    from autosearch.records import LogContents
    from autosearch.search.scheduler import TaskState
    from autosearch.search.tuner import TuneEvent, TuneSummary

DEFAULT_MODEL = "tiny-yolov2"
# tune's budget when neither trials nor minutes is given: whichever comes first. The trials make a run comparable
# across machines; the minutes keep README's "about 10 minutes" true on a slow one, where 400 trials took up to 15.
DEFAULT_TRIALS = 400
DEFAULT_MINUTES = 10.0
DEFAULT_BATCH = 16
# report's timing: forward passes per runtime, over this many fresh processes apiece. On a shared VM a process is
# drawn fast or slow as a whole (its runs agree with each other, not with the next process's), so a median over a
# few processes is whichever mode the middle one drew and two runtimes' ratio moves with it from one report to the
# next; over ten it holds (experiments/report_rounds.py; docs/results.md, "How many processes a report needs").
DEFAULT_RUNS = 100
DEFAULT_ROUNDS = 10
# profile's passes per runtime, in this many rounds of turns: one process, so a round is a turn, not a process start
DEFAULT_PROFILE_RUNS = 40
DEFAULT_PROFILE_ROUNDS = 8
# name -> "module:factory": a view of the plug-in registry's group "autosearch.runners" (autosearch.plugins); the
# factory is called as factory(target, measure, *, seed, **options) -> Runner, its options checked against the
# OPTIONS table of its module (autosearch.options). Built in: local, ray.
RUNNERS: Mapping[str, str] = plugins.View(plugins.RUNNERS)


def _prepare() -> None:
    """Before TVM's first import: make it lighter (:func:`autosearch.tvm_compat.lighten_tvm_import`)."""
    from autosearch.tvm_compat import lighten_tvm_import

    lighten_tvm_import()


def _target(target: Any):
    """A TVM target: ``None`` (this CPU, all its cores), a spec string (``llvm``, ``cuda``, a tag, JSON), or a
    ``tvm.target.Target`` as it is."""
    from autosearch.frontend.target import parse_target

    return parse_target(target) if target is None or isinstance(target, str) else target


# ---------------------------------------------------------------------------------------------- load_tasks
def load_tasks(model: str = DEFAULT_MODEL, *, target: Any = None, input_shape: str | None = None,
               winograd: str | None = None, layout: str | None = None, fast_math: str | None = None,
               precision: str | None = None) -> ImportedModel:
    """Import ``model`` (a built-in name such as ``tiny-yolov2``, or a path to an ``.onnx`` file) and extract its
    tuning tasks for ``target``, lowered as :func:`tune` would lower it: the model's tasks are what a run tunes.

    ``input_shape`` fixes dynamic input axes (``images:1,3,640,640``). The lowering options (``winograd``,
    ``layout``, ``fast_math``, ``precision``; None: the default) are :mod:`autosearch.frontend.lowering`'s. The result's
    ``tasks`` are :class:`~autosearch.frontend.task.TuningTask` objects (name, weight, FLOPs, workload key)."""
    _prepare()
    from autosearch.frontend.importer import import_model

    return import_model(model, _target(target), input_shape=input_shape, winograd=winograd or "auto",
                        layout=layout or DEFAULT_LAYOUT, fast_math=fast_math or DEFAULT_FAST_MATH,
                        precision=precision or DEFAULT_PRECISION)


def select_tasks(tasks: Sequence[TuningTask], spec: str | Sequence[int | str] | None) -> list[TuningTask]:
    """The tasks ``spec`` names (``run --tasks``): indices (``0,3``), ranges (``0-4``) and name fragments
    (``conv``: every task whose name contains it), as a comma-separated string or a sequence; None: all."""
    if spec is not None and not isinstance(spec, str):
        spec = ",".join(str(part) for part in spec)
    if not spec:
        return list(tasks)
    chosen = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if part.isdigit():
            idx = int(part)
            if idx >= len(tasks):
                raise UserError(f"--tasks: no task {idx}; the model has tasks 0..{len(tasks) - 1}")
            chosen.append(tasks[idx])
        elif "-" in part and all(p.isdigit() for p in part.split("-", 1)):
            lo, hi = (int(p) for p in part.split("-", 1))
            if hi >= len(tasks) or lo > hi:
                raise UserError(f"--tasks: bad range {part}; the model has tasks 0..{len(tasks) - 1}")
            chosen.extend(tasks[lo:hi + 1])
        else:
            matched = [t for t in tasks if part in t.name]
            if not matched:
                raise UserError(f"--tasks: no task name contains {part!r}")
            chosen.extend(matched)
    return list({t.workload_key: t for t in chosen}.values())


# ---------------------------------------------------------------------------------------------- tune
@dataclass(frozen=True)
class MeasureOptions:
    """How :func:`tune` builds and times each config (``run``'s flags of the same names). The defaults are what
    ``run`` uses; a test or a smoke run may time less (``repeat=3, min_repeat_ms=5``)."""

    repeat: int = 30  # timed repeats per kernel (at most: as many as fit in 0.2 s, at least 5); the median counts
    min_repeat_ms: int = 0  # 0: one call per repeat, caches flushed (cold, as in the model); > 0: a repeat runs
    # the kernel as often as it takes to last this long (MetaSchedule's way: all but its first call warm)
    build_workers: int | None = None  # parallel builds (None: every core, or every CPU of the Ray cluster)
    build_timeout: float = 60.0  # seconds per build
    run_timeout: float = 30.0  # seconds per measurement, at least
    ray_address: str | None = None  # runner "ray": join this cluster (auto or HOST:PORT); None: an embedded one
    device_key: str | None = None  # runner "ray": the device key to measure on (default: the target's)
    gpu_name: str | None = None  # runner "ray": the GPU name of a cuda-<name> device key
    allow_mixed: bool = False  # runner "ray": accept devices of one key that differ
    cache_state: str = "flushed"  # before each cold repeat: the arguments flushed, or the caches "dirty" as a
    # forward pass leaves them (autosearch.measure.flush)

    def __post_init__(self) -> None:
        from autosearch.measure.flush import CACHE_STATES

        if self.cache_state not in CACHE_STATES:
            raise UserError(f"unknown cache state {self.cache_state!r}; valid: {', '.join(CACHE_STATES)}")

    def runner_settings(self) -> dict[str, Any]:
        """What every runner takes (:class:`~autosearch.measure.base.RunnerBase`): the evaluator and the build and
        run limits. A runner's factory adds what is its own (``ray``: the cluster and device fields)."""
        from autosearch.measure.base import EvaluatorConfig

        return {"evaluator": EvaluatorConfig(repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                             cache_state=self.cache_state),
                "build_workers": self.build_workers, "build_timeout": self.build_timeout,
                "run_timeout": self.run_timeout}


def runner_option_table(runner: str) -> dict[str, Option]:
    """The options table of a registered runner (``OPTIONS`` of its factory's module; none for the built-ins, whose
    settings are :class:`MeasureOptions`'). Imports that module."""
    _runner_factory(runner)
    return dict(getattr(importlib.import_module(plugins.entry_point(plugins.RUNNERS, runner).module), "OPTIONS", {}))


def _runner_factory(runner: str) -> Callable[..., Any]:
    if runner not in RUNNERS:
        raise UserError(f"unknown runner {runner!r}; valid runners: {', '.join(sorted(RUNNERS))}")
    return plugins.load(plugins.RUNNERS, runner, missing=lambda package: (
        f"--runner {runner} needs the package {package!r}: {install_hint(package)}"))


def _runner_kwargs(runner: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` checked and converted against the registered runner's table, the runner's name checked first
    (:func:`runner_option_table`): one line before any work (what :func:`make_runner` passes its factory, what a
    run's record keeps)."""
    table = runner_option_table(runner)
    return parse(table, dict(options), f"runner {runner!r}") if options else {}


def make_runner(runner: str, target: Any, measure: MeasureOptions | None = None, *, seed: int = 0,
                options: Mapping[str, Any] | None = None):
    """A registered runner by name (:data:`RUNNERS`): ``local`` (processes on this machine), ``ray`` (a device pool
    on a Ray cluster) or a plug-in's, made by its factory with ``options`` checked against its table
    (:func:`runner_option_table`); the caller closes it."""
    return _runner_factory(runner)(target, measure or MeasureOptions(), seed=seed, **_runner_kwargs(runner, options))


def resolve_guidance(spec: str | None, target: Any, strategy: str, *, seed: int) -> tuple[str | None, str]:
    """(the cost model the tuner gets, one line saying what guides the run). ``auto``: the pre-trained model
    autosearch ships, where it fits the target and the strategy's guidance is cheap (``guided_by_default``),
    else none; a directory: a model train-model wrote, checked against the target (one-line error if it is
    corrupt or made for another target or feature version)."""
    from autosearch.search.cost_model import COST_MODELS, PRETRAINED, make_cost_model
    from autosearch.search.strategy import guided_by_default

    if spec in (None, "", "none"):
        return None, "none"
    if spec == "auto":
        from autosearch.cost_models.pretrained import shipped_for

        if not guided_by_default(strategy):
            return None, f"none (auto guides optuna; name a model, e.g. --cost-model pretrained, to guide {strategy})"

        directory, why = shipped_for(target)
        if directory is None:
            return None, f"none ({why})"
        spec = PRETRAINED
    if spec == PRETRAINED or (spec not in COST_MODELS and os.path.isdir(spec)):  # registry names first
        from autosearch.cost_models.pretrained import SHIPPED_DIR, describe, family_note, load_model_dir

        directory = SHIPPED_DIR if spec == PRETRAINED else spec
        model = load_model_dir(directory, target, seed=seed, trees_without_torch=spec == PRETRAINED)
        what = "the shipped model" if spec == PRETRAINED else directory
        return spec, f"{what}, {describe(model.manifest, model.note)}; {family_note(model.manifest, target)}"
    make_cost_model(spec, seed=seed)  # fail fast on an unknown name
    return spec, f"{spec}, trained online on this run's measurements"


def _resume_lowering(resume: LogContents, option: str, asked: str | None, default: str) -> str:
    """A resumed run keeps the lowering (``--winograd``, ``--layout``, ``--fast-math``) its log was tuned with: other
    lowerings give other tasks. Logs from before an option existed were tuned with its old default."""
    logged = {str((h.get("lowering") or {}).get(option, OLD_LOWERING[option])) for h in resume.tasks.values()}
    if len(logged) == 1:
        [mode] = logged
        if asked and asked != mode:
            raise UserError(f"{resume.path} was tuned with --{option.replace('_', '-')} {mode}; "
                            "resume it with the same lowering")
        return mode
    return asked or default


def _resume_layouts(resume: LogContents) -> tuple[str, ...] | None:
    """The models a resumed ``--layout auto`` run tuned (its tasks' layouts; None: not such a run): it goes on
    with them, whatever a new run would choose (:func:`autosearch.frontend.importer.extract_tasks`)."""
    logged = {layout for h in resume.tasks.values() for layout in (h.get("lowering") or {}).get("layouts", ())}
    return tuple(layout for layout in LAYOUTS if layout in logged) or None


def default_log(model: str, strategy: str) -> str:
    """Where a run without a ``log`` writes: ``runs/<model>-<strategy>-<date-time>.jsonl``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{os.path.splitext(os.path.basename(model))[0]}-{strategy}-{stamp}.jsonl")


@dataclass(frozen=True)
class TunePlanned:
    """Sent by :func:`tune` once its arguments are checked, before the model is imported (seconds, a minute for a
    large model): the budget as it will be run."""

    model: str
    strategy: str
    trials: int | None  # the trial budget (DEFAULT_TRIALS when neither trials nor minutes was given)
    minutes: float | None  # the time limit (DEFAULT_MINUTES when neither was given)
    batch: int
    log: str


@dataclass(frozen=True)
class TuneStarted:
    """Sent by :func:`tune` when the run is set up (model imported, log opened), before the first measurement."""

    model: ImportedModel
    tasks: list[TuningTask]  # the tasks tuned (``tasks`` of the model, or all)
    strategy: str
    options: dict[str, Any]  # the strategy's options, checked and converted
    trials: int | None
    minutes: float | None
    runner: str
    target: Any
    cost_model: str | None  # what guides the strategy (resolve_guidance), None: nothing
    guidance: str  # one line saying what guides the run
    log: str
    corrupt: list[str] = field(default_factory=list)  # resume: the log's lines skipped as corrupt (file:line ...)
    bf16_unguided: bool = False  # the bf16 tasks run unguided: the pre-trained model has no records of their unit
    known: str = "none"  # one line saying which tasks start from known schedules (autosearch.search.known)


@dataclass(frozen=True)
class TaskResult:
    """One task of a tuning run: its untuned and best latencies (seconds; None when there is none)."""

    index: int
    name: str
    workload_key: str
    weight: int  # how often the model runs it
    flops: float  # of one run of the task
    untuned_secs: float | None
    best_secs: float | None
    trials: int
    failures: int
    note: str = ""  # why the task stopped early ("early stop", "exhausted"), if it did

    @property
    def speedup(self) -> float | None:
        return self.untuned_secs / self.best_secs if self.untuned_secs and self.best_secs else None

    @property
    def best_gflops(self) -> float:
        return self.flops / self.best_secs / 1e9 if self.best_secs else 0.0


@dataclass
class TuneResult:
    """What :func:`tune` did: the log it wrote (``export`` turns it into a database), every task's best, and the
    model's estimated latency before and after (weighted sums of the tasks' kernels)."""

    model: str
    strategy: str
    log: str
    plot: str | None  # the model's estimated latency against minutes and trials, the tasks' shares (PNG beside the log)
    guidance: str
    tasks: list[TaskResult]
    trials: int  # measured in the log, a resumed run's earlier ones included
    elapsed_secs: float
    interrupted: bool  # stopped by Ctrl-C (KeyboardInterrupt) or SIGTERM: resume with resume=True
    untuned_secs: float  # the untuned kernels of the tuned tasks of the model export keeps, weighted
    tuned_secs: float  # their best kernels, weighted
    layout: str | None = None  # layout "auto": the faster model as tuned (what export keeps), else None
    layout_estimates: dict[str, float] = field(default_factory=dict)  # layout "auto": seconds per layout's model
    # the model compiled (the faster layout's), estimated from its tasks' best in-run latencies, and again with each
    # re-timed task at its finalist's score in fresh processes (None: no task re-timed). The in-run best is the
    # minimum of many noisy trials, so it reads low (the winner's curse); the re-timed figure does not
    model_secs: float | None = None
    retimed_model_secs: float | None = None
    # layout "auto" in fp32: one layout per convolution where export keeps it (geometry -> layout; {}: a whole model,
    # ``layout``'s); the estimates above are then of that model, with the layout transforms between its layers as the
    # run timed them (``transitions_secs``; None: not timed, and not counted)
    layer_layouts: dict[str, str] = field(default_factory=dict)
    transitions_secs: float | None = None
    summary: TuneSummary | None = None  # the tuning loop's own account (per-task state, time per step)

    @property
    def speedup(self) -> float | None:
        return self.untuned_secs / self.tuned_secs if self.tuned_secs > 0 else None

    def best(self, task: str) -> float | None:
        """The best latency (seconds) of the task whose name or workload key is ``task``."""
        for t in self.tasks:
            if task in (t.name, t.workload_key):
                return t.best_secs
        raise KeyError(task)


def _untuned(state) -> float:
    return state.baseline.median if state.baseline is not None and state.baseline.ok else math.nan


def _tuned_totals(states: Sequence[TaskState]) -> tuple[float, float]:
    """(untuned, tuned) seconds of the tuned tasks among ``states``, weighted."""
    untuned = tuned = 0.0
    for s in states:
        base, best = _untuned(s), s.best_latency
        if math.isfinite(base) and math.isfinite(best):
            untuned += base * s.task.weight
            tuned += best * s.task.weight
    return untuned, tuned


def _model_estimates(states: Sequence[TaskState]) -> tuple[float | None, float | None]:
    """(in-run, re-timed) estimate of the model compiled, of its tasks ``states``, seconds; each None when not
    every task of it has a latency (re-timed: also when no task was re-timed)."""
    from autosearch.frontend.alternatives import model_total

    in_run = model_total((s.task.lowering, s.task.weight, s.model_seconds) for s in states)
    retimed = model_total((s.task.lowering, s.task.weight, s.retimed_model_seconds) for s in states)
    finite = [x if math.isfinite(x) else None for x in (in_run, retimed)]
    return finite[0], finite[1] if any(s.best_retimed is not None for s in states) else None


def _check_timing(*, threads: int | None, **counts: int) -> None:
    """A command's counts of passes, rounds and the like each positive, and its threads when given."""
    for name, value in counts.items():
        if value <= 0:
            raise UserError(f"--{name} must be positive, not {value}")
    if threads is not None and threads <= 0:
        raise UserError(f"--threads must be positive, not {threads}")


def _check_outputs(*paths: str | None) -> None:
    """The directories of a command's output files made and writable before its minutes of work, not after."""
    for path in paths:
        if path:
            make_writable_dir(os.path.dirname(os.path.abspath(path)))


def _check_tune(strategy: str, trials: int | None, minutes: float | None, batch: int, finalist_rounds: int,
                resume: bool, log: str | None, runner: Any,
                runner_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every argument of :func:`tune` a user can get wrong, checked before any work; the runner's options as
    checked and converted (:func:`_runner_kwargs`; none for a runner object)."""
    from autosearch.search.strategy import STRATEGIES

    if strategy not in STRATEGIES:
        raise UserError(f"unknown strategy {strategy!r}; valid strategies: {', '.join(sorted(STRATEGIES))}")
    if trials is not None and trials <= 0:
        raise UserError(f"--trials must be a positive number, not {trials}")
    if minutes is not None and not (math.isfinite(minutes) and minutes > 0):
        raise UserError(f"--minutes must be a positive number, not {minutes:g}")
    if batch <= 0:
        raise UserError(f"--batch must be a positive number, not {batch}")
    if finalist_rounds < 0:
        raise UserError(f"--finalist-rounds must be 0 or more, not {finalist_rounds}")
    if resume and not log:
        raise UserError("--resume needs --log PATH (the log to continue)")
    if log:
        from autosearch.records import TuningLog

        TuningLog.check(log, resume=resume)  # before the model's import: seconds a user need not wait
    if runner_options and not isinstance(runner, str):
        raise UserError("runner options go to a runner by name; a runner object is made by its caller")
    return _runner_kwargs(runner, runner_options) if isinstance(runner, str) else {}


def tune(model: str = DEFAULT_MODEL, *, strategy: str = "optuna", trials: int | None = None,
         minutes: float | None = None, tasks: str | Sequence[int | str] | None = None, log: str | None = None,
         resume: bool = False, target: Any = None, input_shape: str | None = None, winograd: str | None = None,
         layout: str | None = None, fast_math: str | None = None, precision: str | None = None,
         cost_model: str | None = "auto", warm_start: str | None = None, known_schedules: str | None = "shipped",
         siblings: bool = False, options: Mapping[str, Any] | None = None,
         batch: int = DEFAULT_BATCH, seed: int = 0, early_stop: int | None = None, finalist_rounds: int = 3,
         runner: Any = "local", runner_options: Mapping[str, Any] | None = None,
         measure: MeasureOptions | None = None, plot: bool = True,
         on_event: Callable[[TunePlanned | TuneStarted | TuneEvent], None] | None = None) -> TuneResult:
    """Tune ``model``'s tasks with a search strategy, every measurement appended to a tuning log (JSON Lines).

    The budget is ``trials`` measurements over all tasks, or ``minutes`` of search, whichever comes first
    (neither: :data:`DEFAULT_TRIALS` or :data:`DEFAULT_MINUTES`); then each task's finalists are re-timed in
    ``finalist_rounds`` fresh processes, so that one lucky timing does not decide what is exported. ``log`` None
    writes ``runs/<model>-<strategy>-<time>.jsonl``; ``resume=True`` continues the run recorded in ``log`` (its
    lowering kept; ``minutes``: minutes more), and an existing log is never overwritten without it.

    ``strategy``: a registered strategy (:data:`autosearch.search.strategy.STRATEGIES`), with ``options`` from its
    options table. ``cost_model``: ``auto`` (the shipped pre-trained model where it fits the target and the strategy),
    ``none``, a registry name trained online, or a directory written by :func:`train_model`. ``known_schedules``:
    the configs other machines measured fastest for the same tasks, measured first and handed to the strategy
    (:mod:`autosearch.search.known`): ``shipped`` (autosearch's), ``none`` (the strategy from scratch, as a study
    comparing strategies wants), or a tuning log or database to take them from. ``siblings``: tasks of one loop
    nest fused with different epilogues lend each other their best configs (:mod:`autosearch.search.siblings`;
    off by default: measured level with each task alone on the models tried). ``runner``: a registered runner
    (:data:`RUNNERS`: ``local``, ``ray``, a plug-in's) with ``runner_options`` from its table, or a runner object
    (the caller closes it); ``measure``: how each config is timed.

    ``on_event`` gets a :class:`TunePlanned`, a :class:`TuneStarted`, then a :class:`~autosearch.search.tuner.TuneEvent`
    after each batch, untuned timing and re-timing (what the CLI's progress bar shows), and of the layout transforms
    tuned at the end of a ``--layout auto`` run (phase ``"transitions"``). Ctrl-C stops the search:
    the log keeps every finished batch and the result says ``interrupted``; no plot is drawn then (seconds of
    matplotlib on a slow machine between the Ctrl-C and the prompt), the resumed run draws it from the log's start.
    """
    from autosearch import __version__

    runner_options = _check_tune(strategy, trials, minutes, batch, finalist_rounds, resume, log, runner,
                                 runner_options)
    from autosearch.search.strategy import parse_options

    options = parse_options(strategy, dict(options or {}))
    notify = on_event or (lambda event: None)
    if trials is None and minutes is None:
        trials, minutes = DEFAULT_TRIALS, DEFAULT_MINUTES
    log_path = log or default_log(model, strategy)
    notify(TunePlanned(model=model, strategy=strategy, trials=trials, minutes=minutes, batch=batch, log=log_path))

    _prepare()
    from autosearch.frontend.importer import import_model
    from autosearch.records import TuningLog, read_log
    from autosearch.search.cost_model import guides_unit, pretrained_model
    from autosearch.search.sketch_store import SketchStore
    from autosearch.search.tuner import Tuner
    from autosearch.tensor_units.cpu import bf16_unit, target_mcpu

    target = _target(target)
    if target.kind.name != "llvm" and runner == "local":
        raise UserError(f"target kind {target.kind.name!r} cannot be measured by the local runner on this "
                        "machine; use --runner ray with a device of that kind")
    model_cost, guidance = resolve_guidance(cost_model, target, strategy, seed=seed)
    from autosearch.search.known import load as load_known

    known = load_known(known_schedules)
    logged = read_log(log_path) if resume else None
    if logged is not None and not (logged.runs or logged.tasks) and (
            logged.records or logged.corrupt or logged.truncated_tail):
        # a run writes its header line before anything else: appending to such a file would bury someone's data
        raise UserError(f"{log_path} holds no run or task header: is it an autosearch tuning log? (--resume "
                        "continues the log of an earlier run)")
    lowering = {"winograd": winograd or "auto", "layout": layout or DEFAULT_LAYOUT,
                "fast_math": fast_math or DEFAULT_FAST_MATH, "precision": precision or DEFAULT_PRECISION}
    if logged is not None:
        for option, asked in (("winograd", winograd), ("layout", layout), ("fast_math", fast_math),
                              ("precision", precision)):
            lowering[option] = _resume_lowering(logged, option, asked, lowering[option])
    imported = import_model(model, target, input_shape=input_shape, **lowering,
                            layouts=_resume_layouts(logged) if logged is not None else None)
    chosen = select_tasks(imported.tasks, tasks)
    tuning_log = TuningLog(log_path, resume=resume)
    try:
        warm = []
        if warm_start:
            from autosearch.frontend.database_files import read_records

            warm = [read_records(warm_start)]  # LogContents: the scorer featurises its task headers too
        runner_name = runner if isinstance(runner, str) else getattr(runner, "name", type(runner).__name__)
        notify(TuneStarted(model=imported, tasks=chosen, strategy=strategy, options=options, trials=trials,
                           minutes=minutes, runner=runner_name, target=target, cost_model=model_cost,
                           guidance=guidance, log=log_path, corrupt=list(logged.corrupt) if logged else [],
                           known=(known.describe((t.workload_key for t in chosen), host_cpu=target_mcpu(target),
                                                 ranked=pretrained_model(model_cost or ""), tasks=chosen)
                                  if known is not None else "none"),
                           bf16_unguided=bool(imported.bf16_tasks and model_cost
                                              and not guides_unit(model_cost, bf16_unit(target)))))
        own = isinstance(runner, str)
        tuning_log.write_run({"strategy": strategy, "options": options, "cost_model": cost_model,
                              "guided_by": guidance, "trials": trials, "minutes": minutes, "batch": batch,
                              "seed": seed, "resumed": bool(resume), "siblings": siblings,
                              "runner": runner if own else type(runner).__name__,
                              "runner_options": runner_options,
                              "cache_state": (measure or MeasureOptions()).cache_state, "autosearch": __version__})
        measuring = make_runner(runner, target, measure, seed=seed, options=runner_options) if own else runner
        try:
            summary = Tuner(tasks=chosen, runner=measuring, log=tuning_log, strategy=strategy, budget=trials,
                            seconds=minutes * 60 if minutes is not None else None, batch=batch, seed=seed,
                            strategy_options=options, cost_model=model_cost, warm_start=warm, known=known,
                            early_stop=early_stop, siblings=siblings,
                            resume=logged, on_event=notify, finalist_rounds=finalist_rounds,
                            sketch_store=SketchStore()).run()
            if not summary.interrupted and imported.layout == "auto":
                _tune_transitions(imported.relax_mod, target, log_path, tuning_log, measuring, summary,
                                  strategy=strategy, batch=batch, seed=seed,
                                  on_event=lambda event: notify(replace(event, phase="transitions")))
        finally:
            if own:
                measuring.close()
    finally:
        tuning_log.close()
    return _tune_result(imported.name, strategy, log_path, guidance, summary, plot=plot)


def _tune_transitions(relax_mod, target: Any, log_path: str, tuning_log, runner, summary: TuneSummary, *,
                      strategy: str, batch: int, seed: int, on_event) -> None:
    """Where export would keep one layout per convolution, tune the layout transforms that model adds between its
    layers (:mod:`autosearch.deploy.transitions`), once per choice, into the log: export counts them and exports
    their best. ``on_event`` gets its progress (events of phase ``"transitions"``)."""
    import time

    from autosearch.deploy.database import lowering_of
    from autosearch.deploy.transitions import timed_for, transition_tasks, tune_transitions
    from autosearch.records import read_log

    clock = time.perf_counter()
    contents = read_log(log_path)
    try:
        lowering = lowering_of(contents)
    except UserError:  # no layout's model measured yet
        return
    mixed = lowering.get("layer_layouts")
    if not mixed or timed_for(contents.transitions, mixed) is not None:
        return
    tasks = transition_tasks(relax_mod, target, lowering, contents.tasks)
    if tasks is None:  # a convolution of that model was not tuned (--tasks): compile builds one layout
        return
    record = tune_transitions(tasks, runner=runner, tuning_log=tuning_log, strategy=strategy, layer_layouts=mixed,
                              resume=contents, batch=batch, seed=seed, on_event=on_event)
    summary.timing["transitions"] = time.perf_counter() - clock
    if record is None:  # Ctrl-C: the run is interrupted, and a resume tunes them on from their logged trials
        summary.interrupted = True
        return
    tuning_log.write_transitions(record)


def _tune_result(model: str, strategy: str, log_path: str, guidance: str, summary: TuneSummary, *,
                 plot: bool) -> TuneResult:
    from autosearch.deploy.database import compiled_tasks, lowering_of
    from autosearch.records import read_log

    contents = read_log(log_path)  # the whole log, as export reads it: a resumed run is drawn from its start
    try:
        lowering = lowering_of(contents)
    except UserError:  # no layout's model measured yet
        lowering = {}
    kept = compiled_tasks(contents, lowering)
    layouts = dict(lowering.get("layout_totals") or {})  # --layout auto: each layout's model, as export chose
    leader = lowering.get("layout") if layouts else None
    kept_keys = set(kept)
    states = [s for s in summary.states if s.task.workload_key in kept_keys]
    untuned, tuned = _tuned_totals(states)
    tasks = [TaskResult(index=s.task.index, name=s.task.name, workload_key=s.task.workload_key, weight=s.task.weight,
                        flops=s.task.flops, untuned_secs=None if math.isnan(_untuned(s)) else _untuned(s),
                        best_secs=s.best.median if s.best is not None else None, trials=s.trials,
                        failures=s.failures, note=s.done) for s in summary.states]
    model_secs, retimed_model_secs = _model_estimates(states)
    transitions = lowering.get("transitions_secs") if lowering.get("layer_layouts") else None
    if transitions is not None:  # kernels of the kept model that no task is: counted as the run timed them
        model_secs = model_secs + transitions if model_secs is not None else None
        retimed_model_secs = retimed_model_secs + transitions if retimed_model_secs is not None else None
    png = None
    if plot and summary.trials and not summary.interrupted:
        from autosearch.plots import plot_run
        from autosearch.search.estimates import estimate_curve, task_shares

        curve = estimate_curve(contents)
        if curve:
            final = retimed_model_secs if retimed_model_secs is not None else model_secs
            label = "export's model" + (", re-timed" if retimed_model_secs is not None else "") + (
                ", with its layout transforms" if transitions is not None else "")
            png = plot_run(curve, task_shares(contents, kept), os.path.splitext(log_path)[0] + ".png",
                           title=f"{model} — {strategy}", final=final, final_label=label)
    return TuneResult(model=model, strategy=strategy, log=log_path, plot=png, guidance=guidance, tasks=tasks,
                      trials=summary.trials, elapsed_secs=summary.elapsed, interrupted=summary.interrupted,
                      untuned_secs=untuned, tuned_secs=tuned, layout=leader, layout_estimates=layouts,
                      model_secs=model_secs, retimed_model_secs=retimed_model_secs,
                      layer_layouts=dict(lowering.get("layer_layouts") or {}), transitions_secs=transitions,
                      summary=summary)


# ---------------------------------------------------------------------------------------------- export
def export(log: str, out: str, *, top_k: int = 1, force: bool = False, memory_budget: float | None = None,
           model: str | None = None, input_shape: str | None = None, target: Any = None,
           on_warning: Callable[[str], None] | None = None) -> ExportSummary:
    """Write the best ``top_k`` schedules of every task of a tuning log to ``out`` as TVM's own MetaSchedule
    JSONDatabase (what :func:`compile`, :func:`report` and TVM's ``compile`` read), with how the model was lowered.

    A task whose best is no faster than its untuned kernel is left out (TVM's default code stays). Where the log
    tuned alternatives (Winograd or direct, a layout each, bf16 or fp32) the faster is kept; with
    ``memory_budget`` (MiB) the fastest choice whose predicted peak memory fits it, which needs ``model`` (and
    the ``input_shape`` and ``target`` it was tuned with). An existing database in ``out`` is replaced only with
    ``force``. ``on_warning`` gets a line about corrupt lines skipped (default: the ``autosearch.api`` logger)."""
    import logging

    if top_k <= 0:
        raise UserError(f"--top-k must be positive, not {top_k}")
    if memory_budget is not None and not model:
        raise UserError("--memory-budget needs --model: the model the log was tuned on")
    _prepare()
    from autosearch.deploy.database import check_out_dir, export_database
    from autosearch.records import read_log

    contents = read_log(log)
    if not contents.tasks:
        raise UserError(f"{log} has no task headers: is it an autosearch tuning log?")
    check_out_dir(out, force=force)  # before --memory-budget's minutes of work
    if contents.corrupt:
        (on_warning or logging.getLogger(__name__).warning)(
            f"skipped {len(contents.corrupt)} corrupt line(s), first: {contents.corrupt[0]}")
    budget, lowering = None, None
    if memory_budget is not None:
        from autosearch.deploy.budget import budget_choice, import_tuned_model

        target = _target(target)
        tuned = import_tuned_model(contents, model, target, input_shape=input_shape)
        budget, lowering = budget_choice(contents, tuned.relax_mod, target, memory_budget)
    summary = export_database(contents, out, top_k=top_k, force=force, lowering=lowering)
    summary.log, summary.corrupt, summary.memory_budget = log, list(contents.corrupt), budget
    return summary


# ---------------------------------------------------------------------------------------------- compile, report
def _database_lowering(db: str, target: Any, *, winograd: str | None, layout: str | None, fast_math: str | None,
                       precision: str | None) -> tuple[WinogradPolicy, str, str, dict[str, str]]:
    """(the Winograd and precision policy, the layout, the fast-math mode, one layout per convolution or {}) to
    build with: each as given, else as the database was tuned (export records it), else the option's value before
    it existed (databases from before it, or from ``ms.tune_tir`` on the model as imported). With ``auto``, the
    per-layer algorithms the database measured faster; one layout per convolution where export chose it and no
    ``layout`` is given."""
    from autosearch.deploy.database import database_lowering
    from autosearch.frontend.winograd import WinogradPolicy

    lowering = database_lowering(db)

    def option(name: str, asked: str | None) -> str:
        if asked == "auto" and name == "layout":  # the database holds the choice: export made it
            asked = None
        return asked or str(lowering.get(name, OLD_LOWERING[name]))

    mode = winograd or str(lowering.get("winograd", "auto"))
    tuned = str(lowering.get("precision", OLD_LOWERING["precision"]))
    if precision and precision != tuned:  # another precision lowers other tasks: none would be tuned
        raise UserError(f"{db} was tuned with --precision {tuned}, not {precision}: leave --precision out "
                        "to compile as it was tuned")
    precision = option("precision", precision)
    asked_layout, layout = layout, option("layout", layout)
    if precision == "bf16" and layout == "NCHW" and lowering.get("layout") == "NCHW":
        # run --precision bf16 --layout auto, and the NCHW model (in fp32: bf16 convolutions are NHWC) was the faster
        precision = "fp32"
    measured = lowering.get("choices") if "auto" in (mode, precision) else None
    if precision == "bf16" or "bf16" in (measured or {}).values():
        _check_bf16_units(db, target)
    policy = WinogradPolicy.of(mode, measured, precision=precision)
    layer_layouts = dict(lowering.get("layer_layouts") or {}) if asked_layout in (None, "auto") else {}
    return policy, layout, option("fast_math", fast_math), layer_layouts


def _check_bf16_units(db: str, target: Any) -> None:
    """A one-line error unless ``target`` has the bf16 units the database's schedules run on (a bf16 unit at
    least, where no schedule names one)."""
    from autosearch.frontend.database_files import RECORD_FILE
    from autosearch.tensor_units.cpu import bf16_unit, units
    from autosearch.tensor_units.intrinsics import units_named

    try:
        with open(os.path.join(db, RECORD_FILE), encoding="utf-8") as fh:
            used = units_named(fh.read())
    except OSError:  # no records: loading the database says what is wrong
        used = set()
    here = set(units(target))
    again = "tune the model again here, or compile it on a CPU with"
    if "AMX-BF16" in used and "AMX-BF16" not in here:
        raise UserError(f"{db} has convolutions tuned in bf16 on AMX tiles; this target has no AMX-BF16 ({again} AMX)")
    if "AVX512-BF16" in used and "AVX512-BF16" not in here:
        raise UserError(f"{db} has convolutions tuned in bf16 on AVX512-BF16; this target has no AVX512-BF16 "
                        f"({again} it)")
    if not used and bf16_unit(target) is None:
        raise UserError(f"{db} has convolutions tuned in bf16; this target has no bf16 unit (AMX-BF16 or "
                        f"AVX512-BF16) ({again} one)")


def compile(model: str, db: str, out: str, *, target: Any = None, input_shape: str | None = None,
            winograd: str | None = None, layout: str | None = None, fast_math: str | None = None,
            precision: str | None = None) -> CompiledModel:
    """Build the whole ``model`` with the tuning database ``db`` applied into the shared library ``out`` (its
    weights beside it, ``.params``), lowered as the database was tuned unless an option says otherwise (another
    lowering gives other tasks, none of them tuned). Tasks the database lacks keep TVM's default code: the result
    lists them (``missing_tasks``), with the model's predicted peak memory on CPU targets."""
    _prepare()
    from autosearch.deploy.build import compile_model
    from autosearch.frontend.database_files import load_database
    from autosearch.frontend.importer import import_model

    _check_outputs(out)  # before the model's import and build
    target = _target(target)
    policy, layout, fast_math, layer_layouts = _database_lowering(
        db, target, winograd=winograd, layout=layout, fast_math=fast_math, precision=precision)  # a wrong target fails
    database = load_database(db)                                                                # before loading
    imported = import_model(model, target, input_shape=input_shape, winograd=policy.mode, layout=layout,
                            fast_math=fast_math, precision=policy.precision)
    compiled = compile_model(imported.relax_mod, target, imported.tasks, database, out, winograd=policy,
                             layout=imported.layout, fast_math=imported.fast_math, layer_layouts=layer_layouts)
    compiled.model = imported.name
    return compiled


def report(model: str, db: str, *, log: str | None = None, target: Any = None, input_shape: str | None = None,
           winograd: str | None = None, layout: str | None = None, fast_math: str | None = None,
           precision: str | None = None, runs: int = DEFAULT_RUNS, rounds: int = DEFAULT_ROUNDS, untuned_runs: int = 3,
           threads: int | None = None, plot: str = "report.png", markdown: str | None = None,
           on_message: Callable[[str], None] | None = None) -> Report:
    """The end-to-end figures of ``model`` built with the database ``db``: latency, peak memory and output
    deviation of TVM untuned and tuned, ONNX Runtime and OpenVINO (when installed), every runtime timed in fresh
    processes on the same ``threads``, ``runs`` forward passes over ``rounds`` turns (``untuned_runs`` for untuned
    TVM, whose passes take seconds); per-task latencies (untuned ones from ``log``, when given). Writes the bar
    chart ``plot`` and, when given, the tables as Markdown; ``on_message`` gets a line at each step (minutes).
    See :mod:`autosearch.deploy.report`."""
    _check_timing(runs=runs, rounds=rounds, threads=threads)
    _check_outputs(plot, markdown)
    _prepare()
    from autosearch.deploy.report import end_to_end_report

    target = _target(target)
    policy, layout, fast_math, layer_layouts = _database_lowering(db, target, winograd=winograd, layout=layout,
                                                                  fast_math=fast_math, precision=precision)
    return end_to_end_report(model, db, target=target, policy=policy, layout=layout, fast_math=fast_math,
                             layer_layouts=layer_layouts,
                             input_shape=input_shape, log=log, runs=runs, rounds=rounds, untuned_runs=untuned_runs,
                             threads=threads, plot=plot, markdown=markdown, on_message=on_message)


def profile(model: str, db: str, *, log: str | None = None, target: Any = None, input_shape: str | None = None,
            winograd: str | None = None, layout: str | None = None, fast_math: str | None = None,
            precision: str | None = None, runs: int = DEFAULT_PROFILE_RUNS, rounds: int = DEFAULT_PROFILE_ROUNDS,
            threads: int | None = None, top: int = 15, plot: str = "profile.png", markdown: str | None = None,
            on_message: Callable[[str], None] | None = None) -> LayerProfile:
    """Where the tuned model's time goes: ``model`` built with the database ``db`` (lowered as it was tuned) and
    each of its kernels timed in the model, beside OpenVINO's per-node profile in fp32 and at its default precision
    (when installed), the runtimes taking turns over ``runs`` forward passes in ``rounds`` rounds, in this process,
    on the same ``threads``; per category, per kernel, and per convolution geometry (which layers lose to OpenVINO);
    with ``log`` (the run's tuning log), each kernel's time in the model beside its task's as tuned. Writes the PNG
    ``plot`` and, when given, the tables (each runtime's ``top`` slowest kernels) as Markdown. TVM has one thread
    pool per process: ``threads`` binds it for the rest of the process. See :mod:`autosearch.deploy.profile`."""
    _check_timing(runs=runs, rounds=rounds, threads=threads, top=top)
    if log and not os.path.isfile(log):
        raise UserError(f"log not found: {log}")
    _check_outputs(plot, markdown)
    _prepare()
    from autosearch.deploy.profile import layer_profile

    target = _target(target)
    policy, layout, fast_math, layer_layouts = _database_lowering(db, target, winograd=winograd, layout=layout,
                                                                  fast_math=fast_math, precision=precision)
    result = layer_profile(model, db, target=target, policy=policy, layout=layout, fast_math=fast_math,
                           layer_layouts=layer_layouts, input_shape=input_shape, runs=runs, rounds=rounds,
                           threads=threads, log=log, plot=plot, on_message=on_message)
    if markdown:
        with open(markdown, "w") as fh:
            fh.write(result.markdown(top) + "\n")
    return result


# ---------------------------------------------------------------------------------------------- cost models
def compare_models(logs: str | Sequence[str], *, models: Sequence[str] | None = None, split: str = "task",
                   seed: int = 0, min_records: int = 10, plot: str = "compare-models.png",
                   markdown: str | None = None,
                   on_progress: Callable[[str, int, int], None] | None = None) -> EvaluationReport:
    """Leave-one-task-out (``split="model"``: leave-one-model-out) accuracy of cost models on the measured records
    of tuning logs or TVM databases: each model trained without the held-out task, ranked on it. ``models``:
    registry names, with a feature set as ``model@features`` (None: every tree and learned one). Writes the
    predicted-vs-measured PNG ``plot`` and, when given, the table as Markdown. ``on_progress(label, done,
    total)``: featurising the records, then each model's held-out folds."""
    _prepare()
    from autosearch.cost_models.evaluate import DEFAULT_MODELS
    from autosearch.cost_models.evaluate import compare_models as evaluate
    from autosearch.search.cost_model import make_cost_model

    logs = [logs] if isinstance(logs, str) else list(logs)
    models = list(DEFAULT_MODELS) if models is None else [m.strip() for m in models if m.strip()]
    if not models:
        raise UserError("--models: give at least one cost model")
    for name in models:  # unknown names and feature sets fail here, listing the valid ones
        if name == "pretrained" or os.path.isdir(name):
            raise UserError(f"compare-models trains each model without the held-out task; {name!r} is pre-trained "
                            "(it may have seen it): its held-out accuracy is in its manifest (train-model)")
        make_cost_model(name, seed=seed)
    for path in logs:
        if not os.path.exists(path):
            raise UserError(f"log not found: {path}")
    if min_records < 1:
        raise UserError("--min-records must be positive")
    _check_outputs(plot, markdown)
    progress = on_progress or (lambda label, done, total: None)
    result = evaluate(logs, models, seed=seed, out_png=plot, min_records=min_records, split=split,
                      on_fold=lambda model, done, total: progress(f"{model}: held-out {split}s", done, total),
                      on_featurise=lambda done, total: progress("featurising records", done, total))
    if markdown:
        with open(markdown, "w") as fh:
            fh.write(result.markdown + "\n")
    return result


def train_model(out: str, *, logs: Sequence[str] = (), measure: bool = False, minutes: float | None = None,
                model: str = DEFAULT_MODEL, tasks_per_layout: int = 6, per_task: int = 64,
                family: str = "xgb-rank", folds: int = 5, exclude_tasks: Sequence[str] = (), seed: int = 0,
                force: bool = False, target: str | None = None, precision: str = "auto", runner: str = "local",
                runner_options: Mapping[str, Any] | None = None,
                on_progress: Callable[[str, int, int], None] | None = None,
                on_message: Callable[[str], None] | None = None) -> TrainReport:
    """Pre-train a cost model on measured records and write it to the directory ``out`` (``model.ubj`` and
    ``manifest.json``), for ``tune(cost_model=out)``. ``logs``: tuning logs or TVM databases; ``measure``: first
    measure a dataset on this machine for ``minutes`` (``out/dataset.jsonl``, gone on from when it exists:
    random configs and mutations of the best, of ``tasks_per_layout`` tasks of ``model`` per lowering (fp32
    convolutions in each layout, and where this CPU has a bf16 unit the convolutions, matmuls and attentions on it),
    up to ``per_task`` configs each, then of its other such tasks one by one while the minutes last) and train on it
    too; ``target``: measure for this target instead of the host's CPU (a JSON dict, e.g. the host's features less
    AMX, to measure the AVX512-BF16 dot product's schedules on a CPU that has both units). ``family``: ``xgb-rank``
    or ``blend`` (needs PyTorch). ``precision``: ``auto`` measures the lowerings a default run tunes, ``fp32`` or
    ``bf16`` one side only.
    Held-out accuracy over ``folds`` folds by task; ``exclude_tasks``: workload keys left out, e.g. to test the
    model on them. ``on_progress(label, done, total)``: measuring configs, then featurising records."""
    _prepare()
    from autosearch.cost_models.pretrained import MANIFEST
    from autosearch.cost_models.pretrained import train_model as train

    logs = list(logs)
    for path in logs:
        if not os.path.exists(path):
            raise UserError(f"log not found: {path}")
    if not logs and not measure:
        raise UserError("train-model needs --log (measured records) or --measure (measure them here first)")
    if os.path.exists(os.path.join(out, MANIFEST)) and not force:
        raise UserError(f"{out} already holds a cost model; choose another --out or pass --force")
    if folds < 2:
        raise UserError("--folds must be at least 2")
    if not measure:  # (--measure checks its options, then makes it)
        make_writable_dir(out)  # before minutes of featurising, not at the end
    progress = on_progress or (lambda label, done, total: None)
    if measure:
        logs.append(_measure_dataset(out, minutes=minutes, model=model, tasks_per_layout=tasks_per_layout,
                                     per_task=per_task, seed=seed, target=target, precision=precision,
                                     runner=runner, runner_options=runner_options, progress=progress,
                                     say=on_message or (lambda line: None)))
    return train(logs, out, family=family, seed=seed, folds=folds, exclude=tuple(exclude_tasks),
                 on_progress=lambda done, total: progress("featurising records", done, total))


def _measure_dataset(out: str, *, minutes: float | None, model: str, tasks_per_layout: int, per_task: int, seed: int,
                     target: str | None, precision: str, runner: str, runner_options: Mapping[str, Any] | None,
                     progress: Callable[[str, int, int], None], say: Callable[[str], None]) -> str:
    """``train-model --measure``: measure (or go on measuring) OUT/dataset.jsonl for ``minutes``; its path."""
    from autosearch.frontend.target import parse_target
    from autosearch.search.dataset import DATASET_FILE, dataset_lowerings, dataset_tasks, measure_dataset
    from autosearch.search.sketch_store import SketchStore

    if minutes is None or not (math.isfinite(minutes) and minutes > 0):
        raise UserError("train-model --measure needs --minutes, a positive number (the measuring budget)")
    if tasks_per_layout <= 0 or per_task <= 0:
        raise UserError("--tasks-per-layout and --per-task must be positive")
    _runner_kwargs(runner, runner_options)  # a bad runner or option: one line before any task is imported
    where = (f"for {target}" if target else "on this machine") + (f" through the runner {runner!r}"
                                                                     if runner != "local" else "")
    target = parse_target(target)  # default: this machine's CPU, all its cores
    dataset_lowerings(target, precision)  # --precision bf16 on a CPU without a unit: the error before any write
    make_writable_dir(out)
    tasks, more = dataset_tasks(model, target, count=tasks_per_layout, precision=precision)
    lowerings = ", ".join(dict.fromkeys(f"{t.lowering.get('precision', OLD_LOWERING['precision'])} "
                                        f"{t.lowering.get('layout', OLD_LOWERING['layout'])}" for t in (*tasks, *more)))
    path = os.path.join(out, DATASET_FILE)
    say(f"measuring a dataset {where}: {len(tasks)} tasks of {model} ({lowerings}: its convolutions, in "
        f"bf16 its matmuls and attentions too), up to {per_task} configs each, then its {len(more)} other such "
        f"tasks one by one while the {minutes:g} min "
        f"last -> {path}")
    with make_runner(runner, target, MeasureOptions(), seed=seed, options=runner_options) as measuring:
        measure_dataset(tasks, path, runner=measuring, seconds=60 * minutes, per_task=per_task, seed=seed, more=more,
                        on_progress=lambda done, total: progress("measuring configs", done, total),
                        sketch_store=SketchStore())
    return path


__all__ = ["DEFAULT_BATCH", "DEFAULT_MINUTES", "DEFAULT_MODEL", "DEFAULT_TRIALS", "RUNNERS", "MeasureOptions",
           "TaskResult", "TunePlanned", "TuneResult", "TuneStarted", "compare_models", "compile", "default_log",
           "export", "load_tasks", "make_runner", "report", "resolve_guidance", "runner_option_table", "select_tasks",
           "train_model", "tune"]
