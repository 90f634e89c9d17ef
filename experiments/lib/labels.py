"""Re-timing logged kernels in fresh measuring processes: the labels of a cost-model dataset, and their ceiling.

A trial's own timing is taken in the middle of a search, in a process that has timed hundreds of kernels,
with the evaluator a tuner can afford (a slow kernel is timed once). As a label that is noisy: on a shared
2-core machine the same kernel re-timed minutes later differs by 10-20%. ``experiments/make_dataset.py``
therefore re-times every valid trial of every task after the trials, in ``rounds``: each round times each
task's kernels in a fresh measuring process, in an order shuffled per round, with more repeats and no
slow-kernel shortcut (:data:`LABEL_EVALUATOR`). A record's label is then the median over rounds of its
per-round medians (``autosearch.cost_models.features.labelled_trials``, the rule of ``autosearch.ranking``),
and ``experiments/measurement_noise.py`` re-labels a sample the same way to measure how far two such labels agree.

The settings are written to the log as a run header (``{"experiment": "make_dataset", "retime": ...}``) so the
noise measurement repeats them without being told.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from autosearch.measure.base import EvaluatorConfig
from autosearch.ranking import current_retimes
from autosearch.records import LogContents, TuningLog
from autosearch.search.finalists import rotated
from autosearch.types import Record
from experiments.lib.retime import schedule

log = logging.getLogger("labels")

# Labels: 10 repeats of at least 50 ms each, every kernel timed in full (slow_factor 0: no shortcut)
LABEL_EVALUATOR = EvaluatorConfig(repeat=10, min_repeat_ms=50, slow_factor=0.0)
LABEL_ROUNDS = 2
BATCH = 16  # kernels built and timed per runner call (a deadline is checked between batches)


def settings_json(rounds: int, evaluator: EvaluatorConfig) -> dict[str, Any]:
    return {"rounds": rounds, "evaluator": asdict(evaluator)}


def logged_settings(contents: LogContents) -> tuple[int, EvaluatorConfig] | None:
    """(rounds, evaluator) of the last re-timing settings a log's run headers hold, or None."""
    for run in reversed(contents.runs):
        if isinstance(run.get("retime"), dict):
            spec = run["retime"]
            return int(spec["rounds"]), EvaluatorConfig(**spec["evaluator"])
    return None


def retime(runner, task, records: Sequence[Record], *, round_no: int, out: TuningLog,
           rng: np.random.Generator, deadline: float = float("inf"), fresh: bool = True) -> list[Record]:
    """Re-time ``records`` of ``task`` in a fresh measuring process (shuffled, ``BATCH`` at a time) and log each
    result as a ``retime`` record of round ``round_no``. Stops early at ``deadline`` (``time.time()``).
    ``fresh=False`` keeps the runner's current process (to tell per-process noise from per-call noise)."""
    from autosearch.frontend.target import target_to_json

    target = target_to_json(runner.target)  # what the kernels are built for here, not the record's (another machine's)
    if fresh:
        runner.refresh()
    order = [records[i] for i in rng.permutation(len(records))]
    done: list[Record] = []
    for start in range(0, len(order), BATCH):
        if time.time() > deadline:
            break
        batch = order[start:start + BATCH]
        results = runner.measure(task, [schedule(task, r.trace) for r in batch])
        retimed = [Record(kind="retime", task_key=r.task_key, task_name=r.task_name, target=target,
                          config=r.config, result=res, flops=r.flops, trace=r.trace, strategy=r.strategy,
                          round=round_no, started=time.time() - res.build_secs - res.run_secs)
                   for r, res in zip(batch, results)]
        out.append(retimed)
        done += retimed
    return done


def relabel(contents: LogContents, tasks: dict[str, Any], runner, out: TuningLog, *, rounds: int, seed: int,
            deadline: float = float("inf")) -> int:
    """Re-time every valid trial of ``tasks`` (key -> TuningTask) that lacks a re-time of some round 1..``rounds``
    after its task's last trial; one fresh measuring process per task and round, tasks in an order rotated from
    round to round. Resumable: what ``contents`` already holds is not measured again. Returns the re-times logged."""
    from autosearch.cost_models.features import valid_trials

    trials: dict[str, list[Record]] = {}
    for rec in valid_trials(contents):
        if rec.config is not None and rec.task_key in tasks:
            trials.setdefault(rec.task_key, []).append(rec)
    have: dict[str, set[tuple[int, Any]]] = {
        key: {(r.round, r.config) for r in current_retimes(x for x in contents.records if x.task_key == key)}
        for key in trials
    }
    prepared: set[str] = set()
    logged = 0
    for round_no in range(1, rounds + 1):
        for key in rotated(list(trials), round_no - 1):
            todo = [r for r in trials[key] if (round_no, r.config) not in have[key]]
            if not todo or time.time() > deadline:
                continue
            task = tasks[key]
            if key not in prepared:
                baseline = runner.prepare(task)
                if not baseline.ok:
                    log.warning("%s: cannot build its reference (%s); not re-timed", task.name, baseline.error[:200])
                    continue
                prepared.add(key)
            rng = np.random.default_rng([seed, round_no, zlib.crc32(key.encode())])
            done = retime(runner, task, todo, round_no=round_no, out=out, rng=rng, deadline=deadline)
            logged += len(done)
            log.info("round %d, %s: %d re-timed (%d failed)", round_no, task.name, len(done),
                     sum(not r.ok for r in done))
    return logged
