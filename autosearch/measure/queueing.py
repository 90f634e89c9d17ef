"""How long a timing's threads waited for a core: what tells a kernel the machine slowed from a slow kernel.

A kernel of two threads, each held to a core of its own, finishes when its slower thread does. When another
process runs on one of those cores, that thread waits for the scheduler to give it the core back (a timeslice of
milliseconds), and every repeat waits so: a kernel of a fraction of a millisecond reads a timeslice in all its
repeats, which nothing in the repeats tells from a slow schedule (:attr:`autosearch.types.MeasureResult.disturbed`
sees a split only). Linux counts, per thread, the time it was runnable and not running (``schedstat``'s run
delay): over a timing, the process's run delay against the window its threads ran in says how much of it they
waited.
"""

from __future__ import annotations

import os

TASKS = "/proc/self/task"


def run_delay_seconds() -> float | None:
    """Seconds this process's threads have waited, runnable, for a core since they started (the sum of each
    thread's ``schedstat`` run delay); None where the kernel does not count it (not Linux, or no schedstat)."""
    total = 0
    try:
        threads = os.listdir(TASKS)
    except OSError:
        return None
    for tid in threads:
        try:
            with open(f"{TASKS}/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except FileNotFoundError:  # a thread that ended meanwhile: its delay went with it
            continue
        except (OSError, ValueError, IndexError):
            return None
    return total / 1e9


def waited_share(before: float | None, after: float | None, window: float, threads: int) -> float | None:
    """The share of a timing's ``window`` (seconds) that its ``threads`` spent waiting for a core, from
    :func:`run_delay_seconds` read before and after it; None where it was not counted."""
    if before is None or after is None or window <= 0:
        return None
    return max(0.0, after - before) / (window * max(1, threads))


__all__ = ["run_delay_seconds", "waited_share"]
