"""One contract for every cost model: shapes, determinism, save/load, and learning something."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.cost_models import (
    blend,
    learned,
    mlp_rank,
    sequence_model,
    sklearn_model,
    tvm_mlp,
    tvm_xgb,
    xgboost_model,
)
from autosearch.cost_models.evaluate import pairwise_accuracy as pairwise
from autosearch.errors import UserError
from autosearch.search.cost_model import CostModel, make_cost_model

MODELS = ["xgb", "xgb-rank", "rf", "gbr", "mlp", "tvm-xgb", "tvm-mlp", "seq", "seq@sequence+loop", "mlp-rank",
          "mlp-rank@loop+asm", "blend", "xgb@pooled", "rf@pooled+loop", "xgb-rank@loop+asm",
          "sklearn:KNeighborsRegressor", "sklearn:ExtraTreesRegressor"]
LOADERS = {
    xgboost_model.XGBCostModel: xgboost_model.load,
    sklearn_model.SklearnCostModel: sklearn_model.load,
    learned.SegmentSumMLP: learned.load,
    tvm_xgb.TVMXGBModel: tvm_xgb.load,
    tvm_mlp.TVMMLPModel: tvm_mlp.load,
    sequence_model.SequenceRanker: sequence_model.load,
    mlp_rank.RankingMLP: mlp_rank.load,
    blend.BlendRanker: blend.load,
}


@pytest.fixture(scope="module")
def fitted(dataset, split):
    """name -> (model fitted on 3 tasks, its input X, its held-out predictions)."""
    train, test = split
    out = {}
    for name in MODELS:
        model = make_cost_model(name, seed=3)
        X = dataset.X(model.input_kind)
        assert model.fit(X[train], dataset.y[train], dataset.groups[train]) is model
        out[name] = (model, X, model.predict(X[test]))
    return out


@pytest.mark.parametrize("name", MODELS)
def test_contract(name, fitted, dataset, split, tmp_path):
    train, test = split
    model, X, pred = fitted[name]
    assert isinstance(model, CostModel)
    assert pred.shape == (len(test),) and pred.dtype == np.float64 and np.isfinite(pred).all()

    # learns something that transfers to an unseen task: a constant predictor scores 0.5
    assert pairwise(dataset.y[test], pred) > 0.6

    # deterministic with a seed
    again = make_cost_model(name, seed=3).fit(X[train], dataset.y[train], dataset.groups[train])
    np.testing.assert_array_equal(again.predict(X[test]), pred)

    # save / load round trip (no pickle: np.load runs with allow_pickle=False)
    path = str(tmp_path / f"{name.replace(':', '_').replace('@', '_')}.model")
    model.save(path)
    loaded = LOADERS[type(model)](path)
    assert loaded.input_kind == model.input_kind  # a saved model knows which features to be fed
    np.testing.assert_array_equal(loaded.predict(X[test]), pred)
    from autosearch.cost_models._io import load_model

    np.testing.assert_array_equal(load_model(path).predict(X[test]), pred)  # dispatch on the file's header


def test_seed_changes_randomised_models(dataset, split, fitted):
    train, test = split
    model, X, pred = fitted["rf"]
    other = make_cost_model("rf", seed=4).fit(X[train], dataset.y[train])
    assert not np.array_equal(other.predict(X[test]), pred)


def test_every_registered_model_is_in_the_contract():
    from autosearch.search.cost_model import COST_MODELS, PRETRAINED, SKLEARN_PREFIX

    assert set(COST_MODELS) - {PRETRAINED, SKLEARN_PREFIX} <= set(MODELS)


def test_unfitted_model_refuses_to_predict(dataset):
    for name in ("xgb", "rf", "mlp", "tvm-mlp", "seq", "mlp-rank"):
        model = make_cost_model(name)
        with pytest.raises(RuntimeError):
            model.predict(dataset.X(model.input_kind, rows=np.arange(2)))


def test_a_learned_model_without_torch_says_which_extra_installs_it():
    """As on a machine without the [learned] extra (a fresh process, torch blocked): the plug-in's import fails,
    and the advice is the extra (the CPU build), not a bare ``pip install torch`` (PyPI's default wheel pulls
    several GB of CUDA libraries)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from autosearch.search.cost_model import make_cost_model\n"
            "from autosearch.errors import UserError\n"
            "for name in ('mlp', 'tvm-mlp', 'seq', 'mlp-rank'):\n"
            "    try:\n"
            "        make_cost_model(name)\n"
            "    except UserError as exc:\n"
            "        print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["cost model needs the package 'torch': pip install -e '.[learned]'"] * 4


def test_unknown_sklearn_regressor_is_a_user_error():
    with pytest.raises(UserError, match="RandomForestRegressor"):
        make_cost_model("sklearn:RandomForestRegresor")
    with pytest.raises(UserError, match="cannot be built from a name alone"):
        make_cost_model("sklearn:StackingRegressor")
    with pytest.raises(UserError):
        make_cost_model("no-such-model")
    with pytest.raises(UserError, match="trace tokens"):
        make_cost_model("seq@loop")
    with pytest.raises(UserError, match="one feature vector per record"):
        make_cost_model("xgb@sequence+loop")
    with pytest.raises(UserError, match="one feature vector per record"):
        make_cost_model("mlp-rank@sequence")


def test_tvm_xgb_known_features_equal_fresh_extraction(dataset, split, fitted):
    """compare-models hands tvm-xgb features extracted once; TVM's extractor run afresh gives the same model."""
    import dataclasses

    train, test = split
    _, X, pred = fitted["tvm-xgb"]
    assert all(p.features is not None for p in X)
    bare = np.array([dataclasses.replace(p, features=None) for p in X], dtype=object)
    fresh = make_cost_model("tvm-xgb", seed=3).fit(bare[train], dataset.y[train], dataset.groups[train])
    np.testing.assert_allclose(fresh.predict(bare[test]), pred, rtol=1e-6)


def test_tvm_mlp_keeps_tvms_per_epoch_log_for_debug(dataset, split, caplog):
    """TVM's trainer logs each epoch's loss at INFO; a fit under INFO shows none of it, under DEBUG all, and the
    logger's own level is left as it was."""
    import logging

    train, _ = split
    model = make_cost_model("tvm-mlp", seed=3).set_params(num_epoch_full=10)
    X = dataset.X(model.input_kind)
    level = logging.getLogger("mlp_model").level
    with caplog.at_level(logging.INFO):
        model.fit(X[train], dataset.y[train], dataset.groups[train])
    assert not [r for r in caplog.records if r.name == "mlp_model"]
    with caplog.at_level(logging.DEBUG):
        model.fit(X[train], dataset.y[train], dataset.groups[train])
    assert any(r.name == "mlp_model" and "Epoch" in r.getMessage() for r in caplog.records)
    assert logging.getLogger("mlp_model").level == level


def test_blend_adds_its_members_each_scaled_to_unit_spread_on_its_training_records(dataset, split, fitted):
    train, test = split
    model, X, pred = fitted["blend"]
    members = [make_cost_model(name, seed=3).fit(X[train], dataset.y[train], dataset.groups[train])
               for name in blend.MEMBERS]
    expected = sum(m.predict(X[test]) / np.std(m.predict(X[train])) for m in members)
    np.testing.assert_allclose(pred, expected, rtol=1e-6)
