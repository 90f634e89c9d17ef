"""A runner that builds kernels in warm local processes and checks and times each on one device.

The device is any object that answers ``reference(...)`` and ``run(...)`` with an ``autosearch.measure.worker.Reply``,
as ``autosearch.measure.measuring.MeasuringProcess`` does. To stay runnable here the device is such a process on this
machine, which makes this runner autosearch's ``local`` one reduced to the runner contract; a runner for a board on
the network replaces ``self.device`` with a client of it that answers the same two calls. Every rule of judging a
measurement (timeouts, the reference check, a crashed or hanging kernel, the slow-kernel shortcut) is
``self.policy``'s, the ``MeasurePolicy`` the built-in runners call, so its results mean what theirs mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import wait
from typing import Any

from autosearch.frontend.target import host_cores, target_num_cores
from autosearch.frontend.task import TuningTask
from autosearch.measure.base import RunnerBase
from autosearch.measure.local import BuildPool, Built
from autosearch.measure.measuring import MeasuringProcess
from autosearch.measure.policy import REFERENCE_TIMEOUT
from autosearch.options import Option
from autosearch.types import MeasureResult

# the runner's own settings, given as `run --runner device --runner-option threads=1` (checked against this table)
OPTIONS = {"threads": Option("threads the device times each kernel with (0: the target's cores)", 0, int)}


class DeviceRunner(RunnerBase):
    name = "device"

    def __init__(self, *, target, **settings: Any) -> None:
        super().__init__(target=target, **settings)
        self.num_threads = self.num_threads or target_num_cores(target)
        self.builder = BuildPool(target=target, workers=self.build_workers or host_cores(),
                                 timeout=self.build_timeout)
        # the device: here a local measuring process; a remote one answers the same calls
        self.device = MeasuringProcess(name="device", env={"TVM_NUM_THREADS": str(self.num_threads)})
        self._references: dict[str, bytes] = {}

    def prepare(self, task: TuningTask) -> MeasureResult:
        [result] = self.prepare_many([task])
        return result

    def prepare_many(self, tasks: Sequence[TuningTask], *,
                     meanwhile: Callable[[], None] | None = None) -> list[MeasureResult]:
        """The untuned kernels of ``tasks`` built at once on every build worker while ``meanwhile()`` runs here (the
        tuner builds the tasks' design spaces then); once every build has ended, each reference is computed and each
        baseline timed on the device, one at a time. One by one, each build left the other workers and the caller
        idle."""
        import tvm

        futures = self.builder.submit([tvm.ir.save_json(t.mod) for t in tasks])
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            wait(futures)  # nothing is timed while a build runs
        return [self._baseline(task, future.result()) for task, future in zip(tasks, futures)]

    def _baseline(self, task: TuningTask, built: Built) -> MeasureResult:
        if built.failure is not None:
            return built.failure
        reply = self.device.reference(task.workload_key, built.artifact, task.args, self.seed,
                                      self.policy.reference_evaluator(), timeout=REFERENCE_TIMEOUT)
        result = self.policy.baseline_result(task.workload_key, reply, build_secs=built.build_secs,
                                             worker=self.device.ident)
        if result.ok:
            self._references[task.workload_key] = reply.value["reference"]
        return result

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        import tvm

        self.policy.require_baseline(task)
        builds = self.builder.build([tvm.ir.save_json(m) for m in mods])  # every build ends before any timing
        return [self._run(task, built) for built in builds]

    def _run(self, task: TuningTask, built: Built) -> MeasureResult:
        if built.failure is not None:
            return built.failure
        key = task.workload_key
        reply = self.device.run(key, lambda: self._references[key], built.artifact, task.args, self.seed,
                                self.policy.run_evaluator(task), timeout=self.policy.timeout(key))
        return self.policy.run_result(key, reply, build_secs=built.build_secs, worker=self.device.ident)

    def refresh(self) -> None:
        """A fresh measuring process (the tuner re-times its finalists so); the slow-kernel shortcut starts over."""
        self.device.refresh()
        self.policy.forget_best()

    def close(self) -> None:
        self.builder.close()
        self.device.close()


def create(target, measure, *, seed: int = 0, threads: int = OPTIONS["threads"].default) -> DeviceRunner:
    """The factory autosearch calls for ``--runner device`` (entry point of group ``autosearch.runners``):
    ``measure`` is ``autosearch.api.MeasureOptions`` (the evaluator and limits every runner takes, from
    ``measure.runner_settings()``); the keyword options are this module's :data:`OPTIONS`, already checked."""
    return DeviceRunner(target=target, seed=seed, num_threads=threads or None, **measure.runner_settings())
