"""Interrupted runs lose nothing: SIGINT / SIGTERM / SIGKILL at random points, then --resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from autosearch.records import read_log
from tests.conftest import ROOT, processes_left, run_cli, run_cli_here, small_conv_onnx

# Batches of 2: the signal comes after 1, 2 or 3 batches, with 2 batches and the finalists still to go; kernels are
# timed 3 times for 5 ms (checked and compared, never benchmarked). The resume runs in the test process.
BUDGET, BATCH = 10, 2
FAST_TIMING = ("--repeat", "3", "--min-repeat-ms", "5")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("rel") / "small.onnx")
    small_conv_onnx(path)
    return path


def _trials_in(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as fh:
        return sum(1 for line in fh if b'"kind":"trial"' in line)


def _left_in_session(sid: int) -> list[int]:
    """The live processes of session ``sid``, once they have had a few seconds to end."""
    def in_session(pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return False
        return int(fields[3]) == sid and fields[0] not in ("Z", "X")

    return processes_left(in_session)


@pytest.mark.parametrize("sig, extra_batches", [(signal.SIGINT, 0), (signal.SIGTERM, 1), (signal.SIGKILL, 2)])
def test_interrupt_then_resume_loses_and_repeats_nothing(tmp_path, model_path, sig, extra_batches, capfd):
    log = str(tmp_path / "run.jsonl")
    args = ["run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--layout", "NCHW",
            "--finalist-rounds", "1", *FAST_TIMING,
            "--trials", str(BUDGET), "--batch", str(BATCH), "--log", log, "--seed", "3"]
    scratch = tmp_path / "tmp"  # the run's temporary files: its build workers' directory among them
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "autosearch", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(scratch)},
                            start_new_session=True)  # a session of its own: what is left of the run is in it
    deadline = time.time() + 240
    target = BATCH * (1 + extra_batches)
    while _trials_in(log) < target and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(random.Random(int(sig)).uniform(0.0, 1.5))  # somewhere inside the next batch or two
    assert proc.poll() is None, "the run ended before the signal"
    sent = time.time()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    stopped_in = time.time() - sent
    # however it ended, none of its processes is left behind: its fork server and workers (a SIGKILL too)
    assert not _left_in_session(proc.pid), "the run's processes outlived it"
    if sig is not signal.SIGKILL:
        assert stopped_in < 10, f"took {stopped_in:.1f} s to stop"
        assert proc.returncode in (130, 0), err[-2000:]
        assert "Traceback" not in err
        assert not list(scratch.glob("autosearch-*")), "an interrupted run left its temporary files"
        if "continue with --resume" in err:  # the search itself was stopped (not the run's last seconds)
            assert not os.path.exists(log.replace(".jsonl", ".png"))  # no plot between the signal and the prompt
    contents = read_log(log)
    assert not contents.corrupt
    before = [r.config for r in contents.trials()]
    assert 0 < len(before) <= BUDGET and len(set(before)) == len(before)

    again = run_cli_here(capfd, *args, "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    contents = read_log(log)
    after = [r.config for r in contents.trials()]
    assert len(after) == BUDGET, "resume must finish the budget exactly"
    assert len(set(after)) == BUDGET, "no config measured twice"
    assert after[: len(before)] == before, "nothing measured before the interruption was lost"
    assert not contents.corrupt
    assert os.path.exists(log.replace(".jsonl", ".png"))  # the resumed run draws the whole log


def test_sigint_with_the_ray_runner_then_resume(tmp_path, model_path):
    """The same guarantee with the embedded Ray device pool: stop cleanly, resume, nothing lost or repeated."""
    log = str(tmp_path / "ray.jsonl")
    args = ["run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--layout", "NCHW",
            "--finalist-rounds", "1", *FAST_TIMING,
            "--trials", "8", "--batch", str(BATCH), "--log", log, "--seed", "5", "--runner", "ray"]
    proc = subprocess.Popen([sys.executable, "-m", "autosearch", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while _trials_in(log) < BATCH and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before the signal"
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert time.time() - sent < 30, "the Ray pool must shut down promptly"
    assert proc.returncode in (130, 0), err[-2000:]
    before = [r.config for r in read_log(log).trials()]
    assert before and len(set(before)) == len(before)
    again = run_cli(*args, "--resume", timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    after = [r.config for r in read_log(log).trials()]
    assert len(after) == 8 and len(set(after)) == 8 and after[: len(before)] == before
