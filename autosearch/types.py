"""The small public types every stage shares: a config of a task's decision space, what measuring it gave, and
the record the tuning log holds of it.

Strategies and cost models see these and nothing of TVM: a :class:`Config` is a sketch index and one value per
:class:`Decision`, a :class:`MeasureResult` a :class:`Status` and latencies in seconds. A :class:`Record` is one
line of the log; reading and writing the log is :mod:`autosearch.records`'s.
"""

from __future__ import annotations

import math
import socket
import statistics
import time
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

LOG_FORMAT_VERSION = 1  # the "v" of every line of the tuning log


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class Decision:
    """One open choice of a sketch: a sampling instruction of the trace and its legal values."""

    name: str
    kind: str  # SamplePerfectTile | SampleCategorical | SampleComputeLocation
    choices: tuple[Any, ...]
    position: int  # index of the instruction in the sketch's trace

    @cached_property
    def choice_set(self) -> frozenset:
        """The legal values as a set, built once per decision: a space's ``contains`` asks it for every value of
        every config a strategy proposes (:meth:`autosearch.search.space.DecisionSpace.contains`)."""
        return frozenset(self.choices)


@dataclass(frozen=True, order=True)
class Config:
    """A point of a task's decision space: sketch index and one value per decision.

    Values are ints (categorical index, compute location) or tuples of ints (tile factors).
    """

    sketch: int
    values: tuple[Any, ...]

    def replace(self, i: int, value: Any) -> Config:
        return Config(self.sketch, self.values[:i] + (value,) + self.values[i + 1:])

    def to_json(self) -> dict[str, Any]:
        return {"sketch": self.sketch, "values": [list(v) if isinstance(v, tuple) else v for v in self.values]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Config:
        return cls(int(obj["sketch"]), tuple(tuple(v) if isinstance(v, list) else v for v in obj["values"]))


# ---------------------------------------------------------------------------------------------- results
class Status(str, Enum):
    OK = "ok"
    INVALID_CONFIG = "invalid_config"
    BUILD_ERROR = "build_error"
    BUILD_TIMEOUT = "build_timeout"
    RUN_ERROR = "run_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_RESULT = "wrong_result"
    WORKER_CRASHED = "worker_crashed"


# a timing whose threads waited for a core over this share of it was slowed by the machine, not by its schedule
WAITED_LIMIT = 0.1


@dataclass(frozen=True)
class MeasureResult:
    """What measuring one kernel gave. Only ``ok`` results have a latency."""

    status: Status
    latencies: tuple[float, ...] = ()  # seconds, one per repeat
    error: str = ""
    build_secs: float = 0.0
    run_secs: float = 0.0  # wall time of the measurement, load + check + timing
    worker: str = ""
    # what timed it, as the measuring process names it: LLVM's name for its CPU (a GPU's name for a GPU kernel); ""
    # where nothing was timed, and in logs older than the field
    measured_on: str = ""
    # the share of the timing its threads spent waiting for a core, runnable (another process on their cores:
    # autosearch.measure.queueing); None where it was not counted, and in logs older than the field
    waited: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK and bool(self.latencies)

    @property
    def median(self) -> float:
        """Median latency in seconds (inf unless ok)."""
        return statistics.median(self.latencies) if self.ok else math.inf

    @property
    def cv(self) -> float:
        """Coefficient of variation of the repeats (stdev / mean)."""
        if len(self.latencies) < 2:
            return 0.0
        mean = statistics.fmean(self.latencies)
        return statistics.stdev(self.latencies) / mean if mean > 0 else 0.0

    @property
    def disturbed(self) -> bool:
        """Whether the machine slowed the timing: its repeats split into fast ones and a slow majority (the fastest
        under a third of the median; needs five repeats to tell), or its threads waited for a core over
        :data:`WAITED_LIMIT` of it, which a timing slowed in every repeat shows and its repeats do not.

        The fast repeats say what the kernel does, the median what the machine did meanwhile (why, and what is done
        about it: :mod:`autosearch.search.disturbed`)."""
        if not self.ok:
            return False
        return (len(self.latencies) >= 5 and min(self.latencies) < self.median / 3) or self.waited_through

    @property
    def waited_through(self) -> bool:
        """Whether its threads waited for a core over :data:`WAITED_LIMIT` of the timing (False where not counted)."""
        return self.waited is not None and self.waited > WAITED_LIMIT

    def gflops(self, flops: float) -> float:
        return flops / self.median / 1e9 if self.ok and self.median > 0 else 0.0

    def to_json(self, flops: float) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value}
        if self.error:
            out["error"] = self.error[:2000]
        if self.ok:
            out.update(latencies=list(self.latencies), median=self.median, cv=round(self.cv, 5),
                       gflops=round(self.gflops(flops), 4))
            if self.waited is not None:
                out["waited"] = round(self.waited, 4)
        return out

    @classmethod
    def failed(cls, status: Status, error: str, **kw: Any) -> MeasureResult:
        return cls(status=status, error=error, **kw)


# ---------------------------------------------------------------------------------------------- records
def _versions() -> dict[str, str]:
    from autosearch import __version__

    try:
        import tvm

        tvm_version = tvm.__version__
    except Exception:  # pragma: no cover
        tvm_version = "unknown"
    return {"autosearch": __version__, "tvm": tvm_version}


@dataclass
class Record:
    """One line of the tuning log: a measured config of a task (or its untuned baseline)."""

    kind: str  # "trial" | "baseline" | "retime" (a finalist re-timed in a fresh process)
    task_key: str
    task_name: str
    target: dict[str, Any]
    config: Config | None
    result: MeasureResult
    flops: float
    trace: Any = None  # TVM trace JSON of the applied schedule (trials only)
    requested: Config | None = None  # the config the strategy asked for, when TVM changed it
    strategy: str = ""
    trial: int = 0
    round: int = 0  # re-timing round of a ``retime`` record (1, 2, ...); 0 otherwise and in older logs
    started: float = field(default_factory=time.time)
    finished: float = field(default_factory=time.time)
    host: str = field(default_factory=socket.gethostname)
    versions: dict[str, str] = field(default_factory=_versions)

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def latency(self) -> float:
        return self.result.median

    @property
    def gflops(self) -> float:
        return self.result.gflops(self.flops)

    @property
    def built_for(self) -> str:
        """LLVM's name for the CPU the kernel was built for (the target's ``mcpu``; "" where it names none)."""
        return str(self.target.get("mcpu", "") or "")

    @property
    def timed_on(self) -> str:
        """LLVM's name for the CPU whose timings these are: as the measuring process said, else (a log older than
        that field, or nothing timed) :attr:`built_for`, which a run sets to the host's unless told otherwise.
        The two differ where a run built for one CPU was timed on another (a stand-in): its timings are not the
        target CPU's."""
        return self.result.measured_on or self.built_for

    @property
    def stood_in(self) -> bool:
        """Whether this was timed on another CPU than the one it was built for."""
        return bool(self.result.measured_on and self.built_for and self.result.measured_on != self.built_for)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": LOG_FORMAT_VERSION,
            "kind": self.kind,
            "task": {"key": self.task_key, "name": self.task_name},
            "target": self.target,
            "flops": self.flops,
            "result": self.result.to_json(self.flops),
            "build_secs": round(self.result.build_secs, 4),
            "run_secs": round(self.result.run_secs, 4),
            "started": round(self.started, 3),
            "finished": round(self.finished, 3),
            "host": self.host,
            "worker": self.result.worker,
            "versions": self.versions,
        }
        if self.result.measured_on:
            out["measured_on"] = self.result.measured_on
        if self.config is not None:
            out["config"] = self.config.to_json()
        if self.requested is not None and self.requested != self.config:
            out["requested"] = self.requested.to_json()
        if self.trace is not None:
            out["trace"] = self.trace
        if self.strategy:
            out["strategy"] = self.strategy
        if self.trial:
            out["trial"] = self.trial
        if self.round:
            out["round"] = self.round
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Record:
        res = obj["result"]
        result = MeasureResult(
            status=Status(res["status"]),
            latencies=tuple(float(x) for x in res.get("latencies", ())),
            error=res.get("error", ""),
            build_secs=float(obj.get("build_secs", 0.0)),
            run_secs=float(obj.get("run_secs", 0.0)),
            worker=obj.get("worker", ""),
            measured_on=obj.get("measured_on", ""),
            waited=float(res["waited"]) if res.get("waited") is not None else None,
        )
        return cls(
            kind=obj["kind"],
            task_key=obj["task"]["key"],
            task_name=obj["task"]["name"],
            target=obj.get("target", {}),
            config=Config.from_json(obj["config"]) if obj.get("config") else None,
            requested=Config.from_json(obj["requested"]) if obj.get("requested") else None,
            result=result,
            flops=float(obj.get("flops", 0.0)),
            trace=obj.get("trace"),
            strategy=obj.get("strategy", ""),
            trial=int(obj.get("trial", 0)),
            round=int(obj.get("round", 0)),
            started=float(obj.get("started", 0.0)),
            finished=float(obj.get("finished", 0.0)),
            host=obj.get("host", ""),
            versions=obj.get("versions", {}),
        )


__all__ = ["LOG_FORMAT_VERSION", "Config", "Decision", "MeasureResult", "Record", "Status"]
