"""Faults for the Ray pool tests, injected from the test side: the product has no fault switch.

The pool's scheduler (:class:`~autosearch.measure.ray_batch.RayBatch`) and its view of the devices
(:class:`~autosearch.measure.ray_fleet.DeviceFleet`) run in the test process, so pytest's ``monkeypatch``
reaches them; what they then do to the cluster is real: a device actor gets SIGSEGV from outside while a
job is on it, a build task's warm subprocess runs a kernel that never returns. Imported by the test module
after it has configured Ray's token auth, and by Ray workers (the hanging build's body).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import ray

from autosearch.measure import ray_device
from autosearch.measure.ray_batch import RayBatch
from autosearch.measure.ray_fleet import DeviceFleet


def _hang_in_the_build_worker(hang: bytes, args: list, timeout: float) -> tuple[dict[str, Any], bytes | None]:
    """Body of a build task whose warm subprocess does not answer within ``timeout`` seconds: where this Ray
    worker's build subprocess would compile, it runs the built ``hang`` kernel (a call that sleeps an hour)."""
    worker = ray_device._build_worker()
    worker.start()
    ident = worker.ident
    reply = worker.call("reference", "hang", hang, args, 0, {"repeat": 1}, timeout=timeout)
    return ray_device.build_status(reply, ident)


_hanging_build = ray.remote(_hang_in_the_build_worker)


def inject(monkeypatch, plan: dict[int, str], target) -> dict[int, str]:
    """Faults by module index in every ``measure`` batch (never in ``prepare``); returns ``plan``, which the
    test may change between batches.

    ``actor_exit``: the device actor measuring the job gets SIGSEGV, on every attempt; ``actor_exit_once``:
    on its first attempt only; ``build_hang``: the job's build never answers.
    """
    from tests.faulty_kernels import ARGS, artifact

    hang = artifact("hang", target)
    start_run, start_build = RayBatch._start_run, RayBatch._start_build

    def start_run_then_crash(batch: RayBatch, job, device) -> Any:
        ref = start_run(batch, job, device)
        fault = None if batch.reference else plan.get(job.index)
        if fault == "actor_exit" or (fault == "actor_exit_once" and job.deaths == 0):
            os.kill(device.info["pid"], signal.SIGSEGV)  # the actor process (pid from its fingerprint)
        return ref

    def start_build_or_hang(batch: RayBatch, job) -> tuple[Any, Any]:
        if batch.reference or plan.get(job.index) != "build_hang":
            return start_build(batch, job)
        return _hanging_build.options(num_cpus=1, num_returns=2, max_retries=0).remote(
            hang, ARGS, batch.pool.build_timeout)

    monkeypatch.setattr(RayBatch, "_start_run", start_run_then_crash)
    monkeypatch.setattr(RayBatch, "_start_build", start_build_or_hang)
    return plan


def misreport(monkeypatch, overrides: dict[int, dict[str, Any]]) -> None:
    """Devices report these fingerprint fields (by device index) instead of their own: two machines that
    differ, on one machine."""
    ask = DeviceFleet._ask_fingerprints

    def asked(fleet: DeviceFleet) -> list[dict[str, Any]]:
        return [{**info, **overrides.get(i, {})} for i, info in enumerate(ask(fleet))]

    monkeypatch.setattr(DeviceFleet, "_ask_fingerprints", asked)
