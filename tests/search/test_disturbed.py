"""A timing whose repeats split (a fast few, a slow majority), or whose threads waited for a core through much of it,
is the machine's, not the kernel's: the tuner times that kernel again once its batch is done and logs the steadier
timing with a note."""

from __future__ import annotations

import dataclasses

import pytest

from autosearch.search.disturbed import steadier
from autosearch.types import MeasureResult, Status

MS = 1e-3


def _result(*latencies_ms: float, error: str = "", run_secs: float = 0.0, waited: float | None = None) -> MeasureResult:
    return MeasureResult(Status.OK, tuple(x * MS for x in latencies_ms), error=error, run_secs=run_secs, waited=waited)


def test_repeats_that_split_are_disturbed_and_a_quiet_spread_or_a_uniform_slowdown_is_not():
    assert _result(0.045, 0.05, *[3.9] * 28).disturbed  # a timeslice wait on most repeats (seen on the AMX Xeon)
    assert not _result(*[0.030 + 0.001 * i for i in range(30)]).disturbed  # a few percent apart
    assert not _result(*[2.0] * 30).disturbed  # slow throughout: nothing in the repeats says so,
    assert _result(*[3.9] * 30, waited=0.45).disturbed  # but its threads' waiting for a core does
    assert not _result(*[2.0] * 30, waited=0.01).disturbed  # a tick's wait here and there is not a slow spell
    assert not _result(0.04, 3.9, 3.9, 3.9).disturbed  # too few repeats to tell
    assert not MeasureResult.failed(Status.RUN_ERROR, "boom").disturbed


def test_the_second_timing_is_kept_unless_it_failed_or_reads_slower_and_either_way_it_is_noted():
    first = _result(0.045, *[3.9] * 29, error="timed once: something before", run_secs=0.5)
    calm = _result(*[0.04] * 30, run_secs=0.2)
    kept = steadier(first, calm)
    assert kept.latencies == calm.latencies and "kept the second" in kept.error and "3.9 ms" in kept.error
    assert kept.run_secs == pytest.approx(0.7)  # the trial's wall time is both measurements
    worse = _result(*[5.0] * 30)
    kept = steadier(first, worse)
    assert kept.latencies == first.latencies and "kept the first" in kept.error
    assert kept.error.startswith("timed once: something before; ")
    kept = steadier(first, MeasureResult.failed(Status.WORKER_CRASHED, "died"))
    assert kept.latencies == first.latencies and kept.ok
    kept = steadier(_result(*[3.9] * 30, waited=0.45), calm)
    assert kept.latencies == calm.latencies and "its threads waited for a core 45% of it" in kept.error


@pytest.mark.slow
def test_a_disturbed_trial_is_timed_again_after_its_batch_and_logged_with_the_second_timing(tmp_path, conv_task):
    """The runner is the real one; only the first timing of the batch's first kernel is made to look as a slow
    spell of the machine makes it look (its fast repeats kept, the rest 100x slower)."""
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log
    from autosearch.search.tuner import Tuner

    class SlowSpellOnce(LocalRunner):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.calls: list[int] = []

        def measure(self, task, mods):
            results = super().measure(task, mods)
            self.calls.append(len(mods))
            if len(self.calls) == 1 and results[0].ok:
                lat = sorted(results[0].latencies)
                slow = lat[:3] + [x * 100 for x in lat[3:]]
                results[0] = dataclasses.replace(results[0], latencies=tuple(slow))
                self.spoiled = results[0]
            return results

    runner = SlowSpellOnce(target=conv_task.target, evaluator=EvaluatorConfig(repeat=10), run_timeout=10)
    path = str(tmp_path / "run.jsonl")
    try:
        with TuningLog(path) as log:
            Tuner(tasks=[conv_task], runner=runner, log=log, strategy="random", budget=4, batch=4, seed=2,
                  finalist_rounds=0).run()
    finally:
        runner.close()
    # the first batch, then its disturbed kernel again (with any other the machine disturbed meanwhile)
    assert len(runner.calls) >= 2 and 1 <= runner.calls[1] <= runner.calls[0]
    first = read_log(path).trials()[0]
    assert runner.spoiled.disturbed and not first.result.disturbed
    assert first.result.median < runner.spoiled.median / 10
    assert "timed again at the end of its batch" in first.result.error and "kept the second" in first.result.error
    assert len(read_log(path).trials()) == 4
