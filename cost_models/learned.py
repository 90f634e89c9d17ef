"""``mlp``: a neural cost model over per-store features with sum pooling, in plain numpy.

The architecture of MetaSchedule's ``SegmentSumMLP`` and TenSet's MLP model: each buffer store's
164 features go through the same MLP encoder, the encodings are *summed* over the stores of the
program (a program's cost is roughly the sum of its statements' costs), and a small head maps the
sum to a score. Pooling before the network (as tabular models must) loses which features belong
to the same store; summing after the encoder keeps it.

Why numpy and not a framework: a deep-learning framework would be autosearch's largest dependency
(several GB) for a model of three dense layers
and a masked sum. Forward and backward are ~40 lines, Adam is ~10, and training on a few thousand
records takes seconds on one core. scikit-learn's ``MLPRegressor`` cannot do the per-store sum.

Loss: squared error on normalised throughput plus a RankNet pairwise logistic loss between
records of the same task (TenSet found ranking losses best for search; MetaSchedule's MLP uses
LambdaRank). The squared-error term keeps scores comparable across tasks.

Defaults (mini-batches of 64, L2 1e-2, 400 Adam steps) were picked leave-one-task-out on the committed
4-task dataset (``tests/data/small_dataset.jsonl``): small batches and strong weight decay, because few
records per task make the network overfit easily (large batches with weak decay ranked held-out tasks
worse, and some of them no better than chance). A study on a larger dataset should revisit them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from threadpoolctl import threadpool_limits

from cost_models._io import read_npz, write_npz
from cost_models.features import N_STORE_FEATURES, store_mask

_LAYERS = ("W1", "b1", "W2", "b2", "W3", "b3", "W4", "b4")


class SegmentSumMLP(BaseEstimator):
    """Per-store encoder (2 x Dense+ReLU) -> masked sum over stores -> Dense+ReLU -> Dense -> score.

    Input: (records x stores x 164) with NaN rows as padding (``features.stack_per_store``).
    """

    input_kind = "per_store"

    def __init__(
        self,
        *,
        hidden: int = 64,
        n_steps: int = 400,
        batch_size: int = 64,
        learning_rate: float = 2e-3,
        weight_decay: float = 1e-2,
        rank_weight: float = 1.0,
        grad_clip: float = 5.0,
        seed: int = 0,
    ) -> None:
        self.hidden = hidden
        self.n_steps = n_steps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.rank_weight = rank_weight
        self.grad_clip = grad_clip
        self.seed = seed

    # ------------------------------------------------------------------ network
    def _init(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        h = self.hidden

        def dense(n_in: int, n_out: int) -> np.ndarray:
            return rng.normal(0.0, np.sqrt(2.0 / n_in), size=(n_in, n_out))  # He init for ReLU

        return {"W1": dense(N_STORE_FEATURES, h), "b1": np.zeros(h), "W2": dense(h, h), "b2": np.zeros(h),
                "W3": dense(h, h), "b3": np.zeros(h), "W4": dense(h, 1) * 0.1, "b4": np.zeros(1)}

    def _prepare(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[2] != N_STORE_FEATURES:
            raise ValueError(f"mlp takes per-store input (n, stores, {N_STORE_FEATURES}), not {X.shape}")
        mask = store_mask(X).astype(np.float64)
        Z = np.where(mask[..., None] > 0, X, 0.0)
        if hasattr(self, "mean_"):
            Z = (Z - self.mean_) / self.scale_ * mask[..., None]
        return Z, mask

    def _forward(self, p: dict[str, np.ndarray], Z: np.ndarray, mask: np.ndarray):
        a1 = Z @ p["W1"] + p["b1"]
        h1 = np.maximum(a1, 0.0)
        a2 = h1 @ p["W2"] + p["b2"]
        h2 = np.maximum(a2, 0.0) * mask[..., None]
        s = h2.sum(axis=1)
        a3 = s @ p["W3"] + p["b3"]
        h3 = np.maximum(a3, 0.0)
        out = (h3 @ p["W4"] + p["b4"])[:, 0]
        return out, (Z, a1, h1, a2, h2, s, a3, h3, mask)

    @staticmethod
    def _backward(p: dict[str, np.ndarray], cache, dout: np.ndarray) -> dict[str, np.ndarray]:
        Z, a1, h1, a2, _, s, a3, h3, mask = cache
        g: dict[str, np.ndarray] = {}
        d = dout[:, None]
        g["W4"], g["b4"] = h3.T @ d, d.sum(axis=0)
        da3 = (d @ p["W4"].T) * (a3 > 0)
        g["W3"], g["b3"] = s.T @ da3, da3.sum(axis=0)
        ds = da3 @ p["W3"].T
        da2 = ds[:, None, :] * mask[..., None] * (a2 > 0)
        hidden = da2.shape[-1]
        g["W2"] = h1.reshape(-1, hidden).T @ da2.reshape(-1, hidden)
        g["b2"] = da2.sum(axis=(0, 1))
        da1 = (da2 @ p["W2"].T) * (a1 > 0)
        g["W1"] = Z.reshape(-1, Z.shape[-1]).T @ da1.reshape(-1, hidden)
        g["b1"] = da1.sum(axis=(0, 1))
        return g

    def _loss_grad(self, pred: np.ndarray, y: np.ndarray, groups: np.ndarray) -> np.ndarray:
        """d(loss)/d(pred): mean squared error + rank_weight x mean RankNet loss over same-task pairs."""
        n = len(pred)
        grad = 2.0 * (pred - y) / n
        if self.rank_weight > 0:
            better = (y[:, None] > y[None, :] + 1e-6) & (groups[:, None] == groups[None, :])
            n_pairs = int(better.sum())
            if n_pairs:
                diff = pred[:, None] - pred[None, :]
                # d/d(diff) of log(1 + exp(-diff)) = -sigmoid(-diff)
                w = np.where(better, -0.5 * (1.0 - np.tanh(diff / 2.0)), 0.0) * (self.rank_weight / n_pairs)
                grad += w.sum(axis=1) - w.sum(axis=0)
        return grad

    # ------------------------------------------------------------------ estimator API
    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> SegmentSumMLP:
        # One BLAS thread: the matrices are small, and a multi-threaded OpenBLAS on a busy machine spends
        # a fit waiting for cores that measurements hold (many times slower than one thread).
        with threadpool_limits(1):
            return self._fit(X, y, groups)

    def _fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None) -> SegmentSumMLP:
        rng = np.random.default_rng(self.seed)
        for attr in ("mean_", "scale_"):
            self.__dict__.pop(attr, None)
        Z, mask = self._prepare(X)
        rows = Z[mask > 0]
        self.mean_ = rows.mean(axis=0)
        self.scale_ = np.where(rows.std(axis=0) > 1e-6, rows.std(axis=0), 1.0)
        Z = (Z - self.mean_) / self.scale_ * mask[..., None]
        y = np.asarray(y, dtype=np.float64)
        groups = np.zeros(len(y), dtype=np.int64) if groups is None else np.asarray(groups)
        params = self._init(rng)
        m = {k: np.zeros_like(v) for k, v in params.items()}
        v = {k: np.zeros_like(v) for k, v in params.items()}
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        n = len(y)
        order = rng.permutation(n)
        cursor = 0
        for step in range(1, self.n_steps + 1):
            if n <= self.batch_size:
                idx = np.arange(n)
            else:
                if cursor + self.batch_size > n:
                    order, cursor = rng.permutation(n), 0
                idx = order[cursor:cursor + self.batch_size]
                cursor += self.batch_size
            pred, cache = self._forward(params, Z[idx], mask[idx])
            grads = self._backward(params, cache, self._loss_grad(pred, y[idx], groups[idx]))
            norm = np.sqrt(sum(float((g * g).sum()) for g in grads.values()))
            clip = min(1.0, self.grad_clip / norm) if norm > 0 else 1.0
            lr = self.learning_rate * min(1.0, step / 50)  # short warm-up: He-initialised sums can be large
            for k in _LAYERS:
                g = grads[k] * clip + (self.weight_decay * params[k] if k.startswith("W") else 0.0)
                m[k] = beta1 * m[k] + (1 - beta1) * g
                v[k] = beta2 * v[k] + (1 - beta2) * g * g
                m_hat = m[k] / (1 - beta1**step)
                v_hat = v[k] / (1 - beta2**step)
                params[k] = params[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
        self.params_ = params
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "params_"):
            raise RuntimeError("fit the model before predict")
        with threadpool_limits(1):
            Z, mask = self._prepare(X)
            out, _ = self._forward(self.params_, Z, mask)
        return out

    def save(self, path: str) -> None:
        arrays = {}
        if hasattr(self, "params_"):
            arrays = {**self.params_, "mean": self.mean_, "scale": self.scale_}
        write_npz(path, {"family": "mlp", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> SegmentSumMLP:
    model = SegmentSumMLP(**header["params"])
    if "W1" in arrays:
        model.params_ = {k: arrays[k] for k in _LAYERS}
        model.mean_, model.scale_ = arrays["mean"], arrays["scale"]
    return model


def load(path: str) -> SegmentSumMLP:
    """Load a model written by :meth:`SegmentSumMLP.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0) -> SegmentSumMLP:
    """Registry factory for ``mlp``."""
    return SegmentSumMLP(seed=seed)
