"""Ray device pool (``--runner ray``): builds as Ray tasks, measurements on one actor per device.

The pool behaves like :class:`~autosearch.measure.local.LocalRunner` (same kernels module, same
statuses, same timeouts), spread over a Ray cluster:

* every device is an actor holding one unit of the device's key resource (``cpu-znver4-2``,
  ``cuda-rtx-4090``), so a kernel is timed only on a matching machine, one kernel at a time per device;
* builds are Ray tasks (``num_cpus=1``), at most ``build_workers`` at once, each in a warm subprocess
  with the local builder's timeout; for CPU targets all builds of a batch finish before the first
  measurement starts, so no compile shares the machine with a timing (CUDA batches overlap them);
* an actor that dies mid-measurement (killed, segfault, lost node) is restarted by Ray and its job is
  retried on another device of the key, at most ``max_retries`` times; each result is recorded once;
* devices of one key must report the same fingerprint (CPU model and cores, or GPU and driver; TVM
  versions), unless ``allow_mixed``: timings from different machines are not comparable.

Without an address the pool starts a private single-node Ray on loopback, sized to this machine.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, TaskCancelledError, WorkerCrashedError

from autosearch.errors import UserError
from autosearch.measure.base import EvaluatorConfig
from autosearch.measure.local import failure_from_reply
from autosearch.measure.ray_device import (
    STARTUP_TIMEOUT,
    DeviceActor,
    build_in_worker,
    device_kind,
    identity,
    warm_build_worker,
)
from autosearch.measure.ray_device import device_key as key_for_target
from autosearch.records import MeasureResult, Status
from autosearch.target import host_cores, target_num_cores, target_to_json
from autosearch.task import TuningTask

log = logging.getLogger(__name__)

# Extra seconds the driver allows beyond a job's own timeout before it declares the actor hung:
# installing a reference and restarting a worker subprocess (a TVM import) are not kernel time.
DRIVER_SLACK = STARTUP_TIMEOUT
POLL_SECS = 0.5
RECOVERY_TIMEOUT = 300.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@contextlib.contextmanager
def _keep_loopback() -> Iterator[None]:
    """Keep a single-machine cluster on 127.0.0.1 while this process starts or joins it.

    Ray (2.60) replaces 127.0.0.1 by the machine's external address (so other machines could join),
    and its servers then listen on every interface. Its own switch for single-machine platforms keeps
    loopback; it is a private constant, so if it is gone we only warn.
    """
    try:
        from ray._private import ray_constants
    except ImportError:  # pragma: no cover - Ray moved it
        ray_constants = None
    if ray_constants is None or not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        log.warning("cannot keep Ray on loopback with this Ray version: it may listen on all interfaces")
        yield
        return
    old = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old


def _ephemeral_token() -> None:
    """A per-process token for the private embedded cluster, unless the user configured one.

    Ray 2.60 turns token auth on for ``ray.init()`` clusters and would otherwise write a token to
    ``~/.ray/auth_token``, which later ``ray start`` calls on this machine then pick up.
    """
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if os.path.exists(os.path.join(os.path.expanduser("~"), ".ray", "auth_token")):
        return
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in _LOOPBACK


@dataclass
class _Job:
    """One module of a batch on its way through build and measurement."""

    index: int
    mod_json: str
    fault: str | None = None
    build: dict[str, Any] = field(default_factory=dict)
    artifact: Any = None  # ObjectRef of the .so bytes, fetched only by the measuring actor
    deaths: int = 0
    avoid: set[int] = field(default_factory=set)
    last_death: str = ""


@dataclass
class _Device:
    """The driver's view of one device actor."""

    index: int
    handle: Any
    info: dict[str, Any] = field(default_factory=dict)
    state: str = "starting"  # starting | idle | busy | recovering | dead
    deaths: int = 0
    since: float = 0.0
    ping: Any = None  # while recovering: a fingerprint call that answers once Ray has restarted the actor

    @property
    def alive(self) -> bool:
        return self.state != "dead"


class RayRunner:
    """Builds and measures kernels on a Ray cluster of devices (see the module docstring).

    ``address``: ``None`` starts a private Ray on loopback; ``"auto"`` or ``"HOST:PORT"`` joins a cluster.
    ``device_key`` overrides the key derived from the target (needed for CUDA: the target has no GPU
    name). ``num_devices``: actors to start (default: every unit of the key in the cluster; 1 when
    embedded). ``build_workers``: builds at once (default: the cluster's CPUs). Timeouts in seconds.
    ``_fingerprints`` and ``_faults`` are test-only: a fingerprint override per device, and faults
    injected per module index (``build_hang``, ``actor_exit``, ``actor_exit_once``).
    """

    name = "ray"

    def __init__(
        self,
        *,
        target,
        address: str | None = None,
        build_workers: int | None = None,
        evaluator: EvaluatorConfig | None = None,
        build_timeout: float = 60.0,
        run_timeout: float = 30.0,
        seed: int = 0,
        num_threads: int | None = None,
        device_key: str | None = None,
        gpu_name: str | None = None,
        num_devices: int | None = None,
        allow_mixed: bool = False,
        max_retries: int = 2,
        max_restarts: int = 10,
        build_resources: dict[str, float] | None = None,
        ray_init_kwargs: dict[str, Any] | None = None,
        _fingerprints: dict[int, dict[str, Any]] | None = None,
        _faults: dict[int, str] | None = None,
    ) -> None:
        self.target = target
        self.kind = device_kind(target)
        self.key = device_key or key_for_target(target, gpu_name=gpu_name)
        self.evaluator = evaluator or EvaluatorConfig()
        # As in LocalRunner: the untuned kernel is timed like every candidate, with fewer repeats.
        self.baseline_evaluator = replace(self.evaluator, repeat=min(3, self.evaluator.repeat))
        self.build_timeout = build_timeout
        self.run_timeout = run_timeout
        self.seed = seed
        self.num_threads = num_threads or (target_num_cores(target) if self.kind == "cpu" else 1)
        self.allow_mixed = allow_mixed
        self.max_retries = max_retries
        self.max_restarts = max_restarts
        self.build_resources = dict(build_resources or {})
        self._target_json = target_to_json(target)
        self._faults = dict(_faults or {})
        self._references: dict[str, Any] = {}  # task key -> ObjectRef of the reference npz bytes
        self._baseline_secs: dict[str, float] = {}
        self._best_secs: dict[str, float] = {}  # best median per task so far (for evaluator.slow_factor)
        self._devices: list[_Device] = []
        self._owns_ray = False
        self._identity: tuple | None = None
        self._batch: _Batch | None = None
        self.phase_secs = {"build": 0.0, "run": 0.0}  # wall time in each phase (overlapping for CUDA)
        if self.kind == "cuda" and address is None:
            _require_local_cuda()
        self._connect(address, num_devices, ray_init_kwargs or {})
        try:
            self.build_workers = max(1, build_workers or int(ray.cluster_resources().get("CPU", 1)))
            self._start_devices(num_devices, _fingerprints or {})
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ cluster and devices
    def _connect(self, address: str | None, num_devices: int | None, init_kwargs: dict[str, Any]) -> None:
        if ray.is_initialized():
            log.info("using the Ray connection this process already has")
            return
        kwargs: dict[str, Any] = {"log_to_driver": False}
        if address is None:
            _ephemeral_token()
            kwargs.update(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                          num_cpus=host_cores(), resources={self.key: num_devices or 1})
        else:
            kwargs["address"] = address
        kwargs.update(init_kwargs)
        loopback = address is None or _is_loopback(address)
        try:
            with _keep_loopback() if loopback else contextlib.nullcontext():
                ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = "a local Ray instance" if address is None else f"the Ray cluster at {address!r}"
            raise UserError(f"cannot start or join {where}: {str(exc).strip().splitlines()[-1]}") from exc
        self._owns_ray = True
        log.info("Ray %s: %s", "started on loopback" if address is None else f"joined at {address}",
                 ray.cluster_resources())

    def _start_devices(self, num_devices: int | None, overrides: dict[int, dict[str, Any]]) -> None:
        available = int(ray.cluster_resources().get(self.key, 0))
        if available < 1:
            raise UserError(
                f"no node of the Ray cluster advertises the device resource {self.key!r}; start the "
                f"measuring machines with: ray start --address <head> --resources '{{\"{self.key}\": 1}}'"
            )
        count = num_devices or available
        if count > available:
            raise UserError(f"asked for {count} devices of {self.key!r}, the cluster has {available}")
        if self.kind == "cuda":
            _require_gpu_nodes(self.key)
        remote = ray.remote(DeviceActor).options(
            num_cpus=0,  # logical: builds and measurements take turns instead (see measure())
            num_gpus=1 if self.kind == "cuda" else 0,
            resources={self.key: 1},
            max_restarts=self.max_restarts,
            max_task_retries=0,  # retries are ours: on another device, counted, never duplicated
        )
        for i in range(count):
            handle = remote.remote(key=self.key, kind=self.kind, index=i, num_threads=self.num_threads,
                                   fingerprint_override=overrides.get(i))
            self._devices.append(_Device(index=i, handle=handle))
        refs = [d.handle.fingerprint.remote() for d in self._devices]
        try:
            infos = ray.get(refs, timeout=STARTUP_TIMEOUT)
        except GetTimeoutError as exc:
            raise UserError(
                f"the {count} device actor(s) for {self.key!r} did not start within {STARTUP_TIMEOUT:.0f} s: "
                "is another pool holding the devices?"
            ) from exc
        for device, info in zip(self._devices, infos):
            device.info = info
            device.state = "idle"
        self._check_fingerprints()
        # Start the build subprocesses (one per build worker) and the measuring ones, all importing TVM.
        builders = [_warm_task.options(num_cpus=1, max_retries=0, **self._build_options()).remote()
                    for _ in range(self.build_workers)]
        warm = ray.get([d.handle.warm_up.remote() for d in self._devices], timeout=2 * STARTUP_TIMEOUT)
        for device, reply in zip(self._devices, warm):
            if reply.kind != "ok":
                raise UserError(f"device {device.index} ({device.info.get('hostname')}) cannot start its "
                                f"measuring process: {reply.error}")
        for reply in ray.get(builders, timeout=2 * STARTUP_TIMEOUT):
            if reply.kind != "ok":
                raise UserError(f"a build worker cannot start: {reply.error}")
        log.info("Ray pool %s: %d device(s) on %s", self.key, len(self._devices),
                 sorted({d.info.get("hostname") for d in self._devices}))

    def _check_fingerprints(self) -> None:
        infos = [d.info for d in self._devices]
        if self.kind == "cuda":
            missing = sorted({f"{i.get('hostname')} (node {str(i.get('node_id'))[:12]})"
                              for i in infos if not i.get("cuda_enabled")})
            if missing:
                raise UserError(
                    f"target cuda: the TVM on {', '.join(missing)} has no CUDA runtime "
                    "(tvm.runtime.enabled('cuda') is False; the PyPI apache-tvm wheel is CPU-only). "
                    "Install a TVM built with USE_CUDA=ON on the GPU machines."
                )
        identities = [identity(i, self.kind) for i in infos]
        self._identity = identities[0]
        if len(set(identities)) > 1:
            first, other = identities[0], next(x for x in identities if x != identities[0])
            j = identities.index(other)
            diff = ", ".join(f"{k}: {a!r} vs {b!r}" for (k, a), (_, b) in zip(first, other) if a != b)
            text = (f"the devices for {self.key!r} differ (device 0 on {infos[0].get('hostname')} vs "
                    f"device {j} on {infos[j].get('hostname')}: {diff}); their timings are not comparable")
            if not self.allow_mixed:
                raise UserError(text + ". Pass allow_mixed=True (--allow-mixed) to use them anyway.")
            log.warning("%s; measuring anyway (allow_mixed)", text)

    def _build_options(self) -> dict[str, Any]:
        return {"resources": self.build_resources} if self.build_resources else {}

    @property
    def devices(self) -> list[dict[str, Any]]:
        """Fingerprints of the live devices (hostname, node id, CPU/GPU, TVM versions)."""
        return [dict(d.info) for d in self._devices if d.alive]

    def warm_up(self) -> None:
        """Devices are warmed up at construction; kept for parity with LocalRunner."""

    # ------------------------------------------------------------------ Runner API
    def prepare(self, task: TuningTask) -> MeasureResult:
        """Build the unscheduled module, compute the reference on one device and time it (the baseline)."""
        import tvm

        [result] = self._execute(task, [tvm.ir.save_json(task.mod)], reference=True)
        if result.ok:
            self._baseline_secs[task.workload_key] = result.median
        return result

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        """Build every module as a Ray task, then check and time each on a device; results in order."""
        import tvm

        if task.workload_key not in self._references:
            raise RuntimeError(f"prepare() the task {task.name} before measuring it")
        return self._execute(task, [tvm.ir.save_json(m) for m in mods], reference=False)

    def baseline_secs(self, task: TuningTask) -> float | None:
        return self._baseline_secs.get(task.workload_key)

    def refresh(self) -> None:
        """Replace every device's measuring process (to re-time finalists in fresh processes), as
        LocalRunner.refresh does; the best-so-far shortcut is reset too."""
        ray.get([d.handle.refresh.remote() for d in self._devices if d.state == "idle"], timeout=60)
        self._best_secs.clear()

    def close(self) -> None:
        for device in self._devices:
            if device.state != "dead":
                with contextlib.suppress(RayError, GetTimeoutError):
                    ray.get(device.handle.close.remote(), timeout=10)
            with contextlib.suppress(RayError, ValueError):
                ray.kill(device.handle)
            device.state = "dead"
        self._references.clear()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def __enter__(self) -> RayRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ the batch loop
    def _run_timeout(self, task: TuningTask) -> float:
        base = self._baseline_secs.get(task.workload_key, 0.0)
        return min(max(self.run_timeout, 3 * base * (self.evaluator.repeat + 2)), 300.0)

    def _execute(self, task: TuningTask, mod_jsons: list[str], *, reference: bool) -> list[MeasureResult]:
        self._batch = _Batch(self, task, mod_jsons, reference=reference)
        try:
            return self._batch.run()
        finally:
            self._batch = None

    def in_flight(self) -> dict[int, int]:
        """Module index -> device index of the measurements running now (for progress displays)."""
        batch = self._batch
        if batch is None:
            return {}
        return {job.index: device.index for job, device, _ in list(batch.running.values())}

    def device_handle(self, index: int) -> Any:
        """The Ray actor of device ``index`` (to inspect or kill it)."""
        return self._devices[index].handle


def _require_local_cuda() -> None:
    import tvm

    if not tvm.runtime.enabled("cuda"):
        raise UserError(
            "target cuda: this machine's TVM has no CUDA runtime (tvm.runtime.enabled('cuda') is False; the "
            "PyPI apache-tvm wheel is CPU-only). Install a TVM built with USE_CUDA=ON, or join a cluster of "
            "GPU machines with --ray-address."
        )


def _require_gpu_nodes(key: str) -> None:
    ok = [n for n in ray.nodes()
          if n.get("Alive") and n["Resources"].get(key, 0) >= 1 and n["Resources"].get("GPU", 0) >= 1]
    if not ok:
        raise UserError(f"no node advertises both the resource {key!r} and a GPU: start GPU machines with "
                        f"ray start --address <head> --num-gpus 1 --resources '{{\"{key}\": 1}}'")


_build_task = ray.remote(build_in_worker)
_warm_task = ray.remote(warm_build_worker)


class _Batch:
    """One prepare/measure call: builds in a sliding window, then jobs dispatched to idle devices.

    Every path of a job ends in exactly one ``_finish`` (which refuses a second one): an actor death
    puts the job back in the queue; a late answer from a killed actor is dropped with its ref.
    """

    def __init__(self, pool: RayRunner, task: TuningTask, mod_jsons: list[str], *, reference: bool) -> None:
        self.pool = pool
        self.task = task
        self.reference = reference
        faults = {} if reference else pool._faults
        self.jobs = [_Job(i, mj, faults.get(i)) for i, mj in enumerate(mod_jsons)]
        self.results: list[MeasureResult | None] = [None] * len(self.jobs)
        self.to_build = collections.deque(self.jobs)
        self.building: dict[Any, tuple[_Job, Any, float]] = {}  # status ref -> (job, artifact ref, t0)
        self.ready: list[_Job] = []
        self.running: dict[Any, tuple[_Job, _Device, float]] = {}  # reply ref -> (job, device, deadline)
        # CPU devices time kernels on the cores builds would use: measure only after the batch is built.
        self.overlap = pool.kind == "cuda"
        self.run_timeout = pool._run_timeout(task) if not reference else 600.0

    # ---------------------------------------------------------------- bookkeeping
    def _finish(self, job: _Job, result: MeasureResult) -> None:
        if self.results[job.index] is not None:
            raise AssertionError(f"job {job.index} finished twice")
        self.results[job.index] = result

    def _pending(self) -> bool:
        return any(r is None for r in self.results)

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
            # a device may still be recovering from an earlier batch: its ping lives on the device
            pinging = {d.ping: d for d in self.pool._devices if d.ping is not None}
            refs = list(self.building) + list(self.running) + list(pinging)
            if refs:
                done, _ = ray.wait(refs, num_returns=1, timeout=POLL_SECS)
                if done:
                    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                for ref in done:
                    self._handle(ref, pinging)
            else:  # only possible while jobs wait for a device that is not recovering: do not spin
                time.sleep(POLL_SECS)
            self._check_deadlines()
        if not self.reference:
            end = time.perf_counter()
            built = built if all_built else end
            self.pool.phase_secs["build"] += built - start
            self.pool.phase_secs["run"] += end - built
        return [r for r in self.results if r is not None]

    def _handle(self, ref: Any, pinging: dict[Any, _Device]) -> None:
        if ref in self.building:
            self._build_done(ref)
        elif ref in self.running:
            self._run_done(ref)
        elif ref in pinging:
            self._ping_done(pinging[ref])

    # ---------------------------------------------------------------- builds
    def _submit_builds(self) -> None:
        pool = self.pool
        while self.to_build and len(self.building) < pool.build_workers:
            job = self.to_build.popleft()
            status_ref, artifact_ref = _build_task.options(
                num_cpus=1, num_returns=2, max_retries=0, **pool._build_options()).remote(
                job.mod_json, pool._target_json, pool.build_timeout, job.fault)
            self.building[status_ref] = (job, artifact_ref, time.monotonic())

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
            self._finish(job, MeasureResult.failed(Status.WORKER_CRASHED,
                                                   f"build task died: {_first_line(exc)}",
                                                   build_secs=time.monotonic() - t0))
            return
        except RayError as exc:
            self._finish(job, MeasureResult.failed(Status.BUILD_ERROR, _first_line(exc),
                                                   build_secs=time.monotonic() - t0))
            return
        if status["kind"] != "ok":
            reply = _reply(status)
            self._finish(job, failure_from_reply(reply, timeout_status=Status.BUILD_TIMEOUT,
                                                 error_status=Status.BUILD_ERROR, build_secs=reply.seconds,
                                                 worker=status.get("worker", "")))
            return
        job.build = status
        job.artifact = artifact_ref
        self.ready.append(job)

    # ---------------------------------------------------------------- measurements
    def _pick(self, job: _Job) -> _Device | None:
        idle = [d for d in self.pool._devices if d.state == "idle"]
        fresh = [d for d in idle if d.index not in job.avoid]
        if fresh:
            return fresh[0]
        others_alive = [d for d in self.pool._devices if d.alive and d.index not in job.avoid]
        return idle[0] if idle and not others_alive else None

    def _dispatch(self) -> None:
        pool, task = self.pool, self.task
        self.ready.sort(key=lambda j: j.index)
        for job in list(self.ready):
            device = self._pick(job)
            if device is None:
                continue
            self.ready.remove(job)
            if self.reference:
                ref = device.handle.reference.remote(task.workload_key, job.artifact, task.args, pool.seed,
                                                     pool.baseline_evaluator.to_json(), self.run_timeout)
            else:
                fault = job.fault
                if fault == "actor_exit_once":
                    fault = "actor_exit" if job.deaths == 0 else None
                evaluator = pool.evaluator.to_json()
                best = pool._best_secs.get(task.workload_key)
                if best is not None and pool.evaluator.slow_factor > 0:
                    evaluator["slow_after"] = best * pool.evaluator.slow_factor
                ref = device.handle.run.remote(task.workload_key, [pool._references[task.workload_key]],
                                               job.artifact, task.args, pool.seed, evaluator,
                                               self.run_timeout, fault)
            device.state = "busy"
            self.running[ref] = (job, device, time.monotonic() + self.run_timeout + DRIVER_SLACK)

    def _run_done(self, ref: Any) -> None:
        job, device, _ = self.running.pop(ref)
        try:
            reply, ident = ray.get(ref)
        except RayActorError as exc:
            self._device_died(device, job, _first_line(exc))
            return
        except RayError as exc:  # an error in our actor code, not the kernel's: report, keep the device
            device.state = "idle"
            self._finish(job, MeasureResult.failed(Status.RUN_ERROR, _first_line(exc),
                                                   build_secs=job.build.get("build_secs", 0.0)))
            return
        device.state = "idle"
        self._finish(job, self._result(job, reply, ident))

    def _result(self, job: _Job, reply: Any, ident: str) -> MeasureResult:
        build_secs = float(job.build.get("build_secs", 0.0))
        if reply.kind != "ok":
            return failure_from_reply(reply, timeout_status=Status.RUN_TIMEOUT, error_status=Status.RUN_ERROR,
                                      build_secs=build_secs, run_secs=reply.seconds, worker=ident)
        value = reply.value
        if self.reference:
            self.pool._references[self.task.workload_key] = ray.put(value["reference"])
            return MeasureResult(Status.OK, tuple(value["latencies"]), build_secs=build_secs,
                                 run_secs=reply.seconds, worker=ident)
        if "wrong_result" in value:
            return MeasureResult.failed(Status.WRONG_RESULT, value["wrong_result"], build_secs=build_secs,
                                        run_secs=value["run_secs"], worker=ident)
        result = MeasureResult(Status.OK, tuple(value["latencies"]), build_secs=build_secs,
                               run_secs=value["run_secs"], worker=ident, error=value.get("note", ""))
        key = self.task.workload_key
        if result.median < self.pool._best_secs.get(key, float("inf")):
            self.pool._best_secs[key] = result.median
        return result

    # ---------------------------------------------------------------- faults
    def _device_died(self, device: _Device, job: _Job, why: str) -> None:
        device.deaths += 1
        job.deaths += 1
        job.avoid.add(device.index)
        job.last_death = why
        log.warning("device %s#%d (%s) died during job %d: %s", self.pool.key, device.index,
                    device.info.get("hostname"), job.index, why)
        self._recover(device)
        if job.deaths > self.pool.max_retries:
            self._finish(job, MeasureResult.failed(
                Status.WORKER_CRASHED,
                f"the device actor died on each of {job.deaths} attempts (last: {why})",
                build_secs=float(job.build.get("build_secs", 0.0))))
        else:
            self.ready.append(job)

    def _recover(self, device: _Device) -> None:
        """Ray restarts the actor (``max_restarts``); a fingerprint call answers once it is back."""
        device.state = "recovering"
        device.since = time.monotonic()
        device.ping = device.handle.fingerprint.remote()

    def _ping_done(self, device: _Device) -> None:
        ref, device.ping = device.ping, None
        try:
            info = ray.get(ref)
        except RayError as exc:
            device.state = "dead"
            log.warning("device %s#%d is gone: %s", self.pool.key, device.index, _first_line(exc))
            return
        if identity(info, self.pool.kind) != self.pool._identity and not self.pool.allow_mixed:
            device.state = "dead"
            log.warning("device %s#%d came back on a different machine (%s); not using it",
                        self.pool.key, device.index, info.get("hostname"))
            with contextlib.suppress(RayError, ValueError):
                ray.kill(device.handle)
            return
        device.info = info
        device.state = "idle"

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
                log.warning("device %s#%d does not answer; killing it", self.pool.key, device.index)
                device.state = "killed"
                ray.kill(device.handle, no_restart=False)  # its pending reply now fails -> _device_died
        for device in self.pool._devices:
            if device.ping is not None and now > device.since + RECOVERY_TIMEOUT:
                device.ping = None
                device.state = "dead"
                log.warning("device %s#%d did not come back within %.0f s", self.pool.key, device.index,
                            RECOVERY_TIMEOUT)

    def _fail_if_no_devices(self) -> None:
        if any(d.alive for d in self.pool._devices):
            return
        for job in self.ready:
            self._finish(job, MeasureResult.failed(
                Status.WORKER_CRASHED,
                f"no device of {self.pool.key!r} is left ({job.last_death or 'all died'})",
                build_secs=float(job.build.get("build_secs", 0.0))))
        self.ready.clear()


def _reply(status: dict[str, Any]):
    from autosearch.measure.worker import Reply

    return Reply(status["kind"], error=status.get("error", ""), seconds=float(status.get("seconds", 0.0)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]
