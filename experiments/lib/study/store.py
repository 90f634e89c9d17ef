"""The study's results directory: every finished run and every re-timing round in a file of its own.

::

    NAME/tasks/TASK.json                 the task (TuningTask JSON: TIR module, FLOPs, target), extracted once
    NAME/runs/TASK/METHOD/s<SEED>.json   a finished run (:class:`RunResult`), written atomically when it ends
    NAME/runs/TASK/METHOD/s<SEED>/       its work: the tuning log or MetaSchedule's database, its output
    NAME/runs/TASK/METHOD/s<SEED>.claim  who is running it now (host, pid); .error: why it failed last time
    NAME/retime/TASK/round<K>.json       one re-timing round of a task's best configs (:mod:`.retiming`)

A run is the unit of progress: a study killed mid-run starts that run again from scratch (a half-run's timings
would mix two sittings) and never repeats a finished one. Files are self-contained, so several sittings or
machines can fill one directory (a shared file system, or directories copied together): a claim keeps two
processes off the same run, and a claim whose process died on this host is taken over.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from experiments.lib.io import read_json, write_json
from experiments.lib.tasks import TaskSpec


@dataclass(frozen=True)
class RunKey:
    task: TaskSpec
    method: str
    seed: int

    def __str__(self) -> str:
        return f"{self.task} / {self.method} / seed {self.seed}"


@dataclass
class RunResult:
    """One finished run: every trial's in-run latency and finish time, and its best config at each budget.

    ``latencies``: seconds per trial in the order measured (``inf`` for a failed trial; MetaSchedule's by its own
    timer, with the same evaluator settings); ``finished``: seconds from the run's start (set-up included) to when
    each trial's result was known. ``best[budget]``: the fastest of the first ``budget`` trials (its 1-based
    ``trial``, in-run ``latency``, and ``trace``, a key of ``traces``: TVM trace JSON, what re-timing rebuilds).
    """

    task: str
    method: str
    seed: int
    fingerprint: dict[str, Any]
    started: float  # epoch seconds
    wall_secs: float
    latencies: list[float]
    finished: list[float]
    best: dict[int, dict[str, Any]]
    traces: dict[str, Any]
    notes: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["latencies"] = [x if math.isfinite(x) else None for x in self.latencies]
        out["best"] = {str(b): v for b, v in self.best.items()}
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunResult:
        obj = dict(obj)
        obj["latencies"] = [math.inf if x is None else float(x) for x in obj["latencies"]]
        obj["best"] = {int(b): v for b, v in obj["best"].items()}
        return cls(**obj)


def trace_key(trace: Any) -> str:
    """A short stable name of a schedule (its trace JSON): equal traces, one re-time."""
    import hashlib

    return hashlib.blake2b(json.dumps(trace, sort_keys=True).encode(), digest_size=8).hexdigest()


def best_at(latencies: list[float], budget: int) -> int | None:
    """0-based index of the fastest valid trial among the first ``budget`` (the first of equals); None if none."""
    valid = [(lat, i) for i, lat in enumerate(latencies[:budget]) if math.isfinite(lat)]
    return min(valid)[1] if valid else None


def _boot_id() -> str | None:
    """This boot of this host (Linux): a claim written before a reboot names a process that is gone, even when
    its pid now belongs to another one (sittings on a machine restarted between them)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False  # kill(0 or -1, 0) would ask about a whole process group or every process, not one
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    """Paths and reads of one study's results directory (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root

    # ------------------------------------------------------------------ paths
    def task_file(self, task: TaskSpec) -> str:
        return os.path.join(self.root, "tasks", f"{task.slug}.json")

    def _run_stem(self, key: RunKey) -> str:
        return os.path.join(self.root, "runs", key.task.slug, key.method, f"s{key.seed}")

    def run_file(self, key: RunKey) -> str:
        return self._run_stem(key) + ".json"

    def work_dir(self, key: RunKey) -> str:
        return self._run_stem(key)

    def error_file(self, key: RunKey) -> str:
        return self._run_stem(key) + ".error"

    def claim_file(self, key: RunKey) -> str:
        return self._run_stem(key) + ".claim"

    def retime_dir(self, task: TaskSpec) -> str:
        return os.path.join(self.root, "retime", task.slug)

    # ------------------------------------------------------------------ reads
    def result(self, key: RunKey) -> RunResult | None:
        path = self.run_file(key)
        return RunResult.from_json(read_json(path)) if os.path.exists(path) else None

    def failed(self, key: RunKey) -> bool:
        return os.path.exists(self.error_file(key))

    def rounds(self, task: TaskSpec) -> list[dict[str, Any]]:
        """The task's re-timing rounds so far, in round order."""
        folder = self.retime_dir(task)
        if not os.path.isdir(folder):
            return []
        names = sorted((n for n in os.listdir(folder) if n.startswith("round") and n.endswith(".json")),
                       key=lambda n: int(n[5:-5]))
        return [read_json(os.path.join(folder, n)) for n in names]

    def write_round(self, task: TaskSpec, round_json: dict[str, Any]) -> str:
        return write_json(os.path.join(self.retime_dir(task), f"round{round_json['round']}.json"), round_json)

    def write_result(self, key: RunKey, result: RunResult) -> None:
        write_json(self.run_file(key), result.to_json())
        if os.path.exists(self.error_file(key)):
            os.unlink(self.error_file(key))

    # ------------------------------------------------------------------ claims
    def claim(self, key: RunKey) -> bool:
        """Take the run for this process: False if a live process (here or on another host) holds it.

        The claim is written whole to a file of its own and then linked into place (``link`` fails if the name
        exists, atomically, on local and network file systems alike), so a reader never sees a claim half-written:
        one read as empty or without a pid is debris (an older sitting killed mid-write) and is taken over."""
        path = self.claim_file(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        me = {"host": socket.gethostname(), "pid": os.getpid(), "boot": _boot_id(), "since": time.time()}
        mine = f"{path}.{me['host']}.{me['pid']}"
        with open(mine, "w") as fh:
            json.dump(me, fh)
        try:
            for _ in range(2):
                try:
                    os.link(mine, path)
                    return True
                except FileExistsError:
                    pass
                try:
                    holder = read_json(path)
                except FileNotFoundError:
                    continue  # released between the two calls
                except (OSError, ValueError):
                    holder = {}
                pid = holder.get("pid")
                rebooted = holder.get("boot") not in (None, me["boot"])
                alive = isinstance(pid, int) and not rebooted and _alive(pid)
                if holder.get("host") not in (None, me["host"]) and isinstance(pid, int) or alive:
                    return False
                os.unlink(path)  # its process died on this host (or before its reboot), or it is debris: ours now
            return False
        finally:
            os.unlink(mine)

    def release(self, key: RunKey) -> None:
        try:
            os.unlink(self.claim_file(key))
        except FileNotFoundError:
            pass


def all_runs(tasks, methods, seeds) -> list[RunKey]:
    """Every run of a study, in the order a sitting does them: task by task, and within a task seed by seed with
    the methods taking turns (so a slow spell of the machine does not fall on one method's runs)."""
    return [RunKey(t, m.name, s) for t in tasks for s in seeds for m in methods]


def shard_tasks(tasks, shard: tuple[int, int]) -> list:
    """The tasks of shard ``i`` of ``n`` (by position in the configuration)."""
    i, n = shard
    return [t for k, t in enumerate(tasks) if k % n == i]
