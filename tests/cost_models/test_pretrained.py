"""The pre-trained cost model: the shipped one, train-model, and ``run --cost-model auto|none|DIR``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest

from autosearch.errors import UserError
from tests.conftest import run_cli, run_cli_here, small_conv_onnx
from tests.cost_models.conftest import DATASET, HELD_OUT


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> str:
    """A model trained by ``train-model`` on the committed dataset, its held-out task left out."""
    from autosearch.cli import main
    from autosearch.records import read_log

    held_out = list(read_log(DATASET).tasks)[HELD_OUT]
    out = str(tmp_path_factory.mktemp("model") / "m")
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout):
        mp.setenv("AUTOSEARCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        code = main(["train-model", "--log", DATASET, "--out", out, "--folds", "3", "--exclude-task", held_out])
    assert code == 0, stdout.getvalue()[-2000:]
    assert "held-out accuracy" in stdout.getvalue() and "run --cost-model" in stdout.getvalue()
    return out


@pytest.fixture(scope="module")
def blend_dir(tmp_path_factory) -> str:
    """A blend (booster + mlp-rank network) trained by ``train-model --family blend``, its held-out task left out."""
    from autosearch.cost_models.pretrained import train_model
    from autosearch.records import read_log

    held_out = list(read_log(DATASET).tasks)[HELD_OUT]
    out = str(tmp_path_factory.mktemp("blend") / "m")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AUTOSEARCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        train_model([DATASET], out, family="blend", folds=3, exclude=(held_out,))
    return out


def _held_out_records(contents, key: str) -> list:
    return [r for r in contents.trials(key) if r.ok and r.trace is not None]


def _held_out_features(contents, key: str) -> np.ndarray:
    """The loop features of one task's valid records of the dataset, in log order."""
    from autosearch.cost_models.features import TaskFeaturizer
    from autosearch.frontend.task import TuningTask

    featurizer = TaskFeaturizer(TuningTask.from_json(contents.tasks[key]))
    schedules = [featurizer.schedule_from_trace(r.trace) for r in _held_out_records(contents, key)]
    return np.stack(featurizer.loop(schedules))


def _held_out_ranking(model, contents, key: str) -> float:
    """Pairwise accuracy of ``model`` on one task's records of the dataset (no fitting)."""
    from autosearch.cost_models.evaluate import pairwise_accuracy

    throughput = np.asarray([1.0 / r.latency for r in _held_out_records(contents, key)])
    return pairwise_accuracy(throughput, model.predict(_held_out_features(contents, key)))


def test_shipped_model_loads_its_manifest_is_checked_and_it_ranks_an_unseen_task(contents, target):
    from autosearch.cost_models.loop_features import WIDTH
    from autosearch.cost_models.pretrained import SHIPPED_DIR, feature_version, load_model_dir, shipped_for

    directory, why = shipped_for(target)
    assert directory == SHIPPED_DIR and not why  # x86-64 CPUs are what it is for
    model = load_model_dir(SHIPPED_DIR, target)
    manifest = model.manifest
    assert manifest["features"] == "loop" and manifest["feature_version"] == feature_version()
    assert manifest["feature_width"] == WIDTH == model.booster.num_features()
    assert manifest["target"]["arch"] == "x86_64" and manifest["records"] >= 1000 and manifest["tasks"] >= 10
    assert all(len(t["sha256"]) == 64 and t["records"] > 0 for t in manifest["trained_on"])
    assert 0.5 < manifest["held_out"]["pairwise"] <= 1.0
    key = list(contents.tasks)[HELD_OUT]
    assert key not in manifest["task_keys"]  # really unseen
    assert _held_out_ranking(model, contents, key) > 0.6  # chance is 0.5


def test_train_model_round_trip_ranks_the_task_it_never_saw(trained_dir, contents, target):
    from autosearch.cost_models.pretrained import load_model_dir

    model = load_model_dir(trained_dir, target)
    key = list(contents.tasks)[HELD_OUT]
    assert model.manifest["tasks"] == len(contents.tasks) - 1 and key in model.manifest["excluded"]
    assert _held_out_ranking(model, contents, key) > 0.55


def test_a_blend_directory_holds_both_members_ranks_the_unseen_task_and_refits_only_its_trees(blend_dir, contents,
                                                                                             target):
    import torch
    import xgboost as xgb

    from autosearch.cost_models.mlp_rank import RankingMLP
    from autosearch.cost_models.pretrained import NETWORK, load_model_dir

    model = load_model_dir(blend_dir, target)
    manifest = model.manifest
    assert manifest["family"] == "blend" and isinstance(model.network, RankingMLP)
    assert len(manifest["spreads"]) == 2 and min(manifest["spreads"]) > 0 and "torch" in manifest["versions"]
    assert os.path.exists(os.path.join(blend_dir, NETWORK))
    key = list(contents.tasks)[HELD_OUT]
    assert _held_out_ranking(model, contents, key) > 0.55
    X = _held_out_features(contents, key)
    trees = model.booster.predict(xgb.DMatrix(X.astype(np.float32)))
    s_trees, s_net = manifest["spreads"]
    np.testing.assert_allclose(model.predict(X), trees / s_trees + model.network.predict(X) / s_net, rtol=1e-6)
    # online: the trees grow on the task's records, the network stays as pre-trained
    throughput = 1.0 / np.asarray([r.latency for r in _held_out_records(contents, key)])
    weights_before = [p.detach().clone() for p in model.network.network_.parameters()]
    model.fit(X[:12], throughput[:12] / throughput[:12].max())
    assert model.refit_.num_boosted_rounds() == model.booster.num_boosted_rounds() + model.online_rounds
    assert all(torch.equal(a, b) for a, b in zip(weights_before, model.network.network_.parameters()))
    refit = model.refit_.predict(xgb.DMatrix(X.astype(np.float32)))
    np.testing.assert_allclose(model.predict(X), refit / s_trees + model.network.predict(X) / s_net, rtol=1e-6)


def test_without_pytorch_the_shipped_way_ranks_by_the_blends_trees_and_a_named_blend_is_a_one_line_error(
        blend_dir, contents, target, monkeypatch):
    import sys

    import xgboost as xgb

    from autosearch.cost_models.pretrained import describe, load_model_dir
    from autosearch.errors import UserError

    X = _held_out_features(contents, list(contents.tasks)[HELD_OUT])
    monkeypatch.setitem(sys.modules, "torch", None)  # an install without the [learned] extra
    monkeypatch.delitem(sys.modules, "autosearch.cost_models.mlp_rank", raising=False)
    model = load_model_dir(blend_dir, target, trees_without_torch=True)
    assert model.network is None and "needs PyTorch" in describe(model.manifest, model.note)
    np.testing.assert_allclose(model.predict(X), model.booster.predict(xgb.DMatrix(X.astype(np.float32))), rtol=1e-6)
    with pytest.raises(UserError, match="needs the package 'torch': pip install -e '.\\[learned\\]'"):
        load_model_dir(blend_dir, target)


def test_a_blend_directory_without_its_network_is_a_one_line_error(blend_dir, tmp_path, target):
    from autosearch.cost_models.pretrained import NETWORK, load_model_dir
    from autosearch.errors import UserError

    broken = str(tmp_path / "no-network")
    shutil.copytree(blend_dir, broken)
    os.unlink(os.path.join(broken, NETWORK))
    with pytest.raises(UserError, match="not a saved autosearch cost model"):
        load_model_dir(broken, target)
    with open(os.path.join(broken, "manifest.json")) as fh:
        manifest = json.load(fh)
    manifest["family"] = "lightgbm"
    with open(os.path.join(broken, "manifest.json"), "w") as fh:
        json.dump(manifest, fh)
    with pytest.raises(UserError, match="family 'lightgbm' is not one of xgb-rank, blend"):
        load_model_dir(broken, target)


def test_online_refit_grows_trees_on_top_of_the_pretrained_ones(trained_dir, contents):
    from autosearch.frontend.task import TuningTask
    from autosearch.search.cost_model import make_scorer
    from autosearch.search.space import DecisionSpace

    key = list(contents.tasks)[HELD_OUT]
    task = TuningTask.from_json(contents.tasks[key])
    space = DecisionSpace(task.mod, task.target)
    scorer = make_scorer(trained_dir, space, task, seed=0)
    assert scorer.fitted and scorer.features == "tvm"  # ranks before its first measurement
    base_rounds = scorer.model.booster.num_boosted_rounds()
    records = [r for r in contents.trials(key) if r.ok][:12]
    before = scorer.score([r.config for r in records])
    scorer.update([r.config for r in records], [r.result for r in records])
    refit = scorer.model.refit_
    assert refit is not None and refit.num_boosted_rounds() == base_rounds + scorer.model.online_rounds
    assert scorer.model.booster.num_boosted_rounds() == base_rounds  # the pre-trained trees stay as shipped
    assert not np.allclose(before, scorer.score([r.config for r in records]))


def _run(capfd, tmp_path, *extra: str) -> tuple[int, str, str, str]:
    """A short real ``run`` of the small conv model's conv task, in process: (exit code, stdout, stderr, log path).
    One finalist re-timing round, 2 repeats, no pooling task: how kernels are timed, and the untuned MaxPool, are
    not what these tests are about."""
    model = str(tmp_path / "model.onnx")
    if not os.path.exists(model):
        small_conv_onnx(model)
    log = str(tmp_path / f"run{len(list(tmp_path.glob('*.jsonl')))}.jsonl")
    proc = run_cli_here(capfd, "run", "--strategy", "optuna", "--model", model, "--tasks", "conv", "--trials", "6",
                        "--batch", "3", "--layout", "NCHW", "--finalist-rounds", "1", "--repeat", "2",
                        "--min-repeat-ms", "5", "--log", log, *extra)
    return proc.returncode, proc.stdout, proc.stderr, log


@pytest.mark.parametrize("choice", ["auto", "none", "trained", "blend"])
def test_auto_none_and_a_trained_directory_all_tune_and_the_log_says_which(capfd, tmp_path, request, choice):
    from autosearch.records import read_log

    spec = request.getfixturevalue(f"{choice}_dir") if choice in ("trained", "blend") else choice
    code, out, err, log = _run(capfd, tmp_path, *(["--cost-model", spec] if choice != "auto" else []))  # auto: default
    assert code == 0, err[-2000:]
    contents = read_log(log)
    [header] = contents.runs
    guided = header["guided_by"]
    assert {"auto": "the shipped model", "none": "none"}.get(choice, spec) in guided
    if choice == "blend":
        assert "blend on loop features" in guided
    assert f"cost model: {guided.split(',')[0]}" in " ".join(out.split())  # the console wraps long lines
    assert sum(r.ok for r in contents.trials()) >= 5  # two batches: the second ranked after an update


def test_bad_model_directories_are_one_line_errors(capfd, tmp_path, trained_dir):
    corrupt = str(tmp_path / "corrupt")
    shutil.copytree(trained_dir, corrupt)
    with open(os.path.join(corrupt, "manifest.json"), "w") as fh:
        fh.write("{not json")
    other_features = str(tmp_path / "features")
    shutil.copytree(trained_dir, other_features)
    other_target = str(tmp_path / "target")
    shutil.copytree(trained_dir, other_target)
    for path, change in ((other_features, {"feature_version": -1}), (other_target, {"target": {"kind": "llvm",
                                                                                                "arch": "aarch64"}})):
        with open(os.path.join(path, "manifest.json")) as fh:
            manifest = json.load(fh)
        manifest.update(change)
        with open(os.path.join(path, "manifest.json"), "w") as fh:
            json.dump(manifest, fh)
    broken_booster = str(tmp_path / "booster")
    shutil.copytree(trained_dir, broken_booster)
    with open(os.path.join(broken_booster, "model.ubj"), "wb") as fh:
        fh.write(b"\x00garbage")
    # one case as a user meets it, in a fresh interpreter: exit code 2, one line on stderr, no traceback
    model = str(tmp_path / "model.onnx")
    small_conv_onnx(model)
    proc = run_cli("run", "--strategy", "optuna", "--model", model, "--trials", "12", "--log",
                   str(tmp_path / "run.jsonl"), "--cost-model", corrupt)
    assert proc.returncode == 2 and "corrupt" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-1000:]
    assert len(proc.stderr.strip().splitlines()) == 1
    # every case through the CLI's main, in process: the same exit code and one-line message
    for path, needle in ((corrupt, "corrupt"), (other_features, "train it again"), (other_target, "aarch64"),
                         (broken_booster, "cannot be loaded"), (str(tmp_path), "not a cost model directory")):
        code, _, err, _ = _run(capfd, tmp_path, "--cost-model", path)
        assert code == 2, (path, err[-1000:])
        assert needle in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    proc = run_cli_here(capfd, "train-model", "--log", DATASET, "--out", trained_dir)
    assert proc.returncode == 2 and "already holds a cost model" in proc.stderr  # never overwritten unasked


def test_the_manifests_cpu_list_is_checked_on_load(trained_dir, tmp_path) -> None:
    import shutil

    from autosearch.cost_models.pretrained import MANIFEST, read_manifest

    bad = tmp_path / "bad"
    shutil.copytree(trained_dir, bad)
    manifest = json.loads((bad / MANIFEST).read_text())
    assert [c["family"] for c in manifest["cpus"]] and all(c["records"] > 0 for c in manifest["cpus"])
    manifest["cpus"] = [{"family": "AMD", "mcpu": "znver4"}]  # no record count
    (bad / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="cpus must list"):
        read_manifest(str(bad))


@pytest.mark.parametrize("mcpu, family", [("znver4", "AMD"), ("znver3", "AMD"), ("sapphirerapids", "Intel"),
                                          ("rocketlake", "Intel")])
def test_the_run_header_says_whether_the_hosts_cpu_family_was_trained_on(mcpu, family) -> None:
    import tvm

    from autosearch.cost_models.pretrained import family_note, family_of_mcpu

    assert family_of_mcpu(mcpu) == family
    manifest = {"cpus": [{"family": "AMD", "mcpu": "znver4", "records": 10, "tasks": 2}]}
    note = family_note(manifest, tvm.target.Target({"kind": "llvm", "mcpu": mcpu}))
    if mcpu == "znver4":
        assert note == "records of this CPU (AMD znver4) among them"
    elif family == "AMD":
        assert note == "records of this CPU family (AMD) among them"
    else:
        assert note == "no records of this CPU family (Intel): trained on AMD"


def test_a_model_trained_on_two_cpu_families_lists_them_and_its_accuracy_across_them(tmp_path) -> None:
    """The same tasks measured on two CPUs are two groups each (labels compare configs of one machine); the manifest
    names both CPUs and gives held-out accuracy per family: trained on the same family, on the other, on all."""
    from autosearch.cost_models.pretrained import train_model

    intel = tmp_path / "intel.jsonl"
    rng = np.random.default_rng(0)
    lines = []
    for line in open(DATASET):
        obj = json.loads(line)
        if obj.get("kind") == "trial" and obj["result"].get("latencies"):  # another machine: other timings
            obj["result"]["latencies"] = [x * float(rng.uniform(0.7, 1.3)) for x in obj["result"]["latencies"]]
        lines.append(json.dumps(obj).replace('"mcpu": "znver4"', '"mcpu": "sapphirerapids"'))
    intel.write_text("\n".join(lines) + "\n")
    report = train_model([DATASET, str(intel)], str(tmp_path / "model"), folds=2)
    manifest = report.manifest
    assert [(c["family"], c["mcpu"]) for c in manifest["cpus"]] == [("AMD", "znver4"), ("Intel", "sapphirerapids")]
    assert manifest["tasks"] == 4 and manifest["records"] == sum(c["records"] for c in manifest["cpus"]) == 320
    by_family = manifest["held_out"]["by_family"]
    assert set(by_family) == {"AMD", "Intel"}
    assert set(by_family["AMD"]) == {"same", "same, common tasks", "from Intel", "all"}
    assert set(by_family["Intel"]) == {"same", "same, common tasks", "from AMD", "all"}
    assert all(0.5 < v <= 1.0 for scores in by_family.values() for v in scores.values())
    # both logs hold the same four tasks: "same" is already trained on the common tasks alone
    assert all(scores["same, common tasks"] == scores["same"] for scores in by_family.values())


def test_cross_family_same_on_common_tasks_trains_on_the_tasks_both_families_measured() -> None:
    """Intel measured tasks 0-5, AMD tasks 0-2: "same, common tasks" trains Intel's model on its tasks 0-2 only, so
    that "from AMD" is compared with a model of as many tasks of Intel's own."""
    from autosearch.cost_models.pretrained import cross_family_accuracy

    class Recorder:  # which tasks each fit saw; ranks by the one feature
        def __init__(self) -> None:
            self.fits: list[set[int]] = []

        def fit(self, X, y, groups) -> None:
            self.fits.append({int(t) for t in task_of_group[np.unique(groups)]})

        def predict(self, X):
            return X[:, 0]

    families = ["AMD"] * 3 + ["Intel"] * 6
    task_of_group = np.asarray([0, 1, 2, 0, 1, 2, 3, 4, 5])
    groups = np.repeat(np.arange(9), 4)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((len(groups), 1))
    y = X[:, 0] + 0.1 * rng.standard_normal(len(groups))
    task_fold = task_of_group[groups] % 3
    model = Recorder()
    out = cross_family_accuracy(model, X, y, groups, task_of_group, np.asarray(families), task_fold)
    assert set(out["Intel"]) == {"same", "same, common tasks", "all", "from AMD"}
    intel_fits = model.fits[len(model.fits) // 2:]  # AMD tested first, four fits a fold, three folds each
    same, common = intel_fits[0::4], intel_fits[1::4]
    assert any(fit & {3, 4, 5} for fit in same) and all(fit <= {0, 1, 2} for fit in common)
