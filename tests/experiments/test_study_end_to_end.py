"""The study end to end on a small real conv task: killed during a sitting, continued without repeating a finished
run, re-timed in fresh processes, aggregated. Real TVM builds and measurements; the numbers are not the point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from experiments.lib.io import ROOT
from experiments.lib.study.config import load_config
from experiments.lib.study.store import Store, all_runs
from tests.conftest import small_conv_onnx


def _study(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen([sys.executable, "-m", "experiments.study", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


def test_a_killed_study_resumes_without_repeating_a_finished_run(tmp_path, capsys) -> None:
    model = str(tmp_path / "small_conv.onnx")
    small_conv_onnx(model)
    config_path = tmp_path / "tiny.toml"
    config_path.write_text(f"""
[study]
name = "tiny"
seeds = [0]
budgets = [2, 4]
batch = 2
retime_rounds = 1
reference = "random"
tasks = ["{model}:1x16x28x28->1x32x28x28@3x3/direct"]

[[method]]
name = "random"
strategy = "random"

[[method]]
name = "coordinate-descent"
strategy = "coordinate_descent"
options = {{ init_random = 2 }}
""")
    results = str(tmp_path / "results")
    config, store = load_config(str(config_path)), Store(results)
    first, second = all_runs(config.tasks, config.methods, config.seeds)

    proc = _study(str(config_path), "--results", results)
    deadline = time.time() + 300
    while not os.path.exists(store.run_file(first)) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole sitting: the study and the run it has in flight
    proc.wait()
    assert os.path.exists(store.run_file(first)), proc.stdout.read()
    assert not os.path.exists(store.run_file(second))
    kept = open(store.run_file(first)).read()

    from experiments.study import main

    # the next sitting in this process (the kill above is the subprocess part); its run still has a process of its own
    capsys.readouterr()
    code = main([str(config_path), "--results", results])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 runs done now, 1 skipped" in out
    assert open(store.run_file(first)).read() == kept  # the finished run was not repeated
    result = store.result(second)
    assert len(result.latencies) == 4 and set(result.best) == {2, 4}
    assert result.fingerprint["cores"] == os.cpu_count()
    [round1] = store.rounds(config.tasks[0])
    methods = [r["method"] for r in round1["results"]]
    assert set(methods) == {"random", "coordinate-descent"} and methods[0] != methods[1]  # interleaved
    assert all(r["status"] == "ok" for r in round1["results"])

    stem = str(tmp_path / "tiny")
    assert main([str(config_path), "--results", results, "--aggregate", "--out", stem]) == 0
    summary = json.load(open(stem + ".json"))
    assert summary["progress"]["runs_done"] == 2 and summary["progress"]["tasks_retimed"] == 1
    gflops = summary["tasks"][0]["methods"]["coordinate-descent"]["gflops"]["4"]
    assert len(gflops) == 1 and gflops[0] > 0
    # a configuration without readme = true never writes README's block
    assert main([str(config_path), "--results", results, "--aggregate", "--out", stem, "--readme"]) == 2
