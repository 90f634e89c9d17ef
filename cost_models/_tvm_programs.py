"""What the wrappers of MetaSchedule's own cost models (``tvm-xgb``, ``tvm-mlp``) share: feeding them features
extracted once, and grouping programs by task.

MetaSchedule's models take programs (``features.Program``: TuneContext + MeasureCandidate) and run their
feature extractor themselves. ``compare-models`` fits one model per held-out task on the same programs, so
their features (the extractor's output) are computed once when the dataset is built, not once per fold:
:class:`KnownFeatures` answers the model's extractor calls from them.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

WORKLOAD_WIDTH = 8  # columns PerStoreFeature(extract_workload=True) appends: the same for every store of a task


class Extracted:
    """A feature matrix with the ``numpy()`` face of the TVM tensor the models expect."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def numpy(self) -> np.ndarray:
        return self.array


class KnownFeatures:
    """An extractor that answers from ``PerStoreFeature`` output already extracted for these candidates.

    ``extractor`` is the model's own one, which unknown candidates (the search loop's) go to. When it is
    ``PerStoreFeature(extract_workload=True)`` (``tvm-mlp``), the known features (extracted without the
    workload columns) get the task's workload columns appended: they depend on the task alone, so one
    extraction per task gives them.
    """

    def __init__(self, extractor, programs) -> None:
        self.extractor = extractor
        self.known = {id(p.candidate): p.features for p in programs if p.features is not None}
        self.programs = list(programs)  # keep the candidates alive while their ids are keys
        self.workload = bool(getattr(extractor, "extract_workload", False))
        self._workload_rows: dict[int, np.ndarray] = {}  # id(context) -> the task's workload columns

    def _with_workload(self, context, candidate, features: np.ndarray) -> np.ndarray:
        if not self.workload:
            return features
        if id(context) not in self._workload_rows:
            [one] = self.extractor.extract_from(context, [candidate])
            self._workload_rows[id(context)] = one.numpy()[0, -WORKLOAD_WIDTH:].astype(features.dtype)
        row = self._workload_rows[id(context)]
        return np.hstack([features, np.broadcast_to(row, (features.shape[0], WORKLOAD_WIDTH))])

    def extract_from(self, context, candidates):
        out = [self.known.get(id(c)) for c in candidates]
        if any(f is None for f in out):
            return self.extractor.extract_from(context, candidates)
        return [Extracted(self._with_workload(context, c, f)) for c, f in zip(candidates, out)]


def groups_of(X: np.ndarray) -> dict[str, list[int]]:
    """Task key -> row indices of the programs of that task, in order of first appearance."""
    by_task: dict[str, list[int]] = OrderedDict()
    for i, program in enumerate(X):
        by_task.setdefault(program.task_key, []).append(i)
    return by_task


def own_extractor(extractor):
    """The model's real extractor behind a :class:`KnownFeatures` (or the extractor itself)."""
    return getattr(extractor, "extractor", extractor)
