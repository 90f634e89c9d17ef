"""How a measurement is judged, for every runner: timeouts, the slow-kernel shortcut, worker replies -> results.

:class:`~autosearch.measure.local.LocalRunner` and :class:`~autosearch.measure.ray_pool.RayRunner` differ
in where a kernel is built and timed, not in how: each rule lives here once, with the per-task state it
reads (the untuned baseline and the best median so far), and both runners call it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from autosearch.types import MeasureResult, Status

if TYPE_CHECKING:
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.worker import Reply

# Seconds the reference run may take: the unscheduled kernel, called once and then timed, can take seconds a call.
REFERENCE_TIMEOUT = 600.0
# Seconds a candidate's check and timing may take at most, however slow the baseline.
MAX_RUN_TIMEOUT = 300.0
# Seconds: an untuned kernel whose first call (the one that computes its reference) takes longer is timed by that
# call alone. Three more repeats of a kernel of a tenth of a second or more made the untuned reference runs most of a
# run's task set-up; so did a second call of the multi-second ones.
BASELINE_ONCE_AFTER = 0.1


def failure_from_reply(reply: Reply, *, timeout_status: Status, error_status: Status, **kw: Any) -> MeasureResult:
    """Map a worker reply that is not ``ok`` to the result taxonomy (a dead worker is ``worker_crashed``)."""
    status = {"timeout": timeout_status, "crashed": Status.WORKER_CRASHED}.get(reply.kind, error_status)
    return MeasureResult.failed(status, reply.error, **kw)


def build_failure(reply: Reply, *, worker: str) -> MeasureResult:
    """The result of a build whose worker did not answer ``ok``."""
    return failure_from_reply(reply, timeout_status=Status.BUILD_TIMEOUT, error_status=Status.BUILD_ERROR,
                              build_secs=reply.seconds, worker=worker)


def run_failure(reply: Reply, *, build_secs: float, worker: str) -> MeasureResult:
    """The result of a reference, install or timing call whose worker did not answer ``ok``."""
    return failure_from_reply(reply, timeout_status=Status.RUN_TIMEOUT, error_status=Status.RUN_ERROR,
                              build_secs=build_secs, run_secs=reply.seconds, worker=worker)


class MeasurePolicy:
    """The rules of one runner's measurements and the per-task state they need.

    ``run_timeout`` (seconds) is the floor of every candidate's timeout; a task whose untuned kernel is
    slow gets more (see :meth:`timeout`).
    """

    def __init__(self, *, evaluator: EvaluatorConfig, run_timeout: float) -> None:
        self.evaluator = evaluator
        # The untuned kernel is timed like every candidate, with fewer repeats: it can take seconds.
        self.baseline_evaluator = replace(evaluator, repeat=min(3, evaluator.repeat))
        self.run_timeout = run_timeout
        self._baseline_secs: dict[str, float] = {}  # task key -> median of the untuned kernel
        self._best_secs: dict[str, float] = {}  # task key -> best median measured so far (for slow_factor)

    def require_baseline(self, task: TuningTask) -> None:
        """Candidates are checked against the reference that ``prepare`` computes with the baseline."""
        if task.workload_key not in self._baseline_secs:
            raise RuntimeError(f"prepare() the task {task.name} before measuring it")

    def reference_evaluator(self) -> dict[str, Any]:
        """The evaluator of a reference run, as the worker reads it: :attr:`baseline_evaluator` with
        ``slow_after`` = :data:`BASELINE_ONCE_AFTER`, so a slow untuned kernel is timed by its reference call."""
        return {**self.baseline_evaluator.to_json(), "slow_after": BASELINE_ONCE_AFTER}

    def baseline_secs(self, task_key: str) -> float | None:
        return self._baseline_secs.get(task_key)

    def timeout(self, task_key: str) -> float:
        """Seconds one candidate's check and timing may take: enough for ``repeat + 2`` runs of three times
        the untuned kernel, never less than ``run_timeout`` nor more than :data:`MAX_RUN_TIMEOUT`."""
        base = self._baseline_secs.get(task_key, 0.0)
        return min(max(self.run_timeout, 3 * base * (self.evaluator.repeat + 2)), MAX_RUN_TIMEOUT)

    def run_evaluator(self, task: TuningTask) -> dict[str, Any]:
        """The evaluator of the next candidate of ``task``, as the worker reads it: with ``slow_after`` (seconds)
        once the task has a best, so a kernel ``slow_factor`` times slower than it is timed only once; with
        ``bf16`` (the products in a chain) when the task multiplies bf16 operands (checked with bf16's tolerance,
        :func:`autosearch.measure.
        kernels.check_tolerance`)."""
        from autosearch.tensor_units.intrinsics import rounds_to_bf16

        evaluator = self.evaluator.to_json()
        roundings = rounds_to_bf16(task.name, task.args)
        if roundings:
            evaluator["bf16"] = roundings
        best = self._best_secs.get(task.workload_key)
        if best is not None and self.evaluator.slow_factor > 0:
            evaluator["slow_after"] = best * self.evaluator.slow_factor
        return evaluator

    def baseline_result(self, task_key: str, reply: Reply, *, build_secs: float, worker: str) -> MeasureResult:
        """The result of the reference run (the untuned kernel, timed); an ok one becomes the task's baseline."""
        if reply.kind != "ok":
            return run_failure(reply, build_secs=build_secs, worker=worker)
        result = MeasureResult(Status.OK, tuple(reply.value["latencies"]), build_secs=build_secs,
                               run_secs=reply.seconds, worker=worker, measured_on=reply.value.get("measured_on", ""),
                               waited=reply.value.get("waited"))
        self._baseline_secs[task_key] = result.median
        return result

    def run_result(self, task_key: str, reply: Reply, *, build_secs: float, worker: str) -> MeasureResult:
        """The result of checking and timing one candidate; an ok one may become the task's best so far."""
        if reply.kind != "ok":
            return run_failure(reply, build_secs=build_secs, worker=worker)
        value = reply.value
        if "wrong_result" in value:
            return MeasureResult.failed(Status.WRONG_RESULT, value["wrong_result"], build_secs=build_secs,
                                        run_secs=value["run_secs"], worker=worker)
        result = MeasureResult(Status.OK, tuple(value["latencies"]), build_secs=build_secs,
                               run_secs=value["run_secs"], worker=worker, error=value.get("note", ""),
                               measured_on=value.get("measured_on", ""), waited=value.get("waited"))
        if result.median < self._best_secs.get(task_key, float("inf")):
            self._best_secs[task_key] = result.median
        return result

    def forget_best(self) -> None:
        """Time every candidate in full again (finalists are re-timed without the shortcut)."""
        self._best_secs.clear()
