"""The committed dataset's features (``tests/data/small_dataset_features``), which the cost-model tests read instead
of featurising the dataset in every session, are what the extractors compute now."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from autosearch.cost_models.feature_store import FeatureStore
from autosearch.cost_models.features import build_dataset
from autosearch.records import LogContents
from tests.data.refresh_features import KINDS, STORE, written_for

REFRESH = "stale: rewrite them with `python -m tests.data.refresh_features`"


@pytest.fixture
def committed(tmp_path) -> FeatureStore:
    """A copy of the committed store (reading it as the fixture does, never writing into it)."""
    import tvm

    if written_for() != tvm.__version__:  # their keys name TVM's version: the dataset fixture computes them instead
        pytest.skip(f"the committed features are TVM {written_for()}'s, this is {tvm.__version__}: {REFRESH}")
    shutil.copytree(STORE, tmp_path, dirs_exist_ok=True)
    return FeatureStore(str(tmp_path))


def _sample(contents, per_task: int) -> LogContents:
    """The first and last valid records of every task (mutations of the best come last in the dataset)."""
    records = []
    for key in contents.tasks:
        valid = [r for r in contents.trials(key) if r.ok]
        records += valid[:per_task // 2] + valid[-(per_task - per_task // 2):]
    return LogContents(path=contents.path, tasks=dict(contents.tasks), records=records)


def test_the_committed_store_holds_every_record_of_the_dataset(contents, committed):
    read = build_dataset([contents], kinds=KINDS, store=committed)
    assert len(read) == 160 and read.featurised == 0 and read.cached == 160, REFRESH


def test_the_committed_features_are_the_ones_computed_now(contents, committed):
    sample = _sample(contents, per_task=2)
    fresh = build_dataset([sample], kinds=KINDS)  # no store: every extractor runs
    read = build_dataset([sample], kinds=KINDS, store=committed)
    assert fresh.featurised == len(fresh) == 8 and read.featurised == 0
    for kind in ("loop", "pooled", "asm", "per_store"):  # per_store pads its rows with NaN
        assert np.array_equal(fresh.X(kind), read.X(kind), equal_nan=True), f"{kind} features {REFRESH}"
