"""experiments/precision.py: per layer, fp32 against each bf16 alternative, the faster kept as export keeps it."""

from __future__ import annotations

import math

from experiments.precision import layer_table


def test_the_table_names_what_export_keeps_and_a_winograd_column_only_where_one_was_tuned() -> None:
    rows = [{"layer": "1x13x13x1024->1x13x13x1024@3x3", "fp32_ms": 17.9, "bf16_ms": 7.2, "winograd_ms": 4.4},
            {"layer": "1x416x416x3->1x416x416x16@3x3", "fp32_ms": 1.0, "bf16_ms": 1.1, "winograd_ms": math.inf},
            {"layer": "1x52x52x64->1x52x52x128@3x3", "fp32_ms": 1.8, "bf16_ms": 0.9, "winograd_ms": 1.1}]
    table = layer_table(rows)
    lines = table.splitlines()
    assert "bf16 Winograd ms" in lines[0]
    assert lines[2].endswith("| 4.07x | bf16 Winograd |")  # fp32 against the faster bf16
    assert lines[3].endswith("| - | 0.91x | fp32 |")  # no Winograd alternative; fp32 faster
    assert lines[4].endswith("| 2.00x | bf16 |")
    assert "| 20.700 |  | 6.300 (the faster of each) | 3.29x |" in lines[5]
    plain = layer_table([{**r, "winograd_ms": math.inf} for r in rows[1:]])
    assert "Winograd" not in plain.splitlines()[0] and plain.splitlines()[3].endswith("| 2.00x | bf16 |")
