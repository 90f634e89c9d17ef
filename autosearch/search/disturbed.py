"""Timings the machine disturbed, taken again: one rule for the tuner's batches, its finalists' rounds and datasets.

A two-thread kernel whose second thread waits for a core a scheduler timeslice at a time reads many times slower
on most of its repeats, or on all of them while another process keeps that core busy: the repeats split, or the
threads' own count of their waiting for a core says so (:attr:`autosearch.types.MeasureResult.disturbed`,
:mod:`autosearch.measure.queueing`). Logged so, a good config is lost to the search and a known schedule measured
first reads as a bad one. Such a timing is taken again once its batch is done, when the slow spell has often
passed, and the steadier of the two is kept, with a note in the log. A slowdown its threads do not wait through (a
hypervisor taking the virtual CPU, a core slowed by its neighbour's heat) is not caught here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autosearch.types import MeasureResult


def measure_steadily(runner: Any, task: Any, mods: list[Any]) -> list[MeasureResult]:
    """``runner.measure(task, mods)``, with each disturbed timing taken once more after the batch (:func:`steadier`)."""
    results = list(runner.measure(task, mods))
    disturbed = [i for i, r in enumerate(results) if r.disturbed]
    if disturbed:
        again = runner.measure(task, [mods[i] for i in disturbed])
        for i, result in zip(disturbed, again, strict=True):
            results[i] = steadier(results[i], result)
    return results


def steadier(first: MeasureResult, again: MeasureResult) -> MeasureResult:
    """Of a disturbed timing and the kernel's second one, the one to keep: the second unless it failed or reads
    slower; either way noted, with the first's fastest repeat and median, so the log says what happened. Its build
    and run seconds are both measurements' together: the trial cost the run that much."""
    fastest, median = min(first.latencies) * 1e3, first.median * 1e3
    kept = again if again.ok and again.median < first.median else first
    why = (f"its threads waited for a core {first.waited:.0%} of it" if first.waited_through
           else "the first timing's repeats split")
    note = (f"timed again at the end of its batch: {why} (fastest {fastest:.4g} ms, median {median:.4g} ms); kept "
            f"the {'second' if kept is again else 'first'}")
    return replace(kept, error="; ".join(e for e in (kept.error, note) if e),
                   build_secs=first.build_secs + again.build_secs, run_secs=first.run_secs + again.run_secs)
