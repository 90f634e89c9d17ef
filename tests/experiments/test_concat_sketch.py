"""experiments/concat_sketch.py on a real short run of a channel concatenation: the run's best, the sketch and the
unscheduled kernel built and timed in turns, one row per concatenation, and a log without one is a usage error."""

from __future__ import annotations

import json

import pytest

from tests.conftest import channel_concat_onnx, run_cli_here


def test_a_runs_concatenation_is_timed_three_ways(tmp_path, capfd, monkeypatch) -> None:
    from experiments import concat_sketch

    model, log = str(tmp_path / "concat.onnx"), str(tmp_path / "run.jsonl")
    channel_concat_onnx(model)
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", model, "--trials", "2", "--batch", "1",
                        "--log", log, "--known-schedules", "none", "--finalist-rounds", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    monkeypatch.setattr("experiments.lib.io.RESULTS", str(tmp_path / "results"))
    assert concat_sketch.main(["--log", log, "--rounds", "2", "--out", "t"]) == 0
    [row] = json.load(open(tmp_path / "results" / "concat-sketch-t.json"))["tasks"]
    assert row["shapes"] == [[1, 12, 12, 8], [1, 12, 12, 16], [1, 12, 12, 8], [1, 12, 12, 32]] and row["trials"] == 2
    assert all(row[k] > 0 for k in ("best", "sketch", "unscheduled"))
    table = [ln for ln in open(tmp_path / "results" / "concat-sketch-t.md") if ln.startswith("| fused_concatenate")]
    assert len(table) == 1 and "1x12x12x8 + 1x12x12x16 + 1x12x12x8 -> 1x12x12x32" in table[0]


def test_a_log_without_a_concatenation_is_a_usage_error(tmp_path) -> None:
    from experiments import concat_sketch

    log = tmp_path / "empty.jsonl"
    log.write_text("")
    with pytest.raises(SystemExit) as exc:
        concat_sketch.main(["--log", str(log)])
    assert exc.value.code == 2
