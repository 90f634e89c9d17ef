"""experiments/in_flow.py on a small tuned model: the pass's kernel calls captured and timed five ways, in turns."""

from __future__ import annotations

import json

import pytest

from tests.conftest import small_conv_run


def test_in_flow_captures_the_passs_kernels_and_times_them_every_way_in_each_round(tmp_path, monkeypatch):
    import autosearch
    from experiments import in_flow
    from experiments.lib import io

    monkeypatch.setattr(io, "RESULTS", str(tmp_path / "results"))
    model, log = small_conv_run(tmp_path, trials=2)
    autosearch.export(log, str(tmp_path / "db"))
    assert in_flow.main(["--model", model, "--db", str(tmp_path / "db"), "--out", "flow", "--rounds", "2",
                         "--passes", "2", "--repeats", "2"]) == 0
    out = json.loads((tmp_path / "results" / "flow.json").read_text())
    assert set(out["totals"]) == set(in_flow.WAYS) and all(len(t) == 2 and min(t) > 0 for t in out["totals"].values())
    symbols = out["symbols"]
    assert any("conv2d" in s for s in symbols) and not any(s.startswith("vm.") for s in symbols)  # kernels only
    # each way that times calls one by one has a figure per call of the pass; the pass itself has none
    assert set(out["each"]) == set(in_flow.WAYS) - {"the pass"}
    assert all(len(v) == len(symbols) and min(v) > 0 for v in out["each"].values())
    text = (tmp_path / "results" / "flow.md").read_text()
    assert "alone, flushed" in text and "lose most in the flow" in text
    assert (tmp_path / "results" / "flow.png").stat().st_size > 0


def test_in_flow_refuses_a_count_below_one(tmp_path):
    from experiments import in_flow

    with pytest.raises(SystemExit) as exc:
        in_flow.main(["--model", "m.onnx", "--db", str(tmp_path), "--out", "x", "--rounds", "0"])
    assert exc.value.code == 2
