"""experiments/known_order.py on a small real run's configs as known schedules: every one timed, the orders
compared on the same timings, resumed without measuring again; bad input is exit 2."""

from __future__ import annotations

import json
import math

from tests.conftest import small_conv_run


def test_known_orders_are_compared_on_one_timing_of_each_config_and_a_second_sitting_measures_nothing(
        tmp_path, monkeypatch, capsys):
    from experiments import known_order
    from experiments.lib import io

    monkeypatch.setattr(io, "RESULTS", str(tmp_path / "results"))
    model, log = small_conv_run(tmp_path, trials=6)
    args = ["--model", model, "--layout", "NCHW", "--precision", "fp32", "--known-schedules", log, "--tasks", "conv",
            "--out", "ko"]
    assert known_order.main(args) == 0
    out = json.loads((tmp_path / "results" / "ko.json").read_text())
    [task] = out["tasks"]
    assert len(task["configs"]) == 3  # the log's three fastest, this CPU's known schedules
    assert all(math.isfinite(task["seconds"][k]) and task["seconds"][k] > 0 for k in task["configs"])
    assert len(set(task["scores"])) > 1  # the shipped model guides fp32 tasks: it scored them
    ms = out["summary"]["model_ms"]
    assert set(ms) == set(known_order.ORDERS)
    for order in known_order.ORDERS:
        after = [ms[order][str(k)] for k in known_order.KS]
        assert all(a >= b for a, b in zip(after, after[1:]))  # a task's best after k can only improve with k
        assert all(ms["best"][str(k)] <= ms[order][str(k)] for k in known_order.KS)
        assert math.isclose(ms[order]["3"], ms["best"]["3"])  # all three measured: every order holds the fastest
    assert ms["model, then cpu"]["1"] == ms["model"]["1"]
    assert "| model, then cpu |" in (tmp_path / "results" / "ko.md").read_text()
    assert (tmp_path / "results" / "ko.png").stat().st_size > 0

    capsys.readouterr()
    assert known_order.main(args) == 0
    assert "[1/" not in capsys.readouterr().out  # no progress line: the measured task is not measured again

    assert known_order.main([*args[:-1], "again", "--model", str(tmp_path / "missing.onnx")]) == 2
    assert known_order.main([*args[:-1], "none", "--known-schedules", "none"]) == 2
