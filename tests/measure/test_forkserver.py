"""Workers forked from one warm server: each with its own environment, surviving the server's death."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from autosearch.measure import forkserver
from autosearch.measure.worker import STARTUP_TIMEOUT, WATCH_THREAD, Worker
from tests.conftest import run_conv_in

pytestmark = pytest.mark.skipif(not forkserver.AVAILABLE, reason="no fork server on this platform")


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def _kernel_threads(pid: int) -> list[str]:
    """The thread ids of worker ``pid`` that run kernels: all but its caller's watch."""
    def name(tid: str) -> str:
        with open(f"/proc/{pid}/task/{tid}/comm") as fh:
            return fh.read().strip()

    return [tid for tid in os.listdir(f"/proc/{pid}/task") if name(tid) != WATCH_THREAD]


def _threads(pid: int) -> int:
    return len(_kernel_threads(pid))


def test_workers_are_forks_of_one_server_each_with_its_own_thread_count(conv_task, conv_space):
    """TVM_NUM_THREADS is each worker's, though the server imported TVM before either existed: TVM reads it
    when its thread pool starts, at the first parallel kernel. Each worker's threads run on the cores it is given
    (both are given two: a pinned test worker has one, and a worker's pool keeps to its process's), and a worker
    of one thread runs one though it may run on two cores (TVM's pool starts a thread per core it is given)."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("this machine has one core: a worker cannot run two threads on cores of their own")
    envs = [{"TVM_NUM_THREADS": n, "AUTOSEARCH_AFFINITY": "0,1"} for n in ("1", "2")]
    workers = [Worker(name=f"threads{n}", env=env) for n, env in zip((1, 2), envs)]
    try:
        for w in workers:
            assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        one, two = (w._proc.pid for w in workers)
        assert _ppid(one) == _ppid(two) != os.getpid()
        ran = [run_conv_in(w, conv_task, conv_space, {"repeat": 3}) for w in workers]
        assert (_threads(one), _threads(two)) == (1, 2)
        assert all(0 <= r["waited"] < 1 for r in ran)  # each counted its threads' wait for a core
        # and the two-thread worker's threads each on a core of its own: its first thread too, which TVM leaves
        # free to run beside the other on its core
        assert sorted(os.sched_getaffinity(int(t)) for t in _kernel_threads(two)) == [{0}, {1}]
    finally:
        for w in workers:
            w.close()


def test_a_killed_server_is_replaced_and_its_orphaned_worker_still_serves_then_reports_its_death():
    first = Worker(name="orphan")
    try:
        assert first.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        server = _ppid(first._proc.pid)
        os.kill(server, signal.SIGKILL)
        deadline = time.time() + 10
        while _ppid(first._proc.pid) == server and time.time() < deadline:  # reparented once the server is gone
            time.sleep(0.05)
        assert first.call("ping", timeout=10).kind == "ok"  # its pipe is ours, not the server's
        second = Worker(name="after")
        try:
            assert second.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
            assert _ppid(second._proc.pid) not in (server, os.getpid())
        finally:
            second.close()
        os.kill(first._proc.pid, signal.SIGKILL)
        reply = first.call("ping", timeout=10)
        assert reply.kind == "crashed" and "status unknown" in reply.error, reply
        assert first.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"  # and the next call starts a fresh one
    finally:
        first.close()


def test_an_orphaned_worker_is_killed_and_waited_for_where_nobody_reaps_it():
    """Once its server is gone the worker's parent is init (or a subreaper), which need not reap it: a micro-VM's
    first process here does not. Killed, it stays a zombie; kill() must see it ended, not wait out its timeout and
    raise (a run's close did, on Ctrl-C)."""
    w = Worker(name="zombie")
    try:
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        proc = w._proc
        server = _ppid(proc.pid)
        os.kill(server, signal.SIGKILL)
        deadline = time.time() + 10
        while _ppid(proc.pid) == server and time.time() < deadline:
            time.sleep(0.05)
        start = time.time()
        w.kill()
        assert time.time() - start < 1.0  # here init reaps an orphan within 1.2-1.4 s; under load, CI's took over 5
        assert _state(proc.pid) in ("Z", "gone")  # ended: a zombie until init gets to it, or reaped
    finally:
        w.close()


def test_a_request_the_parent_gives_up_leaves_the_server_to_end_with_its_children(monkeypatch):
    """Ctrl-C between sending a request and reading the new worker's pid closes the socket; the server has forked
    by then, and its answer finds no reader. It must stop listening and still reap that worker, not die with a
    traceback and leave its children to a parent that may never reap them."""
    from multiprocessing.connection import Pipe

    server = forkserver.ForkServer(dict(os.environ))
    ours, theirs = Pipe()

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(forkserver, "_recv_exact", interrupted)  # only in this process: the server has its own
    with pytest.raises(KeyboardInterrupt):
        server.spawn(theirs.fileno(), dict(os.environ))
    theirs.close()
    assert not server.alive()
    assert server._proc.poll() is None, "the server must outlive the request while its worker runs"
    ours.close()  # the worker reads EOF and ends; the server reaps it and ends too
    assert server._proc.wait(timeout=STARTUP_TIMEOUT) == 0


def test_a_killed_worker_reports_its_signal_and_a_changed_environment_gets_a_new_server(monkeypatch):
    w = Worker(name="signals")
    try:
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        server = _ppid(w._proc.pid)
        os.kill(w._proc.pid, signal.SIGSEGV)
        reply = w.call("ping", timeout=10)
        assert reply.kind == "crashed" and "signal 11" in reply.error, reply
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        assert _ppid(w._proc.pid) == server
        monkeypatch.setenv("AUTOSEARCH_FORKSERVER_TEST", "1")  # a variable no import reads: the same server
        w.kill()
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        assert _ppid(w._proc.pid) == server
        monkeypatch.setenv("TVM_FORKSERVER_TEST", "1")  # what TVM's import sees may differ now: a new server
        w.kill()
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        assert _ppid(w._proc.pid) != server
    finally:
        w.close()


def test_a_worker_starts_afresh_where_no_fork_server_can_be_had(monkeypatch):
    def refused(*_):
        raise OSError("no server (injected)")

    monkeypatch.setattr(forkserver, "spawn", refused)
    w = Worker(name="afresh")
    try:
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        assert _ppid(w._proc.pid) == os.getpid()
    finally:
        w.close()


def test_a_killed_worker_is_waited_for_by_two_threads_at_once():
    """As a pool's close() kills and waits for a worker while a build thread waits for it too (Popen allows it)."""
    from concurrent.futures import ThreadPoolExecutor

    w = Worker(name="waited")
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for _ in range(10):
                assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
                proc = w._proc
                os.kill(proc.pid, signal.SIGKILL)
                codes = list(pool.map(lambda p: p.wait(timeout=10), [proc, proc]))
                assert codes == [-signal.SIGKILL] * 2
                w.kill()
    finally:
        w.close()


def test_the_server_is_keyed_on_what_an_import_can_read():
    base = {"PATH": "/usr/bin", "HOME": "/root", "PYTEST_CURRENT_TEST": "a.py::t (call)"}
    key = forkserver.import_environment(base)
    assert key == (("PATH", "/usr/bin"),)
    assert forkserver.import_environment({**base, "PYTEST_CURRENT_TEST": "a.py::u (setup)", "RAY_X": "1"}) == key
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        assert forkserver.import_environment({**base, name: "2"}) != key, name
    assert forkserver.import_environment({**base, "PATH": "/opt/bin"}) != key


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the linker's stand-in joins the worker's group by "
                    "Popen(process_group=), new in Python 3.11")
@pytest.mark.parametrize("forked", [True, False], ids=["forked", "afresh"])
def test_a_kill_reaches_what_the_worker_started(forked, monkeypatch):
    """A build's linker is the worker's child: killed with the worker (by its process group), it no longer runs on
    after a build's timeout or a pool's close, writing into the worker's temporary directory. The linker is stood in
    for by a process put in the worker's group."""
    import subprocess

    def refused(*_):
        raise OSError("no server (injected)")

    if not forked:
        monkeypatch.setattr(forkserver, "spawn", refused)
    w = Worker(name="group")
    try:
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        pid = w._proc.pid
        assert os.getpgid(pid) == pid != os.getpgid(0)
        linker = subprocess.Popen(["sleep", "60"], process_group=pid)
        w.kill()
        assert linker.wait(timeout=10) == -signal.SIGKILL
        assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"  # and the next call starts a fresh worker
    finally:
        w.close()


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "afresh"])
def test_a_worker_whose_caller_goes_away_mid_call_ends_and_an_idle_one_ends_cleanly(forked, target, monkeypatch):
    """A hanging kernel's worker outlived its caller when the caller died (a Ray device actor killed, a run killed
    with SIGKILL): it waited for the kernel, an hour here, and a spinning one would spin on a core later kernels are
    timed on. Its caller's end of the pipe closing mid-call now ends it at once; an idle worker still ends on its
    own when it reads the end (exit code 0)."""
    from tests.faulty_kernels import ARGS, artifact

    if not forked:
        monkeypatch.setattr(forkserver, "AVAILABLE", False)
    hang = artifact("hang", target)
    busy, idle = Worker(name="busy"), Worker(name="idle")
    try:
        for w in (busy, idle):
            assert w.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        busy._conn.send(("reference", ("hang", hang, ARGS, 0, {"repeat": 1, "min_repeat_ms": 0})))
        time.sleep(0.5)  # the kernel is running (it sleeps an hour)
        assert _state(busy._proc.pid) not in ("Z", "gone")
        for w in (busy, idle):
            w._conn.close()  # as a caller's exit closes it, however the caller died
        for w, code in ((busy, -signal.SIGKILL), (idle, 0)):
            assert w._proc.wait(timeout=10) == code
    finally:
        for w in (busy, idle):
            w.kill()
