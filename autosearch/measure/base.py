"""The Runner interface every measurement backend (local processes, Ray device pool) implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from autosearch.records import MeasureResult
from autosearch.task import TuningTask


@dataclass(frozen=True)
class EvaluatorConfig:
    """How one kernel is timed (TVM's time evaluator), as in MetaSchedule's ``EvaluatorConfig``.

    Each repeat runs the kernel ``number`` times (raised until a repeat lasts ``min_repeat_ms``) and
    reports the mean; the CPU caches are flushed before every repeat, so the weights are not warm.
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 20
    cache_flush: bool = True
    check_rtol: float = 1e-3
    # A candidate whose correctness run alone takes this many times the task's best latency is timed
    # once instead of ``repeat`` times: it cannot win, and re-timing multi-second kernels dominates tuning.
    slow_factor: float = 5.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class MeasureJob:
    """One kernel to build and measure for a task (the module is already scheduled)."""

    task_key: str
    mod_json: str  # tvm.ir.save_json of the scheduled IRModule
    job_id: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


class Runner(Protocol):
    """Builds and measures kernels. Implementations: LocalRunner, RayRunner."""

    name: str

    def prepare(self, task: TuningTask) -> MeasureResult:
        """Compute the task's reference output and measure its untuned (unscheduled) latency."""

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        """Build and time scheduled modules of ``task``; one result per module, in order."""

    def close(self) -> None:
        """Stop worker processes / actors."""
