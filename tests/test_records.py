"""The append-only tuning log: round trip, truncated last line, corrupt lines with line numbers."""

from __future__ import annotations

import json

import pytest

from autosearch.errors import UserError
from autosearch.records import Config, MeasureResult, Record, Status, TuningLog, read_log


def _rec(i: int, status: Status = Status.OK, latency: float = 1e-3) -> Record:
    result = MeasureResult(status, (latency, latency * 1.1, latency * 0.9) if status is Status.OK else (),
                           error="" if status is Status.OK else "boom")
    return Record(kind="trial", task_key="k1", task_name="conv", target={"kind": "llvm"},
                  config=Config(0, ((1, 2), i)), result=result, flops=2e6, trial=i)


def test_round_trip_and_best(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.write_task({"workload_key": "k1", "name": "conv"})
        log.append([_rec(1, latency=3e-3), _rec(2, Status.WRONG_RESULT), _rec(3, latency=1e-3)])
        log.append([_rec(4, Status.WORKER_CRASHED), _rec(5, latency=2e-3)])
    contents = read_log(path)
    assert not contents.corrupt and not contents.truncated_tail
    assert [r.trial for r in contents.trials("k1")] == [1, 2, 3, 4, 5]
    best = contents.best("k1")
    assert best.trial == 3 and best.result.status is Status.OK
    assert contents.records[1].result.status is Status.WRONG_RESULT and contents.records[1].latency == float("inf")
    line = json.loads(open(path).readlines()[1])
    assert line["result"]["median"] == pytest.approx(1e-3 * 1.0) or line["result"]["median"] > 0
    assert {"versions", "host", "worker", "started", "finished", "build_secs", "run_secs"} <= set(line)
    assert line["result"]["gflops"] > 0 and "cv" in line["result"]


def test_truncated_last_line_is_tolerated_and_resume_appends_cleanly(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.append([_rec(1), _rec(2)])
    with open(path, "ab") as fh:  # a crash in the middle of writing line 3
        fh.write(json.dumps(_rec(3).to_json()).encode()[:50])
    contents = read_log(path)
    assert contents.truncated_tail and not contents.corrupt and len(contents.records) == 2
    with TuningLog(path, resume=True) as log:
        log.append([_rec(4)])
    contents = read_log(path)
    assert [r.trial for r in contents.records] == [1, 2, 4]
    assert len(contents.corrupt) == 1 and ":3:" in contents.corrupt[0]  # the old partial line, now mid-file


def test_corrupt_line_is_reported_with_its_line_number(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.append([_rec(1)])
    with open(path, "a") as fh:
        fh.write("{not json}\n")
        fh.write('{"kind": "alien"}\n')
    with TuningLog(path, resume=True) as log:
        log.append([_rec(2)])
    contents = read_log(path)
    assert [r.trial for r in contents.records] == [1, 2]
    assert [c[len(path):].split(":")[1] for c in contents.corrupt] == ["2", "3"]
    assert all(c.startswith(path) for c in contents.corrupt)


def test_existing_log_is_refused_without_resume(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.append([_rec(1)])
    with pytest.raises(UserError, match="--resume"):
        TuningLog(path)
    assert len(read_log(path).records) == 1


def test_unwritable_log_path_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot write"):
        TuningLog(str(blocker / "sub" / "run.jsonl"))


def test_first_pass_follows_the_flops_share(tmp_path):
    """The warm-up budget goes to the heavy tasks; FLOP-less copies get the minimum."""
    from autosearch.frontend.task import TuningTask
    from autosearch.tuner import MIN_FIRST_PASS, Tuner

    def task(i, flops):
        return TuningTask(index=i, name=f"t{i}", weight=1, flops=flops, mod=None, target=None, args=(),
                          workload_key=str(i))

    tasks = [task(0, 3e9), task(1, 1e9)] + [task(i, 0.0) for i in range(2, 22)]
    with TuningLog(str(tmp_path / "l.jsonl")) as log:
        tuner = Tuner(tasks=tasks, runner=None, log=log, strategy="random", budget=400, batch=16)
        firsts = [tuner._first_pass(s) for s in tuner.states]
    assert firsts[0] == 16 and firsts[1] == 16  # capped at one batch
    assert all(f == MIN_FIRST_PASS for f in firsts[2:])
    assert sum(firsts) <= 200


def test_a_time_limit_alone_plans_the_warm_up_for_the_trials_it_should_hold(tmp_path):
    """With ``seconds`` and no trial budget the warm-up is sized for the trials the limit should hold: at the prior
    pace per build core first, then at the run's own pace; a tuner with neither bound is refused."""
    from autosearch.frontend.task import TuningTask
    from autosearch.tuner import PLANNED_TRIALS_PER_CORE_MINUTE, Tuner

    class Runner:  # only its build workers are read
        build_workers = 2

    tasks = [TuningTask(index=i, name=f"t{i}", weight=1, flops=1e9 * (i + 1), mod=None, target=None, args=(),
                        workload_key=str(i)) for i in range(40)]
    with TuningLog(str(tmp_path / "l.jsonl")) as log:
        timed = Tuner(tasks=tasks, runner=Runner(), log=log, strategy="random", seconds=600, batch=16)
        counted = Tuner(tasks=tasks, runner=Runner(), log=log, strategy="random", budget=timed.planned, batch=16)
        assert timed.planned == 10 * PLANNED_TRIALS_PER_CORE_MINUTE * 2 and timed.budget is None
        assert [timed._first_pass(s) for s in timed.states] == [counted._first_pass(s) for s in counted.states]
        # after a minute of 120 measured trials the run's own pace plans the rest: 2 a second for 540 s more
        import time

        from autosearch.records import Config

        for n in range(120):
            timed.states[n % 3].record(Config(0, (n,)), MeasureResult(Status.OK, (1e-3,)))
        timed._start = time.perf_counter() - 60
        assert timed.planned == pytest.approx(120 + 2 * 540, abs=3)
        with pytest.raises(ValueError):
            Tuner(tasks=tasks, runner=Runner(), log=log, strategy="random")
        with pytest.raises(ValueError):
            Tuner(tasks=tasks, runner=Runner(), log=log, strategy="random", seconds=0)


def test_scheduler_moves_on_from_a_heavy_task_whose_best_stays_flat(tmp_path):
    """Ansor's forward gradient fades with a task's trials: a heavy task stuck at its best for hundreds
    of trials yields the next batch to a lighter task that has had few (and an improving task wins)."""
    from autosearch.frontend.task import TuningTask
    from autosearch.records import Config
    from autosearch.tuner import Tuner

    def task(i):
        return TuningTask(index=i, name=f"t{i}", weight=1, flops=1e9, mod=None, target=None, args=(),
                          workload_key=str(i))

    def ok(secs):
        return MeasureResult(Status.OK, (secs,))

    with TuningLog(str(tmp_path / "l.jsonl")) as log:
        tuner = Tuner(tasks=[task(0), task(1)], runner=None, log=log, strategy="random", budget=1000, batch=16)
        heavy, light = tuner.states
        for n in range(400):  # 16 ms, flat after the first trial
            heavy.record(Config(0, (n,)), ok(16e-3 if n == 0 else 30e-3))
        for n in range(32):  # 4 ms, also flat
            light.record(Config(0, (n,)), ok(4e-3 if n == 0 else 9e-3))
        for s in tuner.states:
            s.strategy = object()  # both warmed up
        assert tuner._next_task() is light
        for n in range(32, 400):
            light.record(Config(0, (n,)), ok(9e-3))
        assert tuner._next_task() is heavy  # equal trials: the heavier task again
        heavy.record(Config(0, (10_000,)), ok(8e-3))  # the heavy task improves: its backward term grows
        for n in range(400, 430):
            light.record(Config(0, (n,)), ok(9e-3))
        assert tuner._next_task() is heavy


def test_scheduler_gives_less_to_the_slower_alternative_of_a_layer(tmp_path):
    """A layer tuned both ways runs its faster alternative: the slower one's gain is scaled down."""
    from autosearch.frontend.task import TuningTask
    from autosearch.records import Config
    from autosearch.tuner import Tuner

    def task(i, algorithm):
        return TuningTask(index=i, name=f"t{i}", weight=1, flops=1e9, mod=None, target=None, args=(),
                          workload_key=str(i), lowering={"winograd": "auto", "layer": "L", "algorithm": algorithm})

    with TuningLog(str(tmp_path / "l.jsonl")) as log:
        tuner = Tuner(tasks=[task(0, "direct"), task(1, "winograd")], runner=None, log=log, strategy="random",
                      budget=1000, batch=16)
        direct, wino = tuner.states
        for n in range(64):
            direct.record(Config(0, (n,)), MeasureResult(Status.OK, (10e-3,)))
            wino.record(Config(0, (n,)), MeasureResult(Status.OK, (4e-3,)))
        for s in tuner.states:
            s.strategy = object()
        assert tuner._rivalry() == {id(direct): pytest.approx(0.16)}
        assert tuner._next_task() is wino
