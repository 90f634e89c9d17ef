"""Leave one task out: the question a tuner asks of what it learned elsewhere, brought to a new task."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import numpy as np


def without_task(logs: Sequence, task_key: str) -> list:
    """Warm-start logs (``LogContents``) minus every record and header of the task under test: a model must
    transfer to it, not recall it."""
    return [dataclasses.replace(c, tasks={k: v for k, v in c.tasks.items() if k != task_key},
                                records=[r for r in c.records if r.task_key != task_key]) for c in logs]


def task_splits(groups: np.ndarray, folds: Iterable[int]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(held-out group, train mask, test mask) for each group in ``folds``: train on every other task's rows."""
    groups = np.asarray(groups)
    for g in folds:
        test = groups == g
        yield g, ~test, test
