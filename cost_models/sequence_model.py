"""``seq``: a TLP-style cost model: attention over the tokens of a schedule's trace, ranked within each task.

TLP (ASPLOS'23) scores a schedule from the sequence of its schedule primitives rather than from features of
the program they produce: each step becomes a vector, a self-attention network reads the sequence, and a
LambdaRank loss trains it to order the schedules of one task. Here the steps are MetaSchedule's trace
instructions (:mod:`autosearch.cost_models.trace_tokens`: kind, names, decision, resolved integer inputs), and:

- embedding: per token, the sum of learned embeddings of its kind, name and literal (hash buckets), a
  linear map of its numbers (standardised on the training tokens) and of its position in the trace;
- encoder: a small pre-norm ``nn.TransformerEncoder`` over the tokens (padding masked);
- pooling: attention pooling (a learned score per token, softmax over the trace), so a model sees the
  instructions that matter (the tiles, the unroll) wherever the sketch put them;
- ``seq@sequence+loop`` (``+asm``): the loop (+ assembly) features of the program, standardised, through a
  dense layer, concatenated to the pooled trace before the head: what a replay of the trace tells
  (vector loop, unrolled body, cache traffic) beside what the decisions were;
- loss: RankNet pairs within a task weighted by LambdaRank's |delta NDCG| (``_torch.lambda_weights``), so
  swaps near the top of a task's ranking, which top-1 measures, cost most. Each step draws
  ``tasks_per_step`` tasks and up to ``records_per_task`` records of each: every pair compared is of one task.

Scores have no scale (a ranker: ``is_ranker``); only the order within a task means anything. The number of
steps follows the data (``n_epochs`` passes over the records, between ``min_steps`` and ``max_steps``), so
the committed 160-record dataset fits in seconds and a 10,000-record one still sees each record many times.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator
from torch import nn

from autosearch.cost_models._io import read_npz, write_npz
from autosearch.cost_models._torch import fit_ranker, load_state, ranking_steps, session, state_arrays
from autosearch.cost_models.features import SEQUENCE_KINDS, vector_width
from autosearch.cost_models.trace_tokens import BUCKETS, N_KINDS, NUMERIC, split_sequence_input
from autosearch.errors import UserError

_FLAG = 3  # the postproc flag column: fed with the numbers
_PREDICT_CHUNK = 512  # records per forward pass when predicting (bounds memory on large calls)


class _Network(nn.Module):
    def __init__(self, *, d_model: int, heads: int, layers: int, dropout: float, vector: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.kind = nn.Embedding(N_KINDS, d_model)
        self.name = nn.Embedding(BUCKETS, d_model)
        self.literal = nn.Embedding(BUCKETS, d_model)
        self.numbers = nn.Linear(NUMERIC.stop - _FLAG, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.encoder = None
        if layers:
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=dropout,
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.token = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_model), nn.ReLU())
        self.attend = nn.Linear(d_model, 1)
        self.vector = nn.Sequential(nn.Linear(vector, d_model), nn.ReLU()) if vector else None
        self.head = nn.Sequential(nn.Linear(d_model * (2 if vector else 1), d_model), nn.ReLU(), nn.Linear(d_model, 1))

    def forward(self, ids: torch.Tensor, numbers: torch.Tensor, mask: torch.Tensor,
                vector: torch.Tensor | None) -> torch.Tensor:
        positions = torch.arange(ids.shape[1]).clamp_max(self.max_len - 1)
        h = (self.kind(ids[..., 0]) + self.name(ids[..., 1]) + self.literal(ids[..., 2])
             + self.numbers(numbers) + self.position(positions)[None])
        if self.encoder is not None:
            h = self.encoder(h, src_key_padding_mask=~mask)
        h = self.token(h)
        weights = torch.softmax(self.attend(h)[..., 0].masked_fill(~mask, -torch.inf), dim=1)
        pooled = (weights[..., None] * h).sum(dim=1)
        if self.vector is not None:
            pooled = torch.cat([pooled, self.vector(vector)], dim=-1)
        return self.head(pooled)[:, 0]


class SequenceRanker(BaseEstimator):
    """The ``seq`` cost model. Input: ``input_kind`` (``sequence``, ``sequence+loop``, ``sequence+loop+asm``)
    as ``FeatureDataset.X`` gives it. ``n_jobs``: torch threads during fit and predict."""

    is_ranker = True

    def __init__(
        self,
        *,
        input_kind: str = "sequence",
        d_model: int = 32,
        heads: int = 2,
        layers: int = 1,
        dropout: float = 0.1,
        n_epochs: int = 20,
        min_steps: int = 150,
        max_steps: int = 3000,
        tasks_per_step: int = 4,
        records_per_task: int = 16,
        learning_rate: float = 2e-3,
        weight_decay: float = 1e-4,
        gain_scale: float = 4.0,
        grad_clip: float = 1.0,
        max_len: int = 256,
        n_jobs: int = 1,
        seed: int = 0,
    ) -> None:
        self.input_kind = input_kind
        self.d_model = d_model
        self.heads = heads
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
        self.max_len = max_len
        self.n_jobs = n_jobs
        self.seed = seed

    def _network(self) -> _Network:
        return _Network(d_model=self.d_model, heads=self.heads, layers=self.layers, dropout=self.dropout,
                        vector=vector_width(self.input_kind), max_len=self.max_len)

    def _tensors(self, X: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(ids, standardised numbers, mask, standardised vector) of a model input, padding zeroed."""
        vectors, tokens = split_sequence_input(X, vector_width(self.input_kind))
        mask = ~np.isnan(tokens[..., 0])
        tokens = np.where(mask[..., None], tokens, 0.0)
        ids = tokens[..., :_FLAG].astype(np.int64)
        numbers = np.where(mask[..., None], (tokens[..., _FLAG:NUMERIC.stop] - self.number_mean_) / self.number_scale_,
                           0.0)
        vector = None
        if vectors.shape[1]:
            vector = torch.from_numpy(((vectors - self.vector_mean_) / self.vector_scale_).astype(np.float32))
        return (torch.from_numpy(ids), torch.from_numpy(numbers.astype(np.float32)), torch.from_numpy(mask), vector)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> SequenceRanker:
        vectors, tokens = split_sequence_input(X, vector_width(self.input_kind))
        real = tokens[~np.isnan(tokens[..., 0])][:, _FLAG:NUMERIC.stop]
        self.number_mean_ = real.mean(axis=0)
        self.number_scale_ = np.where(real.std(axis=0) > 1e-6, real.std(axis=0), 1.0)
        self.vector_mean_ = vectors.mean(axis=0)
        self.vector_scale_ = np.where(vectors.std(axis=0) > 1e-6, vectors.std(axis=0), 1.0)
        ids, numbers, mask, vector = self._tensors(X)
        lengths = mask.sum(dim=1).numpy()
        steps = ranking_steps(len(y), n_epochs=self.n_epochs, min_steps=self.min_steps, max_steps=self.max_steps,
                              per_step=self.tasks_per_step * self.records_per_task)
        with session(self.seed, self.n_jobs):
            net = self._network()

            def score(idx: np.ndarray) -> torch.Tensor:
                width = int(lengths[idx].max())
                return net(ids[idx, :width], numbers[idx, :width], mask[idx, :width],
                           None if vector is None else vector[idx])

            self.network_ = fit_ranker(net, score, y, groups, name="seq", steps=steps,
                                       learning_rate=self.learning_rate, weight_decay=self.weight_decay,
                                       grad_clip=self.grad_clip, tasks_per_step=self.tasks_per_step,
                                       records_per_task=self.records_per_task, gain_scale=self.gain_scale,
                                       rng=np.random.default_rng(self.seed))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "network_"):
            raise RuntimeError("fit the model before predict")
        ids, numbers, mask, vector = self._tensors(X)
        out = np.zeros(len(ids), dtype=np.float64)
        with session(self.seed, self.n_jobs), torch.no_grad():
            for start in range(0, len(ids), _PREDICT_CHUNK):
                part = slice(start, start + _PREDICT_CHUNK)
                width = max(1, int(mask[part].sum(dim=1).max())) if len(ids) else 1
                out[part] = self.network_(ids[part, :width], numbers[part, :width], mask[part, :width],
                                          None if vector is None else vector[part]).numpy()
        return out

    def save(self, path: str) -> None:
        arrays: dict[str, np.ndarray] = {}
        if hasattr(self, "network_"):
            arrays = {**state_arrays(self.network_, "w_"), "number_mean": self.number_mean_,
                      "number_scale": self.number_scale_, "vector_mean": self.vector_mean_,
                      "vector_scale": self.vector_scale_}
        write_npz(path, {"family": "seq", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> SequenceRanker:
    model = SequenceRanker(**header["params"])
    if arrays:
        for name in ("number_mean", "number_scale", "vector_mean", "vector_scale"):
            setattr(model, f"{name}_", arrays[name])
        model.network_ = load_state(model._network(), arrays, "w_").eval()
    return model


def load(path: str) -> SequenceRanker:
    """Load a model written by :meth:`SequenceRanker.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0, input_kind: str = "sequence") -> SequenceRanker:
    """Registry factory for ``seq`` (``seq@sequence+loop``: joined with the loop features)."""
    if input_kind not in SEQUENCE_KINDS:
        raise UserError(f"cost model {name!r} reads trace tokens: its features are one of {', '.join(SEQUENCE_KINDS)}")
    return SequenceRanker(input_kind=input_kind, seed=seed)
