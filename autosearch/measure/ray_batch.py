"""One prepare/measure call on the Ray pool: builds as Ray tasks in a sliding window, then each job on an
idle device, retried on another device when its actor dies, each finished exactly once.

Builds are Ray tasks (``num_cpus=1``), at most ``build_workers`` at once, each in a warm subprocess with
the local builder's timeout. For CPU targets every build of a batch finishes before the first
measurement starts, so no compile shares the machine with a timing (CUDA batches overlap them).
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import RayActorError, RayError, TaskCancelledError, WorkerCrashedError

from autosearch.frontend.task import TuningTask
from autosearch.measure.policy import REFERENCE_TIMEOUT, build_failure
from autosearch.measure.ray_cluster import first_line
from autosearch.measure.ray_device import build_in_worker, warm_build_worker
from autosearch.measure.ray_fleet import Device
from autosearch.measure.worker import STARTUP_TIMEOUT, Reply
from autosearch.types import MeasureResult, Status

if TYPE_CHECKING:
    from autosearch.measure.ray_pool import RayRunner

log = logging.getLogger(__name__)

# Extra seconds the driver allows beyond a job's own timeout before it declares the actor hung:
# installing a reference and restarting a worker subprocess (a TVM import) are not kernel time.
DRIVER_SLACK = STARTUP_TIMEOUT
POLL_SECS = 0.5

_build_task = ray.remote(build_in_worker)
_warm_task = ray.remote(warm_build_worker)


def warm_builders(count: int, options: dict[str, Any]) -> list[Any]:
    """Start ``count`` build subprocesses (one per Ray worker that will build), all importing TVM; returns
    the refs of their replies."""
    return [_warm_task.options(num_cpus=1, max_retries=0, **options).remote() for _ in range(count)]


@dataclass
class _Job:
    """One module of a batch on its way through build and measurement."""

    index: int
    mod_json: str
    build: dict[str, Any] = field(default_factory=dict)
    artifact: Any = None  # ObjectRef of the .so bytes, fetched only by the measuring actor
    deaths: int = 0
    avoid: set[int] = field(default_factory=set)
    last_death: str = ""

    @property
    def build_secs(self) -> float:
        return float(self.build.get("build_secs", 0.0))


class RayBatch:
    """Builds and measures the modules of one call; :meth:`run` returns one result per module, in order.

    Every path of a job ends in exactly one ``_finish`` (which refuses a second one): an actor death
    puts the job back in the queue; a late answer from a killed actor is dropped with its ref.
    """

    def __init__(self, pool: RayRunner, task: TuningTask, mod_jsons: list[str], *, reference: bool) -> None:
        self.pool = pool
        self.fleet = pool.fleet
        self.policy = pool.policy
        self.task = task
        self.reference = reference
        self.jobs = [_Job(i, mj) for i, mj in enumerate(mod_jsons)]
        self.results: list[MeasureResult | None] = [None] * len(self.jobs)
        self.to_build = collections.deque(self.jobs)
        self.building: dict[Any, tuple[_Job, Any, float]] = {}  # status ref -> (job, artifact ref, t0)
        self.ready: list[_Job] = []
        self.running: dict[Any, tuple[_Job, Device, float]] = {}  # reply ref -> (job, device, deadline)
        # CPU devices time kernels on the cores builds would use: measure only after the batch is built.
        self.overlap = pool.kind == "cuda"
        self.run_timeout = REFERENCE_TIMEOUT if reference else self.policy.timeout(task.workload_key)

    # ---------------------------------------------------------------- bookkeeping
    def _finish(self, job: _Job, result: MeasureResult) -> None:
        if self.results[job.index] is not None:
            raise AssertionError(f"job {job.index} finished twice")
        self.results[job.index] = result

    def _pending(self) -> bool:
        return any(r is None for r in self.results)

    def in_flight(self) -> dict[int, int]:
        """Module index -> device index of the measurements running now."""
        return {job.index: device.index for job, device, _ in list(self.running.values())}

    def run(self) -> list[MeasureResult]:
        start = built = time.perf_counter()
        all_built = False
        while self._pending():
            self._submit_builds()
            if not all_built and not (self.to_build or self.building):
                all_built, built = True, time.perf_counter()
            if self.overlap or not (self.to_build or self.building):
                self._dispatch()
            self._fail_if_no_devices()
            if not self._pending():
                break
            pinging = self.fleet.pings()
            refs = list(self.building) + list(self.running) + list(pinging)
            if refs:
                done, _ = ray.wait(refs, num_returns=1, timeout=POLL_SECS)
                if done:
                    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                for ref in done:
                    self._handle(ref, pinging)
            else:  # jobs wait for a device, or for a recovering device's next ping: do not spin
                time.sleep(POLL_SECS)
            self._check_deadlines()
        if not self.reference:
            end = time.perf_counter()
            built = built if all_built else end
            self.pool.count_phases(built - start, end - built)
        return [r for r in self.results if r is not None]

    def _handle(self, ref: Any, pinging: dict[Any, Device]) -> None:
        if ref in self.building:
            self._build_done(ref)
        elif ref in self.running:
            self._run_done(ref)
        elif ref in pinging:
            self.fleet.ping_done(pinging[ref])

    # ---------------------------------------------------------------- builds
    def _submit_builds(self) -> None:
        while self.to_build and len(self.building) < self.pool.build_workers:
            job = self.to_build.popleft()
            status_ref, artifact_ref = self._start_build(job)
            self.building[status_ref] = (job, artifact_ref, time.monotonic())

    def _start_build(self, job: _Job) -> tuple[Any, Any]:
        """Submit the build task of one job: refs of its status and of its artifact."""
        pool = self.pool
        return _build_task.options(num_cpus=1, num_returns=2, max_retries=0, **pool.build_options).remote(
            job.mod_json, pool.target_json, pool.build_timeout)

    def _build_done(self, ref: Any) -> None:
        job, artifact_ref, t0 = self.building.pop(ref)
        try:
            status = ray.get(ref)
        except TaskCancelledError:
            self._finish(job, MeasureResult.failed(Status.BUILD_TIMEOUT, f"no answer within "
                                                   f"{self.pool.build_timeout:.0f} s (build task cancelled)",
                                                   build_secs=time.monotonic() - t0))
            return
        except WorkerCrashedError as exc:
            self._finish(job, MeasureResult.failed(Status.WORKER_CRASHED, f"build task died: {first_line(exc)}",
                                                   build_secs=time.monotonic() - t0))
            return
        except RayError as exc:
            self._finish(job, MeasureResult.failed(Status.BUILD_ERROR, first_line(exc),
                                                   build_secs=time.monotonic() - t0))
            return
        if status["kind"] != "ok":
            reply = Reply(status["kind"], error=status.get("error", ""), seconds=float(status.get("seconds", 0.0)))
            self._finish(job, build_failure(reply, worker=status.get("worker", "")))
            return
        job.build = status
        job.artifact = artifact_ref
        self.ready.append(job)

    # ---------------------------------------------------------------- measurements
    def _pick(self, job: _Job) -> Device | None:
        idle = self.fleet.idle()
        fresh = [d for d in idle if d.index not in job.avoid]
        if fresh:
            return fresh[0]
        others_alive = [d for d in self.fleet.devices if d.alive and d.index not in job.avoid]
        return idle[0] if idle and not others_alive else None

    def _dispatch(self) -> None:
        self.ready.sort(key=lambda j: j.index)
        for job in list(self.ready):
            device = self._pick(job)
            if device is None:
                continue
            self.ready.remove(job)
            ref = self._start_run(job, device)
            device.state = "busy"
            self.running[ref] = (job, device, time.monotonic() + self.run_timeout + DRIVER_SLACK)

    def _start_run(self, job: _Job, device: Device) -> Any:
        """Send one job to a device: the ref of its (reply, worker ident)."""
        pool, task, key = self.pool, self.task, self.task.workload_key
        if self.reference:
            return device.handle.reference.remote(key, job.artifact, task.args, pool.seed,
                                                  self.policy.reference_evaluator(), self.run_timeout)
        return device.handle.run.remote(key, [pool.reference(key)], job.artifact, task.args, pool.seed,
                                        self.policy.run_evaluator(task), self.run_timeout)

    def _run_done(self, ref: Any) -> None:
        job, device, _ = self.running.pop(ref)
        try:
            reply, ident = ray.get(ref)
        except RayActorError as exc:
            self._device_died(device, job, first_line(exc))
            return
        except RayError as exc:  # an error in our actor code, not the kernel's: report, keep the device
            device.state = "idle"
            self._finish(job, MeasureResult.failed(Status.RUN_ERROR, first_line(exc), build_secs=job.build_secs))
            return
        device.state = "idle"
        self._finish(job, self._result(job, reply, ident))

    def _result(self, job: _Job, reply: Reply, ident: str) -> MeasureResult:
        key = self.task.workload_key
        if not self.reference:
            return self.policy.run_result(key, reply, build_secs=job.build_secs, worker=ident)
        result = self.policy.baseline_result(key, reply, build_secs=job.build_secs, worker=ident)
        if result.ok:
            self.pool.keep_reference(key, reply.value["reference"])
        return result

    # ---------------------------------------------------------------- faults
    def _device_died(self, device: Device, job: _Job, why: str) -> None:
        job.deaths += 1
        job.avoid.add(device.index)
        job.last_death = why
        self.fleet.died(device, why, during=f"job {job.index}")
        if job.deaths > self.pool.max_retries:
            self._finish(job, MeasureResult.failed(
                Status.WORKER_CRASHED, f"the device actor died on each of {job.deaths} attempts (last: {why})",
                build_secs=job.build_secs))
        else:
            self.ready.append(job)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for ref, (job, _, t0) in list(self.building.items()):
            if now > t0 + self.pool.build_timeout + DRIVER_SLACK:
                ray.cancel(ref, force=True)
                self.building.pop(ref)
                self._finish(job, MeasureResult.failed(
                    Status.BUILD_TIMEOUT,
                    f"no answer within {self.pool.build_timeout:.0f} s (build task killed)",
                    build_secs=now - t0))
        for _, device, deadline in list(self.running.values()):
            if now > deadline and device.state == "busy":
                self.fleet.hung(device)  # its pending reply now fails -> _device_died
        self.fleet.expire_recoveries(now)

    def _fail_if_no_devices(self) -> None:
        if self.fleet.any_alive():
            return
        for job in self.ready:
            self._finish(job, MeasureResult.failed(
                Status.WORKER_CRASHED, f"no device of {self.pool.key!r} is left ({job.last_death or 'all died'})",
                build_secs=job.build_secs))
        self.ready.clear()
