"""mlp-rank's input encoding and its ranking loss, on arrays small enough to check by hand."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.cost_models.mlp_rank import PiecewiseLinear, RankingMLP


def test_piecewise_linear_encodes_the_position_within_each_quantile_bin():
    X = np.column_stack([np.arange(101.0), np.full(101, 7.0)])  # quantile edges 0, 25, 50, 75, 100; a constant
    encoder = PiecewiseLinear(X, bins=4)
    assert encoder.width == 2 * (1 + 4)
    Z = encoder(np.array([[0.0, 7.0], [37.5, 7.0], [100.0, 7.0], [250.0, 3.0]])).numpy()
    bins_x = Z[:, 2:6]
    np.testing.assert_allclose(bins_x[0], [0, 0, 0, 0])
    np.testing.assert_allclose(bins_x[1], [1, 0.5, 0, 0])  # past bin 1, half way through bin 2
    np.testing.assert_allclose(bins_x[2], [1, 1, 1, 1])
    np.testing.assert_allclose(bins_x[3], [1, 1, 1, 1])  # beyond the training range: clipped
    np.testing.assert_array_equal(Z[:, 6:], 0.0)  # a feature constant in training has no bins
    np.testing.assert_allclose(Z[:, 0], (np.array([0, 37.5, 100, 250]) - 50) / X[:, 0].std(), rtol=1e-6)
    round_trip = PiecewiseLinear.from_arrays(encoder.arrays())
    np.testing.assert_array_equal(round_trip(X).numpy(), encoder(X).numpy())


def test_learns_a_step_in_one_feature_shared_by_every_task():
    """Tasks whose speed jumps where feature 0 crosses a threshold (as at a register or cache limit), each task
    with its own offset: on a held-out task, the configs past the step rank above the others."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(400, 5))
    groups = np.repeat(np.arange(8), 50)
    y = (X[:, 0] > 0.6) * 1.0 + 0.05 * rng.normal(size=400) + groups * 0.3
    model = RankingMLP(seed=0, min_steps=300).fit(X[groups < 7], y[groups < 7], groups[groups < 7])
    test = groups == 7
    pred = model.predict(X[test])
    fast = X[test, 0] > 0.6
    ordered = (pred[fast][:, None] > pred[~fast][None, :]).mean()  # scores have no scale: only orders count
    assert 0 < fast.sum() < len(fast) and ordered > 0.95


def test_needs_a_task_with_a_pair():
    with pytest.raises(ValueError, match="at least 2 records"):
        RankingMLP().fit(np.zeros((3, 4)), np.arange(3.0), np.arange(3))
    with pytest.raises(ValueError, match="one feature vector per record"):
        RankingMLP().fit(np.zeros((3, 4, 2)), np.arange(3.0))
