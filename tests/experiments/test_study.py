"""The study's bookkeeping on hand-made results: aggregation maths, resume (finished runs never repeated, claims),
interleaved and resumable re-timing rounds, the README block, configuration errors. Nothing is built or timed."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

from autosearch.types import MeasureResult, Status
from experiments.lib.io import ROOT, read_json
from experiments.lib.stats import NEVER
from experiments.lib.study.config import ConfigError, load_config
from experiments.lib.study.report import (
    BEGIN,
    END,
    aggregate,
    collect,
    goals_text,
    held_out_text,
    profile_ratios,
    replace_block,
    summary,
)
from experiments.lib.study.retiming import retime_task
from experiments.lib.study.runs import sit
from experiments.lib.study.store import RunKey, RunResult, Store, all_runs

MACHINE = {"cpu_model": "Test CPU", "cores": 2, "mcpu": "testcpu", "num_cores": 2}
TASKS = ("m:1x8x8x8->1x8x8x8@3x3", "m:NHWC:1x8x8x8->1x16x4x4@1x1")


def _config(tmp_path, *, seeds=(0, 1, 2), budgets=(2, 4), rounds=2, extra: str = ""):
    path = tmp_path / "study.toml"
    path.write_text(f"""
[study]
name = "t"
seeds = {list(seeds)}
budgets = {list(budgets)}
batch = 2
retime_rounds = {rounds}
reference = "ms"
tasks = {json.dumps(list(TASKS))}
{extra}
[[method]]
name = "a"
strategy = "random"

[[method]]
name = "b"
strategy = "coordinate_descent"

[[method]]
name = "ms"
kind = "metaschedule"
""")
    return load_config(str(path))


def _result(key: RunKey, latencies, *, budgets=(2, 4), wall=10.0) -> RunResult:
    """A run whose trial i finished at i seconds; its best at each budget named by (method, seed, trial)."""
    best, traces = {}, {}
    for b in budgets:
        valid = [(lat, i) for i, lat in enumerate(latencies[:b]) if math.isfinite(lat)]
        if valid:
            lat, i = min(valid)
            name = f"{key.method}-s{key.seed}-t{i + 1}"
            best[b] = {"trial": i + 1, "latency": lat, "trace": name}
            traces[name] = {"insts": name}
    return RunResult(task=str(key.task), method=key.method, seed=key.seed, fingerprint=MACHINE, started=0.0,
                     wall_secs=wall, latencies=list(latencies), finished=[float(i + 1) for i in range(len(latencies))],
                     best=best, traces=traces)


def _write_task(store: Store, spec, gflop: float = 1.0) -> None:
    os.makedirs(os.path.dirname(store.task_file(spec)), exist_ok=True)
    with open(store.task_file(spec), "w") as fh:
        json.dump({"spec": str(spec), "flops": gflop * 1e9, "name": f"task-{spec.slug}", "workload_key": spec.slug}, fh)


def _round(number: int, retimes: dict[tuple[str, str], float | None]) -> dict:
    """A stored re-timing round: seconds per (method, trace); None = that kernel failed this round."""
    return {"round": number, "fingerprint": MACHINE, "results": [
        {"method": m, "trace": t, "status": "ok" if s is not None else "wrong_result",
         "latencies": [s] * 3 if s is not None else [], "error": ""} for (m, t), s in retimes.items()]}


@pytest.fixture
def study(tmp_path):
    """2 tasks x 3 methods x 3 seeds, all runs done and re-timed twice (GFLOP 1 per task: GFLOPS = 1 / seconds).

    Task 0: a re-times to 1/10, 1/20, 1/30 s per seed at budget 4 (GFLOPS 10, 20, 30), ms to 1/10 (10): a wins 2x.
    Task 1: a gets 5 GFLOPS, ms 10: a loses 0.5x. b's seed 2 on task 0 failed its re-time (0 GFLOPS). In-run, ms's
    best at 4 trials is 0.1 s (the target); a reaches it at trial 3 in seeds 0 and 1, never in seed 2."""
    config = _config(tmp_path)
    store = Store(str(tmp_path / "results"))
    speeds = {(0, "a"): (10, 20, 30), (0, "b"): (10, 10, 10), (0, "ms"): (10, 10, 10),
              (1, "a"): (5, 5, 5), (1, "b"): (10, 10, 10), (1, "ms"): (10, 10, 10)}
    for t, spec in enumerate(config.tasks):
        _write_task(store, spec)
        rounds: list[dict] = [{}, {}]
        for key in all_runs([spec], config.methods, config.seeds):
            if key.method == "ms":
                lat = [0.5, 0.3, 0.2, 0.1]
            elif key.method == "a":
                lat = [0.5, 0.2, 0.1, 0.05] if key.seed < 2 else [0.5, math.inf, 0.3, 0.2]
            else:
                lat = [0.4, 0.4, 0.4, 0.4]
            result = _result(key, lat)
            store.write_result(key, result)
            for b in config.budgets:
                trace = result.best[b]["trace"]
                secs = 1.0 / speeds[(t, key.method)][key.seed]
                failed = (t, key.method, key.seed) == (0, "b", 2)
                # two rounds whose median is ``secs``: 0.8x and 1.2x of it
                rounds[0][(key.method, trace)] = None if failed else 0.8 * secs
                rounds[1][(key.method, trace)] = 1.2 * secs
        for i, r in enumerate(rounds):
            store.write_round(spec, _round(i + 1, r))
    return config, store


def test_aggregation_medians_intervals_win_rates_and_time_to_target(study, tmp_path) -> None:
    config, store = study
    tasks, progress = collect(config, store)
    assert progress["runs_done"] == progress["runs_total"] == 18
    a0, b0, ms0 = (tasks[0].methods[m] for m in ("a", "b", "ms"))
    assert a0.gflops[4] == pytest.approx([10.0, 20.0, 30.0])  # median over the two rounds: 1.0x of the speed
    assert a0.median(4) == pytest.approx(20.0) and ms0.median(4) == pytest.approx(10.0)
    assert b0.gflops[4] == pytest.approx([10.0, 10.0, 0.0]) and b0.retime_failures == 2  # budgets 2 and 4
    assert tasks[0].target_secs == pytest.approx(0.1)
    assert a0.to_target == [3, 3, NEVER] and a0.wall_to_target == [3.0, 3.0, NEVER]
    assert ms0.to_target == [4, 4, 4]
    rows = summary(config, tasks)
    top = rows["a"]["by_budget"][4]
    assert top["tasks"] == 2 and top["win_rate"] == 0.5 and top["goal_share"] == 0.5
    assert top["geomean_ratio"] == pytest.approx(1.0)  # 2x and 0.5x
    assert top["log_se"] == pytest.approx(math.log(2))  # logs +-log 2: sd sqrt(2) log 2 over sqrt(2) tasks
    assert rows["ms"]["by_budget"][4]["win_rate"] == 0.5  # against itself: ties count half
    assert rows["a"]["reached"] == 2 and rows["a"]["median_trials_to_target"] == 3  # task 1: ms's target is 0.1 too
    assert rows["b"]["reached"] == 0 and rows["b"]["median_trials_to_target"] == NEVER
    # 3 s to target against ms's 4 s to its 4th trial: not within a third of its wall time
    assert rows["a"]["wall_goal_share"] == 0.0
    profile = profile_ratios(tasks, ["a", "b", "ms"], 4)
    assert profile["a"] == pytest.approx([1.0, 2.0]) and profile["ms"] == pytest.approx([2.0, 1.0])

    stem = str(tmp_path / "out" / "t")
    os.makedirs(os.path.dirname(stem))
    payload = aggregate(config, store, stem)
    for suffix in (".md", ".json", "-readme.md", "-profile.png", "-tasks.png"):
        assert os.path.getsize(stem + suffix) > 0, suffix
    text = open(stem + ".md").read()
    assert "| a | " in text and "20.0 [10-30]" in text and "Partial" not in text and "Test CPU" in text
    assert "| 1.00x ± 0.69 (50%) |" in text and "Goal 1 (>= 1.1x ms's" in text  # ms, a MetaSchedule peer
    stored = json.load(open(stem + ".json"))
    assert stored["tasks"][0]["methods"]["a"]["trials_to_target"] == [3, 3, None]  # never: null
    assert payload["summary"]["a"]["by_budget"][4]["win_rate"] == 0.5


def test_the_pretrained_guided_method_is_also_summarised_without_the_tasks_it_was_trained_on(study) -> None:
    config, store = study
    guided = tuple(dataclasses.replace(m, cost_model="auto") if m.name == "a" else m for m in config.methods)
    config = dataclasses.replace(config, methods=guided)
    tasks, _ = collect(config, store)
    assert held_out_text(config, tasks) == ""  # no task in the training set: nothing to separate
    tasks[0].pretrained_seen = True  # a's 2x task: without it, a is left with its 0.5x
    text = held_out_text(config, tasks)
    assert text.startswith("On the 1 of 2 tasks outside") and "a 0.50x (0%) @2, 0.50x (0%) @4" in text
    assert " b " not in text and "ms" not in text  # only the methods the pre-trained model guides


def test_goal_lines_only_where_the_reference_is_metaschedule(study) -> None:
    config, store = study
    tasks, _ = collect(config, store)
    assert goals_text(config, summary(config, tasks)).startswith("Goal 1 (>= 1.1x ms's")
    ours = dataclasses.replace(config, reference="b")  # e.g. which pre-trained model to ship: no goal of ours
    assert goals_text(ours, summary(ours, tasks)) == ""


def test_a_partial_study_says_so_and_leaves_unretimed_cells_empty(tmp_path) -> None:
    config = _config(tmp_path, seeds=(0,))
    store = Store(str(tmp_path / "results"))
    spec = config.tasks[0]
    _write_task(store, spec)
    store.write_result(RunKey(spec, "a", 0), _result(RunKey(spec, "a", 0), [0.5, 0.2, 0.1, 0.05]))
    tasks, progress = collect(config, store)
    assert progress == {**progress, "runs_done": 1, "runs_total": 6, "tasks_retimed": 0}
    assert all(math.isnan(g) for g in tasks[0].methods["a"].gflops[4])  # no round yet: no number
    stem = str(tmp_path / "t")
    aggregate(config, store, stem, with_plots=False)
    assert "**Partial**: 1 of 6 runs" in open(stem + ".md").read()


def test_a_sitting_never_repeats_a_finished_run_and_resumes_after_a_kill(tmp_path) -> None:
    config = _config(tmp_path, seeds=(0, 1))
    store = Store(str(tmp_path / "results"))
    spec = config.tasks[0]
    keys = all_runs([spec], config.methods, config.seeds)
    store.write_result(keys[0], _result(keys[0], [0.1]))  # finished in an earlier sitting
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    os.makedirs(os.path.dirname(store.claim_file(keys[1])), exist_ok=True)
    with open(store.claim_file(keys[1]), "w") as fh:  # a sitting killed while running it: its process is gone
        json.dump({"host": os.uname().nodename, "pid": dead.pid}, fh)
    os.makedirs(os.path.dirname(store.claim_file(keys[2])), exist_ok=True)
    with open(store.claim_file(keys[2]), "w") as fh:  # another live sitting is running this one
        json.dump({"host": os.uname().nodename, "pid": os.getppid()}, fh)
    launched: list[RunKey] = []
    interrupted: list[RunKey] = []

    def launch(key: RunKey) -> bool:
        if len(launched) == 2 and not interrupted:
            interrupted.append(key)
            raise KeyboardInterrupt  # killed in the middle of the third run
        launched.append(key)
        store.write_result(key, _result(key, [0.2]))
        return True

    with pytest.raises(KeyboardInterrupt):
        sit(config, store, [spec], launch=launch)
    assert launched == [keys[1], keys[3]]
    assert not os.path.exists(store.claim_file(keys[4]))  # the interrupted run gave its claim back
    first = open(store.run_file(keys[0])).read()
    retimed: list = []
    report = sit(config, store, [spec], launch=launch, after_task=retimed.append)
    assert launched[2:] == [keys[4], keys[5]] and report.done == keys[4:]
    assert open(store.run_file(keys[0])).read() == first
    assert retimed == []  # keys[2] is still held elsewhere: the task is not complete
    os.unlink(store.claim_file(keys[2]))
    report = sit(config, store, [spec], launch=launch, after_task=retimed.append)
    assert report.done == [keys[2]] and retimed == [spec]
    report = sit(config, store, [spec], launch=launch, after_task=retimed.append)
    assert report.done == [] and len(report.skipped) == len(keys)


def test_a_claim_from_before_the_hosts_reboot_is_stale_even_if_its_pid_is_alive_again(tmp_path) -> None:
    from experiments.lib.study.store import _boot_id

    if _boot_id() is None:
        pytest.skip("no boot id on this OS: claims fall back to host and pid")
    config = _config(tmp_path, seeds=(0,))
    store = Store(str(tmp_path / "results"))
    key = all_runs([config.tasks[0]], config.methods, config.seeds)[0]
    os.makedirs(os.path.dirname(store.claim_file(key)), exist_ok=True)
    holder = {"host": os.uname().nodename, "pid": os.getppid()}  # a live pid, as a reused one after a reboot
    for boot, taken in (("another-boot", True), (_boot_id(), False)):
        with open(store.claim_file(key), "w") as fh:
            json.dump({**holder, "boot": boot}, fh)
        assert store.claim(key) is taken, boot  # the same boot: that live process is running it
        if taken:
            store.release(key)


def test_a_half_written_claim_is_debris_and_a_whole_one_is_never_seen_half_written(tmp_path) -> None:
    """A claim cut off while being written (by an older sitting killed then) holds no pid: it is taken over, and
    no pid from it reaches ``kill`` (``kill(-1, 0)`` succeeds whenever any process could be signalled)."""
    config = _config(tmp_path, seeds=(0,))
    store = Store(str(tmp_path / "results"))
    key = all_runs([config.tasks[0]], config.methods, config.seeds)[0]
    os.makedirs(os.path.dirname(store.claim_file(key)), exist_ok=True)
    for debris in ("", "{", json.dumps({"host": os.uname().nodename}), json.dumps({"pid": -1})):
        with open(store.claim_file(key), "w") as fh:
            fh.write(debris)
        assert store.claim(key), debris
        assert read_json(store.claim_file(key))["pid"] == os.getpid()
        assert not store.claim(key)  # now held by a live process: this one
        store.release(key)
    assert os.listdir(os.path.dirname(store.claim_file(key))) == []  # no file of its own left behind


def test_a_failed_run_is_left_alone_unless_retried(tmp_path) -> None:
    config = _config(tmp_path, seeds=(0,))
    store = Store(str(tmp_path / "results"))
    spec = config.tasks[0]
    calls: list[RunKey] = []

    def launch(key: RunKey) -> bool:  # as launch_child: b's process fails and leaves an .error
        calls.append(key)
        if key.method == "b":
            with open(store.error_file(key), "w") as fh:
                fh.write("exit code 1")
            return False
        store.write_result(key, _result(key, [0.1]))
        return True

    report = sit(config, store, [spec], launch=launch)
    assert [k.method for k in report.failed] == ["b"] and [k.method for k in report.done] == ["a", "ms"]
    assert sit(config, store, [spec], launch=launch).done == [] and len(calls) == 3
    sit(config, store, [spec], launch=launch, retry_failed=True)
    assert [k.method for k in calls[3:]] == ["b"]


def test_retiming_interleaves_methods_shares_equal_traces_and_resumes_by_round(tmp_path) -> None:
    config = _config(tmp_path, seeds=(0, 1), rounds=3)
    store = Store(str(tmp_path / "results"))
    spec = config.tasks[0]
    for key in all_runs([spec], config.methods, config.seeds):
        lat = [0.5, 0.4, 0.3, 0.2] if key.method != "ms" else [0.5, 0.1, 0.3, 0.2]  # ms: one best for budgets 2, 4
        store.write_result(key, _result(key, lat))
    orders: list[list[str]] = []

    def measure(traces):
        if len(orders) == 2:
            raise KeyboardInterrupt  # killed during the third round
        orders.append([t["insts"] for t in traces])
        return [MeasureResult(Status.OK, (0.1,)) for _ in traces]

    fresh: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        retime_task(config, store, spec, measure=measure, fresh=lambda: fresh.append(1), machine=MACHINE)
    first = orders[0]
    # a: s0-t2, s0-t4, s1-t2, s1-t4; b the same; ms: s0-t2, s1-t2 (its budget-4 best is its budget-2 best)
    assert [name.split("-")[0] for name in first] == ["a", "b", "ms", "a", "b", "ms", "a", "b", "a", "b"]
    assert len(set(first)) == len(first) == 10
    assert orders[1][0].startswith("b") and orders[1][2].startswith("a")  # round 2: b goes first, then ms, then a
    assert len(store.rounds(spec)) == 2 and len(fresh) == 3  # a fresh process before every round
    orders.clear()
    assert retime_task(config, store, spec, measure=measure, fresh=lambda: None, machine=MACHINE) == 1
    assert orders[0][0].startswith("ms")  # the third round, rotated once more
    assert retime_task(config, store, spec, measure=measure, fresh=lambda: None, machine=MACHINE) == 0
    rounds = store.rounds(spec)
    assert [r["round"] for r in rounds] == [1, 2, 3] and rounds[0]["fingerprint"] == MACHINE


def test_readme_block_is_replaced_between_its_markers_only() -> None:
    text = f"# R\n\nbefore\n{BEGIN}\nold table\n{END}\nafter\n"
    new = replace_block(text, "| new |\n")
    assert new == f"# R\n\nbefore\n{BEGIN}\n| new |\n{END}\nafter\n"
    assert replace_block(new, "x") == f"# R\n\nbefore\n{BEGIN}\nx\n{END}\nafter\n"
    with pytest.raises(ValueError, match="no study block"):
        replace_block("# R\n", "x")
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1 and readme.index(BEGIN) < readme.index(END)


@pytest.mark.parametrize("extra, method_block, message", [
    ("", '[[method]]\nname = "x"\nstrategy = "hillclimb"\n', "unknown strategy 'hillclimb'"),
    ("", '[[method]]\nname = "x"\nstrategy = "random"\noptions = { colour = 1 }\n', "no option 'colour'"),
    ("", '[[method]]\nname = "a"\nstrategy = "random"\n', "two methods share a name"),
    ("", '[[method]]\nname = "x"\nkind = "metaschedule"\nsearch_trials = 99\n', "search_trials"),
    ('reference = "nobody"\n', "", "reference"),
])
def test_bad_configurations_are_one_line_errors(tmp_path, extra, method_block, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f'[study]\ntasks = ["m:1x1x4x4->1x1x4x4"]\nreference = "a"\n{extra}'
                    f'[[method]]\nname = "a"\nstrategy = "random"\n{method_block}'.replace(
                        'reference = "a"\nreference', "reference"))
    with pytest.raises(ConfigError, match=message):
        load_config(str(path))


def test_the_study_command_reports_a_bad_configuration_in_one_line(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[study]\ntasks = ["m:1x1x4x4->1x1x4x4"]\n[[method]]\nname = "a"\nstrategy = "hillclimb"\n')
    proc = subprocess.run([sys.executable, "-m", "experiments.study", str(path)], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "hillclimb" in proc.stderr and "Traceback" not in proc.stderr
    smoke = load_config(os.path.join(ROOT, "experiments", "study-smoke.toml"))
    full = load_config(os.path.join(ROOT, "experiments", "study.toml"))
    assert not smoke.readme and full.readme and len(full.tasks) >= 12 and len(full.seeds) >= 3
    assert smoke.smoke and not full.smoke  # the smoke study's tables disown their numbers, the study's do not
    shipped = load_config(os.path.join(ROOT, "experiments", "study-shipped.toml"))
    assert not shipped.readme and not shipped.smoke  # a real comparison, whose block is not README's
    for method in shipped.methods:  # every candidate a model directory the study can load
        assert os.path.exists(os.path.join(ROOT, method.cost_model, "manifest.json")), method
    assert {t.model for t in full.tasks} >= {"tiny-yolov2", "yolov3-tiny", "yolov8n"}
