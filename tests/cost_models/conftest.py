"""Fixtures for the cost-model tests: the committed dataset, featurised once per session.

``tests/data/small_dataset.jsonl`` holds 4 tiny-YOLOv2 conv tasks x 40 measured configs (random and
mutations of the best), made by ``experiments/make_dataset.py --tasks 8,6,5,4 --per-task 40``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager

import numpy as np
import pytest

from tests.data.refresh_features import DATASET
from tests.data.refresh_features import STORE as COMMITTED_FEATURES

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


def first_records(contents, n: int = 3):
    """The first ``n`` valid records of the first task, with its header: a few records to featurise afresh."""
    from autosearch.records import LogContents

    key = next(iter(contents.tasks))
    records = [r for r in contents.trials(key) if r.ok][:n]
    return LogContents(path=contents.path, tasks={key: contents.tasks[key]}, records=records)


def _tasks_part(contents, part: int, parts: int):
    """Every ``parts``-th task of ``contents`` from the ``part``-th on, with all its records."""
    from autosearch.records import LogContents

    keys = list(contents.tasks)[part::parts]
    return LogContents(path=contents.path, tasks={k: contents.tasks[k] for k in keys},
                       records=[r for r in contents.records if r.task_key in keys])


@contextmanager
def _locked(path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # waits while another worker holds it
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def dataset(contents, tmp_path_factory):
    """The committed dataset with every input kind, its features read from the committed store
    (``tests/data/small_dataset_features``, ``python -m tests.data.refresh_features``; checked against features
    computed afresh by ``test_committed_features.py``): featurising it took each xdist worker a minute (its
    assembly features compile 160 kernels). Where the store misses (another TVM), the workers share the work: each
    featurises its half of the tasks into a feature store in the session's directory, then takes the other half
    from there (featurising it itself if the other worker has not begun it, waiting if it is at it). The
    extraction's own timings are checked on records featurised afresh (``first_records``)."""
    from autosearch.cost_models.feature_store import FeatureStore
    from autosearch.cost_models.features import build_dataset

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    session = tmp_path_factory.getbasetemp()  # a worker's is in the session's directory
    shared = (session.parent if worker else session) / "dataset-features"  # shared by the session's workers
    shared.mkdir(exist_ok=True)
    with _locked(shared / "seed.lock"):  # a copy: tests must not write into the committed store
        if not (shared / "seeded").exists():
            shutil.copytree(COMMITTED_FEATURES, shared, dirs_exist_ok=True)
            (shared / "seeded").touch()
    store = FeatureStore(str(shared))
    mine = int(worker.removeprefix("gw") or 0) % 2
    for part in (mine, 1 - mine) if worker else ():
        with _locked(shared / f"part{part}.lock"):
            done = shared / f"part{part}.done"
            if not done.exists():
                build_dataset([_tasks_part(contents, part, 2)], store=store)
                done.touch()
    return build_dataset([contents], store=store)


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
