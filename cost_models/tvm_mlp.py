"""``tvm-mlp``: MetaSchedule's own ``MLPModel`` (``s_tir.meta_schedule.cost_model.mlp_model``), driven through
its ``update``/``predict`` API: the learned anchor, as ``tvm-xgb`` is the tree one.

What is TVM's: the network (``SegmentSumMLP``: per-store encoder, segment sum, two residual layers), the
trainer (``SegmentSumMLPTrainer.train_full``: Adam, StepLR, LambdaRank loss on ``min_cost / cost``, batches of
128 across tasks, a share of the tasks held out to pick the epoch with the lowest held-out loss), its features
(``PerStoreFeature(extract_workload=True)``: the 164 per-store features plus 8 describing the workload) and
their normalisation (each loader divides by its own column maxima). As with ``tvm-xgb``, ``fit`` hands it one
task at a time through ``MLPModel.update`` and lets it train once, after the last task.

What TVM 0.27's wheel needs to run with PyTorch 2.13 at all, set for the duration of a fit or predict only:

- ``train_full`` builds ``StepLR(..., verbose=True)``; torch 2.13's schedulers no longer take ``verbose``
  (a TypeError): the scheduler it gets accepts and drops that argument.
- ``SegmentSumMLP.forward`` ends in ``squeeze()``, which turns a batch of one (a task's last partial batch,
  a one-candidate predict) into a 0-d tensor that its loss and ``np.concatenate`` reject: the network
  here is TVM's class with that output kept 1-D (the same weights).
- ``train_full`` holds out ``floor(tasks x test_split)`` tasks; with fewer than 1/``test_split`` tasks that is
  none and it fails on an empty loader, so ``test_split`` is raised to one task's share. With a single task
  it cannot hold one out at all: the model then trains with TVM's ``train_incremental`` for as many epochs.
- It saves its best epoch to ``tempfile.NamedTemporaryFile().name`` and never deletes it: the file goes to a
  temporary directory removed after the fit. Its task split uses Python's global ``random``: seeded from
  ``seed`` and restored afterwards, as torch's RNG (``_torch.session``).

Saved as its network's weights (``.npz``, no pickle); TVM's own ``save`` pickles its feature cache.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import random
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator

from autosearch.cost_models._io import read_npz, write_npz
from autosearch.cost_models._torch import load_state, session, state_arrays
from autosearch.cost_models._tvm_programs import KnownFeatures, groups_of, own_extractor

INPUT_DIM = 172  # PerStoreFeature(extract_workload=True): 164 per-store + 8 workload features


@contextlib.contextmanager
def _runnable(seed: int) -> Iterator[None]:
    """The settings of TVM's trainer that 0.27 + torch 2.13 need (see the module docstring), for one call.
    Its logger (``mlp_model``) reports every epoch's loss at INFO, 50 lines a fit: a comparison of 36 folds
    would bury its own progress in them, so they show only when DEBUG is on (``-v``)."""
    logger = logging.getLogger("mlp_model")
    old_level = logger.level
    if not logger.isEnabledFor(logging.DEBUG):
        logger.setLevel(logging.WARNING)
    scheduler = torch.optim.lr_scheduler.StepLR
    if "verbose" not in inspect.signature(scheduler.__init__).parameters:

        class StepLR(scheduler):  # type: ignore[valid-type, misc]
            def __init__(self, *args: Any, verbose: Any = None, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)

        torch.optim.lr_scheduler.StepLR = StepLR  # type: ignore[misc]
    old_tempdir, old_random = tempfile.tempdir, random.getstate()
    try:
        with tempfile.TemporaryDirectory(prefix="autosearch-tvm-mlp-") as scratch:
            tempfile.tempdir = scratch
            random.seed(seed)
            yield
    finally:
        torch.optim.lr_scheduler.StepLR = scheduler  # type: ignore[misc]
        logger.setLevel(old_level)
        tempfile.tempdir = old_tempdir
        random.setstate(old_random)


def _network(hidden_dim: int):
    """TVM's ``SegmentSumMLP`` with its output kept 1-D for a batch of one."""
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import SegmentSumMLP

    class Network(SegmentSumMLP):
        def forward(self, segment_sizes, features):  # type: ignore[override]
            return super().forward(segment_sizes, features).reshape(-1)

    return Network(input_dim=INPUT_DIM, hidden_dim=hidden_dim)


class TVMMLPModel(BaseEstimator):
    """Wrapper that gives MetaSchedule's ``MLPModel`` the ``fit``/``predict`` shape of a CostModel. Defaults
    are TVM's (``TrainerConfig``, ``SegmentSumMLPConfig``); ``n_jobs``: torch threads during fit and predict."""

    input_kind = "program"

    def __init__(self, *, hidden_dim: int = 256, batch_size: int = 128, learning_rate: float = 7e-4,
                 weight_decay: float = 1e-6, num_epoch_full: int = 50, grad_clip_norm: float = 0.5,
                 test_split: float = 0.2, n_jobs: int = 1, seed: int = 0) -> None:
        self.hidden_dim = hidden_dim
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.num_epoch_full = num_epoch_full
        self.grad_clip_norm = grad_clip_norm
        self.test_split = test_split
        self.n_jobs = n_jobs
        self.seed = seed

    def _make(self, n_tasks: int = 1):
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import MLPModel, SegmentSumMLPTrainer, State, TrainerConfig
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

        config = TrainerConfig(
            batch_size=self.batch_size, learning_rate=self.learning_rate, weight_decay=self.weight_decay,
            num_epoch_full=self.num_epoch_full, num_epoch_incremental=self.num_epoch_full,
            grad_clip_norm=self.grad_clip_norm, test_split=max(self.test_split, (1.0 + 1e-9) / max(n_tasks, 1)),
        )
        state = State(extractor=PerStoreFeature(extract_workload=True))
        state.model = _network(self.hidden_dim)
        return MLPModel(trainer=SegmentSumMLPTrainer(train_config=config, state=state))

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> TVMMLPModel:
        """One ``MLPModel.update`` per task (TVM groups records by task), one training at the end."""
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        y = np.asarray(y, dtype=np.float64)
        tasks = list(groups_of(X).items())
        with _runnable(self.seed), session(self.seed, self.n_jobs):
            model = self._make(len(tasks))
            trainer = model.trainer
            trainer.state.extractor = KnownFeatures(trainer.state.extractor, X)
            for n, (_, rows) in enumerate(tasks):
                # frozen: only add the records; the last task's update trains on all of them (train_full)
                trainer.frozen = n < len(tasks) - 1 or len(tasks) == 1
                results = [RunnerResult(run_secs=[float(1.0 / max(y[i], 1e-9))], error_msg=None) for i in rows]
                model.update(X[rows[0]].context, [X[i].candidate for i in rows], results)
            if len(tasks) == 1:
                [group] = trainer.state.data.values()
                trainer.train_incremental(group.features, group.costs)
        self.model_ = model
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if not hasattr(self, "model_"):
            raise RuntimeError("fit the model before predict")
        state = self.model_.trainer.state
        out = np.zeros(len(X), dtype=np.float64)
        with _runnable(self.seed), session(self.seed, self.n_jobs):
            state.extractor = KnownFeatures(own_extractor(state.extractor), X)
            for rows in groups_of(X).values():
                out[rows] = self.model_.predict(X[rows[0]].context, [X[i].candidate for i in rows])
        return out

    def save(self, path: str) -> None:
        arrays = state_arrays(self.model_.trainer.state.model, "w_") if hasattr(self, "model_") else {}
        write_npz(path, {"family": "tvm-mlp", "params": self.get_params()}, arrays)


def load_from(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> TVMMLPModel:
    model = TVMMLPModel(**header["params"])
    if arrays:
        inner = model._make()
        load_state(inner.trainer.state.model, arrays, "w_")
        model.model_ = inner
    return model


def load(path: str) -> TVMMLPModel:
    """Load a model written by :meth:`TVMMLPModel.save`."""
    return load_from(*read_npz(path))


def create(name: str, *, seed: int = 0) -> TVMMLPModel:
    """Registry factory for ``tvm-mlp``."""
    return TVMMLPModel(seed=seed)
