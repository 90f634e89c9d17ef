"""The run's progress bar: what it counts, and the line a non-terminal log gets per batch."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from autosearch.frontend.task import TuningTask
from autosearch.progress import TuningProgress
from autosearch.search.scheduler import TaskState
from autosearch.search.tuner import TuneEvent
from autosearch.types import Config, MeasureResult, Status


def _event(trials: int, elapsed: float, budget: int | None) -> TuneEvent:
    task = TuningTask(index=0, name="conv", weight=1, flops=1e9, mod=None, target=None, args=(), workload_key="0")
    return TuneEvent(task=TaskState(task=task), trials_done=trials, budget=budget,
                     batch_results=[MeasureResult(Status.OK, (1e-3,))], elapsed=elapsed)


def _progress(**kw) -> tuple[TuningProgress, io.StringIO]:
    out = io.StringIO()
    return TuningProgress(Console(file=out, force_terminal=False, width=200), **kw), out


def test_with_trials_and_minutes_the_bar_follows_whichever_is_nearer_its_end():
    """400 trials or 10 minutes: 100 trials after 5 minutes is half-way (the minutes), 300 after 5 is 3/4."""
    progress, out = _progress(budget=400, seconds=600)
    assert progress._completed(_event(100, 300, 400)) == 200
    assert progress._completed(_event(300, 300, 400)) == 300
    assert progress._completed(_event(100, 900, 400)) == 400
    with progress:
        progress.update(_event(100, 300, 400))
    assert "100/400, 5.0/10 min" in out.getvalue()


def test_a_budget_alone_counts_trials_and_a_limit_alone_seconds():
    trials, out = _progress(budget=400)
    assert trials._completed(_event(100, 300, 400)) == 100
    with trials:
        trials.update(_event(100, 300, 400))
    assert "[100/400]" in out.getvalue()
    timed, out = _progress(budget=None, seconds=600)
    assert timed._completed(_event(100, 300, None)) == 300 and timed._completed(_event(100, 900, None)) == 600
    with timed:
        timed.update(_event(100, 300, None))
    assert "100 trials, 5.0/10 min" in out.getvalue()


def test_the_layout_transforms_after_the_search_are_shown_without_moving_the_bar():
    """The transforms tuned after the search count their own trials from 0: the bar stays where the search left it
    (not back to the start), the label and a non-terminal log's line say what runs."""
    progress, out = _progress(budget=400)
    with progress:
        progress.update(_event(400, 600, 400))
        progress.update(dataclasses.replace(_event(3, 5, 16), phase="transitions"))
        bar = progress._progress.tasks[0]
        assert bar.completed == 400 and bar.fields["trials"] == 400
        assert bar.fields["task_name"].endswith("(layout transforms)")
    assert "[layout transforms 3/16] task #0 conv" in out.getvalue()


def test_a_layout_transform_is_shown_by_its_time_not_by_gflops():
    """A transform computes nothing (0 FLOPs): "0.0 GFLOPS" would read as a broken kernel, so its best is in ms."""
    task = TuningTask(index=7, name="transpose", weight=1, flops=0, mod=None, target=None, args=(), workload_key="7")
    state = TaskState(task=task, baseline=MeasureResult(Status.OK, (8e-3,)))
    state.record(Config(0, (1,)), MeasureResult(Status.OK, (2e-3,)))
    event = TuneEvent(task=state, trials_done=1, budget=4, batch_results=[MeasureResult(Status.OK, (2e-3,))],
                      elapsed=1.0, phase="transitions")
    progress, out = _progress(budget=400)
    with progress:
        progress.update(event)
        assert progress._progress.tasks[0].fields["best"] == "-"
    line = next(x for x in out.getvalue().splitlines() if x.startswith("[layout transforms"))
    assert "best 2 ms (x4.0 vs untuned)" in line and "GFLOPS" not in line
