"""compare_models on the committed dataset: the table, the markdown, the PNG, failures as rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autosearch.cost_models.evaluate import (
    EvaluationReport,
    ModelResult,
    compare_models,
    cross_validate,
    leave_one_task_out,
    model_folds,
    task_folds,
)
from autosearch.errors import UserError
from autosearch.records import LogContents, TuningLog


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
    # per record: each fold trains on 3 tasks (120 records) and scores one (40)
    assert rf.fit_secs_per_record * 120 == pytest.approx(rf.fit_secs)
    assert rf.predict_secs_per_record * 40 == pytest.approx(rf.predict_secs)
    assert not np.isnan(rf.y_pred).any()
    assert math.isnan(report.result("xgb-rank").mean("rmse"))  # a ranker's scores have no scale
    assert report.result("sklearn:IsotonicRegression").error.startswith("ValueError")  # a row, not a crash

    table = report.table
    assert table.row_count == 3
    assert [c.header for c in table.columns][:3] == ["model", "pairwise acc.", "Spearman"]
    assert [c.header for c in table.columns][-3:] == ["fit s", "fit ms/record", "predict µs/record"]
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


def test_folds_scored_one_at_a_time_merge_into_the_result_of_one_run(dataset):
    """What a resumable comparison relies on: each fold fitted on its own (as after a stop) and the parts
    merged give the metrics, record counts and per-record times of all folds fitted in one call."""
    folds = task_folds(dataset)
    whole = cross_validate(dataset, "rf", folds, seed=0)
    parts = [cross_validate(dataset, "rf", [fold], seed=0) for fold in folds]
    merged = ModelResult.merged("rf", parts[2:] + parts[:2])  # order of the parts does not matter
    assert merged.per_task == whole.per_task and len(merged.per_task) == 4
    assert (merged.folds, merged.fit_records, merged.predict_records) == (4, 480, 160)
    assert (whole.folds, whole.fit_records, whole.predict_records) == (4, 480, 160)
    fit = sum(p.fit_secs for p in parts)
    assert merged.fit_secs == pytest.approx(fit / 4) and merged.fit_secs_per_record == pytest.approx(fit / 480)
    broken = ModelResult.merged("rf", [parts[0], ModelResult(name="rf", error="ValueError: x", folds=1)])
    assert broken.error == "ValueError: x"


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


def test_tasks_of_one_name_keep_their_own_results(tmp_path, contents):
    """Two networks can name different convolutions alike: each task is held out and reported on its own."""
    import dataclasses

    keys = list(contents.tasks)
    shared = contents.tasks[keys[0]]["name"]
    path = str(tmp_path / "same-names.jsonl")
    with TuningLog(path) as log:
        for n, key in enumerate(keys):
            rename = n < 2
            log.write_task({**contents.tasks[key], "name": shared} if rename else contents.tasks[key])
            log.append([dataclasses.replace(r, task_name=shared) if rename else r for r in contents.trials(key)])
    rf = compare_models([path], ["rf"]).result("rf")
    assert len(rf.per_task) == 4
    assert sorted(k for k in rf.per_task if k.startswith(shared)) == sorted(f"{shared} ({k})" for k in keys[:2])


def _log_naming_models(tmp_path, contents, models_of_task):
    """The committed dataset with each task header naming the models it is a layer of (as make_dataset writes)."""
    keys = list(dict.fromkeys(r.task_key for r in contents.trials() if r.ok))
    path = str(tmp_path / "models.jsonl")
    with TuningLog(path) as log:
        for key, models in zip(keys, models_of_task):
            log.write_task({**contents.tasks[key], "models": models})
            log.append(contents.trials(key))
    return path, keys


def test_leave_one_model_out(tmp_path, contents, monkeypatch):
    """Each model's tasks are scored by a cost model trained only on tasks that are no layer of it."""
    import autosearch.search.cost_model as registry

    # tasks 0, 1: net-a; task 2: net-b; task 3: a layer of both
    path, keys = _log_naming_models(tmp_path, contents, [["net-a"], ["net-a"], ["net-b"], ["net-a", "net-b"]])
    fitted_on = []
    make = registry.make_cost_model

    def spy(spec, *, seed=0):
        model = make(spec, seed=seed)
        fit = model.fit
        model.fit = lambda X, y, groups=None: (fitted_on.append(sorted(set(groups.tolist()))), fit(X, y, groups))[1]
        return model

    monkeypatch.setattr(registry, "make_cost_model", spy)
    report = compare_models([path], ["rf"], split="model", min_records=1)
    rf = report.result("rf")
    assert report.split == "model" and report.held_out_models == ["net-a", "net-b"]
    assert fitted_on == [[2], [0, 1]]  # net-a out: only task 2 trains; net-b out: tasks 0 and 1 (3 is net-b's too)
    names = report.task_names
    assert sorted(rf.per_task) == sorted([f"net-a: {names[0]}", f"net-a: {names[1]}", f"net-a: {names[3]}",
                                          f"net-b: {names[2]}", f"net-b: {names[3]}"])
    assert np.isfinite(rf.y_pred).all()  # every task held out by some model
    assert all(0.0 <= m["pairwise"] <= 1.0 for m in rf.per_task.values())
    # timing: per record over all folds (net-a: trains on 40 records, scores 120; net-b: 80 and 80)
    assert rf.fit_secs_per_record * (40 + 80) == pytest.approx(2 * rf.fit_secs)
    assert rf.predict_secs_per_record * (120 + 80) == pytest.approx(2 * rf.predict_secs)
    assert report.caption().startswith("leave-one-model-out over 2 models (net-a, net-b")
    assert report.to_json()["held_out_models"] == ["net-a", "net-b"]
    assert report.markdown.splitlines()[0].endswith("| fit s | fit ms/record | predict µs/record |")

    # the same dataset left one task out: as many folds as tasks, keyed by task name alone
    by_task = compare_models([path], ["rf"], min_records=1)
    assert by_task.split == "task" and sorted(by_task.result("rf").per_task) == sorted(names)


def test_model_folds_skip_tasks_of_no_model_and_small_tasks(tmp_path, contents):
    from autosearch.cost_models.features import build_dataset
    from autosearch.records import read_log

    path, _ = _log_naming_models(tmp_path, contents, [["net-a"], [], ["net-b"], ["net-c"]])
    dataset = build_dataset([read_log(path)], kinds=("sequence",))  # no replay: the folds need only the headers
    folds = model_folds(dataset)
    assert [(f.name, f.test, f.train) for f in folds] == [
        ("net-a", (0,), (1, 2, 3)), ("net-b", (2,), (0, 1, 3)), ("net-c", (3,), (0, 1, 2))]
    # only tasks that may be held out are (min_records): net-b's task is not, so no fold holds out net-b
    assert [f.name for f in model_folds(dataset, held_out=[0, 3])] == ["net-a", "net-c"]


def test_leave_one_model_out_needs_two_named_models(tmp_path, contents, dataset_path):
    with pytest.raises(UserError, match="at least 2 models"):
        compare_models([dataset_path], ["rf"], split="model")
    path, _ = _log_naming_models(tmp_path, contents, [["net-a"]] * 4)
    with pytest.raises(UserError, match="at least 2 models"):
        compare_models([path], ["rf"], split="model")
    with pytest.raises(UserError, match="split"):
        compare_models([path], ["rf"], split="network")


def test_cli_compares_every_evaluation_default_without_models(monkeypatch, tmp_path):
    import autosearch.cost_models.evaluate as evaluate
    from autosearch.cli import build_parser
    from tests.cost_models.conftest import DATASET

    compared = []

    class Stop(Exception):
        pass

    def record(logs, models, **kwargs):  # the comparison itself is tested above; here only what it is given
        compared.append((list(logs), list(models), kwargs["split"]))
        raise Stop

    monkeypatch.setattr(evaluate, "compare_models", record)
    args = build_parser().parse_args(["compare-models", "--log", DATASET, "--plot", str(tmp_path / "p.png")])
    with pytest.raises(Stop):
        args.func(args)
    assert compared == [([DATASET], list(evaluate.DEFAULT_MODELS), "task")]
