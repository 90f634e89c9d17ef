"""The measuring process of one device: a warm worker that checks and times kernels against task references.

Both runners measure through it (LocalRunner on this machine, each Ray device actor on its own), so the
rule that a replaced process gets its references again lives once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from autosearch.measure.worker import STARTUP_TIMEOUT, Reply, Worker

log = logging.getLogger(__name__)

# A measuring process that has grown past this many bytes is replaced before its next kernel. Each kernel loaded
# and timed leaves some memory behind in the process (TVM's loaded libraries and the allocator's arenas), a few MB
# for a large conv: nothing in a tuning run, but a cost-model dataset times thousands of kernels in one process.
MAX_RSS_BYTES = 4 << 30


class MeasuringProcess:
    """One warm worker process pinned by ``env`` (threads, cores), with each task's reference installed in it.

    A reference is the unscheduled kernel's output (npz bytes) that candidates are checked against. It
    lives in the process; after the process was replaced (a crash, a timeout, its memory limit,
    :meth:`refresh`) it is installed again before the task's next run. Not thread-safe: one caller at a time.
    """

    def __init__(self, *, name: str, env: dict[str, str], max_rss_bytes: int = MAX_RSS_BYTES) -> None:
        self.worker = Worker(name=name, env=env)
        self.max_rss_bytes = max_rss_bytes
        self.recycled = 0  # processes replaced for their memory
        self._installed: set[str] = set()
        self._restarts = 0

    @property
    def ident(self) -> str:
        """``host:name:pid`` of the process that answers the next call (started if it is not running)."""
        self.worker.start()
        return self.worker.ident

    def warm_up(self) -> Reply:
        """Start the process and wait until it has imported TVM."""
        return self.worker.call("ping", timeout=STARTUP_TIMEOUT)

    def _sync(self) -> None:
        if self.worker.restarts != self._restarts:
            self._installed.clear()
            self._restarts = self.worker.restarts

    def reference(self, task_key: str, artifact: bytes, args: Any, seed: int, evaluator: dict[str, Any], *,
                  timeout: float) -> Reply:
        """Run the unscheduled kernel: its output becomes the task's reference (returned, and kept installed
        here), and it is timed (the baseline)."""
        self._sync()
        reply = self.worker.call("reference", task_key, artifact, args, seed, evaluator, timeout=timeout)
        self._sync()
        if reply.kind == "ok":
            self._installed.add(task_key)
        return reply

    def run(self, task_key: str, reference: Callable[[], bytes], artifact: bytes, args: Any, seed: int,
            evaluator: dict[str, Any], *, timeout: float) -> Reply:
        """Check one kernel against the task's reference and time it; ``timeout`` (seconds) starts with the run.

        ``reference()`` gives the reference bytes; it is called only when this process lacks them.
        """
        self._sync()
        if task_key not in self._installed:
            reply = self.worker.call("set_reference", task_key, reference(), timeout=STARTUP_TIMEOUT)
            self._sync()
            if reply.kind != "ok":
                return reply
            self._installed.add(task_key)
        reply = self.worker.call("run", task_key, artifact, args, seed, evaluator, timeout=timeout)
        self._sync()
        rss = self.worker.rss_bytes()
        if rss > self.max_rss_bytes:  # after the reply, between kernels: no timing is cut short
            log.info("measuring process %s holds %.1f GiB: replaced", self.worker.ident, rss / 2**30)
            self.refresh()
            self.recycled += 1
        return reply

    def refresh(self) -> None:
        """Replace the process (to re-time in a fresh one); references are installed again on the next run."""
        self.worker.kill()
        self._sync()

    def close(self) -> None:
        self.worker.close()
