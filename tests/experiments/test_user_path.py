"""experiments/user_path.py: each runtime's median read from ``report``'s Markdown (its first table only), and a step
through the Python API (``--api``)."""

from __future__ import annotations

from experiments.user_path import report_medians

REPORT = """| runtime | mean | median | max | min | std | speedup vs untuned | runs | peak MiB |
|---|---|---|---|---|---|---|---|---|
| TVM untuned | 3567.68 | 3570.01 | 3581.28 | 3551.74 | 12.17 | 1.0x | 3 | 92.3 |
| TVM tuned | 27.03 | 26.73 | 31.27 | 26.01 | 1.16 | 133.6x | 20 | 265.9 |
| ONNX Runtime | 33.10 | 32.51 | 37.76 | 31.93 | 1.37 | 109.8x | 20 | 281.7 |

| # | task | w | untuned ms | tuned ms | speedup |
|---|---|---|---|---|---|
| 2 | fused_conv2d_winograd5 | 1 | 2146.635 | 8.092 | 265.3x |
"""


def test_medians_come_from_the_runtime_table_alone():
    assert report_medians(REPORT) == {"TVM untuned": 3570.01, "TVM tuned": 26.73, "ONNX Runtime": 32.51}


def test_an_api_step_runs_the_function_in_a_fresh_process_and_its_failure_is_the_steps(tmp_path):
    """``--api`` calls ``autosearch.NAME`` with the CLI's arguments in a fresh process: a bad one fails the step
    with the API's one-line error in the step's output, as the CLI's exit code would."""
    import os

    from experiments.user_path import _api

    out = tmp_path / "export.txt"
    code, secs = _api("export", [str(tmp_path / "missing.jsonl"), str(tmp_path / "db")], {"force": True}, str(out),
                      dict(os.environ))
    text = out.read_text()
    assert code != 0 and secs > 0
    assert text.startswith("$ autosearch.export(") and "UserError" in text and "missing.jsonl" in text
    assert not (tmp_path / "db").exists()
