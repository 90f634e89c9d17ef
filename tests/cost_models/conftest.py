"""Fixtures for the cost-model tests: the committed dataset, featurised once per session.

``tests/data/small_dataset.jsonl`` holds 4 tiny-YOLOv2 conv tasks x 40 measured configs (random and
mutations of the best), made by ``experiments/make_dataset.py --tasks 8,6,5,4 --per-task 40``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASET = os.path.join(TESTS, "data", "small_dataset.jsonl")
HELD_OUT = 2  # task index held out by the contract tests (conv2d 128->256 at 26x26)


@pytest.fixture(autouse=True)
def feature_cache(tmp_path_factory, monkeypatch) -> str:
    """Each test's own feature cache directory: scorers and compare_models default to the user's cache,
    which tests must neither read (a stale entry would hide a bug) nor fill."""
    from autosearch.cost_models.feature_store import CACHE_ENV

    path = str(tmp_path_factory.mktemp("feature-cache"))
    monkeypatch.setenv(CACHE_ENV, path)
    return path


@pytest.fixture(scope="session")
def dataset_path() -> str:
    return DATASET


@pytest.fixture(scope="session")
def contents():
    from autosearch.records import read_log

    return read_log(DATASET)


@pytest.fixture(scope="session")
def dataset(contents):
    from autosearch.cost_models.features import build_dataset

    return build_dataset([contents])  # every input kind


@pytest.fixture(scope="session")
def split(dataset):
    """(train rows, test rows): all tasks but HELD_OUT, and HELD_OUT."""
    return np.flatnonzero(dataset.groups != HELD_OUT), np.flatnonzero(dataset.groups == HELD_OUT)


@pytest.fixture(scope="session")
def task_spaces(contents):
    """task key -> (TuningTask rebuilt from its log header, its DecisionSpace), in log order."""
    from autosearch.frontend.task import TuningTask
    from autosearch.search.space import DecisionSpace

    out = {}
    for key, header in contents.tasks.items():
        task = TuningTask.from_json(header)
        out[key] = (task, DecisionSpace(task.mod, task.target))
    return out


@pytest.fixture(scope="session")
def held_out_task(contents, task_spaces):
    """The HELD_OUT task (in order of first valid trial, as ``dataset.task_keys``) and its DecisionSpace."""
    keys = list(dict.fromkeys(r.task_key for r in contents.trials() if r.ok))
    return task_spaces[keys[HELD_OUT]]
