"""experiments/cost_model_study.py on the committed dataset: both splits, each (split, model) stored when it ends
and read, not refitted, by the next call; the ceiling row and the verdict. Real fits (rf, mlp on torch), small."""

from __future__ import annotations

import json
import os

from autosearch.records import TuningLog, read_log
from experiments import cost_model_study
from tests.conftest import ROOT

DATASET = os.path.join(ROOT, "tests", "data", "small_dataset.jsonl")


def _naming_models(tmp_path) -> str:
    """The committed dataset with its 4 tasks named layers of two networks (as make_dataset.py writes)."""
    contents = read_log(DATASET)
    path = str(tmp_path / "models.jsonl")
    with TuningLog(path) as log:
        for key, net in zip(contents.tasks, ["net-a", "net-a", "net-b", "net-b"]):
            log.write_task({**contents.tasks[key], "models": [net]})
            log.append(contents.trials(key))
    return path


def test_both_splits_are_stored_per_model_and_resumed_without_refitting(tmp_path, monkeypatch) -> None:
    from autosearch.cost_models.feature_store import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "features"))
    log = _naming_models(tmp_path)
    ceiling = tmp_path / "noise.json"
    ceiling.write_text(json.dumps({"mean": {"pairwise": 0.97, "spearman": 0.98, "top1": 0.99}}))
    out = str(tmp_path / "cms")
    args = ["--log", log, "--ceiling", str(ceiling), "--out", out]
    assert cost_model_study.main([*args, "--models", "rf"]) == 0
    rf_task = cost_model_study.result_path(out, "task", "rf")
    rf_model = cost_model_study.result_path(out, "model", "rf")
    stored = json.load(open(rf_task))
    assert stored["family"] == "tree" and len(stored["per_task"]) == 4 and not stored["error"]
    assert sorted(json.load(open(rf_model))["per_task"]) == sorted(
        f"{net}: {name}" for net, name in zip(["net-a", "net-a", "net-b", "net-b"],
                                              [r.task_name for r in read_log(log).records if r.kind == "trial"][::40]))
    before = (os.stat(rf_task).st_mtime_ns, os.stat(rf_model).st_mtime_ns)

    # a second sitting adds a learned model; rf is read back, not fitted again
    assert cost_model_study.main([*args, "--models", "rf,mlp"]) == 0
    assert (os.stat(rf_task).st_mtime_ns, os.stat(rf_model).st_mtime_ns) == before
    assert json.load(open(cost_model_study.result_path(out, "task", "mlp")))["family"] == "learned"
    text = open(out + ".md").read()
    assert "## Leave one task out" in text and "## Leave one network out" in text
    assert text.count("| *re-timing ceiling* | labels | 0.970 | 0.980 | 0.990 |") == 2
    assert text.count("Best learned: mlp") == 2 and "leave-one-model-out over 2 models (net-a, net-b" in text
    mlp_task = json.load(open(cost_model_study.result_path(out, "task", "mlp")))["per_task"]
    rf_per_task = stored["per_task"]
    diff = [mlp_task[k]["pairwise"] - rf_per_task[k]["pairwise"] for k in rf_per_task]
    # the paired difference of the best learned and best tree model, per task
    assert f"pairwise {sum(diff) / 4:+.3f} ± " in text and "(4 held-out tasks)" in text
    summary = json.load(open(out + ".json"))
    assert [r["model"] for r in summary["splits"]["task"]] == ["rf", "mlp"]
    assert 0.0 <= summary["splits"]["model"][1]["mean"]["pairwise"] <= 1.0
    assert os.path.getsize(out + ".png") > 0

    # a run of one model alone (say beside another on the second core) still tabulates every stored pair
    assert cost_model_study.main([*args, "--models", "mlp"]) == 0
    assert [r["model"] for r in json.load(open(out + ".json"))["splits"]["task"]] == ["mlp", "rf"]


def test_a_dataset_naming_no_networks_skips_the_network_split_with_its_reason(tmp_path, monkeypatch) -> None:
    from autosearch.cost_models.feature_store import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "features"))
    out = str(tmp_path / "cms")
    assert cost_model_study.main(["--log", DATASET, "--out", out, "--models", "rf"]) == 0
    text = open(out + ".md").read()
    assert "Not run: leave-one-model-out needs tasks of at least 2 models" in text
    assert "Goals: not judged" in text  # a tree model alone
    assert not os.path.exists(cost_model_study.result_path(out, "model", "rf"))


def test_a_stopped_pair_resumes_at_its_first_unfinished_fold(tmp_path, monkeypatch) -> None:
    """A stop between folds (here: the pair's result gone, 2 of 4 folds and half a line left in its folds
    file) costs only the unfinished folds: the finished ones are read, not refitted, and the result is that of
    an uninterrupted run."""
    from autosearch.cost_models.feature_store import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "features"))
    out = str(tmp_path / "cms")
    args = ["--log", DATASET, "--out", out, "--models", "rf", "--splits", "task"]
    assert cost_model_study.main(args) == 0
    pair, folds = cost_model_study.result_path(out, "task", "rf"), cost_model_study.folds_path(out, "task", "rf")
    whole = json.load(open(pair))
    lines = open(folds).read().splitlines()
    assert len(lines) == 4 and whole["folds"] == 4
    os.remove(pair)
    kept = [json.loads(line) for line in lines[:2]]
    for row in kept:
        row["fit_secs"] = 1000.0  # a marker a refit would overwrite
    with open(folds, "w") as f:
        f.write("".join(json.dumps(row) + "\n" for row in kept) + lines[2][:25])

    # a report between sittings fits nothing and leaves the folds file as the stop left it
    before = open(folds).read()
    assert cost_model_study.main([*args, "--report-only"]) == 0
    assert "Not finished: rf (2 folds stored)." in open(out + ".md").read()
    assert json.load(open(out + ".json"))["pending"]["task"] == ["rf (2 folds stored)"]
    assert open(folds).read() == before and not os.path.exists(pair)

    assert cost_model_study.main(args) == 0
    resumed = json.load(open(pair))
    rows = [json.loads(line) for line in open(folds).read().splitlines()[2:]]
    assert [r["fold"] for r in rows] == [json.loads(line)["fold"] for line in lines[2:]]  # only the other two
    assert resumed["per_task"] == whole["per_task"] and resumed["folds"] == 4
    assert resumed["fit_secs"] > 2 * 1000.0 / 4  # the two kept folds were read, not refitted
