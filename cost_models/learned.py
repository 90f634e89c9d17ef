"""``mlp``: a neural cost model over per-store features with sum pooling, on PyTorch.

The architecture of MetaSchedule's ``SegmentSumMLP`` and TenSet's MLP model: each buffer store's
164 features go through the same MLP encoder, the encodings are *summed* over the stores of the
program (a program's cost is roughly the sum of its statements' costs), and a small head maps the
sum to a score. Pooling before the network (as tabular models must) loses which features belong
to the same store; summing after the encoder keeps it. scikit-learn's ``MLPRegressor`` cannot do
the per-store sum. (``tvm-mlp`` is TVM's own implementation of the same idea, with its own trainer.)

Loss: squared error on normalised throughput plus a RankNet pairwise logistic loss between
records of the same task (TenSet found ranking losses best for search; MetaSchedule's MLP uses
LambdaRank). The squared-error term keeps scores comparable across tasks. Gradients by autograd,
``torch.optim.Adam`` with L2 on the weights (not the biases), a 50-step linear warm-up (He-initialised
sums over stores can be large) and gradient-norm clipping.

Defaults (mini-batches of 64, L2 1e-2, 400 Adam steps) were picked leave-one-task-out on the committed
4-task dataset (``tests/data/small_dataset.jsonl``): small batches and strong weight decay, because few
records per task make the network overfit easily (large batches with weak decay ranked held-out tasks
worse, and some of them no better than chance). A study on a larger dataset should revisit them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import nn

from autosearch.cost_models._io import read_npz, write_npz
from autosearch.cost_models._torch import pair_loss, session
from autosearch.cost_models.features import N_STORE_FEATURES, store_mask

# saved arrays: (in, out) weights and biases of the four dense layers (the layout of the numpy model this
# replaces, so its saved files still load)
_LAYERS = ("W1", "b1", "W2", "b2", "W3", "b3", "W4", "b4")
_WARMUP_STEPS = 50


class _Network(nn.Module):
    """Per-store encoder (2 x Dense+ReLU) -> masked sum over stores -> Dense+ReLU -> Dense -> score."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.ModuleList([nn.Linear(N_STORE_FEATURES, hidden), nn.Linear(hidden, hidden),
                                    nn.Linear(hidden, hidden), nn.Linear(hidden, 1)])
        for layer in self.dense:  # He init for ReLU, zero biases; a small last layer starts scores near 0
            nn.init.normal_(layer.weight, 0.0, float(np.sqrt(2.0 / layer.in_features)))
            nn.init.zeros_(layer.bias)
        with torch.no_grad():
            self.dense[3].weight.mul_(0.1)

    def forward(self, Z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.dense[1](torch.relu(self.dense[0](Z)))) * mask[..., None]
        return self.dense[3](torch.relu(self.dense[2](h.sum(dim=1))))[:, 0]

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for i, layer in enumerate(self.dense, start=1):
            out[f"W{i}"] = layer.weight.detach().numpy().T.astype(np.float64)
            out[f"b{i}"] = layer.bias.detach().numpy().astype(np.float64)
        return out

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> _Network:
        with torch.no_grad():
            for i, layer in enumerate(self.dense, start=1):
                layer.weight.copy_(torch.from_numpy(np.asarray(arrays[f"W{i}"], dtype=np.float32).T))
                layer.bias.copy_(torch.from_numpy(np.asarray(arrays[f"b{i}"], dtype=np.float32)))
        return self


class SegmentSumMLP(BaseEstimator):
    """The ``mlp`` cost model. Input: (records x stores x 164) with NaN rows as padding
    (``features.stack_per_store``). ``n_jobs``: torch threads during fit and predict."""

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
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        self.hidden = hidden
        self.n_steps = n_steps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.rank_weight = rank_weight
        self.grad_clip = grad_clip
        self.n_jobs = n_jobs
        self.seed = seed

    def _prepare(self, X: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Standardised features with padding rows zeroed, and the store mask."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[2] != N_STORE_FEATURES:
            raise ValueError(f"mlp takes per-store input (n, stores, {N_STORE_FEATURES}), not {X.shape}")
        mask = store_mask(X)
        Z = np.where(mask[..., None], (X - self.mean_) / self.scale_, 0.0)
        return torch.from_numpy(Z.astype(np.float32)), torch.from_numpy(mask.astype(np.float32))

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> SegmentSumMLP:
        X = np.asarray(X, dtype=np.float64)
        rows = X[store_mask(X)] if X.ndim == 3 else X.reshape(0, N_STORE_FEATURES)
        self.mean_ = rows.mean(axis=0)
        self.scale_ = np.where(rows.std(axis=0) > 1e-6, rows.std(axis=0), 1.0)
        Z, mask = self._prepare(X)
        y_t = torch.as_tensor(np.asarray(y, dtype=np.float32))
        g_t = torch.as_tensor(np.zeros(len(y), dtype=np.int64) if groups is None else np.asarray(groups))
        rng = np.random.default_rng(self.seed)
        with session(self.seed, self.n_jobs):
            net = _Network(self.hidden)
            weights = [p for name, p in net.named_parameters() if name.endswith("weight")]
            biases = [p for name, p in net.named_parameters() if name.endswith("bias")]
            optimiser = torch.optim.Adam([{"params": weights, "weight_decay": self.weight_decay},
                                          {"params": biases, "weight_decay": 0.0}], lr=self.learning_rate)
            warmup = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: min(1.0, (step + 1) / _WARMUP_STEPS))
            n = len(y_t)
            order, cursor = rng.permutation(n), 0
            for _ in range(self.n_steps):
                if n <= self.batch_size:
                    idx = np.arange(n)
                else:
                    if cursor + self.batch_size > n:
                        order, cursor = rng.permutation(n), 0
                    idx = order[cursor:cursor + self.batch_size]
                    cursor += self.batch_size
                pred = net(Z[idx], mask[idx])
                loss = torch.mean((pred - y_t[idx]) ** 2)
                if self.rank_weight > 0:
                    loss = loss + self.rank_weight * pair_loss(pred, y_t[idx], g_t[idx])
                optimiser.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), self.grad_clip)
                optimiser.step()
                warmup.step()
        self.network_ = net.eval()
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "network_"):
            raise RuntimeError("fit the model before predict")
        Z, mask = self._prepare(X)
        with session(self.seed, self.n_jobs), torch.no_grad():
            return self.network_(Z, mask).numpy().astype(np.float64)

    def save(self, path: str) -> None:
        arrays = {}
        if hasattr(self, "network_"):
            arrays = {**self.network_.to_arrays(), "mean": self.mean_, "scale": self.scale_}
        write_npz(path, {"family": "mlp", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> SegmentSumMLP:
    model = SegmentSumMLP(**header["params"])
    if "W1" in arrays:
        model.network_ = _Network(model.hidden).load_arrays(arrays).eval()
        model.mean_, model.scale_ = arrays["mean"], arrays["scale"]
    return model


def load(path: str) -> SegmentSumMLP:
    """Load a model written by :meth:`SegmentSumMLP.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0) -> SegmentSumMLP:
    """Registry factory for ``mlp``."""
    return SegmentSumMLP(seed=seed)
