"""experiments/amx_tile_rows.py: every row count timed on the AMX tiles and written as a table."""

from __future__ import annotations

import pytest


def test_every_tile_row_count_is_timed_and_written(tmp_path, monkeypatch, target):
    from autosearch.tensor_units.cpu import has_amx_bf16
    from experiments import amx_tile_rows
    from experiments.lib import io

    if not has_amx_bf16(target):
        pytest.skip("this CPU has no AMX")
    monkeypatch.setattr(io, "RESULTS", str(tmp_path))
    assert amx_tile_rows.main(["--iterations", "20000", "--rounds", "1"]) == 0
    text = (tmp_path / "amx-tile-rows.md").read_text()
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and "tile rows" not in line]
    assert [int(r[0]) for r in rows] == list(amx_tile_rows.ROWS)
    per_multiply = [float(r[1]) for r in rows]
    per_row = [float(r[2]) for r in rows]
    assert all(t > 0 for t in per_multiply)
    # a multiply of 8 rows does not take half the time of one of 16: per row it costs more (measured: 2x)
    assert per_row[-1] > per_row[0]
