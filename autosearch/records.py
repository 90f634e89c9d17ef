"""The append-only JSON Lines tuning log: one :class:`~autosearch.types.Record` a line, and task and run headers.

One line per measured config, written and fsynced per batch, so a crash loses at most the batch in
flight and ``--resume`` can continue without repeating or dropping a measurement.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from autosearch.errors import UserError, make_writable_dir
from autosearch.ranking import current_retimes, rank, score
from autosearch.types import LOG_FORMAT_VERSION, Record

log = logging.getLogger(__name__)


# Task names of earlier logs, read as today's: the bf16 kernels of a convolution, a matmul and a fused attention were
# named after AMX when AMX was the one unit that ran them; on AVX512-BF16's dot product the name said a unit the CPU
# lacked. Logs are never rewritten: names are renamed as they are read, so an old log resumes, exports and feeds an
# experiment as a new one does (tasks are matched by workload key; these names are what code and people read).
LEGACY_TASK_NAMES = (("conv2d_amx_bf16", "conv2d_bf16"), ("matmul_amx_bf16", "matmul_bf16"),
                     ("attention_amx_bf16", "attention_bf16"))


def current_task_name(name: str) -> str:
    """``name`` as this version names the task (:data:`LEGACY_TASK_NAMES`)."""
    for old, new in LEGACY_TASK_NAMES:
        if old in name:
            return name.replace(old, new)
    return name


# ---------------------------------------------------------------------------------------------- the log
@dataclass
class LogContents:
    """Everything read back from a tuning log."""

    path: str
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # task key -> task header (TuningTask JSON)
    records: list[Record] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)  # "file:line: reason"
    runs: list[dict[str, Any]] = field(default_factory=list)  # one header per run or resume: what guided it
    # the layout transforms one layout per convolution adds, timed at a run's end (autosearch.deploy.transitions)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    truncated_tail: bool = False

    def trials(self, task_key: str | None = None) -> list[Record]:
        """All trial records (of one task, if given), in log order."""
        return [r for r in self.records if r.kind == "trial" and (task_key is None or r.task_key == task_key)]

    def baseline(self, task_key: str) -> Record | None:
        """The untuned baseline of a task (the last one logged)."""
        found = [r for r in self.records if r.kind == "baseline" and r.task_key == task_key]
        return found[-1] if found else None

    def retimes(self, task_key: str) -> list[Record]:
        """Finalists of a task re-timed in a fresh process at the end of a run."""
        return [r for r in self.records if r.kind == "retime" and r.task_key == task_key]

    def ranked(self, task_key: str) -> list[Record]:
        """Valid trials of a task, best first, as the tuner chose: the finalists re-timed in fresh
        processes after the task's last trial first, by :func:`autosearch.ranking.rank` (median over
        re-timing rounds; a lucky in-run timing does not win), then the rest by in-run median. Each
        keeps its in-run result, which was measured under the same conditions as the untuned baseline
        it is compared with. Failed or wrong-result records never appear, nor does a finalist that
        failed a re-time."""
        return self._ranked(task_key)[0]

    def _ranked(self, task_key: str) -> tuple[list[Record], list[Record]]:
        """(:meth:`ranked`, the task's re-times that count), from one pass over the log."""
        own = [r for r in self.records if r.task_key == task_key]
        trials = {r.config: r for r in own if r.kind == "trial" and r.ok and r.config is not None}
        retimes = current_retimes(own)
        order = rank({c: r.latency for c, r in trials.items()}, ((r.config, r.result) for r in retimes))
        # records with no config (read from a TVM database) were never re-timed: they rank by their own timing
        bare = sorted((r for r in own if r.kind == "trial" and r.ok and r.config is None), key=lambda r: r.latency)
        return [trials[c] for c in order] + bare, retimes

    def best(self, task_key: str) -> Record | None:
        """The best valid trial of a task (see :meth:`ranked`); never a failed or wrong-result one."""
        ranked = self.ranked(task_key)
        return ranked[0] if ranked else None

    def best_seconds(self, task_key: str) -> float | None:
        """The best's latency as the choice between alternatives should read it: its score over its re-times
        (:func:`autosearch.ranking.score`) where its finalists were re-timed after its last trial, else its in-run
        latency; None with no valid trial. The in-run latency of a best is the lowest of many noisy timings and reads
        low; where it was re-timed in fresh processes, the re-times say what it runs at."""
        ranked, retimes = self._ranked(task_key)
        if not ranked:
            return None
        best = ranked[0]
        own = [r.result for r in retimes if r.config == best.config]
        retimed = score(own) if own else math.inf
        return retimed if math.isfinite(retimed) else best.latency

    def task_keys(self) -> list[str]:
        return list(dict.fromkeys([*self.tasks, *(r.task_key for r in self.records)]))


def read_log(path: str, *, strict_missing: bool = True) -> LogContents:
    """Read a tuning log (gzipped if its name ends in ``.gz``). A truncated last line (a crash mid-write) is
    tolerated silently; any other corrupt line is reported as ``file:line`` in ``.corrupt`` and skipped."""
    out = LogContents(path=path)
    if not os.path.exists(path):
        if strict_missing:
            raise UserError(f"log not found: {path}")
        return out
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:  # a shipped dataset is gzipped
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise UserError(f"cannot read log {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    lines = data.split(b"\n")
    ends_clean = data.endswith(b"\n") or not data
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        is_last = lineno == len(lines) and not ends_clean
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict) or "kind" not in obj:
                raise ValueError("not a tuning-log object")
            task = obj.get("task")
            if isinstance(task, dict) and isinstance(task.get("name"), str):
                task["name"] = current_task_name(task["name"])
            if obj["kind"] == "task":
                out.tasks[obj["task"]["workload_key"]] = obj["task"]
            elif obj["kind"] == "run":
                out.runs.append(obj["run"])
            elif obj["kind"] in ("trial", "baseline", "retime"):
                out.records.append(Record.from_json(obj))
            elif obj["kind"] == "transitions":
                out.transitions.append(dict(obj["transitions"]))
            else:
                raise ValueError(f"unknown record kind {obj['kind']!r}")
        except (ValueError, KeyError, TypeError) as exc:
            if is_last:
                out.truncated_tail = True
                log.info("%s:%d: ignoring a truncated last line (interrupted write)", path, lineno)
                continue
            reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            out.corrupt.append(f"{path}:{lineno}: {reason}")
            log.debug("%s:%d: skipping corrupt line (%s)", path, lineno, reason)  # callers summarise
    return out


class TuningLog:
    """Append-only writer. Each :meth:`append` writes whole lines, flushes and fsyncs."""

    def __init__(self, path: str, *, resume: bool = False) -> None:
        self.path = path
        self.check(path, resume=resume)  # makes the directory
        try:
            self._fh = open(path, "ab")
        except OSError as exc:
            raise UserError(f"cannot write log {path}: {exc.strerror}") from exc
        # A crash may have left a partial last line: start ours on a fresh line.
        if self._fh.tell() > 0:
            with open(path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    self._fh.write(b"\n")

    @staticmethod
    def check(path: str, *, resume: bool = False) -> None:
        """Refuse, before any work, a log this writer would spoil or could not write: an existing one without
        ``resume``, a gzipped one (plain lines appended to a gzip stream make the whole file unreadable; read_log
        reads ``.gz``), one in a directory that cannot be made or written (made here)."""
        if path.endswith(".gz"):
            raise UserError(f"cannot write log {path}: a run appends plain JSON lines, so name it without .gz "
                            "(to continue a gzipped log, gunzip it and --resume the .jsonl)")
        if os.path.exists(path) and os.path.getsize(path) > 0 and not resume:
            raise UserError(f"log {path} already exists: pass --resume to continue it, or choose another --log")
        make_writable_dir(os.path.dirname(os.path.abspath(path)))

    def write_run(self, run_json: dict[str, Any]) -> None:
        """A run's header (strategy, options, the cost model that guides it), once per run or resume."""
        self._write([{"v": LOG_FORMAT_VERSION, "kind": "run", "run": {**run_json, "started": time.time()}}])

    def write_task(self, task_json: dict[str, Any]) -> None:
        self._write([{"v": LOG_FORMAT_VERSION, "kind": "task", "task": task_json}])

    def write_transitions(self, transitions_json: dict[str, Any]) -> None:
        """The layout transforms one layout per convolution adds between layers, as timed (``deploy.transitions``)."""
        self._write([{"v": LOG_FORMAT_VERSION, "kind": "transitions", "transitions": transitions_json}])

    def append(self, records: Iterable[Record]) -> None:
        self._write([r.to_json() for r in records])

    def _write(self, objs: list[dict[str, Any]]) -> None:
        if not objs:
            return
        payload = b"".join(json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objs)
        # Ctrl-C / SIGTERM wait until the batch is on disk: a line is never cut by our own signal.
        blocked = threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_sigmask")
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if blocked else None
        try:
            self._fh.write(payload)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> TuningLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["LEGACY_TASK_NAMES", "LogContents", "TuningLog", "current_task_name", "read_log"]
