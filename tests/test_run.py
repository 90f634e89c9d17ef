"""`python -m autosearch run` end to end on real kernels: every strategy, resume, bad inputs."""

from __future__ import annotations

import os

import pytest

from autosearch.records import read_log
from tests.conftest import run_cli, small_conv_onnx


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("run") / "small.onnx")
    small_conv_onnx(path)
    return path


def _trial_configs(contents, key=None):
    return [r.config for r in contents.trials(key)]


@pytest.mark.parametrize("strategy", ["random", "annealing", "optuna"])
def test_each_strategy_tunes_real_kernels(tmp_path, model_path, strategy):
    log = str(tmp_path / "run.jsonl")
    proc = run_cli("run", "--strategy", strategy, "--model", model_path, "--tasks", "conv", "--trials", "16",
                   "--batch", "8", "--log", log, "--seed", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    contents = read_log(log)
    trials = contents.trials()
    assert len(trials) == 16
    assert len(set(_trial_configs(contents))) == 16  # never the same config twice
    [key] = contents.tasks
    baseline = contents.baseline(key)
    best = contents.best(key)
    assert baseline.ok and best is not None and best.ok
    assert best.latency < baseline.latency  # a schedule beats the naive loop nest
    assert all(r.trace for r in trials if r.ok)
    assert os.path.exists(log.replace(".jsonl", ".png"))
    assert "speedup" in proc.stdout and "GFLOPS" in proc.stdout


def test_resume_finishes_the_budget_without_repeating_a_measurement(tmp_path, model_path):
    log = str(tmp_path / "run.jsonl")
    first = run_cli("run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--trials", "8",
                    "--batch", "4", "--log", log)
    assert first.returncode == 0, first.stderr[-2000:]
    before = _trial_configs(read_log(log))
    refused = run_cli("run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--trials", "16",
                      "--log", log)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    again = run_cli("run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--trials", "16",
                    "--batch", "4", "--log", log, "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    contents = read_log(log)
    after = _trial_configs(contents)
    assert len(after) == 16 and len(set(after)) == 16
    assert after[:8] == before
    assert len([r for r in contents.records if r.kind == "baseline"]) == 1


@pytest.mark.parametrize("args, needle", [
    (["--strategy", "hillclimb"], "annealing, optuna, random"),
    (["--strategy", "random", "--trials", "0"], "positive"),
    (["--strategy", "random", "--trials", "-3"], "positive"),
    (["--strategy", "optuna", "--sampler", "bogus"], "sampler"),
    (["--strategy", "random", "--cost-model", "magic"], "valid cost models"),
    (["--strategy", "random", "--model", "yolov99"], "built-in models"),
    (["--strategy", "random", "--option", "nosuch=1"], "no option"),
    (["--strategy", "random", "--tasks", "99"], "no task 99"),
    (["--strategy", "random", "--resume"], "log not found"),
    (["--strategy", "random", "--target", "{oops"], "malformed --target"),
])
def test_run_bad_inputs(tmp_path, model_path, args, needle):
    if "--model" not in args:
        args = [*args, "--model", model_path]
    proc = run_cli("run", *args, "--log", str(tmp_path / "x.jsonl"), timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not os.path.exists(tmp_path / "x.jsonl")  # nothing written on bad input
