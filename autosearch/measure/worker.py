"""Warm worker processes with timeouts: a crashing or hanging kernel kills only its worker.

Each worker is a Python process with TVM imported that serves calls over a pipe: a fork of this process's fork
server (:mod:`autosearch.measure.forkserver`, which imports TVM once), or a fresh process where there is none.
The parent waits for an answer with a timeout; on a timeout it kills the worker, on a dead pipe it
reports the crash, and in both cases the next call starts a fresh worker. A call's timeout is its own:
a fresh worker first answers a ping (after its TVM import) within :data:`STARTUP_TIMEOUT`. Each worker leads a
process group of its own, and a kill is sent to that group: a build's linker (the worker's child) dies with it.
A signal sent to the caller's whole group (a terminal's Ctrl-C) does not reach the workers; they end when the
caller closes their pipes. A worker whose caller closes its pipe or dies while a call runs kills itself and its
group: a hanging kernel's worker outlived a killed caller (a Ray device actor, or a run killed with SIGKILL) and slept
or spun for as long as the kernel did, on a core later kernels are timed on.

Not TVM's ``tvm.support.popen_pool.PopenWorker``: it starts every child with the parent's environment
(``TVM_NUM_THREADS`` and the CPU affinity must differ per worker, before TVM starts its thread pool), its
timeout is a timer thread inside the child (a child that stops answering blocks the parent's ``recv``
for ever), and it drops a crashed child's exit status, which names the signal in our ``worker_crashed``.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from typing import Any

from autosearch.measure import forkserver

log = logging.getLogger(__name__)

# Seconds a fresh worker may take to start and import TVM (not counted in any kernel's timeout).
STARTUP_TIMEOUT = 120.0


@dataclass(frozen=True)
class Reply:
    """The outcome of one call: ``ok`` (value), ``error`` (exception text), ``timeout`` or ``crashed``."""

    kind: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0


def _kill_and_wait(proc, name: str, *, timeout: float) -> None:
    """SIGKILL ``proc`` and wait up to ``timeout`` for its end; never raises.

    Killing is where a call that timed out and every close path end, so it must not fail them: a process
    that outlives SIGKILL (stuck in the kernel, in uninterruptible I/O) can be neither helped nor waited for,
    and is left with a warning, as its pid is left in ``ps``. The kill reaches the worker's process group (see
    :func:`forkserver.kill_group`)."""
    if isinstance(proc, forkserver.ForkedProcess):
        proc.kill()
    elif proc.poll() is None:  # Popen: not reaped, so the group its pid leads is still its own
        forkserver.kill_group(proc.pid)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("worker %s (pid %s) has not ended %.0f s after SIGKILL; left to the system", name,
                    proc.pid, timeout)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # TVM errors end with the useful line; Python errors start with it.
    line = lines[-1] if lines and "Traceback" in text else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {line}"[:1000]


def _serve(conn) -> None:
    """Worker main loop (runs in the child process; environment already set by the parent)."""
    env = os.environ
    import tvm  # noqa: F401  - every call but ping needs it; the first answer (a ping) waits for the import

    from autosearch.measure import kernels

    busy = threading.Event()  # a call is running
    threading.Thread(target=_watch_caller, args=(conn.fileno(), busy), name=WATCH_THREAD, daemon=True).start()
    runner = kernels.KernelRunner(env.get("AUTOSEARCH_DEVICE", "cpu"))
    handlers = {
        "build": kernels.build,
        "reference": runner.reference,
        "run": runner.run,
        "set_reference": runner.set_reference,
        "ping": os.getpid,
    }
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):  # the parent closed the pipe or died (reset by peer)
            return
        name, args = msg
        busy.set()
        try:
            reply = ("ok", handlers[name](*args))
        except Exception as exc:  # report, keep serving
            log.debug("worker call %s failed: %s", name, traceback.format_exc())
            reply = ("error", _first_line(exc))
        finally:
            busy.clear()
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):  # the parent is gone or gave up on us: stop quietly
            return


# The caller's watch, a thread of every worker (also its name at the OS, as ``top -H`` and /proc show it)
WATCH_THREAD = "caller-watch"


def _watch_caller(fd: int, busy: threading.Event) -> None:
    """Wait for the caller's end of the pipe ``fd`` to close; if a call is running then, kill this worker's
    process group (the worker, and a build's linker with it).

    An idle worker reads the end of its pipe and returns on its own; a busy one reads nothing until its call
    returns, which for a hanging kernel is never: nobody is left to time it out. The pipe is a socket pair, so
    its peer's close (a process's exit closes it too, however the process died) wakes ``poll`` without
    consuming a request. The thread is blocked in ``poll`` otherwise, so it costs the kernels it shares the
    worker's cores with nothing (its run delay stays 0)."""
    _name_this_thread(WATCH_THREAD)
    poller = select.poll()
    poller.register(fd, select.POLLHUP | getattr(select, "POLLRDHUP", 0))
    while True:
        events = [ev for _, ev in poller.poll()]
        if any(ev & select.POLLNVAL for ev in events):  # the worker closed the pipe itself: it is ending
            return
        if events:
            break
    if not busy.is_set():  # the main loop reads the end and returns
        return
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _name_this_thread(name: str) -> None:
    """Give the calling thread ``name`` at the OS (Linux; elsewhere nothing): Python 3.11 leaves its threads
    named as the process."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
            fh.write(name[:15])
    except OSError:
        pass


def prepare_import() -> None:
    """What a process does before it imports TVM to serve calls (a worker, or the fork server for workers)."""
    # tvm_ffi imports PyTorch when it is installed (the [learned] extra), only to exchange tensors with it;
    # kernels never do. Blocked, a worker starts seconds sooner and without libtorch's memory, on every start.
    sys.modules.setdefault("torch", None)  # type: ignore[arg-type]
    from autosearch.tvm_compat import lighten_tvm_import

    lighten_tvm_import()  # TVM's functions listed once in its import: a worker starts sooner, on every start


def serve_forked(fd: int) -> None:
    """Serve calls on pipe ``fd`` in a process whose environment is this worker's (set before TVM's thread
    pool exists: TVM creates it at the first parallel kernel)."""
    cpus = os.environ.get("AUTOSEARCH_AFFINITY")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    _serve(Connection(fd))


def main(fd: int) -> None:
    """Entry point of a worker process started afresh (where no fork server can be used): serve on ``fd``."""
    import signal

    # Ctrl-C reaches the whole process group: the parent decides when workers stop (pipe closed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    prepare_import()
    serve_forked(fd)


# A worker leads its own process group, as a forked one does, so a kill reaches what it starts; in the caller's
# session where Python can say so (3.11), else in a session of its own.
_OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


class Worker:
    """One warm worker process. Not thread-safe: one caller at a time."""

    def __init__(self, *, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.env = dict(env or {})
        self._proc: subprocess.Popen | forkserver.ForkedProcess | None = None
        self._conn = None
        self._ready = False  # the running process has answered a ping (TVM is imported)
        self.restarts = 0

    @property
    def ident(self) -> str:
        pid = self._proc.pid if self._proc is not None else 0
        return f"{socket.gethostname()}:{self.name}:{pid}"

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        # Forked from the fork server (TVM imported once per process), or where there is none a plain
        # subprocess (not multiprocessing's spawn): neither imports the caller's __main__ again, so scripts
        # without an ``if __name__ == "__main__"`` guard work too. The environment is set before the child's
        # TVM starts its thread pool (its size is read once).
        parent, child = Pipe()
        env = {**os.environ, **self.env}
        try:
            self._proc = None
            if forkserver.AVAILABLE:
                try:
                    self._proc = forkserver.spawn(child.fileno(), env)
                except OSError as exc:  # the server cannot start or died twice: this worker starts afresh
                    log.debug("no fork server (%s): starting worker %s afresh", exc, self.name)
            if self._proc is None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", f"from autosearch.measure.worker import main; main({child.fileno()})"],
                    pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, close_fds=True,
                    **_OWN_GROUP,
                )
        finally:
            child.close()
        self._conn = parent
        self._ready = False

    def call(self, name: str, *args: Any, timeout: float) -> Reply:
        """Call ``name(*args)`` in the worker; never raises for what the worker does.

        ``timeout`` (seconds) counts from when the worker is ready: a fresh process is pinged first.
        """
        self.start()
        if not self._ready and name != "ping":
            reply = self.call("ping", timeout=STARTUP_TIMEOUT)
            if reply.kind != "ok":
                return reply
        reply = self._call(name, args, timeout)
        if name == "ping" and reply.kind == "ok":
            self._ready = True
        return reply

    def _call(self, name: str, args: tuple, timeout: float) -> Reply:
        conn = self._conn  # kill() from another thread may reset self._conn while we wait
        start = time.perf_counter()
        try:
            conn.send((name, args))
            answered = conn.poll(timeout)
        except (OSError, ValueError):  # broken pipe, or closed by kill() meanwhile
            return self._crashed(start)
        if not answered:
            self.kill()
            return Reply("timeout", error=f"no answer within {timeout:.0f} s", seconds=time.perf_counter() - start)
        try:
            kind, value = conn.recv()
        except (EOFError, OSError, ValueError):
            return self._crashed(start)
        seconds = time.perf_counter() - start
        if kind == "ok":
            return Reply("ok", value=value, seconds=seconds)
        return Reply("error", error=value, seconds=seconds)

    def _crashed(self, start: float) -> Reply:
        proc = self._proc
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_and_wait(proc, self.name, timeout=1)
        self._reset()
        self.restarts += 1
        how = "status unknown" if code is None else f"signal {-code}" if code < 0 else f"exit code {code}"
        return Reply("crashed", error=f"worker process died ({how})", seconds=time.perf_counter() - start)

    def rss_bytes(self) -> int:
        """Resident memory of the running process (0 when none runs, or where /proc does not say: not Linux)."""
        if self._proc is None or self._proc.poll() is not None:
            return 0
        try:
            with open(f"/proc/{self._proc.pid}/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            _kill_and_wait(self._proc, self.name, timeout=5)
            self.restarts += 1
        self._reset()

    def _reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._proc = None
        self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._conn.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                _kill_and_wait(self._proc, self.name, timeout=2)
        self._proc = None
        self._conn = None
