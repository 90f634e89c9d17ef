"""Test-only ConfigScorers for the strategy tests (imported by the test modules as a plain module)."""

from __future__ import annotations

import numpy as np

from autosearch.search.space import DecisionSpace
from tests.strategies.replay import SyntheticLatency


class EncodingRidgeScorer:
    """A small learned ConfigScorer for tests: ridge regression of log throughput on ``space.encode``.

    Deliberately simple (a linear model cannot fit the synthetic landscape's kinks); what the tests
    need is a real, imperfect, learning scorer driven through ``update``.
    """

    def __init__(self, space: DecisionSpace, *, alpha: float = 1.0) -> None:
        self.space = space
        self.alpha = alpha
        self.updates = 0
        self._X: list[np.ndarray] = []
        self._y: list[float] = []
        self._w: np.ndarray | None = None

    def update(self, configs, results) -> None:
        self.updates += 1
        for config, result in zip(configs, results):
            if result.ok:
                self._X.append(self.space.encode(config))
                self._y.append(-float(np.log(result.median)))
        if len(self._y) >= 4:
            X = np.c_[np.stack(self._X), np.ones(len(self._X))]
            self._w = np.linalg.solve(X.T @ X + self.alpha * np.eye(X.shape[1]), X.T @ np.asarray(self._y))

    def score(self, configs) -> np.ndarray:
        if self._w is None:
            return np.zeros(len(configs))
        X = np.c_[np.stack([self.space.encode(c) for c in configs]), np.ones(len(configs))]
        return X @ self._w


class OracleScorer:
    """A perfect cost model of the synthetic landscape (minus log latency): shows what guidance can do."""

    def __init__(self, synthetic: SyntheticLatency) -> None:
        self.synthetic = synthetic

    def update(self, configs, results) -> None:
        pass

    def score(self, configs) -> np.ndarray:
        return np.array([-np.log(self.synthetic.latency(c)) for c in configs])
