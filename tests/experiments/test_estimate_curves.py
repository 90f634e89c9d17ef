"""experiments/estimate_curves.py on committed logs of real runs: the estimate at a checkpoint is the curve's last
point up to it, the table and PNG are written, and a bad --run is one line."""

from __future__ import annotations

import os

import pytest

from autosearch.records import read_log
from autosearch.search.estimates import estimate_curve
from experiments import estimate_curves

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "results")
LOG = os.path.join(RESULTS, "user-tiny-yolov2-quickstart-xeon-emr-fp32-nhwc", "log.jsonl.gz")


def test_checkpoints_table_and_plot(tmp_path, monkeypatch, capsys):
    curve = estimate_curve(read_log(LOG))
    point = estimate_curves.at(curve, 100)
    assert point is not None and point.trials <= 100
    assert all(p.latency >= point.latency for p in curve if p.trials <= point.trials)  # the best so far
    assert estimate_curves.at(curve, curve[-1].trials + 1) is None
    monkeypatch.setattr(estimate_curves, "results_path", lambda name: str(tmp_path / name))
    assert estimate_curves.main(["--run", f"nhwc={LOG}", "--checkpoints", "100,10000", "--out", "curves"]) == 0
    table = (tmp_path / "curves.md").read_text()
    assert f"{point.latency * 1e3:.1f} (" in table and "| - |" in table
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    with pytest.raises(SystemExit, match="LABEL=LOG"):
        estimate_curves.main(["--run", str(tmp_path / "missing.jsonl"), "--out", "x"])
