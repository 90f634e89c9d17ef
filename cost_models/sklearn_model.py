"""scikit-learn cost models on a feature vector (loop features by default): ``rf``, ``gbr`` and
``sklearn:<Regressor>``.

Any regressor scikit-learn lists (``sklearn.utils.all_estimators(type_filter="regressor")``) can be
named; it is wrapped in a ``StandardScaler`` pipeline, because pooled per-store features span many
orders of magnitude and distance- or gradient-based regressors (KNN, SVR, MLP) need them scaled.
Trees ignore the scaling.

Saving without pickle: the file holds the constructor parameters (JSON) and the training data;
:func:`load` refits. Every estimator gets ``random_state=seed`` (and ``n_jobs=1``) when it has
them, so the refit is the same model and gives identical predictions.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from autosearch.cost_models._io import read_npz, write_npz
from autosearch.errors import UserError

PREFIX = "sklearn:"

# The named families: sane defaults for a few hundred to a few thousand rows of ~500 features.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "rf": ("RandomForestRegressor", {"n_estimators": 200, "max_features": 0.33, "min_samples_leaf": 1}),
    "gbr": ("GradientBoostingRegressor",
            {"n_estimators": 200, "learning_rate": 0.05, "max_depth": 4, "subsample": 0.8}),
}


@functools.cache
def regressors() -> dict[str, type]:
    """Every regressor class scikit-learn lists, by class name. Listed once per process: ``all_estimators``
    imports every scikit-learn module to find them, and every model built by name asks."""
    from sklearn.utils import all_estimators

    return dict(all_estimators(type_filter="regressor"))


def _estimator_class(name: str) -> type:
    known = regressors()
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=3)
        examples = ", ".join(sorted(known)[:5])
        hint = f"; did you mean {', '.join(close)}?" if close else f"; e.g. {examples}, ..."
        raise UserError(f"unknown scikit-learn regressor {name!r}{hint}")
    return known[name]


class SklearnCostModel(BaseEstimator):
    """A scikit-learn regressor (by class name) behind a StandardScaler, as a cost model."""

    def __init__(self, *, estimator: str = "RandomForestRegressor", params: dict[str, Any] | None = None,
                 scale: bool = True, seed: int = 0, input_kind: str = "loop") -> None:
        self.input_kind = input_kind
        self.estimator = estimator
        self.params = params
        self.scale = scale
        self.seed = seed
        self._make()  # fail now, not at fit time, on an unknown name or a regressor that needs arguments

    def _make(self):
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        cls = _estimator_class(self.estimator)
        kwargs = dict(self.params or {})
        accepted = inspect.signature(cls.__init__).parameters
        if "random_state" in accepted:
            kwargs.setdefault("random_state", self.seed)
        if "n_jobs" in accepted:
            kwargs.setdefault("n_jobs", 1)
        try:
            est = cls(**kwargs)
        except TypeError as exc:
            raise UserError(f"scikit-learn regressor {self.estimator} cannot be built from a name alone: "
                            f"{exc}") from exc
        return make_pipeline(StandardScaler(), est) if self.scale else est

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> SklearnCostModel:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.model_ = self._make().fit(X, y)
        self.X_fit_, self.y_fit_ = X, y  # kept for saving: load() refits instead of unpickling
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise RuntimeError("fit the model before predict")
        return np.asarray(self.model_.predict(np.asarray(X, dtype=np.float64)), dtype=np.float64).reshape(-1)

    def save(self, path: str) -> None:
        arrays = {"X": self.X_fit_, "y": self.y_fit_} if hasattr(self, "model_") else {}
        write_npz(path, {"family": "sklearn", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> SklearnCostModel:
    model = SklearnCostModel(**{"input_kind": "pooled", **header["params"]})  # saved before the option: pooled
    if "X" in arrays:
        model.fit(arrays["X"], arrays["y"])
    return model


def load(path: str) -> SklearnCostModel:
    """Load a model written by :meth:`SklearnCostModel.save` (refits on the stored training data)."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0, input_kind: str = "loop") -> SklearnCostModel:
    """Registry factory: ``rf``, ``gbr`` or ``sklearn:<RegressorClassName>``."""
    from autosearch.cost_models.features import tabular_kind

    input_kind = tabular_kind(name, input_kind)
    if name in PRESETS:
        estimator, params = PRESETS[name]
        return SklearnCostModel(estimator=estimator, params=dict(params), seed=seed, input_kind=input_kind)
    if name.startswith(PREFIX):
        return SklearnCostModel(estimator=name[len(PREFIX):], seed=seed, input_kind=input_kind)
    raise UserError(f"unknown scikit-learn cost model {name!r}: use rf, gbr or {PREFIX}<Regressor>")
