"""XGBoost cost models on a feature vector (loop features by default): regression (``xgb``) and pairwise
ranking (``xgb-rank``), through XGBoost's scikit-learn API (``XGBRegressor`` / ``XGBRanker``).

Regression fits normalised throughput directly. Ranking (``rank:pairwise``, one query group per task)
learns only the order within each task, which is all search needs, and stops the model from spending
capacity on the per-task scale: tasks differ in speed by orders of magnitude, and a regressor fitted
across them spends its trees on that gap. Both are compared in ``compare-models`` (README, Results).
The booster is saved in XGBoost's own UBJSON format inside the model's ``.npz`` (exact round trip,
no pickle).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from autosearch.cost_models._io import read_npz, write_npz

OBJECTIVES = {"xgb": "reg:squarederror", "xgb-rank": "rank:pairwise"}
RELEVANCE_LEVELS = 31  # graded relevance 0..31 from normalised throughput, for the ranking objective
# sampled pairs per record for rank:pairwise (XGBoost's default is 1; more ranked better in compare-models):
# one pair per record leaves most of a task's order unseen when a task has only tens of records
PAIRS_PER_SAMPLE = 8


def ranking_data(X: np.ndarray, y: np.ndarray, groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, relevance, query ids) for XGBoost's ranking objectives: rows sorted so each query (task) is
    contiguous, as XGBoost wants; graded relevance 0..RELEVANCE_LEVELS rather than raw normalised throughput
    (it ranked better in compare-models): levels make near-equal configs, within measurement noise of each
    other, ties instead of pairs to learn."""
    groups = np.zeros(len(y), dtype=np.int64) if groups is None else np.asarray(groups)
    order = np.argsort(groups, kind="stable")
    relevance = np.clip(np.round(np.asarray(y, dtype=np.float32) * RELEVANCE_LEVELS), 0, RELEVANCE_LEVELS)
    return np.asarray(X, dtype=np.float32)[order], relevance[order], groups[order]


class XGBCostModel(BaseEstimator):
    """Gradient-boosted trees (XGBoost ``hist``), single-threaded by default so runs are reproducible
    and leave the other cores to measurements. ``input_kind`` names the feature set it is trained on
    (``features.TABULAR_KINDS``), so a saved model knows what to be fed."""

    def __init__(
        self,
        *,
        input_kind: str = "loop",
        objective: str = "reg:squarederror",
        n_estimators: int = 300,
        max_depth: int = 6,
        learning_rate: float = 0.05,
        subsample: float = 0.8,
        colsample_bytree: float = 0.8,
        min_child_weight: float = 1.0,
        reg_lambda: float = 1.0,
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        self.input_kind = input_kind
        self.objective = objective
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.n_jobs = n_jobs
        self.seed = seed

    @property
    def is_ranker(self) -> bool:
        return self.objective.startswith("rank:")

    def _estimator(self):
        """A fresh ``XGBRanker`` or ``XGBRegressor`` with this model's parameters."""
        import xgboost as xgb

        params: dict[str, Any] = dict(
            objective=self.objective, n_estimators=self.n_estimators, max_depth=self.max_depth,
            learning_rate=self.learning_rate, subsample=self.subsample, colsample_bytree=self.colsample_bytree,
            min_child_weight=self.min_child_weight, reg_lambda=self.reg_lambda, n_jobs=self.n_jobs,
            random_state=self.seed, tree_method="hist", verbosity=0,
        )
        if self.is_ranker:
            return xgb.XGBRanker(**params, lambdarank_pair_method="mean",
                                 lambdarank_num_pair_per_sample=PAIRS_PER_SAMPLE)
        return xgb.XGBRegressor(**params)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> XGBCostModel:
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float32)
        estimator = self._estimator()
        if self.is_ranker:
            X, relevance, qid = ranking_data(X, y, groups)
            estimator.fit(X, relevance, qid=qid)
        else:
            estimator.fit(X, y)
        self.estimator_ = estimator
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "estimator_"):
            raise RuntimeError("fit the model before predict")
        return np.asarray(self.estimator_.predict(np.asarray(X, dtype=np.float32)), dtype=np.float64)

    def save(self, path: str) -> None:
        """An ``.npz`` with the parameters (JSON) and the booster in XGBoost's UBJSON format."""
        arrays = {}
        if hasattr(self, "estimator_"):
            raw = self.estimator_.get_booster().save_raw(raw_format="ubj")
            arrays["booster"] = np.frombuffer(bytes(raw), dtype=np.uint8)
        write_npz(path, {"family": "xgboost", "params": self.get_params(),
                         "n_features_in": getattr(self, "n_features_in_", None)}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> XGBCostModel:
    model = XGBCostModel(**{"input_kind": "pooled", **header["params"]})  # saved before the option: pooled
    if "booster" in arrays:
        estimator = model._estimator()
        estimator.load_model(bytearray(arrays["booster"].tobytes()))
        model.estimator_ = estimator
        model.n_features_in_ = header["n_features_in"]
    return model


def load(path: str) -> XGBCostModel:
    """Load a model written by :meth:`XGBCostModel.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0, input_kind: str = "loop") -> XGBCostModel:
    """Registry factory: ``xgb`` (regression) or ``xgb-rank`` (pairwise ranking within a task)."""
    from autosearch.cost_models.features import tabular_kind

    return XGBCostModel(objective=OBJECTIVES[name], seed=seed, input_kind=tabular_kind(name, input_kind))
