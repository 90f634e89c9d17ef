"""What runs on the Ray cluster: one actor per measuring device, and the build task.

Both keep TVM out of the Ray process itself: kernels are compiled and run in a warm
:class:`~autosearch.measure.worker.Worker` subprocess, so a kernel that segfaults or hangs kills only
that subprocess (``worker_crashed`` / ``run_timeout``, as with the local runner) and the actor lives on.

Devices are named like TVM RPC tracker keys: ``cpu-<mcpu>-<cores>`` or ``cuda-<gpu name>``. The key is
a Ray custom resource a node advertises (``ray start --resources '{"cpu-znver4-2": 1}'``); each actor
asks for one unit, so a target's measurements go only to matching machines, one at a time per device.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
from typing import IO, Any

import ray

from autosearch.errors import UserError
from autosearch.frontend.target import cpu_model, target_num_cores, target_to_json
from autosearch.measure.measuring import MeasuringProcess
from autosearch.measure.worker import STARTUP_TIMEOUT, Reply, Worker

log = logging.getLogger(__name__)

# Fingerprint fields that must agree between the devices of one key (hostname, pid, node id may differ).
IDENTITY_FIELDS = {
    "cpu": ("cpu_model", "cores", "tvm", "tvm_ffi"),
    "cuda": ("gpu_name", "gpu_driver", "tvm", "tvm_ffi", "cuda_enabled"),
}


# ---------------------------------------------------------------------------------------------- keys
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.]+", "-", str(text).strip().lower()).strip("-") or "unknown"


def device_kind(target) -> str:
    """``cpu`` for LLVM targets, ``cuda`` for CUDA ones; other kinds have no device actor."""
    kind = str(target.kind.name)
    if kind == "llvm":
        return "cpu"
    if kind == "cuda":
        return "cuda"
    raise UserError(f"the Ray runner measures llvm (CPU) and cuda targets, not {kind!r}")


def device_key(target, *, gpu_name: str | None = None) -> str:
    """The Ray resource a device for ``target`` advertises: ``cpu-<mcpu>-<cores>`` or ``cuda-<name>``.

    A CUDA target does not carry the GPU's name (TVM keeps only ``arch``), so pass ``gpu_name`` (e.g.
    ``"rtx-4090"``) to match what the GPU nodes advertise; without it the key is ``cuda-<arch>``.
    """
    cfg = target_to_json(target)
    if device_kind(target) == "cuda":
        return f"cuda-{_slug(gpu_name or cfg.get('model') or cfg.get('arch') or 'gpu')}"
    return f"cpu-{_slug(cfg.get('mcpu') or 'generic')}-{target_num_cores(target)}"


# ---------------------------------------------------------------------------------------------- fingerprint
def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _gpu_info() -> tuple[str, str]:
    """(name, driver version) of this actor's GPU from ``nvidia-smi``; ``unknown`` without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "unknown", "unknown"
    ids = ray.get_gpu_ids()
    cmd = [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"]
    if ids:
        cmd += ["-i", str(ids[0])]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True).stdout
        name, driver = (s.strip() for s in out.strip().splitlines()[0].split(",", 1))
        return name, driver
    except (subprocess.SubprocessError, OSError, ValueError, IndexError):
        return "unknown", "unknown"


def fingerprint(kind: str) -> dict[str, Any]:
    """What identifies the machine an actor measures on: devices of one key must agree on it."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count() or 1,
        "tvm": _package_version("apache-tvm"),
        "tvm_ffi": _package_version("apache-tvm-ffi"),
    }
    if kind == "cuda":
        import tvm  # only here: the CUDA question is about this node's TVM build

        info["gpu_name"], info["gpu_driver"] = _gpu_info()
        info["cuda_enabled"] = bool(tvm.runtime.enabled("cuda"))
    return info


def identity(info: dict[str, Any], kind: str) -> tuple:
    return tuple((name, info.get(name)) for name in IDENTITY_FIELDS[kind])


# ---------------------------------------------------------------------------------------------- the actor
def claim_cores(key: str, threads: int, *, slots_dir: str | None = None) -> tuple[IO | None, list[int]]:
    """This node's cores for one measuring device of ``key``: the first slot of ``threads`` cores (of those this
    process may run on) that no other live device of the key on the node holds, and the open lock file that holds
    it (released when the process ends, a dead actor's with it).

    A node that advertises several units of a key runs that many device actors: each timing its kernels on cores
    of its own, or two of them would time on the same cores, each against the other's kernels. With more devices
    than the node has slots, the extra ones share the first slot (logged): they time against each other."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    threads = max(1, threads)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock to claim a slot with
        return None, allowed[:threads]
    slots = max(1, len(allowed) // threads)
    directory = slots_dir or os.path.join(tempfile.gettempdir(), f"autosearch-device-slots-{os.getuid()}")
    for slot in range(slots):
        try:
            os.makedirs(directory, exist_ok=True)
            fh = open(os.path.join(directory, f"{_slug(key)}.{slot}.lock"), "a")
        except OSError as exc:  # no lock files here: the device still measures, on the first cores
            log.warning("cannot claim cores for %s in %s (%s): this device times on the first %d", key, directory,
                        exc, threads)
            return None, allowed[:threads]
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        return fh, allowed[slot * threads:(slot + 1) * threads]
    log.warning("every slot of %d cores for %s on this node is taken (%d cores, %d slots): this device times on "
                "cores another one times on", threads, key, len(allowed), slots)
    return None, allowed[:threads]


class DeviceActor:
    """One measuring device: a warm measuring process pinned to the device's cores.

    Wrapped with ``ray.remote`` by the pool (resources, restarts). References arrive as object refs
    (boxed in a list, so Ray does not fetch them eagerly) and are fetched only when the measuring process
    lacks them: on first use, and again after the process or the actor itself was replaced.
    """

    def __init__(self, *, key: str, kind: str, index: int, num_threads: int) -> None:
        self.info = {**fingerprint(kind), "device_key": key, "index": index}
        env = {"AUTOSEARCH_DEVICE": "cuda" if kind == "cuda" else "cpu"}
        if kind == "cpu":
            self._slot, cores = claim_cores(key, num_threads)  # held for the actor's life
            self.info["measuring_cores"] = cores
            env["TVM_NUM_THREADS"] = str(num_threads)
            env["AUTOSEARCH_AFFINITY"] = ",".join(str(c) for c in cores)
        node = str(self.info["node_id"])[:12]
        self.process = MeasuringProcess(name=f"{node}:{key}#{index}", env=env)
        self.process.worker.start()  # imports TVM while the pool starts the other actors

    def fingerprint(self) -> dict[str, Any]:
        return self.info

    def warm_up(self) -> Reply:
        return self.process.warm_up()

    def reference(self, task_key: str, artifact: bytes, args, seed: int, evaluator: dict,
                  timeout: float) -> tuple[Reply, str]:
        """Run the unscheduled kernel: its output becomes the reference (kept installed here)."""
        ident = self.process.ident
        return self.process.reference(task_key, artifact, args, seed, evaluator, timeout=timeout), ident

    def run(self, task_key: str, reference_box: list, artifact: bytes, args, seed: int, evaluator: dict,
            timeout: float) -> tuple[Reply, str]:
        """Check one kernel against the task's reference and time it; ``timeout`` starts here."""
        ident = self.process.ident
        reply = self.process.run(task_key, lambda: ray.get(reference_box[0]), artifact, args, seed, evaluator,
                                 timeout=timeout)
        return reply, ident

    def refresh(self) -> None:
        """Replace the measuring process; references are installed again on the next run."""
        self.process.refresh()

    def close(self) -> None:
        self.process.close()


# ---------------------------------------------------------------------------------------------- builds
_BUILD_WORKER: Worker | None = None


def _build_worker() -> Worker:
    global _BUILD_WORKER
    if _BUILD_WORKER is None:
        _BUILD_WORKER = Worker(name="ray-build", env={"TVM_NUM_THREADS": "1"})
    return _BUILD_WORKER


def warm_build_worker() -> Reply:
    """Start this Ray worker's build subprocess (TVM import) before the first batch needs it."""
    return _build_worker().call("ping", timeout=STARTUP_TIMEOUT)


def build_in_worker(mod_json: str, target: dict[str, Any], timeout: float) -> tuple[dict[str, Any], bytes | None]:
    """Body of the Ray build task: compile in this Ray worker's warm subprocess, with the local timeout.

    Ray reuses its worker processes, so the subprocess (and its TVM import) survives between builds;
    the timeout starts when the build starts (not when the task was queued, nor while a fresh subprocess
    imports TVM). Returns (status, .so bytes).
    """
    worker = _build_worker()
    worker.start()
    ident = worker.ident
    return build_status(worker.call("build", mod_json, target, timeout=timeout), ident)


def build_status(reply: Reply, ident: str) -> tuple[dict[str, Any], bytes | None]:
    """(status, artifact) of a build task from its worker's reply: plain data, so the driver needs no TVM."""
    if reply.kind == "ok":
        artifact, secs = reply.value
        return {"kind": "ok", "build_secs": secs, "seconds": reply.seconds, "worker": ident}, artifact
    return {"kind": reply.kind, "error": reply.error, "seconds": reply.seconds, "worker": ident}, None
