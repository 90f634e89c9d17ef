"""compare_models on the committed dataset: the table, the markdown, the PNG, failures as rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autosearch.errors import UserError
from autosearch.records import LogContents, TuningLog
from cost_models.evaluate import EvaluationReport, compare_models, leave_one_task_out


def test_compare_models_table_and_png(tmp_path, dataset_path):
    png = str(tmp_path / "models.png")
    models = ["rf", "xgb-rank", "sklearn:IsotonicRegression"]
    report = compare_models([dataset_path], models, seed=0, out_png=png)
    assert isinstance(report, EvaluationReport)
    assert report.n_records == 160 and len(report.task_names) == 4
    rf = report.result("rf")
    assert len(rf.per_task) == 4 and not rf.error
    assert rf.mean("pairwise") > 0.6 and rf.mean("spearman") > 0.2
    assert 0 < rf.mean("top1") <= rf.mean("top5") <= 1.0
    assert rf.fit_secs > 0 and rf.predict_secs > 0
    assert not np.isnan(rf.y_pred).any()
    assert math.isnan(report.result("xgb-rank").mean("rmse"))  # a ranker's scores have no scale
    assert report.result("sklearn:IsotonicRegression").error.startswith("ValueError")  # a row, not a crash

    table = report.table
    assert table.row_count == 3
    assert [c.header for c in table.columns][:3] == ["model", "pairwise acc.", "Spearman"]
    md = report.markdown
    assert md.splitlines()[0].startswith("| model | pairwise acc. |")
    assert any(line.startswith("| rf | 0.") for line in md.splitlines())
    assert "ms per record" in md
    json.dumps(report.to_json())

    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert report.png == png
    assert report.cached_records == 0

    # comparing again on the same logs reads every record's features from the cache (AUTOSEARCH_CACHE)
    again = compare_models([dataset_path], ["rf"], seed=0)
    assert again.cached_records == 160 and "from the feature cache" in again.caption()
    assert "ms per record" not in again.caption()  # nothing was replayed: no per-record cost to report
    np.testing.assert_array_equal(again.result("rf").y_pred, rf.y_pred)


@pytest.mark.parametrize("spec", ["xgb@encoding", "rf@pooled", "xgb-rank@pooled+loop", "gbr@loop"])
def test_feature_sets_run_leave_one_task_out(dataset, spec):
    result = leave_one_task_out(dataset, spec, seed=0)
    assert result.name == spec
    assert len(result.per_task) == 4 and not np.isnan(result.y_pred).any()
    assert result.mean("pairwise") > 0.55


def test_needs_two_tasks(tmp_path, contents, dataset_path):
    key = next(iter(contents.tasks))
    path = str(tmp_path / "one_task.jsonl")
    with TuningLog(path) as log:
        log.write_task(contents.tasks[key])
        log.append(contents.trials(key))
    with pytest.raises(UserError, match="at least 2 tasks"):
        compare_models([path], ["rf"])
    with pytest.raises(UserError, match="unknown"):
        compare_models([dataset_path], ["no-such-model"])
    assert isinstance(contents, LogContents)


def test_min_records_holds_out_only_tasks_with_enough_records(tmp_path, contents):
    keys = list(contents.tasks)
    path = str(tmp_path / "uneven.jsonl")
    with TuningLog(path) as log:
        for n, key in enumerate(keys):
            log.write_task(contents.tasks[key])
            log.append(contents.trials(key)[: 5 if n == 0 else None])  # the first task keeps 5 records
    folds = []
    report = compare_models([path], ["rf"], min_records=10, on_fold=lambda m, d, t: folds.append((m, d, t)))
    rf = report.result("rf")
    assert len(report.task_names) == 4 and report.held_out == 3
    assert len(rf.per_task) == 3 and report.task_names[0] not in rf.per_task
    assert np.isnan(rf.y_pred[report.groups == 0]).all() and np.isfinite(rf.y_pred[report.groups != 0]).all()
    assert folds == [("rf", 1, 3), ("rf", 2, 3), ("rf", 3, 3)]
    assert "3 of 4 tasks" in report.caption()
    with pytest.raises(UserError, match="min-records"):
        compare_models([path], ["rf"], min_records=1000)
