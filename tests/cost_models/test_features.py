"""Program features from log records: shapes, pooling, and agreement with DecisionSpace.apply."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.cost_models.features import (
    N_STORE_FEATURES,
    POOLED_WIDTH,
    TaskFeaturizer,
    build_dataset,
    normalised_throughput,
    pool,
    stack_per_store,
    store_mask,
)
from tests.cost_models.conftest import first_records


def test_dataset_from_committed_log(contents, dataset):
    assert len(dataset) == 160 and len(dataset.task_keys) == 4
    assert np.bincount(dataset.groups).tolist() == [40, 40, 40, 40]
    assert all(1 <= m.shape[0] <= 3 and m.shape[1] == N_STORE_FEATURES for m in dataset.per_store)
    assert all(np.isfinite(m).all() for m in dataset.per_store)
    # the features tell configs apart: no two records of a task share a feature matrix
    for g in range(4):
        rows = {dataset.per_store[i].tobytes() for i in np.flatnonzero(dataset.groups == g)}
        assert len(rows) >= 38  # a decision may leave the program unchanged (e.g. unroll of a short loop)
    y = dataset.y
    for g in range(4):
        assert y[dataset.groups == g].max() == 1.0
    assert (y > 0).all() and (y <= 1).all()
    few = build_dataset([first_records(contents)], kinds=("pooled",))  # featurised here, not read from a store
    assert 0 < few.secs_per_record < 0.5  # trace replay + extraction, seconds per record


def test_model_inputs(dataset):
    pooled = dataset.X("pooled")
    assert pooled.shape == (160, POOLED_WIDTH) and np.isfinite(pooled).all()
    per_store = dataset.X("per_store")
    assert per_store.shape[0] == 160 and per_store.shape[2] == N_STORE_FEATURES
    assert store_mask(per_store).sum(axis=1).tolist() == [m.shape[0] for m in dataset.per_store]
    encoding = dataset.X("encoding")
    assert encoding.shape[0] == 160 and encoding.shape[1] > 10
    programs = dataset.X("program", rows=np.arange(3))
    assert programs.dtype == object and len(programs) == 3
    with pytest.raises(ValueError):
        dataset.X("pixels")


def test_pool_hand_example():
    a = np.zeros((2, N_STORE_FEATURES), dtype=np.float32)
    a[0, 0], a[1, 0], a[1, 5] = 1.0, 3.0, -2.0
    b = np.ones((1, N_STORE_FEATURES), dtype=np.float32)
    out = pool([a, b], [1024.0, 2.0])
    n = N_STORE_FEATURES
    assert out[0, 0] == 4.0 and out[0, n] == 3.0 and out[0, 2 * n] == 2.0  # sum, max, mean of feature 0
    assert out[0, 5] == -2.0 and out[0, n + 5] == 0.0 and out[0, 2 * n + 5] == -1.0
    assert out[0, -1] == 10.0 and out[1, -1] == 1.0  # log2 FLOPs
    stacked = stack_per_store([a, b])
    assert stacked.shape == (2, 2, n) and np.isnan(stacked[1, 1]).all()
    np.testing.assert_array_equal(pool(stacked, [1024.0, 2.0]), out)


def test_normalised_throughput():
    y = normalised_throughput(np.array([2.0, 1.0, 4.0, 10.0, 5.0]), np.array([0, 0, 0, 1, 1]))
    np.testing.assert_allclose(y, [0.5, 1.0, 0.25, 0.5, 1.0])


def test_replayed_trace_matches_applied_config(contents, dataset, held_out_task):
    """The dataset path (replay the logged trace) and the scorer path (space.apply) give one program."""
    task, space = held_out_task
    feat = TaskFeaturizer(task)
    records = [r for r in contents.trials(task.workload_key) if r.ok]
    applied = [space.apply(r.config) for r in records]
    # Some effective configs hold a compute location TVM chose for their tiles, which apply() refuses
    # (it checks the sketch's listed locations): 6 of 40 here.
    assert sum(a.ok for a in applied) >= 30
    pairs = [(r, a) for r, a in zip(records, applied) if a.ok][:6]
    records, applied = [r for r, _ in pairs], [a for _, a in pairs]
    assert all(a.config == r.config for r, a in pairs)
    from_traces = feat.per_store([feat.schedule_from_trace(r.trace) for r in records])
    from_apply = feat.per_store([feat.schedule_from_mod(a.mod) for a in applied])
    for x, z in zip(from_traces, from_apply):
        np.testing.assert_array_equal(x, z)
