"""Metric functions on hand-made rankings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosearch.cost_models.evaluate import pairwise_accuracy, rmse, spearman, task_metrics, top_k_score

Y = np.array([0.1, 0.4, 1.0, 0.25, 0.7])  # normalised throughput, best = index 2


def test_pairwise_perfect_reversed_and_constant():
    assert pairwise_accuracy(Y, Y * 3 + 1) == 1.0
    assert pairwise_accuracy(Y, -Y) == 0.0
    assert pairwise_accuracy(Y, np.zeros_like(Y)) == 0.5  # ties count half


def test_pairwise_counts_one_swapped_pair():
    pred = Y.copy()
    pred[[1, 3]] = pred[[3, 1]]  # swap 0.4 and 0.25: 1 of the 10 pairs is now wrong
    assert pairwise_accuracy(Y, pred) == pytest.approx(0.9)


def test_pairwise_compares_only_within_groups():
    y = np.array([1.0, 0.5, 1.0, 0.5])
    groups = np.array([0, 0, 1, 1])
    pred = np.array([10.0, 9.0, 1.0, 0.0])  # right inside each group, wrong across them (9 > 1)
    assert pairwise_accuracy(y, pred, groups) == 1.0
    assert pairwise_accuracy(y, pred) < 1.0
    assert math.isnan(pairwise_accuracy(np.ones(3), np.arange(3.0)))  # no pair to order


def test_spearman():
    assert spearman(Y, Y**2) == pytest.approx(1.0)
    assert spearman(Y, -Y) == pytest.approx(-1.0)
    assert spearman(Y, np.ones_like(Y)) == 0.0


def test_top_k_score_hand_computed():
    pred = np.array([0.9, 0.8, 0.1, 0.3, 0.2])  # ranks index 0 (y=0.1), 1 (0.4), 3 (0.25), 4 (0.7), 2 (1.0)
    assert top_k_score(Y, pred, 1) == pytest.approx(0.1)
    assert top_k_score(Y, pred, 2) == pytest.approx(0.4)
    assert top_k_score(Y, pred, 4) == pytest.approx(0.7)
    assert top_k_score(Y, pred, 5) == 1.0
    assert top_k_score(Y, Y, 1) == 1.0
    # in latency terms: best latency 1.0 / latency of the best pick 1/0.4 = 0.4
    latency = 1.0 / Y
    assert top_k_score(1.0 / latency, pred, 2) == pytest.approx(latency.min() / latency[1])


def test_top_k_ties_give_no_credit():
    assert top_k_score(Y, np.zeros_like(Y), 1) == pytest.approx(0.1)  # worst config among the tied


def test_rmse_and_task_metrics():
    assert rmse(Y, Y) == 0.0
    assert rmse(np.zeros(4), np.full(4, 2.0)) == pytest.approx(2.0)
    m = task_metrics(Y, Y)
    assert m["pairwise"] == 1.0 and m["top1"] == 1.0 and m["top5"] == 1.0 and m["rmse"] == 0.0
    assert math.isnan(task_metrics(Y, -Y, ranker=True)["rmse"])
