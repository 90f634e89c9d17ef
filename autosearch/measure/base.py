"""The Runner interface every measurement backend (local processes, Ray device pool) implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from autosearch.frontend.task import TuningTask
from autosearch.measure.policy import MeasurePolicy
from autosearch.types import MeasureResult

_R = TypeVar("_R", bound="RunnerBase")


@dataclass(frozen=True)
class EvaluatorConfig:
    """How one kernel is timed (TVM's time evaluator), as in MetaSchedule's ``EvaluatorConfig``.

    Each repeat runs the kernel ``number`` times (raised until a repeat lasts ``min_repeat_ms``) and reports the
    mean; the CPU caches are flushed before every repeat. The default is one call per repeat, so every timed call
    meets its weights and output cold, as a layer does inside the model, where the layers before it have filled the
    caches with their own data. With ``min_repeat_ms`` > 0 (MetaSchedule's way) only the first call of a repeat is
    cold and the rest find everything in cache, and tuned kernels ran slower in the model than they were timed
    (docs/results.md). With one call per repeat, a kernel gets ``repeat`` repeats or as many of its checked call's
    length as fit in ``repeat_budget_ms``, at least :data:`autosearch.measure.kernels.MIN_REPEATS`.

    ``cache_state``: ``flushed`` evicts the kernel's arguments but the first before each repeat; ``dirty`` instead
    leaves every core's caches full of modified lines, as the kernels before it in a forward pass do
    (:mod:`autosearch.measure.flush` says why).
    """

    number: int = 1
    repeat: int = 30
    min_repeat_ms: int = 0
    cache_flush: bool = True
    cache_state: str = "flushed"  # autosearch.measure.flush.CACHE_STATES
    repeat_budget_ms: int = 200
    check_rtol: float = 1e-3
    # A candidate whose correctness run alone takes this many times the task's best latency is timed
    # once instead of ``repeat`` times: it cannot win, and re-timing multi-second kernels dominates tuning.
    slow_factor: float = 5.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Runner(Protocol):
    """Builds and measures kernels. Implementations: LocalRunner, RayRunner."""

    name: str

    def prepare(self, task: TuningTask) -> MeasureResult:
        """Compute the task's reference output and measure its untuned (unscheduled) latency."""

    def prepare_many(self, tasks: Sequence[TuningTask], *,
                     meanwhile: Callable[[], None] | None = None) -> list[MeasureResult]:
        """``prepare`` for several tasks, calling ``meanwhile()`` (host work that must not overlap a timing)
        while their untuned modules build."""

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        """Build and time scheduled modules of ``task``; one result per module, in order."""

    def close(self) -> None:
        """Stop worker processes / actors."""


class RunnerBase:
    """The settings every runner takes and what follows from them: the measurement policy, the phase clock.

    ``build_workers``: builds at once (``None``: every core, or every CPU of the cluster). ``evaluator``:
    how each kernel is timed. ``build_timeout`` / ``run_timeout``: seconds per build, and the floor of
    each measurement's timeout (:meth:`MeasurePolicy.timeout`). ``seed``: of the kernels' random inputs.
    ``num_threads``: threads a kernel runs on (``None``: the target's cores).
    """

    name = "runner"

    def __init__(
        self,
        *,
        target,
        build_workers: int | None = None,
        evaluator: EvaluatorConfig | None = None,
        build_timeout: float = 60.0,
        run_timeout: float = 30.0,
        seed: int = 0,
        num_threads: int | None = None,
    ) -> None:
        self.target = target
        self.build_workers = build_workers
        self.build_timeout = build_timeout
        self.seed = seed
        self.num_threads = num_threads
        self.policy = MeasurePolicy(evaluator=evaluator or EvaluatorConfig(), run_timeout=run_timeout)
        self.phase_secs = {"build": 0.0, "run": 0.0}  # wall seconds in each phase (benchmarks)

    def count_phases(self, build_secs: float, run_secs: float) -> None:
        """Add one measure call's wall seconds spent building and then measuring to :attr:`phase_secs`."""
        self.phase_secs["build"] += build_secs
        self.phase_secs["run"] += run_secs

    def baseline_secs(self, task: TuningTask) -> float | None:
        """Median seconds of the task's untuned kernel, once ``prepare`` measured it."""
        return self.policy.baseline_secs(task.workload_key)

    def prepare(self, task: TuningTask) -> MeasureResult:
        raise NotImplementedError

    def prepare_many(self, tasks: Sequence[TuningTask], *,
                     meanwhile: Callable[[], None] | None = None) -> list[MeasureResult]:
        """Each task's :meth:`prepare` in turn, after ``meanwhile()``. Runners whose builds can run beside the
        caller (:class:`~autosearch.measure.local.LocalRunner`) overlap the two."""
        if meanwhile is not None:
            meanwhile()
        return [self.prepare(t) for t in tasks]

    def spare_builds(self, builds: int) -> int:
        """Build workers that would idle while ``builds`` kernels build: a batch of one kernel on two workers
        leaves one idle for the whole build. 0 for a runner that cannot build ahead (:meth:`prefetch`)."""
        return 0

    def prefetch(self, mods: list[Any]) -> None:
        """Start building kernels a later :meth:`measure` is expected to ask for, on workers that would idle;
        nothing is timed until they have ended. A runner that cannot build ahead ignores the call."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
