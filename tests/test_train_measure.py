"""``train-model --measure``: a dataset measured on this machine, trained on, used by ``run``; continued, never
measuring a config twice; bad input in one line."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from tests.conftest import run_cli, small_conv_onnx


def _trials(path: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for line in open(path):
        obj = json.loads(line)
        if obj["kind"] == "trial":
            out[obj["task"]["key"]].append(obj)
    return out


def test_measure_train_continue_and_guide_a_run(tmp_path) -> None:
    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    out = str(tmp_path / "mine")
    args = ("train-model", "--measure", "--model", model, "--tasks-per-layout", "1", "--out", out, "--folds", "2")
    proc = run_cli(*args, "--per-task", "3", "--minutes", "5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dataset = os.path.join(out, "dataset.jsonl")
    first = _trials(dataset)
    assert len(first) == 2 and all(len(t) == 3 for t in first.values())  # one conv task per layout, 3 configs each
    assert os.path.exists(os.path.join(out, "manifest.json")) and "use it: python -m autosearch run" in proc.stdout

    proc = run_cli(*args, "--per-task", "6", "--minutes", "5", "--force")  # the same command, more configs: goes on
    assert proc.returncode == 0, proc.stderr[-2000:]
    second = _trials(dataset)
    assert set(second) == set(first) and all(len(t) == 6 for t in second.values())
    for key, trials in second.items():  # the first call's trials kept, none measured again
        assert trials[:3] == first[key]
        configs = [json.dumps(t["config"], sort_keys=True) for t in trials]
        assert len(set(configs)) == len(configs)
    runs = [json.loads(line)["run"] for line in open(dataset) if '"kind":"run"' in line]
    assert [r["resumed"] for r in runs] == [False, True]
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["records"] == sum(1 for t in second.values() for r in t if r["result"]["status"] == "ok")

    log = str(tmp_path / "run.jsonl")
    proc = run_cli("run", "--strategy", "optuna", "--model", model, "--layout", "NCHW", "--precision", "fp32",
                   "--trials", "4", "--batch", "2", "--cost-model", out, "--log", log, "--finalist-rounds", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    header = json.loads(open(log).readline())["run"]
    assert header["cost_model"] == out and out in header["guided_by"]


@pytest.mark.parametrize("extra, message", [
    (("--minutes", "0"), "needs --minutes, a positive number"),
    ((), "needs --minutes, a positive number"),
    (("--minutes", "1", "--per-task", "0"), "--per-task must be positive"),
])
def test_bad_measure_options_are_one_line_errors(tmp_path, extra, message) -> None:
    proc = run_cli("train-model", "--measure", "--out", str(tmp_path / "m"), *extra)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_unwritable_out_and_no_records_at_all_are_one_line_errors(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_cli("train-model", "--measure", "--minutes", "1", "--out", str(blocker / "sub"))
    assert proc.returncode == 2 and "cannot write to" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("train-model", "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and "needs --log (measured records) or --measure" in proc.stderr
