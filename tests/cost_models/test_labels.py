"""Labels of a dataset: the re-times in fresh processes where a whole task was re-timed, else the trials' own."""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.cost_models.features import build_dataset, labelled_trials
from autosearch.records import LogContents
from autosearch.types import Config, MeasureResult, Record, Status


def _record(kind: str, key: str, config: Config, latency: float | None, round_no: int = 0) -> Record:
    result = (MeasureResult(Status.OK, latencies=(latency,)) if latency is not None
              else MeasureResult.failed(Status.WRONG_RESULT, "mismatch"))
    return Record(kind=kind, task_key=key, task_name=key, target={}, config=config, result=result, flops=1e9,
                  trace=[[], []], round=round_no)


def _configs(n: int) -> list[Config]:
    return [Config(0, (i,)) for i in range(n)]


def test_labels_are_the_retimes_only_where_a_whole_task_was_retimed():
    a, b, c, d = _configs(4)
    records = [
        # task "all": every trial re-timed in two rounds -> median over rounds of the per-round medians
        _record("trial", "all", a, 1.0), _record("trial", "all", b, 2.0),
        _record("retime", "all", a, 1.5, 1), _record("retime", "all", b, 2.5, 1),
        _record("retime", "all", a, 1.7, 2), _record("retime", "all", b, 2.1, 2),
        # task "some": one trial re-timed (a run's finalists) -> the trials' own timings for every record
        _record("trial", "some", a, 1.0), _record("trial", "some", b, 2.0), _record("retime", "some", a, 0.5, 1),
        # task "failed": a kernel that failed its re-time is left out, the other is labelled by its re-time
        _record("trial", "failed", a, 1.0), _record("trial", "failed", b, 2.0),
        _record("retime", "failed", a, 1.2, 1), _record("retime", "failed", b, None, 1),
        # task "stale": re-timed, then tuned further: re-times before the last trial do not count
        _record("trial", "stale", c, 1.0), _record("retime", "stale", c, 3.0, 1), _record("trial", "stale", d, 2.0),
    ]
    labels = {(r.task_key, r.config): latency for r, latency in labelled_trials(LogContents(path="x", records=records))}
    assert labels == {("all", a): pytest.approx(1.6), ("all", b): pytest.approx(2.3),
                      ("some", a): 1.0, ("some", b): 2.0,
                      ("failed", a): 1.2,
                      ("stale", c): 1.0, ("stale", d): 2.0}


def test_the_dataset_learns_from_the_labels(contents):
    """build_dataset (what compare-models and train-model read) takes the re-timed labels of a re-timed task."""
    key = next(iter(contents.tasks))
    trials = [r for r in contents.trials(key) if r.ok]
    retimes = [Record(kind="retime", task_key=key, task_name=r.task_name, target=r.target, config=r.config,
                      result=MeasureResult(Status.OK, latencies=(2.0 * r.latency,)), flops=r.flops, round=1)
               for r in trials]
    relabelled = LogContents(path="x", tasks=contents.tasks, records=contents.records + retimes)
    before = build_dataset([contents], kinds=("sequence",))
    after = build_dataset([relabelled], kinds=("sequence",))
    mine = after.groups == after.task_keys.index(key)
    np.testing.assert_allclose(after.latency[mine], 2.0 * before.latency[mine])
    np.testing.assert_array_equal(after.latency[~mine], before.latency[~mine])  # other tasks keep their timings
