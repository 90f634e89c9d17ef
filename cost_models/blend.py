"""``blend``: ``xgb-rank`` and ``mlp-rank`` on the same features, their scores added after scaling each to unit spread.

Why: the two rank a task's configs about equally well from different views of the same features (trees split on
thresholds, the network bends at quantiles and shares what it learns across features), and their mistakes differ:
added, they rank better than either (README, cost models on the study dataset). Each member's scores are divided by
their standard deviation over its own training records, so neither dominates by scale (both are rankers: their
scores have no unit); a per-call normalisation would need each call to hold one task.

Saved as one ``.npz`` holding each member's own saved file (bytes), so a member loads as it would alone.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from autosearch.cost_models._io import load_npz, model_from, read_npz, write_npz

MEMBERS = ("xgb-rank", "mlp-rank")


class BlendRanker(BaseEstimator):
    """The ``blend`` cost model: the members of ``MEMBERS`` on ``input_kind``, fitted on the same records."""

    is_ranker = True

    def __init__(self, *, input_kind: str = "loop", seed: int = 0) -> None:
        self.input_kind = input_kind
        self.seed = seed

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> BlendRanker:
        from autosearch.search.cost_model import make_cost_model

        members = [make_cost_model(f"{name}@{self.input_kind}", seed=self.seed).fit(X, y, groups) for name in MEMBERS]
        spreads = [float(np.std(m.predict(X))) for m in members]
        self.members_ = members
        self.spreads_ = np.asarray([s if s > 1e-12 else 1.0 for s in spreads])
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "members_"):
            raise RuntimeError("fit the model before predict")
        return sum(np.asarray(m.predict(X), dtype=np.float64) / s for m, s in zip(self.members_, self.spreads_))

    def save(self, path: str) -> None:
        arrays: dict[str, np.ndarray] = {}
        if hasattr(self, "members_"):
            with tempfile.TemporaryDirectory() as tmp:
                for i, member in enumerate(self.members_):
                    member.save(os.path.join(tmp, str(i)))
                    with open(os.path.join(tmp, str(i)), "rb") as fh:
                        arrays[f"member{i}"] = np.frombuffer(fh.read(), dtype=np.uint8)
            arrays["spreads"] = self.spreads_
        write_npz(path, {"family": "blend", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> BlendRanker:
    model = BlendRanker(**header["params"])
    if "spreads" in arrays:
        model.members_ = [model_from(*load_npz(io.BytesIO(arrays[f"member{i}"].tobytes())))
                          for i in range(len(MEMBERS))]
        model.spreads_ = arrays["spreads"]
    return model


def load(path: str) -> BlendRanker:
    """Load a model written by :meth:`BlendRanker.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0, input_kind: str = "loop") -> BlendRanker:
    """Registry factory for ``blend`` (``blend@loop+asm`` and the other tabular feature sets)."""
    from autosearch.cost_models.features import tabular_kind

    return BlendRanker(input_kind=tabular_kind(name, input_kind), seed=seed)
