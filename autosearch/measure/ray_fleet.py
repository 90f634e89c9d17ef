"""The device actors of one key, as the driver sees them: started, fingerprinted and compared, recovered.

Each device is an actor holding one unit of the key's Ray resource. Devices of one key must report the
same fingerprint (CPU model and cores, or GPU and driver; TVM versions) unless ``allow_mixed``: timings
from different machines are not comparable. An actor that dies is restarted by Ray (``max_restarts``);
the fleet learns it is back when a fingerprint call answers, and drops a device that comes back on a
different machine or not at all.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayError

from autosearch.errors import UserError
from autosearch.measure.ray_cluster import first_line, require_gpu_nodes
from autosearch.measure.ray_device import DeviceActor, identity
from autosearch.measure.worker import STARTUP_TIMEOUT

log = logging.getLogger(__name__)

# Seconds Ray may take to bring a dead device actor back before the fleet gives up on it.
RECOVERY_TIMEOUT = 300.0
# Seconds between recovery pings while Ray says the actor is restarting.
PING_INTERVAL = 1.0


@dataclass
class Device:
    """The driver's view of one device actor."""

    index: int
    handle: Any
    info: dict[str, Any] = field(default_factory=dict)
    state: str = "starting"  # starting | idle | busy | killed | recovering | dead
    deaths: int = 0
    since: float = 0.0
    ping: Any = None  # while recovering: a fingerprint call that answers once Ray has restarted the actor
    next_ping: float = 0.0  # while recovering without a ping: when to send the next one (monotonic seconds)

    @property
    def alive(self) -> bool:
        return self.state != "dead"


class DeviceFleet:
    """The device actors of ``key`` (``kind``: ``cpu`` or ``cuda``), each measuring on ``num_threads`` threads."""

    def __init__(self, *, key: str, kind: str, num_threads: int, allow_mixed: bool, max_restarts: int) -> None:
        self.key = key
        self.kind = kind
        self.num_threads = num_threads
        self.allow_mixed = allow_mixed
        self.max_restarts = max_restarts
        self.devices: list[Device] = []
        self._identity: tuple | None = None

    # ---------------------------------------------------------------- start-up
    def start(self, num_devices: int | None) -> None:
        """Start ``num_devices`` actors (default: one per unit of the key in the cluster) and compare them."""
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
            require_gpu_nodes(self.key)
        remote = ray.remote(DeviceActor).options(
            num_cpus=0,  # logical: builds and measurements take turns instead (see ray_batch)
            num_gpus=1 if self.kind == "cuda" else 0,
            resources={self.key: 1},
            max_restarts=self.max_restarts,
            max_task_retries=0,  # retries are the batch's: on another device, counted, never duplicated
        )
        for i in range(count):
            handle = remote.remote(key=self.key, kind=self.kind, index=i, num_threads=self.num_threads)
            self.devices.append(Device(index=i, handle=handle))
        try:
            infos = self._ask_fingerprints()
        except GetTimeoutError as exc:
            raise UserError(
                f"the {count} device actor(s) for {self.key!r} did not start within {STARTUP_TIMEOUT:.0f} s: "
                "is another pool holding the devices?"
            ) from exc
        for device, info in zip(self.devices, infos, strict=True):
            device.info = info
            device.state = "idle"
        self._check_fingerprints()

    def _ask_fingerprints(self) -> list[dict[str, Any]]:
        """Every device's fingerprint, in device order, once its actor has started."""
        return ray.get([d.handle.fingerprint.remote() for d in self.devices], timeout=STARTUP_TIMEOUT)

    def _check_fingerprints(self) -> None:
        infos = [d.info for d in self.devices]
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
            diff = ", ".join(f"{k}: {a!r} vs {b!r}" for (k, a), (_, b) in zip(first, other, strict=True) if a != b)
            text = (f"the devices for {self.key!r} differ (device 0 on {infos[0].get('hostname')} vs "
                    f"device {j} on {infos[j].get('hostname')}: {diff}); their timings are not comparable")
            if not self.allow_mixed:
                raise UserError(text + ". Pass allow_mixed=True (--allow-mixed) to use them anyway.")
            log.warning("%s; measuring anyway (allow_mixed)", text)

    def warm_up(self) -> None:
        """Wait until every device's measuring process has imported TVM."""
        replies = ray.get([d.handle.warm_up.remote() for d in self.devices], timeout=2 * STARTUP_TIMEOUT)
        for device, reply in zip(self.devices, replies, strict=True):
            if reply.kind != "ok":
                raise UserError(f"device {device.index} ({device.info.get('hostname')}) cannot start its "
                                f"measuring process: {reply.error}")
        log.info("Ray pool %s: %d device(s) on %s", self.key, len(self.devices),
                 sorted({d.info.get("hostname") for d in self.devices}))

    # ---------------------------------------------------------------- state
    @property
    def infos(self) -> list[dict[str, Any]]:
        """Fingerprints of the live devices."""
        return [dict(d.info) for d in self.devices if d.alive]

    def idle(self) -> list[Device]:
        return [d for d in self.devices if d.state == "idle"]

    def any_alive(self) -> bool:
        return any(d.alive for d in self.devices)

    # ---------------------------------------------------------------- deaths and recovery
    def hung(self, device: Device) -> None:
        """A busy device that does not answer: kill its actor, so its pending reply fails and Ray restarts it."""
        log.warning("device %s#%d does not answer; killing it", self.key, device.index)
        device.state = "killed"
        ray.kill(device.handle, no_restart=False)

    def died(self, device: Device, why: str, during: str) -> None:
        """The actor died (killed, segfault, lost node) ``during`` a job: wait for Ray to restart it."""
        device.deaths += 1
        log.warning("device %s#%d (%s) died during %s: %s", self.key, device.index, device.info.get("hostname"),
                    during, why)
        device.state = "recovering"
        device.since = device.next_ping = time.monotonic()

    def pings(self) -> dict[Any, Device]:
        """The fingerprint calls of recovering devices (a device may still be recovering from an earlier
        batch); a recovering device without one gets one when it is due."""
        now = time.monotonic()
        for device in self.devices:
            if device.state == "recovering" and device.ping is None and now >= device.next_ping:
                device.ping = device.handle.fingerprint.remote()
        return {d.ping: d for d in self.devices if d.ping is not None}

    def ping_done(self, device: Device) -> None:
        """A recovering device answered (or failed for good): back to idle if it is the same kind of machine."""
        ref, device.ping = device.ping, None
        try:
            info = ray.get(ref)
        except ActorUnavailableError:  # Ray is still restarting it (a death outside a call): ask again later
            device.next_ping = time.monotonic() + PING_INTERVAL
            return
        except RayError as exc:
            device.state = "dead"
            log.warning("device %s#%d is gone: %s", self.key, device.index, first_line(exc))
            return
        if identity(info, self.kind) != self._identity and not self.allow_mixed:
            device.state = "dead"
            log.warning("device %s#%d came back on a different machine (%s); not using it",
                        self.key, device.index, info.get("hostname"))
            with contextlib.suppress(RayError, ValueError):
                ray.kill(device.handle)
            return
        device.info = info
        device.state = "idle"

    def expire_recoveries(self, now: float) -> None:
        for device in self.devices:
            if device.state == "recovering" and now > device.since + RECOVERY_TIMEOUT:
                device.ping = None
                device.state = "dead"
                log.warning("device %s#%d did not come back within %.0f s", self.key, device.index,
                            RECOVERY_TIMEOUT)

    # ---------------------------------------------------------------- the pool's calls
    def refresh(self) -> None:
        """Replace every idle device's measuring process."""
        ray.get([d.handle.refresh.remote() for d in self.devices if d.state == "idle"], timeout=60)

    def close(self) -> None:
        for device in self.devices:
            if device.state != "dead":
                with contextlib.suppress(RayError, GetTimeoutError):
                    ray.get(device.handle.close.remote(), timeout=10)
            with contextlib.suppress(RayError, ValueError):
                ray.kill(device.handle)
            device.state = "dead"
