"""One autosearch tuning run of one task (the tuning loop as ``run`` drives it), and reading its records."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class TuneRun:
    """What one tuning run left: its trial records in log order, its wall seconds and the whole log (baseline,
    re-times of the finalists when it ran any)."""

    records: list
    wall_secs: float
    log: Any  # autosearch.records.LogContents


def run_autosearch(task, target, strategy: str, budget: int, batch: int, seed: int, *, evaluator=None,
                   cost_model: str | None = None, log_path: str | None = None, warm_start: Sequence[Any] = (),
                   options: dict | None = None, finalist_rounds: int = 0, runner=None) -> TuneRun:
    """Tune ``task`` alone for ``budget`` trials.

    The log at ``log_path`` (a temporary file if None) is started afresh. ``finalist_rounds=0``: the caller
    re-times what it compares in fresh processes itself. ``runner``: a runner to reuse (else a LocalRunner
    with ``evaluator``, closed at the end).
    """
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log
    from autosearch.search.tuner import Tuner

    log_path = log_path or os.path.join(tempfile.mkdtemp(prefix=f"tune-{strategy}-"), "log.jsonl")
    if os.path.exists(log_path):
        os.unlink(log_path)
    own = runner is None
    runner = runner or LocalRunner(target=target, evaluator=evaluator, seed=seed)
    start = time.perf_counter()
    try:
        with TuningLog(log_path) as log:
            Tuner(tasks=[task], runner=runner, log=log, strategy=strategy, budget=budget, batch=batch, seed=seed,
                  strategy_options=options, cost_model=cost_model, warm_start=warm_start,
                  finalist_rounds=finalist_rounds).run()
        wall = time.perf_counter() - start
    finally:
        if own:
            runner.close()
    contents = read_log(log_path)
    return TuneRun(contents.trials(task.workload_key), wall, contents)


def best_within(records: Sequence, budget: int):
    """The fastest valid record among the first ``budget`` (None if none is valid)."""
    valid = [r for r in records[:budget] if r.ok]
    return min(valid, key=lambda r: r.latency) if valid else None


def best_so_far(records: Sequence, flops: float) -> list[float]:
    """Best GFLOPS after each trial (0 until a valid one)."""
    best, out = 0.0, []
    for r in records:
        if r.ok:
            best = max(best, flops / r.latency / 1e9)
        out.append(best)
    return out
