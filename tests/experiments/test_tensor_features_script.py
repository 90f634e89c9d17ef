"""``experiments/tensor_features.py``: the bf16 part of a training set cut from run logs, and the search-level
comparison of runs on their tensorised tasks."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from experiments.tensor_features import convergence, write_bf16_records


def _log(path, tasks: dict[str, str]) -> None:
    """A log with a run header, one task header per (key, dtype of its first operand) and two trials each."""
    lines = [{"v": 1, "kind": "run", "run": {"strategy": "optuna"}}]
    for key, dtype in tasks.items():
        args = [[[1, 8], dtype], [[8, 8], dtype], [[1, 8], "float32"]]
        lines.append({"v": 1, "kind": "task", "task": {"workload_key": key, "name": f"conv2d_{dtype}_{key}",
                                                        "args": args}})
        for i in range(2):
            lines.append({"v": 1, "kind": "trial", "task": {"key": key, "name": f"conv2d_{dtype}_{key}"}, "trial": i})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_bf16_records_of_several_logs_become_one_log(tmp_path) -> None:
    _log(tmp_path / "a.jsonl", {"1": "bfloat16", "2": "float32"})
    _log(tmp_path / "b.jsonl", {"3": "float32", "4": "bfloat16"})
    out = tmp_path / "bf16.jsonl.gz"
    assert write_bf16_records([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], str(out)) == (2, 4)
    lines = [json.loads(line) for line in gzip.open(out, "rt")]
    assert [x["kind"] for x in lines] == ["run", "task", "trial", "trial"] * 2  # each log's header kept
    assert {x["task"]["key"] for x in lines if x["kind"] == "trial"} == {"1", "4"}


def test_convergence_compares_runs_on_the_tasks_each_gave_n_trials() -> None:
    runs = {"guided": {"a": [2.0, 1.0, 1.0, 1.0], "b": [4.0, 2.0, 2.0, 2.0], "c": [1.0, 1.0]},
            "unguided": {"a": [3.0, 3.0, 2.0, 1.5], "b": [2.0, 2.0, 2.0, 2.0], "c": [5.0, math.inf]}}
    conv = convergence(runs)
    # 2 trials: tasks a, b, c; best found a 1.0, b 2.0, c 1.0
    assert conv["guided"][2] == (pytest.approx((1.0 * 1.0 * 1.0) ** (1 / 3)), 3)
    assert conv["unguided"][2][0] == pytest.approx((3.0 * 1.0 * 5.0) ** (1 / 3))
    # 4 trials: c has only 2, so a and b alone
    assert conv["guided"][4] == (pytest.approx(1.0), 2) and conv["unguided"][4][0] == pytest.approx(1.5 ** 0.5)
    assert 6 not in conv["guided"]


def _timed_log(path, tasks: dict[str, list[float]]) -> None:
    """A log of tasks (key -> its trials' medians) named as a fused attention on the unit; one fp32 task besides."""
    lines = [{"v": 1, "kind": "run", "run": {"strategy": "optuna"}}]
    for key, medians in {**tasks, "fp32": [1.0]}.items():
        name = "matmul1" if key == "fp32" else f"attention_bf16{key}"
        lines.append({"v": 1, "kind": "task", "task": {"workload_key": key, "name": name,
                                                        "args": [[[1, 8], "float32"]]}})
        for i, median in enumerate(medians):
            lines.append({"v": 1, "kind": "trial", "task": {"key": key, "name": name}, "trial": i,
                          "result": {"status": "ok", "latencies": [median], "median": median}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_runs_of_several_seeds_compare_seed_by_seed_on_the_tensorised_tasks(tmp_path) -> None:
    from experiments.tensor_features import seeded_runs

    for name, seed, medians in (("new", 0, [2.0, 1.0]), ("new", 1, [3.0, 3.0]), ("old", 0, [4.0, 2.0]),
                                ("old", 1, [1.5, 1.5])):
        _timed_log(tmp_path / f"{name}{seed}.jsonl", {"7": medians})
    runs = seeded_runs([f"{n}={tmp_path / f'{n}{s}.jsonl'}" for n, s in (("new", 0), ("old", 0), ("new", 1),
                                                                        ("old", 1))])
    assert runs == {"new": {"7#0": [2.0, 1.0], "7#1": [3.0, 3.0]}, "old": {"7#0": [4.0, 2.0], "7#1": [1.5, 1.5]}}
    conv = convergence(runs)  # seed 0: best 1.0 (new); seed 1: best 1.5 (old)
    assert conv["new"][2] == (pytest.approx((1.0 * 2.0) ** 0.5), 2)
    assert conv["old"][2] == (pytest.approx((2.0 * 1.0) ** 0.5), 2)
