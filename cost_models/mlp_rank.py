"""``mlp-rank``: an MLP that ranks the configs of a task from one feature vector (the loop features by default).

Tree ensembles lead on the loop features because speed changes by steps: a vector loop that just fits the
registers, an unroll budget crossed, a tile that leaves a cache. An MLP fed the standardised features sees each
one as a single linear direction and must build every step from ReLUs. Here each feature also enters as a
*piecewise-linear encoding* (Gorishniy et al., "On Embeddings for Numerical Features in Tabular Deep Learning",
NeurIPS 2022): its position within each of ``bins`` quantile bins of the training data, clipped to [0, 1]. The
first layer can then bend at any quantile of any feature, which is what a tree's split does, and it keeps the
standardised value beside it for what is smooth.

Loss: RankNet over pairs of records of one task (``_torch.fit_ranker``: each step draws ``tasks_per_step``
tasks), no regression term: a normalised throughput of one task means nothing next to another's, only the
order within a task is learnt. ``gain_scale`` adds ``seq``'s LambdaRank weights; they are off by default.

The defaults (and the encoding, and plain RankNet over LambdaRank) were chosen leaving one network out on the
36-task study dataset (``experiments/cost_model_study.py``; README, cost models), where this is the first
learned model that reaches the trees. Scores have no scale (``is_ranker``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import nn

from autosearch.cost_models._io import read_npz, write_npz
from autosearch.cost_models._torch import fit_ranker, load_state, ranking_steps, session, state_arrays
from autosearch.cost_models.features import tabular_kind


class PiecewiseLinear:
    """The input encoding: standardised features, then for each feature and each of its quantile bins (edges
    from the training rows, repeated edges merged) ``clip((x - lo) / (hi - lo), 0, 1)``. A feature constant
    in training has no bins. ``lo``/``hi``: (features x bins), a missing bin has ``lo = hi = inf`` (always 0)."""

    def __init__(self, X: np.ndarray, bins: int) -> None:
        self.mean = X.mean(axis=0)
        std = X.std(axis=0)
        self.scale = np.where(std > 1e-6, std, 1.0)
        self.lo = np.full((X.shape[1], bins), np.inf)
        self.hi = np.full((X.shape[1], bins), np.inf)
        for j in range(X.shape[1]):
            edges = np.unique(np.quantile(X[:, j], np.linspace(0.0, 1.0, bins + 1)))
            self.lo[j, :len(edges) - 1], self.hi[j, :len(edges) - 1] = edges[:-1], edges[1:]

    @property
    def width(self) -> int:
        return self.lo.shape[0] * (1 + self.lo.shape[1])

    def __call__(self, X: np.ndarray) -> torch.Tensor:
        X = np.asarray(X, dtype=np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf of a missing bin: NaN, zeroed below
            position = np.clip((X[:, :, None] - self.lo) / np.maximum(self.hi - self.lo, 1e-9), 0.0, 1.0)
        encoded = np.concatenate([(X - self.mean) / self.scale, np.nan_to_num(position).reshape(len(X), -1)],
                                 axis=1)
        return torch.from_numpy(encoded.astype(np.float32))

    def arrays(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "scale": self.scale, "lo": self.lo, "hi": self.hi}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> PiecewiseLinear:
        encoder = cls.__new__(cls)
        encoder.mean, encoder.scale, encoder.lo, encoder.hi = (arrays[k] for k in ("mean", "scale", "lo", "hi"))
        return encoder


def _network(width: int, hidden: int, layers: int, dropout: float) -> nn.Sequential:
    parts: list[nn.Module] = []
    for _ in range(layers):
        parts += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
        width = hidden
    return nn.Sequential(*parts, nn.Linear(width, 1))


class RankingMLP(BaseEstimator):
    """The ``mlp-rank`` cost model. Input: one feature vector per record (``input_kind``, a tabular kind).
    ``n_jobs``: torch threads during fit and predict."""

    is_ranker = True

    def __init__(
        self,
        *,
        input_kind: str = "loop",
        bins: int = 16,
        hidden: int = 128,
        layers: int = 2,
        dropout: float = 0.1,
        n_epochs: int = 30,
        min_steps: int = 200,
        max_steps: int = 4000,
        tasks_per_step: int = 4,
        records_per_task: int = 32,
        learning_rate: float = 2e-3,
        weight_decay: float = 1e-4,
        gain_scale: float | None = None,
        grad_clip: float = 1.0,
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        self.input_kind = input_kind
        self.bins = bins
        self.hidden = hidden
        self.layers = layers
        self.dropout = dropout
        self.n_epochs = n_epochs
        self.min_steps = min_steps
        self.max_steps = max_steps
        self.tasks_per_step = tasks_per_step
        self.records_per_task = records_per_task
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.gain_scale = gain_scale
        self.grad_clip = grad_clip
        self.n_jobs = n_jobs
        self.seed = seed

    def _network(self) -> nn.Sequential:
        return _network(self.encoder_.width, self.hidden, self.layers, self.dropout)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> RankingMLP:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"mlp-rank takes one feature vector per record, not an array of shape {X.shape}")
        self.encoder_ = PiecewiseLinear(X, self.bins)
        Z = self.encoder_(X)
        steps = ranking_steps(len(X), n_epochs=self.n_epochs, min_steps=self.min_steps, max_steps=self.max_steps,
                              per_step=self.tasks_per_step * self.records_per_task)
        with session(self.seed, self.n_jobs):
            net = self._network()
            self.network_ = fit_ranker(net, lambda rows: net(Z[rows])[:, 0], y, groups, name="mlp-rank", steps=steps,
                                       learning_rate=self.learning_rate, weight_decay=self.weight_decay,
                                       grad_clip=self.grad_clip, tasks_per_step=self.tasks_per_step,
                                       records_per_task=self.records_per_task, gain_scale=self.gain_scale,
                                       rng=np.random.default_rng(self.seed))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "network_"):
            raise RuntimeError("fit the model before predict")
        with session(self.seed, self.n_jobs), torch.no_grad():
            return self.network_(self.encoder_(X))[:, 0].numpy().astype(np.float64)

    def save(self, path: str) -> None:
        arrays: dict[str, np.ndarray] = {}
        if hasattr(self, "network_"):
            arrays = {**state_arrays(self.network_, "w_"), **self.encoder_.arrays()}
        write_npz(path, {"family": "mlp-rank", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> RankingMLP:
    model = RankingMLP(**header["params"])
    if arrays:
        model.encoder_ = PiecewiseLinear.from_arrays(arrays)
        model.network_ = load_state(model._network(), arrays, "w_").eval()
    return model


def load(path: str) -> RankingMLP:
    """Load a model written by :meth:`RankingMLP.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0, input_kind: str = "loop") -> RankingMLP:
    """Registry factory for ``mlp-rank`` (``mlp-rank@loop+asm`` and the other tabular feature sets)."""
    return RankingMLP(input_kind=tabular_kind(name, input_kind), seed=seed)
