"""Faulty kernels and workers inside a real tuning run: recorded with their status, never best or exported.

Faults come in from the test side: a runner subclass swaps faulty kernels in, real processes are killed.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from autosearch.measure.local import LocalRunner
from autosearch.records import TuningLog, read_log
from autosearch.types import Status


class _SwappingRunner(LocalRunner):
    """A LocalRunner that builds ``plan[n]`` instead of the n-th module it is asked to measure (from 1, over
    the whole run): faulty kernels enter a real tuning run where the Tuner's own modules would. A module asked for
    again (a timing the machine disturbed, taken again after its batch) gets what it got the first time."""

    def __init__(self, *, plan: dict[int, object], **settings) -> None:
        super().__init__(**settings)
        self.plan = plan
        self.given = 0
        self._swaps: dict[int, tuple[object, object]] = {}  # id(module) -> (module, what is built instead)

    def measure(self, task, mods):
        swapped = []
        for mod in mods:
            if id(mod) not in self._swaps:  # the module is kept with its swap: its id is not reused
                self.given += 1
                self._swaps[id(mod)] = (mod, self.plan.get(self.given, mod))
            swapped.append(self._swaps[id(mod)][1])
        return super().measure(task, swapped)


def test_faulty_kernels_are_recorded_and_never_exported(tmp_path, conv_task):
    from autosearch.deploy.database import export_database
    from autosearch.frontend.database_files import read_database
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.search.tuner import Tuner
    from tests.faulty_kernels import FAULTS

    plan = {2: FAULTS["crash"], 3: FAULTS["hang"], 5: FAULTS["wrong"], 6: FAULTS["build"]}
    log_path = str(tmp_path / "run.jsonl")
    runner = _SwappingRunner(plan=plan, target=conv_task.target,
                             evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5), run_timeout=5)
    try:
        with TuningLog(log_path) as log:
            summary = Tuner(tasks=[conv_task], runner=runner, log=log, strategy="random", budget=12, batch=4,
                            seed=4).run()
    finally:
        runner.close()
    assert summary.trials == 12 and not summary.interrupted
    assert runner.given >= 12  # the trials, then the finalists' re-timing
    contents = read_log(log_path)
    by_trial = {r.trial: r.result.status for r in contents.trials()}
    assert by_trial[2] is Status.WORKER_CRASHED
    assert by_trial[3] is Status.RUN_TIMEOUT
    assert by_trial[5] is Status.WRONG_RESULT
    assert by_trial[6] is Status.BUILD_ERROR
    assert sum(1 for s in by_trial.values() if s is Status.OK) == 8
    faulty_configs = {r.config for r in contents.trials() if r.trial in plan}
    best = contents.best(conv_task.workload_key)
    assert best.ok and best.config not in faulty_configs
    export_database(contents, str(tmp_path / "db"), top_k=100)
    exported = read_database(str(tmp_path / "db"))
    assert len(exported.records) == 8  # every ok trial, none of the faulty ones
    assert all(r.ok for r in exported.records)


def test_a_killed_build_worker_fails_one_build_and_the_next_builds(conv_task, conv_space):
    import tvm

    from autosearch.measure.local import BuildPool

    pool = BuildPool(target=conv_task.target, workers=1, timeout=120)
    try:
        pool.warm_up()
        worker = pool._workers[0]
        mod_json = tvm.ir.save_json(conv_space.apply(conv_space.default(0)).mod)

        def kill_soon():
            time.sleep(0.05)
            os.kill(worker._proc.pid, 9)

        killer = threading.Thread(target=kill_soon)
        killer.start()
        [first] = pool.build([mod_json])
        killer.join()
        assert first.failure is not None and first.failure.status is Status.WORKER_CRASHED
        assert "signal 9" in first.failure.error
        [second] = pool.build([mod_json])
        assert second.failure is None and second.artifact
    finally:
        pool.close()


@pytest.mark.parametrize("fault", ["crash", "hang"])
def test_worker_process_faults_do_not_reach_the_caller(fault, target):
    from autosearch.measure.worker import Worker
    from tests.faulty_kernels import artifact, run_in

    kernel = artifact(fault, target)
    w = Worker(name="faults")
    try:
        reply = run_in(w, kernel, timeout=2)
        assert reply.kind == ("crashed" if fault == "crash" else "timeout")
        assert w.call("ping", timeout=60).kind == "ok"
    finally:
        w.close()
