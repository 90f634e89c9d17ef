"""Ray device pool (``--runner ray``): builds as Ray tasks, measurements on one actor per device.

The pool behaves like :class:`~autosearch.measure.local.LocalRunner` (same kernels module, same
measurement policy, same statuses), spread over a Ray cluster:

* every device is an actor holding one unit of the device's key resource (``cpu-znver4-2``,
  ``cuda-rtx-4090``), so a kernel is timed only on a matching machine, one kernel at a time per device;
  devices of one key must report the same fingerprint unless ``allow_mixed`` (:mod:`.ray_fleet`);
* builds are Ray tasks in warm subprocesses with the local builder's timeout, kept off the cores that
  measure (:mod:`.ray_batch`);
* an actor that dies mid-measurement (killed, segfault, lost node) is restarted by Ray and its job is
  retried on another device of the key, at most ``max_retries`` times; each result is recorded once.

Without an address the pool starts a private single-node Ray on loopback, sized to this machine
(:mod:`.ray_cluster`).
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from autosearch.errors import UserError
from autosearch.frontend.target import target_num_cores, target_to_json
from autosearch.frontend.task import TuningTask
from autosearch.measure import ray_cluster
from autosearch.measure.base import RunnerBase
from autosearch.measure.ray_batch import RayBatch, warm_builders
from autosearch.measure.ray_device import device_key as key_for_target
from autosearch.measure.ray_device import device_kind
from autosearch.measure.ray_fleet import DeviceFleet
from autosearch.measure.worker import STARTUP_TIMEOUT
from autosearch.types import MeasureResult

log = logging.getLogger(__name__)


class RayRunner(RunnerBase):
    """Builds and measures kernels on a Ray cluster of devices (see the module docstring).

    ``address``: ``None`` starts a private Ray on loopback; ``"auto"`` or ``"HOST:PORT"`` joins a cluster.
    ``device_key`` overrides the key derived from the target (needed for CUDA: the target has no GPU
    name). ``num_devices``: actors to start (default: every unit of the key in the cluster; 1 when
    embedded). ``build_resources``: extra Ray resources each build task asks for. The other keyword
    arguments are those of :class:`~autosearch.measure.base.RunnerBase` (``build_workers`` defaults to
    the cluster's CPUs).
    """

    name = "ray"

    def __init__(
        self,
        *,
        target,
        address: str | None = None,
        device_key: str | None = None,
        gpu_name: str | None = None,
        num_devices: int | None = None,
        allow_mixed: bool = False,
        max_retries: int = 2,
        max_restarts: int = 10,
        build_resources: dict[str, float] | None = None,
        ray_init_kwargs: dict[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(target=target, **settings)
        self.kind = device_kind(target)
        self.key = device_key or key_for_target(target, gpu_name=gpu_name)
        self.num_threads = self.num_threads or (target_num_cores(target) if self.kind == "cpu" else 1)
        self.max_retries = max_retries
        self.build_options = {"resources": dict(build_resources)} if build_resources else {}
        self.target_json = target_to_json(target)
        self._references: dict[str, Any] = {}  # task key -> ObjectRef of the reference npz bytes
        self.fleet = DeviceFleet(key=self.key, kind=self.kind, num_threads=self.num_threads,
                                 allow_mixed=allow_mixed, max_restarts=max_restarts)
        self._batch: RayBatch | None = None
        if self.kind == "cuda" and address is None:
            ray_cluster.require_local_cuda()
        self._owns_ray = ray_cluster.connect(address, key=self.key, num_devices=num_devices,
                                             init_kwargs=ray_init_kwargs or {})
        try:
            self.build_workers = max(1, self.build_workers or int(ray.cluster_resources().get("CPU", 1)))
            self.fleet.start(num_devices)
            builders = warm_builders(self.build_workers, self.build_options)  # import TVM while devices do
            self.fleet.warm_up()
            for reply in ray.get(builders, timeout=2 * STARTUP_TIMEOUT):
                if reply.kind != "ok":
                    raise UserError(f"a build worker cannot start: {reply.error}")
        except BaseException:
            self.close()
            raise

    @property
    def devices(self) -> list[dict[str, Any]]:
        """Fingerprints of the live devices (hostname, node id, CPU/GPU, TVM versions)."""
        return self.fleet.infos

    def warm_up(self) -> None:
        """Devices are warmed up at construction; kept for parity with LocalRunner."""

    # ------------------------------------------------------------------ Runner API
    def prepare(self, task: TuningTask) -> MeasureResult:
        """Build the unscheduled module, compute the reference on one device and time it (the baseline)."""
        import tvm

        [result] = self._execute(task, [tvm.ir.save_json(task.mod)], reference=True)
        return result

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        """Build every module as a Ray task, then check and time each on a device; results in order."""
        import tvm

        self.policy.require_baseline(task)
        return self._execute(task, [tvm.ir.save_json(m) for m in mods], reference=False)

    def refresh(self) -> None:
        """Replace every device's measuring process (to re-time finalists in fresh processes), as
        LocalRunner.refresh does; the best-so-far shortcut is reset too."""
        self.fleet.refresh()
        self.policy.forget_best()

    def close(self) -> None:
        self.fleet.close()
        self._references.clear()
        if self._owns_ray:
            ray_cluster.disconnect()
        self._owns_ray = False

    def _execute(self, task: TuningTask, mod_jsons: list[str], *, reference: bool) -> list[MeasureResult]:
        self._batch = RayBatch(self, task, mod_jsons, reference=reference)
        try:
            return self._batch.run()
        finally:
            self._batch = None

    # ------------------------------------------------------------------ what a batch keeps here
    def keep_reference(self, task_key: str, reference: Any) -> None:
        """Put a task's reference outputs (npz bytes, from its baseline) in Ray's object store, once for every
        later batch of the task."""
        self._references[task_key] = ray.put(reference)

    def reference(self, task_key: str) -> Any:
        """The ObjectRef of a task's reference outputs (:meth:`keep_reference`)."""
        return self._references[task_key]

    # ------------------------------------------------------------------ progress and inspection
    def in_flight(self) -> dict[int, int]:
        """Module index -> device index of the measurements running now (for progress displays)."""
        batch = self._batch
        return batch.in_flight() if batch is not None else {}

    def device_handle(self, index: int) -> Any:
        """The Ray actor of device ``index`` (to inspect or kill it)."""
        return self.fleet.devices[index].handle


def create(target, measure, *, seed: int = 0) -> RayRunner:
    """The ``ray`` runner of the registry (group ``autosearch.runners``): an embedded Ray, or the cluster at
    ``measure.ray_address``, measuring on the devices of ``measure.device_key`` (default: the target's key)."""
    return RayRunner(target=target, seed=seed, address=measure.ray_address, device_key=measure.device_key,
                     gpu_name=measure.gpu_name, allow_mixed=measure.allow_mixed, **measure.runner_settings())
