"""experiments/sibling_pairs.py on two committed runs of YOLO12n (siblings on and off): the lent trials counted from
the log, the per-task view symmetric in its two runs."""

from __future__ import annotations

import json
import os

import pytest

from experiments.sibling_pairs import compare_logs, table

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "results")
ON = os.path.join(RESULTS, "user-yolo12n.onnx-800trials-seed1-unseen-siblings-zen4", "log.jsonl.gz")
OFF = os.path.join(RESULTS, "user-yolo12n.onnx-800trials-seed1-unseen-nosiblings-zen4", "log.jsonl.gz")


def _strategies(path: str) -> list[str]:
    import gzip

    with gzip.open(path, "rt") as fh:
        return [rec.get("strategy") for rec in map(json.loads, fh) if rec.get("kind") == "trial"]


def test_a_pair_counts_the_lent_trials_and_swapping_the_runs_inverts_the_per_task_ratios() -> None:
    pair = compare_logs(ON, OFF)
    assert pair.lent == _strategies(ON).count("sibling") > 0
    assert 0 < pair.lent_best <= pair.lent
    assert pair.sibling_better + pair.sibling_worse <= 76  # YOLO12n's tasks with a sibling
    swapped = compare_logs(OFF, ON)
    assert swapped.lent == 0 and swapped.lent_best == 0  # the run with siblings off lent nothing
    assert swapped.per_task_sibling == pytest.approx(1 / pair.per_task_sibling)
    assert swapped.per_task_other == pytest.approx(1 / pair.per_task_other)
    assert (swapped.sibling_better, swapped.sibling_worse) == (pair.sibling_worse, pair.sibling_better)
    assert "user-yolo12n.onnx-800trials-seed1-unseen-siblings-zen4" in table([pair])
