"""The finalists' rule, written once (autosearch.ranking.score): the tuner's ranking, the cost models'
labels and the experiments' re-timing all call it. Pure Python: nothing is built or measured."""

from __future__ import annotations

import math

import pytest

from autosearch.ranking import rank, score, scores
from autosearch.types import MeasureResult, Status


def _ok(*secs: float) -> MeasureResult:
    return MeasureResult(Status.OK, secs)


FAILED = MeasureResult.failed(Status.WRONG_RESULT, "x")


def test_the_score_is_the_median_over_rounds_and_a_failure_is_never_best() -> None:
    ok = [_ok(s, s, s) for s in (0.3, 0.1, 0.2)]
    assert score(ok) == pytest.approx(0.2)
    assert score(ok + [FAILED]) == math.inf
    assert score([]) == math.inf
    assert score([_ok(0.1, 0.5, 0.6), _ok(0.3)]) == pytest.approx((0.5 + 0.3) / 2)  # medians first, then over rounds


def test_scores_group_by_key_and_rank_orders_by_them_then_by_the_in_run_median() -> None:
    retimes = [("a", _ok(0.3)), ("b", _ok(0.2)), ("a", _ok(0.1)), ("c", FAILED), ("c", _ok(0.01))]
    assert scores(retimes) == {"a": pytest.approx(0.2), "b": pytest.approx(0.2), "c": math.inf}
    in_run = {"a": 0.05, "b": 0.04, "c": 0.01, "d": 0.5, "e": math.inf}
    # a and b tie on their score: the in-run median breaks it; c failed a re-time: out; d by its in-run median
    assert rank(in_run, retimes) == ["b", "a", "d"]
