"""`python -m autosearch run` end to end on real kernels: every strategy, resume, bad inputs."""

from __future__ import annotations

import os
import re

import pytest

from autosearch.records import read_log
from tests.conftest import run_cli, run_cli_here, small_conv_onnx

# Timing settings of the end-to-end runs: their kernels are checked and compared, never benchmarked
FAST_TIMING = ("--repeat", "3", "--min-repeat-ms", "5")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("run") / "small.onnx")
    small_conv_onnx(path)
    return path


def _trial_configs(contents, key=None):
    return [r.config for r in contents.trials(key)]


# Two batches of 4 each: the second is the strategy's own move after its random start (annealing's chains from
# the measured, optuna's TPE sampler guided by the shipped cost model), so the start is shortened to one batch.
STARTS = {"random": (), "annealing": ("--option", "init_random=4"), "optuna": ("--option", "n_startup_trials=4")}


@pytest.mark.parametrize("strategy", ["random", "annealing", "optuna"])
def test_each_strategy_tunes_real_kernels(tmp_path, model_path, strategy, capfd):
    log = str(tmp_path / "run.jsonl")
    plot = strategy == "random"  # the others draw none (--no-plot), as a script of many runs asks
    proc = run_cli_here(capfd, "run", "--strategy", strategy, "--model", model_path, "--tasks", "conv", "--layout",
                    "NCHW", "--finalist-rounds", "1", *FAST_TIMING, *STARTS[strategy],
                    *(() if plot else ("--no-plot",)), "--trials", "8", "--batch", "4", "--log", log, "--seed", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    contents = read_log(log)
    trials = contents.trials()
    assert len(trials) == 8
    assert len(set(_trial_configs(contents))) == 8  # never the same config twice
    [key] = contents.tasks
    baseline = contents.baseline(key)
    best = contents.best(key)
    assert baseline.ok and best is not None and best.ok
    assert best.latency < baseline.latency  # a schedule beats the naive loop nest
    assert all(r.trace for r in trials if r.ok)
    assert os.path.exists(log.replace(".jsonl", ".png")) == plot and ("plot: " in proc.stdout) == plot
    assert "speedup" in proc.stdout and "GFLOPS" in proc.stdout
    summary = " ".join(proc.stdout.split())  # rich wraps long lines
    assert re.search(r"task set-up \d+ s \(design spaces \d+ s, untuned kernels \d+ s, strategies and cost models "
                     r"\d+ s\)", summary), summary[-600:]


def test_resume_finishes_the_budget_without_repeating_a_measurement(tmp_path, model_path, capfd):
    log = str(tmp_path / "run.jsonl")
    args = ("run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--layout", "NCHW",
            "--finalist-rounds", "1", *FAST_TIMING, "--no-plot", "--log", log)
    first = run_cli_here(capfd, *args, "--trials", "4", "--batch", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    before = _trial_configs(read_log(log))
    refused = run_cli_here(capfd, *args, "--trials", "8")
    assert refused.returncode == 2 and "--resume" in refused.stderr
    again = run_cli_here(capfd, *args, "--trials", "8", "--batch", "2", "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    contents = read_log(log)
    after = _trial_configs(contents)
    assert len(after) == 8 and len(set(after)) == 8
    assert after[:4] == before
    assert len([r for r in contents.records if r.kind == "baseline"]) == 1


def test_a_time_limit_stops_the_search_goes_past_the_planned_trials_and_re_times_the_finalists(
        tmp_path, model_path, capfd):
    """``--minutes`` alone: the search stops at the limit (checked between rounds), not at a trial count: it
    measures more than the trials its warm-up was planned for while time remains, and the finalists' re-timing
    follows the stop as it follows a spent budget."""
    import time

    from autosearch.search.scheduler import PLANNED_TRIALS_PER_CORE_MINUTE

    log = str(tmp_path / "run.jsonl")
    minutes = 0.25
    start = time.perf_counter()
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", model_path, "--tasks", "conv", "--layout",
                        "NCHW", "--finalist-rounds", "1", *FAST_TIMING, "--minutes", str(minutes), "--batch", "2",
                        "--build-workers", "1", "--no-plot", "--log", log)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    contents = read_log(log)
    trials = contents.trials()
    planned = minutes * PLANNED_TRIALS_PER_CORE_MINUTE * 1  # one build worker
    assert len(trials) > planned
    [run] = contents.runs
    assert run["minutes"] == minutes and run["trials"] is None
    # no round began after the limit. A record's start is logged as its batch's end less its own build and run, later
    # than its round's start by the rest of the batch's work: a round began no later than its earliest record's start
    # (a batch's records end together; they are in the log in order)
    batches: list[list] = []
    for r in trials:
        if batches and abs(r.finished - batches[-1][-1].finished) < 0.05:
            batches[-1].append(r)
        else:
            batches.append([r])
    first_start = min(r.started for r in batches[0])
    assert min(r.started for r in batches[-1]) - first_start < minutes * 60
    [key] = contents.tasks
    assert contents.retimes(key), "the finalists were re-timed after the stop"
    assert wall < minutes * 60 + 60
    assert "0.25 min" in proc.stdout


@pytest.mark.parametrize("strategy", ["annealing", "optuna"])  # random's resume is its seen set: the contract suite
def test_an_interrupted_run_resumed_with_another_batch_goes_on_from_its_log(tmp_path, conv_task, strategy, monkeypatch):
    """Interrupted after 6 of 12 trials (batch 3), resumed with batch 4 and the same seed: the strategy is told the
    logged trials, asks none of them again, nothing is measured twice, and the best never falls behind the log's.
    The random start is 4 trials, so the resumed strategy goes on from the logged ones in its own way at once
    (annealing's chains, optuna's TPE), as with the default starts after a longer first run."""
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog
    from autosearch.search import tuner as tuner_module
    from autosearch.search.strategy import make_strategy
    from autosearch.search.tuner import Tuner

    def interrupt_at_6(event):
        if event.phase == "batch" and event.trials_done >= 6:
            raise KeyboardInterrupt  # what Ctrl-C raises in the loop

    told, asks, bests = {}, [], []
    start = {"annealing": {"init_random": 4}, "optuna": {"n_startup_trials": 4}}[strategy]

    def spied_strategy(*args, **kwargs):  # the real strategy, its resume and asks recorded
        real = make_strategy(*args, **kwargs)
        resume, ask = real.resume, real.ask
        real.resume = lambda configs, results: (told.update(zip(configs, results)), resume(configs, results))
        real.ask = lambda n: asks.append(ask(n)) or asks[-1]
        return real

    log_path = str(tmp_path / "run.jsonl")
    runner = LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5), run_timeout=10)
    try:
        with TuningLog(log_path) as log:
            first = Tuner(tasks=[conv_task], runner=runner, log=log, strategy=strategy, budget=12, batch=3, seed=1,
                          strategy_options=start, finalist_rounds=1, on_event=interrupt_at_6).run()
        assert first.interrupted and first.trials == 6
        parts = first.setup_timing  # the task's set-up split into its parts, which make up most of it
        assert parts["space"] > 0 and parts["baseline"] > 0 and parts["strategy"] > 0
        assert 0.8 * first.timing["setup"] <= sum(parts.values()) <= first.timing["setup"]
        logged = read_log(log_path)
        logged_best = min(r.latency for r in logged.trials() if r.ok)
        monkeypatch.setattr(tuner_module, "make_strategy", spied_strategy)
        with TuningLog(log_path, resume=True) as log:
            second = Tuner(tasks=[conv_task], runner=runner, log=log, strategy=strategy, budget=12, batch=4, seed=1,
                           strategy_options=start, finalist_rounds=1, resume=logged,
                           on_event=lambda e: bests.append(e.task.best) if e.phase == "batch" else None).run()
    finally:
        runner.close()
    assert second.trials == 12 and not second.interrupted
    measured = [r.config for r in read_log(log_path).trials()]
    assert len(measured) == 12 == len(set(measured))
    logged_configs = {r.config for r in logged.trials()} | {r.requested for r in logged.trials() if r.requested}
    assert set(told) == logged_configs  # as measured and as requested
    assert all(told[r.config] == r.result for r in logged.trials())
    assert asks and not {c for batch in asks for c in batch} & logged_configs
    assert bests and all(best.median <= logged_best for best in bests)


@pytest.mark.parametrize("args, needle", [
    (["--strategy", "hillclimb"], "annealing, coordinate_descent, optuna, random"),
    (["--strategy", "random", "--trials", "0"], "positive"),
    (["--strategy", "random", "--trials", "-3"], "positive"),
    (["--strategy", "random", "--minutes", "0"], "--minutes must be a positive number"),
    (["--strategy", "random", "--minutes", "nan"], "--minutes must be a positive number"),
    (["--strategy", "optuna", "--sampler", "bogus"], "sampler"),
    (["--strategy", "random", "--cost-model", "magic"], "valid cost models"),
    (["--strategy", "random", "--model", "yolov99"], "built-in models"),
    (["--strategy", "random", "--option", "nosuch=1"], "no option"),
    (["--strategy", "random", "--runner", "rpc"], "unknown runner 'rpc'; valid runners: "),
    (["--strategy", "random", "--runner-option", "threads=2"], "runner 'local' has no option 'threads'"),
    (["--strategy", "random", "--runner-option", "threads"], "--runner-option 'threads': use KEY=VALUE"),
    (["--strategy", "random", "--tasks", "99"], "no task 99"),
    (["--strategy", "random", "--resume"], "log not found"),
    (["--strategy", "random", "--target", "{oops"], "malformed --target"),
    (["--strategy", "random", "--known-schedules", "/nonexistent/known.jsonl"], "known schedules not found"),
])
def test_run_bad_inputs(tmp_path, model_path, args, needle, capfd):
    """In the test process (its stdout and stderr at the file descriptors); one case, past the model's import,
    as a real ``python -m autosearch`` process: its exit code, one line and no traceback are the user's view."""
    if "--model" not in args:
        args = [*args, "--model", model_path]
    args = ["run", *args, "--log", str(tmp_path / "x.jsonl")]
    proc = run_cli(*args, timeout=120) if needle == "no task 99" else run_cli_here(capfd, *args)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not os.path.exists(tmp_path / "x.jsonl")  # nothing written on bad input


@pytest.mark.parametrize("chunk", [1, 8])
def test_tasks_are_set_up_in_chunks_each_once_before_its_first_trial(tmp_path, small_model, chunk, monkeypatch):
    """The tuner sets up the tasks waiting for activation together (their untuned modules build while their design
    spaces are built), up to SETUP_CHUNK at a time; every task is set up once, before its first trial, and its
    baseline is logged when it is activated."""
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog
    from autosearch.search import tuner as tuner_module
    from autosearch.search.tuner import Tuner

    calls: list[list[str]] = []

    class Recording(LocalRunner):
        def prepare_many(self, tasks, *, meanwhile=None):
            calls.append([t.name for t in tasks])
            return super().prepare_many(tasks, meanwhile=meanwhile)

        def measure(self, task, mods):
            assert any(task.name in c for c in calls), "measured before it was set up"
            return super().measure(task, mods)

    monkeypatch.setattr(tuner_module, "SETUP_CHUNK", chunk)
    tasks = list(small_model.tasks)
    runner = Recording(target=tasks[0].target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5))
    log_path = str(tmp_path / "run.jsonl")
    try:
        with TuningLog(log_path) as log:
            summary = Tuner(tasks=tasks, runner=runner, log=log, strategy="random", budget=4, batch=2, seed=0,
                            finalist_rounds=0).run()
    finally:
        runner.close()
    assert summary.trials == 4 and all(s.trials for s in summary.states)
    assert sorted(n for c in calls for n in c) == sorted(t.name for t in tasks)  # each task once
    assert [len(c) for c in calls] == ([1] * len(tasks) if chunk == 1 else [len(tasks)])
    baselines = [r for r in read_log(log_path).records if r.kind == "baseline"]
    assert sorted(r.task_name for r in baselines) == sorted(t.name for t in tasks) and all(r.ok for r in baselines)
    assert summary.setup_timing["space"] > 0 and summary.setup_timing["baseline"] > 0


def test_a_run_keeps_its_tasks_sketches_and_the_next_run_reads_them(tmp_path, monkeypatch) -> None:
    """The sketch cache (autosearch/search/sketch_store.py) as a run uses it: one entry per task, read by the next."""
    import autosearch
    from autosearch.cache import CACHE_ENV
    from autosearch.search.space import DecisionSpace

    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    options = dict(strategy="random", trials=2, batch=2, layout="NCHW", finalist_rounds=0, plot=False,
                   cost_model="none", known_schedules="none")
    first = autosearch.tune(model, log=str(tmp_path / "first.jsonl"), **options)
    kept = os.listdir(tmp_path / "cache" / "sketches")
    assert len(kept) == len(first.tasks) > 0

    def refuse(*args, **kwargs):
        raise AssertionError("a space was built, not read")

    monkeypatch.setattr(DecisionSpace, "_make_sketch", refuse)
    second = autosearch.tune(model, log=str(tmp_path / "second.jsonl"), **options)
    assert len(second.tasks) == len(first.tasks) and sorted(os.listdir(tmp_path / "cache" / "sketches")) == sorted(kept)
