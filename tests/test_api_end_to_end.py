"""The Python API end to end on real kernels, as a script uses it: load_tasks -> tune -> export -> compile, and the
CLI's export of the same log writing the same database."""

from __future__ import annotations

import os

import pytest

import autosearch
from autosearch.api import MeasureOptions, TunePlanned, TuneStarted
from autosearch.errors import UserError
from autosearch.records import read_log
from autosearch.search.tuner import TuneEvent
from tests.conftest import run_cli_here, small_conv_onnx

FAST = MeasureOptions(repeat=3, min_repeat_ms=5)  # kernels checked and compared, never benchmarked
FP32_NCHW = {"layout": "NCHW", "precision": "fp32"}  # one lowering: two tasks, whatever the CPU


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    path = tmp_path_factory.mktemp("api")
    small_conv_onnx(str(path / "small.onnx"))
    return path


@pytest.fixture(scope="module")
def tuned(work):
    """A real four-trial random run of the small model's conv task, with every event it sent."""
    events = []
    result = autosearch.tune(str(work / "small.onnx"), strategy="random", tasks="conv", trials=4, batch=4,
                             finalist_rounds=1, log=str(work / "run.jsonl"), measure=FAST, on_event=events.append,
                             **FP32_NCHW)
    return result, events


def test_load_tasks_returns_the_models_tasks(work):
    model = autosearch.load_tasks(str(work / "small.onnx"), **FP32_NCHW)
    assert model.name == "small" and model.layout == "NCHW" and model.precision == "fp32"
    assert sorted(t.name for t in model.tasks) == ["fused_conv2d_relu1", "max_pool2d1"]
    assert model.flops == pytest.approx(sum(t.flops * t.weight for t in model.tasks)) and model.flops > 7e6
    assert model.target.kind.name == "llvm"


def test_tune_writes_the_log_and_returns_every_tasks_best(tuned, work):
    result, events = tuned
    assert not result.interrupted and result.trials == 4 and result.strategy == "random"
    assert result.log == str(work / "run.jsonl") and os.path.exists(result.plot)
    [task] = result.tasks
    assert task.name == "fused_conv2d_relu1" and task.trials == 4
    assert 0 < task.best_secs < task.untuned_secs and task.speedup > 1  # a schedule beats the naive loop nest
    assert result.best("fused_conv2d_relu1") == task.best_secs
    assert result.tuned_secs == pytest.approx(task.best_secs * task.weight)
    contents = read_log(result.log)  # what the result says is what the log holds
    assert len(contents.trials()) == 4 and contents.runs[0]["strategy"] == "random"
    # the model's estimate from the best trial, and from the chosen finalist's re-time in a fresh process
    from autosearch.ranking import score

    chosen = contents.best(task.workload_key).config
    retimed = score(r.result for r in contents.retimes(task.workload_key) if r.config == chosen)
    assert result.model_secs == pytest.approx(task.best_secs * task.weight)
    assert result.retimed_model_secs == pytest.approx(retimed * task.weight) != result.model_secs
    # the events: planned, started (what is tuned, what guides it), then the loop's progress
    planned, started, *progress = events
    assert isinstance(planned, TunePlanned) and planned.trials == 4 and planned.log == result.log
    assert isinstance(started, TuneStarted) and [t.name for t in started.tasks] == [task.name]
    assert started.guidance.startswith("none") and started.runner == "local"
    assert progress and all(isinstance(e, TuneEvent) for e in progress) and progress[-1].trials_done == 4


def test_export_writes_the_database_the_cli_writes_and_compile_builds_with_it(tuned, work, capfd):
    result, _ = tuned
    summary = autosearch.export(result.log, str(work / "api-db"))
    assert (summary.tasks, summary.records, summary.log) == (1, 1, result.log)
    assert not summary.skipped_tasks and not summary.corrupt and summary.memory_budget is None
    proc = run_cli_here(capfd, "export", "--log", result.log, "--out", str(work / "cli-db"))
    assert proc.returncode == 0, proc.stderr
    files = sorted(os.listdir(work / "api-db"))
    assert files == sorted(os.listdir(work / "cli-db")) and "database_tuning_record.json" in files
    for name in files:
        assert (work / "api-db" / name).read_text() == (work / "cli-db" / name).read_text(), name

    with pytest.raises(UserError, match="already holds a database"):  # never overwritten without force
        autosearch.export(result.log, str(work / "api-db"))

    compiled = autosearch.compile(str(work / "small.onnx"), str(work / "api-db"), str(work / "small.so"))
    assert compiled.model == "small" and compiled.tuned_tasks == ["fused_conv2d_relu1"]
    assert compiled.task_count == 2 and os.path.getsize(compiled.path) > 0 and os.path.exists(compiled.weights_path)
    assert compiled.memory is not None and compiled.memory.peak_bytes() > 0
    # its kernels name the tasks they run, as the log keys them, and how often a forward pass calls each
    kernels = {k.name: k for k in compiled.kernels}
    [tuned_task] = result.tasks
    conv = kernels["fused_conv2d_relu1"]
    assert conv.calls == 1 and read_log(result.log).best(conv.workload_key).latency == tuned_task.best_secs
    assert {k.calls for k in compiled.kernels} == {1} and len(kernels) == compiled.task_count


def test_a_tuned_log_is_not_tuned_again_without_resume(tuned, work):
    result, _ = tuned
    with pytest.raises(UserError, match="pass --resume to continue it"):
        autosearch.tune(str(work / "small.onnx"), strategy="random", tasks="conv", trials=4, log=result.log,
                        measure=FAST, **FP32_NCHW)
    assert len(read_log(result.log).trials()) == 4


def test_a_plug_in_strategy_tunes_real_kernels_through_the_api(work):
    """The example plug-in package's strategy (examples/autosearch-restarts), found by name through the registry,
    tunes a real kernel like a built-in: autosearch's code knows nothing of it."""
    from tests.conftest import example_plug_in

    example_plug_in("autosearch-restarts")
    result = autosearch.tune(str(work / "small.onnx"), strategy="restarts", options={"patience": "1"}, tasks="conv",
                             trials=8, batch=4, finalist_rounds=0, log=str(work / "restarts.jsonl"), measure=FAST,
                             plot=False, **FP32_NCHW)
    [task] = result.tasks
    assert task.trials == 8 and task.best_secs < task.untuned_secs and result.plot is None
    contents = read_log(result.log)
    assert len({r.config for r in contents.trials()}) == 8  # never the same config twice
    assert contents.runs[0]["strategy"] == "restarts" and contents.runs[0]["options"] == {"patience": 1}


def test_a_plug_in_runner_tunes_real_kernels_through_the_api(work):
    """The example plug-in package's runner (examples/autosearch-device-runner), found by name through the registry
    with its option, builds and times a real kernel like a built-in; the run's record names it."""
    from tests.conftest import example_plug_in

    example_plug_in("autosearch-device-runner")
    result = autosearch.tune(str(work / "small.onnx"), strategy="random", tasks="conv", trials=4, batch=2,
                             finalist_rounds=1, runner="device", runner_options={"threads": "1"},
                             log=str(work / "device.jsonl"), measure=FAST, plot=False, **FP32_NCHW)
    [task] = result.tasks
    assert task.trials == 4 and task.best_secs < task.untuned_secs
    contents = read_log(result.log)
    assert contents.runs[0]["runner"] == "device" and contents.runs[0]["runner_options"] == {"threads": 1}
    assert {r.result.worker.split(":")[-2] for r in contents.trials() if r.ok} == {"device"}  # host:name:pid
