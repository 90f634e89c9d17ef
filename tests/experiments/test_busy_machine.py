"""experiments/busy_machine.py: what a run's log says of the timings a busy machine slowed."""

from __future__ import annotations

from autosearch.types import Config, MeasureResult, Record, Status
from experiments.busy_machine import summarise


def _trial(key: str, ms: float, *, kind: str = "trial", error: str = "", waited: float | None = None) -> Record:
    result = MeasureResult(Status.OK, (ms * 1e-3,), error=error, waited=waited)
    return Record(kind=kind, task_key=key, task_name=key, target={}, config=Config(0, ()), result=result, flops=1e9)


def test_slowed_timings_and_those_taken_again_are_counted_by_why_and_by_which_was_kept():
    again = "timed again at the end of its batch: {} (fastest 0.1 ms, median 3.9 ms); kept the {}"
    records = [
        _trial("a", 0.1, waited=0.0), _trial("a", 3.9, waited=0.5),  # slowed at a timeslice, kept as read
        _trial("a", 0.12, waited=0.01, error=again.format("its threads waited for a core 50% of it", "second")),
        _trial("b", 2.0), _trial("b", 0.5, kind="retime"),  # slow against its task's re-timed best
        _trial("b", 0.6, error=again.format("the first timing's repeats split", "first")),
        Record(kind="trial", task_key="b", task_name="b", target={}, config=Config(0, ()), flops=1e9,
               result=MeasureResult.failed(Status.RUN_ERROR, "crashed")),
    ]
    out = summarise(records)
    assert out["ok_trials"] == 5 and out["slow"] == 2 and out["timeslice_stalls"] == 1
    assert out["caught"] == {"repeats split, kept the first": 1, "threads waited, kept the second": 1}
    assert out["caught_total"] == 2 and out["waited_counted"] == 3 and out["waited_over_10pct"] == 1
