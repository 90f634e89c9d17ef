"""A fork server for worker processes: TVM is imported once, each worker is a fork of that warm process.

A fresh Python process spends seconds of CPU importing TVM before it can build or time anything, and a
tuning run starts many: its build and measuring workers, each finalist round's fresh measuring process,
each restart after a crash, a timeout or the memory limit. The server is started like a worker (a plain
subprocess, so the caller's ``__main__`` is never imported again), imports TVM and the kernel module, and
then only forks: a new worker costs milliseconds and shares TVM's pages with its siblings.

The shape is multiprocessing's ``forkserver`` (file descriptors passed over a Unix socket, the child's exit
status written to a pipe of its own when the server reaps it), not that module itself: its children import
the caller's ``__main__`` again and inherit the server's environment, where each worker needs its own
(``TVM_NUM_THREADS``, its cores, its temporary directory), set in the child before TVM's thread pool exists
(TVM reads the variable when it creates the pool, at the first parallel kernel, not at import).

One server per process and environment, started on first use, like multiprocessing's: it holds no results,
only a warm import, and it exits when the process that started it closes its socket (or dies), after its
last child has ended. A server that cannot be started or has died is started again on the next request.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

# Whether workers can be forked from a server here: a Unix with fd passing (Linux, macOS); elsewhere each
# worker is a fresh process (worker.Worker falls back).
AVAILABLE = hasattr(os, "fork") and hasattr(socket, "send_fds")

_STATUS = struct.Struct("i")


class ForkedProcess:
    """A worker forked by the server: the parts of ``subprocess.Popen`` the worker uses.

    It is the server's child, not ours: its exit status comes over ``status_fd`` (written when the server
    reaps it); it is killed by pid, which is safe while that status has not arrived (the pid is not reaped,
    so not reused).
    """

    def __init__(self, pid: int, status_fd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._status_fd = status_fd
        self._ended = False  # status read (or the server died and it never will be)
        self._lock = threading.Lock()

    def _read_status(self, timeout: float | None) -> bool:
        """Whether the process has ended (reading its status if it has come), waiting up to ``timeout``.

        Thread-safe, as ``Popen.wait`` is: a pool's ``close`` kills and waits for a worker while the thread that
        called it may be waiting for it too."""
        if self._ended:
            return True
        fd = self._status_fd
        if fd >= 0:
            try:
                ready, _, _ = select.select([fd], [], [], timeout)
            except (OSError, ValueError):  # closed meanwhile by a thread that read it: see below
                ready = [fd]
            if not ready:
                return False
        with self._lock:
            if self._ended:
                return True
            if self._status_fd >= 0:
                data = os.read(self._status_fd, _STATUS.size)
                os.close(self._status_fd)
                self._status_fd = -1
                if len(data) == _STATUS.size:
                    self.returncode = _STATUS.unpack(data)[0]
                    self._ended = True
                    return True
            # the server died first (EOF, no status): init reaps its orphans, their status is lost; asked by pid
            self._ended = not _running(self.pid)
            return self._ended

    def poll(self) -> int | None:
        """The exit code once ended, else None (also for an orphan that ended with its status lost: the
        worker then finds its pipe dead on the next call and reports the crash)."""
        return self.returncode if self._read_status(0) else None

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._read_status(None if deadline is None else max(0.0, deadline - time.monotonic())):
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(0.05)  # an orphan: its status pipe is at EOF for good, so select() no longer waits
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the worker's process group: the worker and what it started (a build's linker)."""
        if not self._read_status(0):  # not reaped yet, so the pid, and the group it leads, are still this process's
            kill_group(self.pid)

    def __del__(self) -> None:
        if self._status_fd >= 0:
            try:
                os.close(self._status_fd)
            except OSError:
                pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (every worker leads one), or ``pid`` alone where it leads none.

    A worker's own children are in its group: TVM links a built kernel with the system's compiler, a child of the
    build worker, and killing the worker alone left that linker running, and writing into the worker's temporary
    directory, after a build's timeout or a pool's close."""
    try:
        os.killpg(pid, signal.SIGKILL)
        return
    except (ProcessLookupError, PermissionError):  # it leads no group (started otherwise): the process alone
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _running(pid: int) -> bool:
    """Whether an orphaned worker still runs: its pid exists and is not a zombie.

    An orphan's parent becomes the system's init (or a subreaper), which need not reap it: a container's or a
    micro-VM's first process may do so only now and then, and a killed orphan stays a zombie meanwhile, answering
    ``kill(pid, 0)`` as if it ran (a close path waited on it until its timeout)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pid was reused by another user's process: ours has ended
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc here (macOS): kill(pid, 0) is all there is
        return True
    return state not in (b"Z", b"X")


class ForkServer:
    """One server process; :meth:`spawn` forks a worker serving calls on a given pipe end."""

    def __init__(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", f"from autosearch.measure.forkserver import main; main({theirs.fileno()})"],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, close_fds=True,
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self._sock.fileno() >= 0 and self._proc.poll() is None

    def spawn(self, conn_fd: int, env: dict[str, str]) -> ForkedProcess:
        """Fork a worker that serves calls on ``conn_fd`` (a copy is passed; the caller closes its own) with
        ``env`` as its whole environment. Raises OSError when the server is gone."""
        status_r, status_w = os.pipe()
        try:
            payload = json.dumps(env).encode()
            with self._lock:
                try:
                    socket.send_fds(self._sock, [struct.pack("Q", len(payload)) + payload], [conn_fd, status_w])
                    pid = _recv_exact(self._sock, 8)
                except BaseException:  # an exchange cut short (even by Ctrl-C) leaves the socket out of step
                    self.close()
                    raise
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        return ForkedProcess(struct.unpack("q", pid)[0], status_r)

    def close(self) -> None:
        """Let the server go: it exits once its children have ended (not waited for here)."""
        self._sock.close()


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the fork server closed its socket")
        data += chunk
    return data


_current: list[tuple[tuple, ForkServer]] = []  # this process's one server, with the environment it imported under
_current_lock = threading.Lock()


def _server(key: tuple, *, replacing: ForkServer | None = None) -> ForkServer:
    """The server for environment ``key``: the current one while it serves that environment and is alive and not
    ``replacing``, else a new one (the old one is let go: it ends with its children)."""
    with _current_lock:
        if _current:
            old_key, old = _current[0]
            if old_key == key and old.alive() and old is not replacing:
                return old
            old.close()
            _current.clear()
        _current.append((key, ForkServer(dict(os.environ))))
        return _current[0][1]


# The environment variables that can change what the server's import does: Python's own, the dynamic loader's,
# TVM's, and the thread counts and options the numeric libraries read when they load (OpenBLAS under numpy reads
# OPENBLAS_NUM_THREADS then, not later). Everything else reaches a worker anyway: it runs under its own whole
# environment, set after the fork.
_IMPORT_PREFIXES = ("PYTHON", "LD_", "DYLD_", "TVM_", "OMP_", "OPENBLAS_", "MKL_", "GOTO_", "BLIS_", "VECLIB_")
_IMPORT_NAMES = ("PATH",)


def import_environment(environ: dict[str, str] | os._Environ) -> tuple[tuple[str, str], ...]:
    """The part of ``environ`` a server's import can depend on (see :data:`_IMPORT_PREFIXES`), as a key.

    Keyed on the whole environment, a process that sets a variable of its own between runs (a test runner names
    the current test in one, for each test) started a server, and imported TVM, for each."""
    return tuple(sorted((name, value) for name, value in environ.items()
                        if name in _IMPORT_NAMES or name.startswith(_IMPORT_PREFIXES)))


def spawn(conn_fd: int, env: dict[str, str]) -> ForkedProcess:
    """Fork a worker from this process's server for the current environment (started or replaced as needed).

    The server imports TVM under the environment current when it starts; a change to what that import can read
    (another ``PATH``, ``TVM_*``, ``PYTHONPATH``, a thread count of the numeric libraries: :func:`import_environment`)
    gets a new server, so no worker runs under an import it did not ask for.
    """
    key = import_environment(os.environ)
    server = _server(key)
    try:
        return server.spawn(conn_fd, env)
    except OSError:  # it died between the check and the request (or failed to start): once more, afresh
        return _server(key, replacing=server).spawn(conn_fd, env)


# ---------------------------------------------------------------------------------------------- the server
def main(fd: int) -> None:
    """Entry point of the server process: import TVM, then fork a worker per request on socket ``fd``."""
    from autosearch.measure import worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it closes our socket)
    worker.prepare_import()
    import tvm  # noqa: F401  - the point of the server: every child starts with TVM imported

    from autosearch.measure import kernels  # noqa: F401

    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake select() through the wakeup fd
    children: dict[int, int] = {}  # pid -> its status pipe
    listening = True
    while listening or children:
        ready, _, _ = select.select([sock, wake_r] if listening else [wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(children)
        if sock in ready:
            listening = _serve_request(sock, children, (fd, wake_r, wake_w))


def _serve_request(sock: socket.socket, children: dict[int, int], own_fds: tuple[int, ...]) -> bool:
    try:
        head, fds, _, _ = socket.recv_fds(sock, 8, 2)
    except OSError:
        return False
    if len(head) < 8 or len(fds) != 2:  # the parent closed the socket (or sent nothing whole)
        for extra in fds:
            os.close(extra)
        return False
    (size,) = struct.unpack("Q", head)
    conn_fd, status_w = fds
    try:
        env: dict[str, str] = json.loads(_recv_exact(sock, size))
    except OSError:  # the parent closed the socket mid-request
        os.close(conn_fd)
        os.close(status_w)
        return False
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setpgid(0, 0)  # a group of its own, so a kill reaches what it starts (ForkedProcess.kill)
            for other in (*own_fds, *children.values(), status_w):
                os.close(other)
            _become_worker(conn_fd, env)
            code = 0
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)  # as the child does: whichever runs first, the group exists before anyone is told the pid
    except OSError:  # the child has ended already
        pass
    os.close(conn_fd)
    children[pid] = status_w
    try:
        sock.sendall(struct.pack("q", pid))
    except OSError:  # the parent gave up on the exchange (Ctrl-C) and closed its socket: serve the children out
        return False
    return True


def _become_worker(conn_fd: int, env: dict[str, str]) -> None:
    import tempfile

    from autosearch.measure import worker

    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # read TMPDIR again: a build worker's is its pool's scratch directory
    worker.serve_forked(conn_fd)


def _reap(children: dict[int, int]) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours to wait for after all: its end is reported with no status
            done, status = pid, None
        if done == 0:
            continue
        status_w = children.pop(pid)
        if status is not None:
            try:
                os.write(status_w, _STATUS.pack(os.waitstatus_to_exitcode(status)))  # -N for signal N, as Popen's
            except OSError:  # nobody reads it any more
                pass
        os.close(status_w)


