"""experiments/setup_time.py on a small real model: every pass sets up every task, the outputs are written."""

from __future__ import annotations

import json

from tests.conftest import small_conv_onnx


def test_setup_time_sets_up_every_task_each_way_and_writes_its_table(tmp_path, monkeypatch):
    from experiments import setup_time
    from experiments.lib import io

    monkeypatch.setattr(io, "RESULTS", str(tmp_path / "results"))
    model = str(tmp_path / "small.onnx")
    small_conv_onnx(model)
    assert setup_time.main(["--model", model, "--layout", "NCHW"]) == 0
    out = json.loads((tmp_path / "results" / "setup-small.json").read_text())
    assert out["tasks"] == 2 and len(out["set_up"]) == 2
    for parts in out["set_up"].values():
        assert parts["design spaces"] > 0 and parts["untuned kernels"] > 0
    assert "chunked" in (tmp_path / "results" / "setup-small.md").read_text()
    assert (tmp_path / "results" / "setup-small.png").stat().st_size > 0
