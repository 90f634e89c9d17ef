"""Known schedules: chosen from logs per task and CPU, ordered for a host, measured first by the tuning loop and
handed to the strategy, never measured twice on resume; bad files are one-line errors."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from autosearch.errors import UserError
from autosearch.search.known import SHIPPED, SOURCE, KnownSchedule, KnownSchedules, by_prediction, load
from autosearch.search.resized import layer_key
from autosearch.tensor_units.cpu import family_of_mcpu
from autosearch.types import Config, MeasureResult, Record, Status


def _rec(key: str, cpu: str, config: Config, seconds: float | None, *, kind: str = "trial",
         status: Status = Status.OK, measured_on: str = "") -> Record:
    result = (MeasureResult(status=Status.OK, latencies=(seconds,), measured_on=measured_on) if status == Status.OK
              else MeasureResult.failed(status, "bad"))
    return Record(kind=kind, task_key=key, task_name="t", target={"kind": "llvm", "mcpu": cpu}, config=config,
                  result=result, flops=1.0)


C = [Config(0, (i,)) for i in range(8)]


def test_from_records_keeps_the_fastest_valid_configs_per_task_and_cpu():
    records = [
        _rec("k", "znver4", C[0], 3e-3), _rec("k", "znver4", C[1], 1e-3), _rec("k", "znver4", C[2], 2e-3),
        _rec("k", "znver4", C[3], 0.5e-3, status=Status.WRONG_RESULT),  # fastest, but wrong: never known
        _rec("k", "znver4", C[4], 0.6e-3), _rec("k", "znver4", C[4], None, kind="retime", status=Status.RUN_ERROR),
        _rec("k", "znver4", C[5], 9e-3), _rec("k", "znver4", C[5], 0.1e-3, kind="retime"),
        _rec("k", "znver4", C[5], 0.2e-3, kind="retime"),  # median of its three timings: 0.2 ms
        _rec("k", "rocketlake", C[6], 5e-3), _rec("j", "emeraldrapids", C[7], 1e-3),
    ]
    known = KnownSchedules.from_records(records, per_cpu=3, exclude_cpus=["emeraldrapids"])
    assert set(known.by_key) == {"k"}
    by_cpu = {cpu: [(e.config, e.seconds) for e in known.by_key["k"] if e.cpu == cpu] for cpu in known.cpus()}
    assert by_cpu["znver4"] == [(C[5], 0.2e-3), (C[1], 1e-3), (C[2], 2e-3)]
    assert by_cpu["rocketlake"] == [(C[6], 5e-3)]


def test_timings_of_code_built_for_one_cpu_but_timed_on_another_are_nobodys_known_schedules():
    records = [_rec("k", "znver3", C[0], 2e-3, measured_on="znver3"), _rec("k", "znver3", C[1], 3e-3),  # older log
               _rec("k", "znver3", C[2], 1e-3, measured_on="znver4"),  # built for a Zen 3, timed on a Zen 4
               _rec("k", "znver4", C[3], 1e-3, measured_on="znver4")]
    known = KnownSchedules.from_records(records)
    assert {(e.config, e.cpu) for e in known.by_key["k"]} == {(C[0], "znver3"), (C[1], "znver3"), (C[3], "znver4")}
    assert records[2].stood_in and records[2].timed_on == "znver4"
    assert not records[1].stood_in and records[1].timed_on == "znver3"  # no measured_on: the target's CPU


def test_for_task_orders_rank_by_rank_host_cpu_then_family_then_others():
    entries = [KnownSchedule(C[i], 1e-3 * i, cpu) for i, cpu in
               [(0, "znver4"), (1, "znver4"), (2, "rocketlake"), (3, "rocketlake"), (4, "sapphirerapids"),
                (0, "sapphirerapids")]]
    known = KnownSchedules({"k": entries})
    # on a Sapphire Rapids host: its own best, Intel's (Rocket Lake's), then AMD's; C[0] once
    assert known.for_task("k", host_cpu="sapphirerapids") == [C[4], C[2], C[0], C[3], C[1]]
    assert known.for_task("k", host_cpu="znver3") == [C[0], C[2], C[4], C[1], C[3]]
    assert known.for_task("k", host_cpu="znver4", fits=lambda c: c != C[0]) == [C[2], C[4], C[1], C[3]]
    assert known.for_task("unknown", host_cpu="znver4") == []


def test_by_prediction_puts_the_models_first_then_the_hosts_then_the_models_order():
    given = [C[0], C[1], C[2], C[3]]
    # the model's first, then the given first (the host's own best), then the model's order
    assert by_prediction(given, [0.1, 0.9, 0.5, 0.9]) == [C[1], C[0], C[3], C[2]]
    assert by_prediction(given, [0.9, 0.1, 0.5, 0.7]) == [C[0], C[3], C[2], C[1]]
    assert by_prediction(given, [0.0] * 4) == given  # a model that tells nothing apart leaves the CPUs' order
    assert by_prediction([], []) == []


def test_a_written_file_reads_back_and_bad_files_are_one_line_errors(tmp_path):
    known = KnownSchedules({"k": [KnownSchedule(Config(1, ((2, 4), 3)), 1.5e-3, "znver4")]})
    path = str(tmp_path / "known.jsonl.gz")
    known.write(path)
    again = KnownSchedules.read(path)
    assert again.by_key == known.by_key and again.cpus() == ["znver4"]
    with pytest.raises(UserError, match="not found"):
        load(str(tmp_path / "missing.jsonl"))
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wt") as fh:
        fh.write(json.dumps({"v": 1, "key": "k", "known": [{"cpu": "x"}]}) + "\n")
    with pytest.raises(UserError, match="broken.jsonl.gz:1: not a known-schedules file"):
        KnownSchedules.read(str(broken))
    assert load("none") is None and load(None) is None


def test_the_header_names_the_cpus_in_the_order_their_configs_are_measured():
    configs = C[:4]
    cpus = ("rocketlake", "znver4", "znver3", "emeraldrapids")
    known = KnownSchedules({"k": [KnownSchedule(c, 1e-3, cpu) for c, cpu in zip(configs, cpus)]})
    line = known.describe(["k", "other"], host_cpu="znver3")
    assert line.startswith("1 of 2 tasks measured before on AMD znver3 (this CPU), AMD znver4, Intel emeraldrapids, "
                           "Intel rocketlake:")
    assert known.for_task("k", host_cpu="znver3") == [configs[2], configs[1], configs[3], configs[0]]
    assert line.endswith("measured first, in that order")
    ranked = known.describe(["k", "other"], host_cpu="znver3", ranked=True)  # guided by a pre-trained model
    assert ranked.endswith("as the cost model ranks them, the first CPU's best among the first two")


def test_the_shipped_set_holds_valid_schedules_of_more_than_one_cpu():
    shipped = load("shipped")
    assert shipped is not None and shipped.source == SHIPPED
    assert len(shipped.by_key) > 100 and len(shipped.cpus()) >= 2
    # both families a user is likely to have: a run on either starts from its own family's configs
    assert {family_of_mcpu(cpu) for cpu in shipped.cpus()} >= {"AMD", "Intel"}
    assert all(0 < e.seconds < 10 for entries in shipped.by_key.values() for e in entries)
    # every task with its name, shapes and lowering: a task at another shape finds its layer by them
    assert set(shipped.tasks) == set(shipped.by_key)
    assert sum(layer_key(t["name"], t["args"], t["lowering"]) is not None for t in shipped.tasks.values()) > 100


@pytest.mark.slow
def test_the_tuner_measures_known_schedules_first_and_hands_them_to_the_strategy(tmp_path, conv_task,
                                                                                monkeypatch):
    """A first run's best configs as another machine's known schedules: a second run measures them first (logged
    as ``known``), its strategy is made after and resumed with them and never asks them; a resumed third run
    measures none of them again."""
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log
    from autosearch.search import tuner as tuner_module
    from autosearch.search.strategy import make_strategy
    from autosearch.search.tuner import Tuner

    told: dict = {}
    asks: list = []

    def spied_strategy(*args, **kwargs):
        real = make_strategy(*args, **kwargs)
        resume, ask = real.resume, real.ask
        real.resume = lambda configs, results: (told.update(zip(configs, results)), resume(configs, results))
        real.ask = lambda n: asks.append(ask(n)) or asks[-1]
        return real

    runner = LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5), run_timeout=10)
    try:
        with TuningLog(str(tmp_path / "other.jsonl")) as log:
            Tuner(tasks=[conv_task], runner=runner, log=log, strategy="random", budget=8, batch=4, seed=3,
                  finalist_rounds=0).run()
        other = read_log(str(tmp_path / "other.jsonl"))
        # as a Zen 4 built and timed them (the measuring CPU too: a record built for one CPU and timed on another
        # is a stand-in's, never known)
        records = [dataclasses.replace(r, target={**r.target, "mcpu": "znver4"},
                                       result=dataclasses.replace(r.result, measured_on="znver4"))
                   for r in other.trials()]
        known = KnownSchedules.from_records(records, per_cpu=3)
        expected = known.for_task(conv_task.workload_key, host_cpu="znver4")
        assert len(expected) == 3
        monkeypatch.setattr(tuner_module, "make_strategy", spied_strategy)
        path = str(tmp_path / "run.jsonl")
        with TuningLog(path) as log:  # a budget of 2: two of the three known configs, no strategy yet
            first = Tuner(tasks=[conv_task], runner=runner, log=log, strategy="random", budget=2, batch=4, seed=1,
                          known=known, finalist_rounds=0).run()
        assert first.trials == 2 and not told and not asks
        logged = read_log(path)
        assert [(r.config, r.strategy) for r in logged.trials()] == [(c, SOURCE) for c in expected[:2]]
        with TuningLog(path, resume=True) as log:
            Tuner(tasks=[conv_task], runner=runner, log=log, strategy="random", budget=10, batch=4, seed=1,
                  known=known, finalist_rounds=0, resume=logged).run()
    finally:
        runner.close()
    trials = read_log(path).trials()
    assert [r.strategy for r in trials[:3]] == [SOURCE] * 3 and {r.strategy for r in trials[3:]} == {"random"}
    assert [r.config for r in trials[:3]] == expected
    assert len(trials) == 10 == len({r.config for r in trials})
    assert set(expected) <= set(told)  # the strategy learnt of them before its first ask
    assert asks and not {c for batch in asks for c in batch} & set(expected)


@pytest.mark.slow
def test_a_pre_trained_model_chooses_which_known_schedule_is_measured_first(tmp_path, conv_task, conv_space):
    """Known configs set out so that the CPU order measures the one the shipped model ranks lowest first: guided by
    that model, a run of two trials measures the model's highest first and the CPU order's first second; unguided,
    the CPU order's first two."""
    import numpy as np

    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log
    from autosearch.search.cost_model import PRETRAINED, make_scorer
    from autosearch.search.tuner import Tuner

    rng = np.random.default_rng(5)
    configs: list = []
    for _ in range(60):
        applied = conv_space.apply(conv_space.sample(rng))
        if applied.ok and applied.config not in configs:
            configs.append(applied.config)
        if len(configs) == 5:
            break
    scores = make_scorer(PRETRAINED, conv_space, conv_task).score(configs)
    assert len(set(np.round(scores, 6))) == 5, scores  # the model tells these five apart
    ascending = [configs[i] for i in np.argsort(scores)]
    # the lowest-scored as this CPU's fastest, so the CPU order measures the model's worst first
    records = [_rec(conv_task.workload_key, "znver4", c, 1e-3 * (i + 1), measured_on="znver4")
               for i, c in enumerate(ascending)]
    known = KnownSchedules.from_records(records, per_cpu=5)
    cpu_order = known.for_task(conv_task.workload_key, host_cpu="znver4")
    assert cpu_order == ascending
    runner = LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5), run_timeout=10)
    measured = {}
    try:
        for guided in (PRETRAINED, None):
            path = str(tmp_path / f"{guided}.jsonl")
            with TuningLog(path) as log:
                Tuner(tasks=[conv_task], runner=runner, log=log, strategy="optuna", budget=2, batch=4, seed=1,
                      known=known, cost_model=guided, finalist_rounds=0).run()
            measured[guided] = [r.config for r in read_log(path).trials()]
    finally:
        runner.close()
    # the model's highest first, then the CPU order's first (its lowest), kept among the first two
    assert measured[PRETRAINED] == by_prediction(cpu_order, sorted(scores))[:2] == [ascending[-1], ascending[0]]
    assert measured[None] == cpu_order[:2]


@pytest.mark.slow
def test_the_next_probes_known_kernels_build_beside_a_batch_that_leaves_a_worker_idle(tmp_path, small_model):
    """A probe of one known config leaves one of two build workers idle: the next task's known config builds on it,
    and that task's batch takes the kernel (its build seconds logged) instead of building it again. The known
    configs are measured in the same order as without building ahead, and no module is built twice."""
    import numpy as np

    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log
    from autosearch.search.space import DecisionSpace
    from autosearch.search.tuner import Tuner

    tasks = list(small_model.tasks)
    assert len(tasks) >= 2
    rng = np.random.default_rng(3)
    records = []
    for task in tasks:  # one valid config of each task, as another machine's fastest
        space = DecisionSpace(task.mod, task.target)
        config = next(a.config for a in (space.apply(space.sample(rng)) for _ in range(20)) if a.ok)
        records.append(Record(kind="trial", task_key=task.workload_key, task_name=task.name,
                              target={"kind": "llvm", "mcpu": "znver4"}, config=config,
                              result=MeasureResult(status=Status.OK, latencies=(1e-3,)), flops=task.flops))
    known = KnownSchedules.from_records(records, per_cpu=1)
    assert all(known.for_task(t.workload_key, host_cpu="znver4") for t in tasks)

    def runner() -> LocalRunner:
        return LocalRunner(target=tasks[0].target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5),
                           build_workers=2, run_timeout=10)

    def run(name: str, *, ahead: bool) -> tuple[list, list[int]]:
        r = runner()
        if not ahead:
            r.spare_builds = lambda builds: 0
        built, prefetched = [], []
        build_one, prefetch = r.builder._build_one, r.builder.prefetch
        r.builder._build_one = lambda mod_json: built.append(mod_json) or build_one(mod_json)
        r.builder.prefetch = lambda mods: prefetched.append(len(mods)) or prefetch(mods)
        path = str(tmp_path / f"{name}.jsonl")
        try:
            with TuningLog(path) as log:
                Tuner(tasks=tasks, runner=r, log=log, strategy="random", budget=4, batch=2, seed=1, known=known,
                      finalist_rounds=0).run()
        finally:
            r.close()
        trials = read_log(path).trials()
        assert all(t.ok and t.result.build_secs > 0 for t in trials), [t.result for t in trials]
        assert len(set(built)) == len(tasks) + len(trials)  # baselines and trials, each built once: a timing the
        retaken = sum("timed again" in t.result.error for t in trials)  # machine disturbed, taken again, asks for
        assert len(built) - len(set(built)) == retaken  # its kernel again and gets the one kept
        return [(t.task_key, t.config) for t in trials if t.strategy == SOURCE], prefetched

    ahead, prefetched = run("ahead", ahead=True)
    alone, not_prefetched = run("alone", ahead=False)
    assert sum(prefetched) >= 1 and not not_prefetched
    assert ahead == alone and len(ahead) == len(tasks)
