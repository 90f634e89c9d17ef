"""A timing's threads' waiting for a core, counted: a kernel timed while another process holds its core says so."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from autosearch.measure.queueing import run_delay_seconds, waited_share
from autosearch.measure.worker import STARTUP_TIMEOUT, Worker
from autosearch.types import WAITED_LIMIT
from tests.conftest import run_conv_in

pytestmark = pytest.mark.skipif(run_delay_seconds() is None, reason="this kernel does not count threads' run delay "
                                "(Linux's /proc/<pid>/task/<tid>/schedstat)")


def _hog(core: int) -> subprocess.Popen:
    """A process that keeps ``core`` busy until killed."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(proc.pid, {core})
    time.sleep(0.2)  # running before what it is to disturb
    return proc


def test_the_share_is_the_waiting_over_the_threads_window_and_none_where_it_was_not_counted():
    assert waited_share(1.0, 1.3, 0.5, 2) == pytest.approx(0.3)
    assert waited_share(1.0, 1.0, 0.5, 1) == 0.0
    assert waited_share(None, 1.0, 0.5, 1) is None and waited_share(1.0, None, 0.5, 1) is None


def test_a_kernel_timed_while_another_process_holds_its_core_has_its_waiting_counted(conv_task, conv_space):
    """The worker and the busy process on this test's core (a pinned test worker's: the other core is another
    worker's), the kernel timed for ~0.2 s, several of the scheduler's timeslices: the two share the core."""
    core = min(os.sched_getaffinity(0))
    worker = Worker(name="queued", env={"TVM_NUM_THREADS": "1", "AUTOSEARCH_AFFINITY": str(core)})
    evaluator = {"repeat": 10, "min_repeat_ms": 20}
    try:
        assert worker.call("ping", timeout=STARTUP_TIMEOUT).kind == "ok"
        quiet = run_conv_in(worker, conv_task, conv_space, evaluator)
        hog = _hog(core)
        try:
            busy = run_conv_in(worker, conv_task, conv_space, evaluator)
        finally:
            hog.kill()
            hog.wait()
    finally:
        worker.close()
    assert quiet["waited"] < WAITED_LIMIT < busy["waited"], (quiet["waited"], busy["waited"])


def test_one_call_timed_alone_counts_what_it_waited():
    """A kernel far slower than its task's best is timed by one call: that call's wait goes with it. Here the call
    keeps this test's core busy for 0.2 s, first alone, then beside another process held to the same core."""
    from autosearch.measure.kernels import KernelRunner

    cores = os.sched_getaffinity(0)
    core = min(cores)

    def spin() -> None:
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            pass

    runner = KernelRunner()
    os.sched_setaffinity(0, {core})  # this process's one thread, counted, on the core the other process takes
    try:
        secs, alone = runner._call_counted(spin, [])
        hog = _hog(core)
        try:
            secs_busy, beside = runner._call_counted(spin, [])
        finally:
            hog.kill()
            hog.wait()
    finally:
        os.sched_setaffinity(0, cores)
    assert alone / secs < WAITED_LIMIT < beside / secs_busy, (alone, secs, beside, secs_busy)
