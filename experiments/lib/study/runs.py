"""One run of the study (a method tuning a task with a seed for the largest budget), and a sitting that does every
run a results directory still lacks.

Each run happens in a fresh process (:func:`launch_child`), so TVM's thread pools, MetaSchedule's patched Droplet
settings and Optuna's state never carry from one run to the next, and a crash costs one run. The process writes
the run's :class:`~.store.RunResult` when it ends, nothing before.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

from experiments.lib.io import ROOT, read_json, write_json, write_text
from experiments.lib.machine import fingerprint
from experiments.lib.study.config import Method, StudyConfig
from experiments.lib.study.store import RunKey, RunResult, Store, all_runs, best_at, trace_key

log = logging.getLogger(__name__)


def host_task(store: Store, spec):
    """The task a spec names, as extracted into the results directory, for this machine's target (a task file
    written on another machine carries that machine's target; the TIR module does not depend on it)."""
    from autosearch.frontend.target import parse_target
    from autosearch.frontend.task import TuningTask

    task = TuningTask.from_json(read_json(store.task_file(spec)))
    return dataclasses.replace(task, target=parse_target(None))


def extract_tasks(config: StudyConfig, store: Store, tasks: Iterable) -> None:
    """Write the task file of every spec that has none (each model imported once per lowering)."""
    from autosearch.frontend.target import parse_target
    from experiments.lib.tasks import ModelTasks

    missing = [t for t in tasks if not os.path.exists(store.task_file(t))]
    models = ModelTasks(parse_target(None))
    for spec in missing:
        task = models.task(spec)
        write_json(store.task_file(spec), {"spec": str(spec), **task.to_json()})
        log.info("task %s: %s, %.3f GFLOP", spec, task.name, task.gflop)


# ---------------------------------------------------------------------------------------------- one run
def _autosearch(method: Method, task, config: StudyConfig, seed: int, work: str):
    from autosearch.api import resolve_guidance
    from autosearch.measure.base import EvaluatorConfig
    from experiments.lib.tuning import run_autosearch

    cost_model, guidance = resolve_guidance(method.cost_model, task.target, method.strategy, seed=seed)
    start = time.time()
    run = run_autosearch(task, task.target, method.strategy, config.max_budget, config.batch, seed,
                         evaluator=EvaluatorConfig(), cost_model=cost_model, options=dict(method.options),
                         log_path=os.path.join(work, "log.jsonl"))
    latencies = [r.latency if r.ok else math.inf for r in run.records]
    finished = [r.finished - start for r in run.records]
    return latencies, finished, [r.trace for r in run.records], {"guidance": guidance}


def _metaschedule(method: Method, task, config: StudyConfig, seed: int, work: str):
    from autosearch.frontend.database_files import read_database
    from autosearch.measure.base import EvaluatorConfig
    from experiments.lib.metaschedule import tune_tir

    ms_dir = os.path.join(work, "ms")
    search = method.search_trials if method.post_optimization else config.max_budget
    run = tune_tir(task.mod, task.target, ms_dir, search, per_iter=config.batch, evaluator=EvaluatorConfig(),
                   seed=seed + 1, post_optimization=method.post_optimization,
                   droplet_trials=config.max_budget - search)
    records = read_database(ms_dir).records[: run.search_records]  # Droplet appends its best after them
    latencies = [r.latency if r.ok else math.inf for r in records]
    finished = list(run.record_times[: len(records)])
    traces = [r.trace for r in records]
    for batch in run.droplet:  # kept: the configs that built and ran; the rest of the batch failed
        for trace, secs in batch.kept:
            latencies.append(statistics.median(secs) if secs and max(secs) < 1e9 else math.inf)
            traces.append(trace)
        latencies += [math.inf] * (batch.size - len(batch.kept))
        traces += [None] * (batch.size - len(batch.kept))
        finished += [batch.finished] * batch.size
    notes = {"search_trials": len(records), "droplet_trials": sum(b.size for b in run.droplet),
             "droplet_batches": len(run.droplet)} if method.post_optimization else {}
    notes["runner_threads"] = int(os.environ.get("TVM_NUM_THREADS", "0"))  # set by tune_tir before its runner
    return latencies, finished, traces, notes


def run_one(config: StudyConfig, store: Store, key: RunKey) -> RunResult:
    """Tune one task with one method and seed for the largest budget; the result, not yet stored."""
    method = config.method(key.method)
    task = host_task(store, key.task)
    work = store.work_dir(key)
    shutil.rmtree(work, ignore_errors=True)  # a run killed earlier starts again from scratch
    os.makedirs(work)
    started, clock = time.time(), time.perf_counter()
    tune = _metaschedule if method.peer else _autosearch
    latencies, finished, traces, notes = tune(method, task, config, key.seed, work)
    wall = time.perf_counter() - clock
    best, kept = {}, {}
    for budget in config.budgets:
        i = best_at(latencies, budget)
        if i is not None and traces[i] is not None:
            name = trace_key(traces[i])
            kept[name] = traces[i]
            best[budget] = {"trial": i + 1, "latency": latencies[i], "trace": name}
    return RunResult(task=str(key.task), method=key.method, seed=key.seed, fingerprint=fingerprint(task.target),
                     started=started, wall_secs=wall, latencies=latencies, finished=finished, best=best, traces=kept,
                     notes={"gflop": task.gflop, "task_name": task.name, **notes})


# ---------------------------------------------------------------------------------------------- a sitting
def launch_child(config: StudyConfig, store: Store, key: RunKey) -> bool:
    """Run ``key`` in a fresh process (``study.py --child``); True if it stored a result. Its output goes to
    ``WORK.out``; a failure leaves ``.error`` with the tail of it."""
    cmd = [sys.executable, "-m", "experiments.study", config.path, "--results", store.root, "--child", str(key.task),
           key.method, str(key.seed)]
    out_path = store.work_dir(key) + ".out"
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    with open(out_path, "w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    if proc.returncode == 0 and os.path.exists(store.run_file(key)):
        return True
    with open(out_path, errors="replace") as fh:
        tail = fh.read()[-4000:]
    write_text(store.error_file(key), f"exit code {proc.returncode}\n{tail}")
    return False


@dataclasses.dataclass
class SittingReport:
    done: list[RunKey] = dataclasses.field(default_factory=list)  # finished in this sitting
    skipped: list[RunKey] = dataclasses.field(default_factory=list)  # finished before, or held by another process
    failed: list[RunKey] = dataclasses.field(default_factory=list)


def sit(config: StudyConfig, store: Store, tasks: Iterable, *, retry_failed: bool = False,
        launch: Callable[[RunKey], bool], after_task: Callable | None = None,
        on_run: Callable[[RunKey, str], None] | None = None) -> SittingReport:
    """Do every run of ``tasks`` that has no result yet (and, unless ``retry_failed``, did not fail before), task
    by task, held by a claim while it runs; after each task whose runs are all done, ``after_task(spec)`` (the
    re-timing)."""
    report = SittingReport()
    for spec in tasks:
        for key in all_runs([spec], config.methods, config.seeds):
            if os.path.exists(store.run_file(key)) or (store.failed(key) and not retry_failed):
                report.skipped.append(key)
                continue
            if not store.claim(key):
                report.skipped.append(key)
                continue
            try:
                if on_run is not None:
                    on_run(key, "start")
                ok = launch(key)
            finally:
                store.release(key)
            (report.done if ok else report.failed).append(key)
            if on_run is not None:
                on_run(key, "done" if ok else "failed")
        complete = all(os.path.exists(store.run_file(k)) for k in all_runs([spec], config.methods, config.seeds))
        if complete and after_task is not None:
            after_task(spec)
    return report
