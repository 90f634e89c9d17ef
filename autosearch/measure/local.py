"""Local runner: parallel builds in warm worker processes, then one measurement at a time.

Builds and measurements never overlap: on a small machine a compile on the other core would
spoil the timing. The measuring process has ``TVM_NUM_THREADS`` set to the target's cores before it
imports TVM (without it TVM 0.27 used one thread here).
"""

from __future__ import annotations

import logging
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from autosearch.measure.base import EvaluatorConfig
from autosearch.measure.worker import Reply, Worker
from autosearch.records import MeasureResult, Status
from autosearch.target import host_cores, target_num_cores, target_to_json
from autosearch.task import TuningTask

log = logging.getLogger(__name__)



@dataclass
class Built:
    """A compiled kernel, or the result that says why there is none."""

    artifact: bytes | None
    build_secs: float
    failure: MeasureResult | None = None


def failure_from_reply(reply: Reply, *, timeout_status: Status, error_status: Status, **kw: Any) -> MeasureResult:
    """Map a worker reply that is not ``ok`` to the result taxonomy."""
    status = {"timeout": timeout_status, "crashed": Status.WORKER_CRASHED}.get(reply.kind, error_status)
    return MeasureResult.failed(status, reply.error, **kw)


class BuildPool:
    """Warm build processes (TVM imported once), one build each at a time, with a per-build timeout."""

    def __init__(self, *, target, workers: int, timeout: float) -> None:
        self.target = target_to_json(target)
        self.timeout = timeout
        self._idle: queue.Queue[Worker] = queue.Queue()
        self._workers = [Worker(name=f"build{i}", env={"TVM_NUM_THREADS": "1"}) for i in range(max(1, workers))]
        for w in self._workers:
            self._idle.put(w)
        self._pool = ThreadPoolExecutor(max_workers=len(self._workers), thread_name_prefix="autosearch-build")

    def warm_up(self) -> None:
        """Start every worker and wait until TVM is imported in each."""
        list(self._pool.map(lambda w: w.call("ping", timeout=120), self._workers))

    def _build_one(self, mod_json: str) -> Built:
        worker = self._idle.get()
        try:
            reply = worker.call("build", mod_json, self.target, timeout=self.timeout)
        finally:
            self._idle.put(worker)
        if reply.kind == "ok":
            artifact, secs = reply.value
            return Built(artifact, secs)
        failure = failure_from_reply(reply, timeout_status=Status.BUILD_TIMEOUT, error_status=Status.BUILD_ERROR,
                                     build_secs=reply.seconds, worker=worker.ident)
        return Built(None, reply.seconds, failure)

    def build(self, mod_jsons: list[str]) -> list[Built]:
        return list(self._pool.map(self._build_one, mod_jsons))

    def close(self) -> None:
        """Stop the workers first (a build in flight is abandoned: its thread sees the worker die),
        then the threads; no build is left running after an interrupt."""
        for w in self._workers:
            w.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for w in self._workers:
            w.close()


class LocalRunner:
    """Builds in parallel, measures one kernel at a time on this machine's CPU.

    Every kernel's output is checked against the task's reference (the unscheduled module run on
    the same random inputs) before it is timed; a mismatch is ``wrong_result`` and has no latency.
    """

    name = "local"

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
        self.evaluator = evaluator or EvaluatorConfig()
        # The untuned kernel is timed like every candidate (fewer repeats: it can take seconds).
        self.baseline_evaluator = replace(self.evaluator, repeat=min(3, self.evaluator.repeat))
        self.run_timeout = run_timeout
        self.seed = seed
        self.num_threads = num_threads or target_num_cores(target)
        self.builder = BuildPool(target=target, workers=build_workers or host_cores(), timeout=build_timeout)
        self.device = Worker(name="measure", env={"TVM_NUM_THREADS": str(self.num_threads)})
        self._references: dict[str, bytes] = {}
        self._baseline_secs: dict[str, float] = {}
        self._best_secs: dict[str, float] = {}  # best median measured per task (for slow_factor)
        self._installed: set[str] = set()
        self._device_restarts = 0
        self.phase_secs = {"build": 0.0, "run": 0.0}  # wall time spent in each phase (benchmarks)

    # ------------------------------------------------------------------ helpers
    def _sync_device(self) -> None:
        """After the measuring process was replaced, its references must be installed again."""
        if self.device.restarts != self._device_restarts:
            self._installed.clear()
            self._device_restarts = self.device.restarts

    def _timeout(self, task: TuningTask) -> float:
        base = self._baseline_secs.get(task.workload_key, 0.0)
        return min(max(self.run_timeout, 3 * base * (self.evaluator.repeat + 2)), 300.0)

    def warm_up(self) -> None:
        self.builder.warm_up()
        self.device.call("ping", timeout=120)

    # ------------------------------------------------------------------ Runner API
    def prepare(self, task: TuningTask) -> MeasureResult:
        """Build the unscheduled module, keep its output as the reference and time it (the baseline)."""
        import tvm

        [built] = self.builder.build([tvm.ir.save_json(task.mod)])
        if built.failure is not None:
            return built.failure
        reply = self.device.call(
            "reference", task.workload_key, built.artifact, task.args, self.seed,
            self.baseline_evaluator.to_json(), timeout=600,
        )
        self._sync_device()
        if reply.kind != "ok":
            return failure_from_reply(reply, timeout_status=Status.RUN_TIMEOUT, error_status=Status.RUN_ERROR,
                                      build_secs=built.build_secs, run_secs=reply.seconds, worker=self.device.ident)
        self._references[task.workload_key] = reply.value["reference"]
        self._installed.add(task.workload_key)
        result = MeasureResult(Status.OK, tuple(reply.value["latencies"]), build_secs=built.build_secs,
                               run_secs=reply.seconds, worker=self.device.ident)
        self._baseline_secs[task.workload_key] = result.median
        return result

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        """Build all modules in parallel, then check and time each one in turn."""
        import tvm

        if task.workload_key not in self._references:
            raise RuntimeError(f"prepare() the task {task.name} before measuring it")
        start = time.perf_counter()
        builds = self.builder.build([tvm.ir.save_json(m) for m in mods])
        built = time.perf_counter()
        results = [self._run(task, b) for b in builds]
        self.phase_secs["build"] += built - start
        self.phase_secs["run"] += time.perf_counter() - built
        return results

    def measure_artifacts(self, task: TuningTask, builds: list[Built]) -> list[MeasureResult]:
        return [self._run(task, b) for b in builds]

    def _run(self, task: TuningTask, built: Built) -> MeasureResult:
        if built.failure is not None:
            return built.failure
        self._sync_device()
        key = task.workload_key
        if key not in self._installed:
            reply = self.device.call("set_reference", key, self._references[key], timeout=120)
            self._sync_device()
            if reply.kind != "ok":
                return failure_from_reply(reply, timeout_status=Status.RUN_TIMEOUT, error_status=Status.RUN_ERROR,
                                          build_secs=built.build_secs, worker=self.device.ident)
            self._installed.add(key)
        start = time.perf_counter()
        worker = self.device.ident
        evaluator = self.evaluator.to_json()
        best = self._best_secs.get(key)
        if best is not None and self.evaluator.slow_factor > 0:
            evaluator["slow_after"] = best * self.evaluator.slow_factor
        reply = self.device.call("run", key, built.artifact, task.args, self.seed, evaluator,
                                 timeout=self._timeout(task))
        self._sync_device()
        if reply.kind != "ok":
            return failure_from_reply(reply, timeout_status=Status.RUN_TIMEOUT, error_status=Status.RUN_ERROR,
                                      build_secs=built.build_secs, run_secs=time.perf_counter() - start,
                                      worker=worker)
        value = reply.value
        if "wrong_result" in value:
            return MeasureResult.failed(Status.WRONG_RESULT, value["wrong_result"], build_secs=built.build_secs,
                                        run_secs=value["run_secs"], worker=worker)
        result = MeasureResult(Status.OK, tuple(value["latencies"]), build_secs=built.build_secs,
                               run_secs=value["run_secs"], worker=worker, error=value.get("note", ""))
        if result.median < self._best_secs.get(key, float("inf")):
            self._best_secs[key] = result.median
        return result

    def refresh(self) -> None:
        """Replace the measuring process (for re-timing finalists in a fresh process); finalists are
        timed in full, so the best-so-far shortcut is reset too."""
        self.device.kill()
        self._best_secs.clear()
        self._sync_device()

    def baseline_secs(self, task: TuningTask) -> float | None:
        return self._baseline_secs.get(task.workload_key)

    def close(self) -> None:
        self.builder.close()
        self.device.close()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
