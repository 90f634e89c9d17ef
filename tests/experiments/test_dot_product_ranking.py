"""``experiments/dot_product_ranking.py``: which groups each model is trained and scored on."""

from __future__ import annotations

import numpy as np


def _records(n_groups: int, *, bf16: bool, seed: int, rows: int = 12):
    from autosearch.cost_models.loop_features import FEATURE_NAMES
    from experiments.tensor_features import Records

    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_groups), rows)
    X = rng.standard_normal((len(groups), len(FEATURE_NAMES)))
    return Records(X=X, y=X[:, 0] + 0.05 * rng.standard_normal(len(groups)), groups=groups,
                   keys=[f"{seed}-{g}" for g in range(n_groups)], bf16=np.full(n_groups, bf16),
                   names=[f"task{g}" for g in range(n_groups)])


def test_the_held_out_split_is_the_dot_product_tasks_and_the_test_its_tensorised_tasks() -> None:
    from experiments.dot_product_ranking import MODELS, TEST, evaluate

    base = _records(6, bf16=False, seed=1, rows=10)  # other group sizes: a wrong split shows in the record count
    dot, test = _records(5, bf16=True, seed=2), _records(4, bf16=True, seed=3)
    test.keys[3] = dot.keys[0]  # a layer both networks have: not scored as another network's
    results = evaluate(base, dot, test, seed=0)
    assert list(results) == list(MODELS)
    assert all(per[TEST]["tasks"] == 3 and per[TEST]["records"] == 36 for per in results.values())
    assert "dot-product tasks held out" not in results[MODELS[0]]
    for name in MODELS[1:]:  # the five dot-product tasks, wherever they sit among the training groups
        held = results[name]["dot-product tasks held out"]
        assert held["tasks"] == 5 and held["records"] == 60
    assert results[MODELS[2]][TEST]["pairwise"] > 0.8  # the label follows one feature: learnable
