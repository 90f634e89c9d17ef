"""``tvm-xgb``: MetaSchedule's own ``XGBModel``, driven through its ``update``/``predict`` API: the anchor.

Every other model is compared against what TVM's tuner itself uses: the same per-store features
(it runs ``PerStoreFeature`` on the ``MeasureCandidate``s itself), its pack-sum objective (per-store
scores summed per program, squared error weighted by the label) and early stopping on its training
set. Its input is therefore not a feature matrix but programs (``features.Program``: TuneContext +
MeasureCandidate), and it learns from ``RunnerResult`` latencies: we pass ``1 / y`` as the run time,
so its own label ``min_cost / cost`` per task equals our normalised throughput ``y``.

Two settings differ from ``ms.tune_tir``'s defaults, for reproducible comparisons: one XGBoost thread
(default: all physical cores) and no random-prediction warm-up (default: random scores until 100
records; deciding when a model is trusted is the caller's job, see ``guidance.ModelScorer``).
Saving: the booster (UBJSON) and its training features go into the model's ``.npz``; TVM's own
``save`` writes a pickled object array, which we avoid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from autosearch.cost_models._io import read_npz, write_npz
from autosearch.cost_models._tvm_programs import KnownFeatures, groups_of, own_extractor


class TVMXGBModel(BaseEstimator):
    """Wrapper that gives MetaSchedule's ``XGBModel`` the ``fit``/``predict`` shape of a CostModel."""

    input_kind = "program"

    def __init__(self, *, max_depth: int = 10, eta: float = 0.2, early_stopping_rounds: int = 50,
                 n_jobs: int = 1, seed: int = 0) -> None:
        self.max_depth = max_depth
        self.eta = eta
        self.early_stopping_rounds = early_stopping_rounds
        self.n_jobs = n_jobs
        self.seed = seed

    def _make(self):
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig, XGBModel
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        config = XGBConfig(max_depth=self.max_depth, eta=self.eta, seed=self.seed, nthread=self.n_jobs)
        return XGBModel(extractor=PerStoreFeature(), config=config, num_warmup_samples=0, verbose_eval=0,
                        early_stopping_rounds=self.early_stopping_rounds, adaptive_training=True)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> TVMXGBModel:
        """One ``XGBModel.update`` per task (TVM groups records by task), one training at the end."""
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        y = np.asarray(y, dtype=np.float64)
        model = self._make()
        model.extractor = KnownFeatures(model.extractor, X)
        tasks = list(groups_of(X).items())
        for n, (_, rows) in enumerate(tasks):
            # XGBModel retrains inside update() unless its adaptive-training threshold says wait:
            # hold it off until the last task's records are in, so fit() trains exactly once.
            model.last_train_size = 0 if n == len(tasks) - 1 else 1 << 60
            context = X[rows[0]].context
            results = [RunnerResult(run_secs=[float(1.0 / max(y[i], 1e-9))], error_msg=None) for i in rows]
            model.update(context, [X[i].candidate for i in rows], results)
        self.model_ = model
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "model_") or self.model_.booster is None:
            raise RuntimeError("fit the model before predict")
        out = np.zeros(len(X), dtype=np.float64)
        self.model_.extractor = KnownFeatures(own_extractor(self.model_.extractor), X)
        for rows in groups_of(X).values():
            out[rows] = self.model_.predict(X[rows[0]].context, [X[i].candidate for i in rows])
        return out

    def save(self, path: str) -> None:
        arrays: dict[str, np.ndarray] = {}
        groups: list[dict[str, Any]] = []
        if hasattr(self, "model_") and self.model_.booster is not None:
            raw = bytes(self.model_.booster.save_raw(raw_format="ubj"))
            arrays["booster"] = np.frombuffer(raw, dtype=np.uint8)
            rows, stores, costs = [], [], []
            for group in self.model_.data.values():
                groups.append({"hash": group.group_hash, "n": len(group.features)})
                rows.extend(group.features)
                stores.extend(len(f) for f in group.features)
                costs.append(np.asarray(group.costs))
            arrays["features"] = np.concatenate(rows, axis=0)
            arrays["stores"] = np.asarray(stores, dtype=np.int64)
            arrays["costs"] = np.concatenate(costs)
        write_npz(path, {"family": "tvm-xgb", "params": self.get_params(), "groups": groups}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> TVMXGBModel:
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    model = TVMXGBModel(**header["params"])
    if "booster" in arrays:
        inner = model._make()
        booster = xgb.Booster(params={"nthread": model.n_jobs})
        booster.load_model(bytearray(arrays["booster"].tobytes()))
        inner.booster = booster
        bounds = np.concatenate([[0], np.cumsum(arrays["stores"])])
        record, offset = 0, 0
        for group in header["groups"]:
            feats = [arrays["features"][bounds[r]:bounds[r + 1]] for r in range(record, record + group["n"])]
            costs = arrays["costs"][offset:offset + group["n"]]
            inner.data[group["hash"]] = FeatureGroup(group["hash"], feats, costs)
            record += group["n"]
            offset += group["n"]
        inner.data_size = record
        inner.last_train_size = record
        model.model_ = inner
    return model


def load(path: str) -> TVMXGBModel:
    """Load a model written by :meth:`TVMXGBModel.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0) -> TVMXGBModel:
    """Registry factory for ``tvm-xgb``."""
    return TVMXGBModel(seed=seed)
