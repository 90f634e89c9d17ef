"""Export to a MetaSchedule database, TVM loads it, compile the model, import TVM's own databases."""

from __future__ import annotations

import functools
import json
import os
import shutil

import numpy as np
import pytest

from autosearch.records import read_log
from autosearch.types import MeasureResult, Record, Status
from tests.conftest import ROOT, exported_tasks, run_cli, run_cli_here, small_conv_onnx, tune_and_export

TVM_DB = os.path.join(ROOT, "tests", "data", "tvm_tune_tir_db")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A short real run on the small model (both tasks: the scheduler's first pass gives the conv two trials and
    the pool one, by their FLOPs; the fourth goes where it expects the most gain) and its exported database."""
    return tune_and_export(tmp_path_factory.mktemp("export"), small_conv_onnx, trials=4, batch=4,
                           until=lambda contents: any("conv" in name for name in exported_tasks(contents)))


def test_tvm_loads_the_exported_database_and_finds_our_best(tuned):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from autosearch.frontend.task import TuningTask

    contents = read_log(tuned["log"])
    db = JSONDatabase(path_workload=os.path.join(tuned["db"], "database_workload.json"),
                      path_tuning_record=os.path.join(tuned["db"], "database_tuning_record.json"),
                      allow_missing=False)
    faster = [k for k in contents.tasks if contents.best(k).latency < contents.baseline(k).latency]
    assert faster  # the conv task at least: a schedule beats the naive loop nest
    assert len(db.get_all_tuning_records()) == len(faster)
    for key in faster:
        task = TuningTask.from_json(contents.tasks[key])
        assert db.has_workload(task.mod)
        [top] = db.get_top_k(db.commit_workload(task.mod), 1)
        best = contents.best(key)
        assert [float(x) for x in top.run_secs] == pytest.approx(list(best.result.latencies))
        # the trace replays as-is on the workload
        sch = db.query_schedule(task.mod, task.target, workload_name="main")
        assert sch is not None


def test_compiled_tuned_model_matches_onnxruntime_and_beats_untuned(tuned, capfd):
    out = os.path.join(str(tuned["work"]), "model.so")
    proc = run_cli_here(capfd, "compile", "--model", tuned["model"], "--db", tuned["db"], "--out", out)
    assert proc.returncode == 0, proc.stderr
    contents = read_log(tuned["log"])
    faster = [k for k in contents.tasks if contents.best(k).latency < contents.baseline(k).latency]
    assert f"{len(faster)}/2 tuned" in proc.stdout and os.path.getsize(out) > 0
    weights = os.path.join(str(tuned["work"]), "model.params")  # beside the library (autosearch.deploy.artifact)
    assert "(weights: " in proc.stdout and os.path.getsize(weights) > 0  # the console may wrap the path
    md = os.path.join(str(tuned["work"]), "report.md")
    png = os.path.join(str(tuned["work"]), "report.png")
    proc = run_cli_here(capfd, "report", "--model", tuned["model"], "--db", tuned["db"], "--log", tuned["log"],
                        "--runs", "2", "--rounds", "1", "--untuned-runs", "1", "--markdown", md, "--plot", png)
    assert proc.returncode == 0, proc.stderr
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "matches" in proc.stdout
    assert "DIFFERS" not in proc.stdout
    assert os.path.getsize(png) > 0 and "TVM tuned" in open(md).read()
    contents = read_log(tuned["log"])
    conv_key = next(k for k, h in contents.tasks.items() if "conv" in h["name"])
    assert contents.best(conv_key).latency < contents.baseline(conv_key).latency


def test_export_skips_failed_and_wrong_records(tmp_path, tuned):
    contents = read_log(tuned["log"])
    key = next(iter(contents.tasks))
    best = contents.best(key)
    # a wrong-result record that claims to be fastest must never be exported
    fake = Record(kind="trial", task_key=key, task_name=best.task_name, target=best.target, config=best.config,
                  result=MeasureResult(Status.WRONG_RESULT, (), error="mismatch"), flops=best.flops,
                  trace=best.trace)
    log = str(tmp_path / "mixed.jsonl")
    shutil.copy(tuned["log"], log)
    with open(log, "a") as fh:
        obj = fake.to_json()
        obj["result"]["latencies"] = [1e-9]  # even with a latency on the line
        fh.write(json.dumps(obj) + "\n")
    from autosearch.deploy.database import export_database
    from autosearch.frontend.database_files import read_database

    mixed = read_log(log)
    summary = export_database(mixed, str(tmp_path / "db"), top_k=50)
    exported = read_database(str(tmp_path / "db"))
    kept = [k for k in mixed.tasks if mixed.tasks[k]["name"] not in summary.slower_than_untuned]
    assert summary.records == len(exported.records) == sum(1 for r in mixed.trials() if r.ok and r.task_key in kept)
    assert min(r.latency for r in exported.records) > 1e-6


def test_a_database_written_by_ms_tune_tir_imports():
    from autosearch.frontend.database_files import read_records

    contents = read_records(TVM_DB)
    assert len(contents.tasks) == 1 and len(contents.records) >= 4
    ok = [r for r in contents.records if r.ok]
    assert ok and all(r.trace for r in ok)
    header = next(iter(contents.tasks.values()))
    assert header["flops"] > 1e6


def test_report_and_compile_refuse_a_corrupt_database(tmp_path, tuned, capfd):
    db = tmp_path / "corrupt"
    shutil.copytree(tuned["db"], db)
    (db / "database_tuning_record.json").write_text("[0, [garbage\n")
    for run, cmd in ((run_cli, ["report", "--runs", "2"]),  # one real process: one line, exit code 2
                     (functools.partial(run_cli_here, capfd), ["compile", "--out", str(tmp_path / "m.so")])):
        proc = run(*cmd, "--model", tuned["model"], "--db", str(db))
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "database" in lines[0], proc.stderr
    proc = run_cli_here(capfd, "report", "--model", tuned["model"], "--db", str(tmp_path / "nothing"))
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_export_refuses_to_overwrite(tuned, capfd):
    proc = run_cli_here(capfd, "export", "--log", tuned["log"], "--out", tuned["db"])
    assert proc.returncode == 2 and "already holds" in proc.stderr


def test_sample_inputs_are_deterministic():
    from autosearch.measure.kernels import make_inputs

    a = make_inputs([((2, 3), "float32"), ((4,), "int32")], 7)
    b = make_inputs([((2, 3), "float32"), ((4,), "int32")], 7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_task_no_faster_than_untuned_is_left_to_tvm(tmp_path):
    from autosearch.deploy.database import export_database
    from autosearch.records import LogContents

    contents = read_log(os.path.join(ROOT, "tests", "data", "small_dataset.jsonl"))
    key = next(iter(contents.tasks))
    best = contents.best(key)
    slow_baseline = Record(kind="baseline", task_key=key, task_name=best.task_name, target=best.target,
                           config=None, result=MeasureResult(Status.OK, (best.latency / 2,)), flops=best.flops)
    patched = LogContents(path="mem", tasks={key: contents.tasks[key]},
                          records=[r for r in contents.records if r.task_key == key and r.kind != "baseline"]
                          + [slow_baseline])
    summary = export_database(patched, str(tmp_path / "db"))
    assert summary.records == 0 and summary.slower_than_untuned == [best.task_name]


def test_a_winner_whose_trial_a_slow_spell_inflated_is_judged_by_its_re_times(tmp_path):
    """A finalist re-timed well below the untuned kernel is exported even though its one in-run timing (a slow
    spell of the machine) read above it; re-times that agree with that timing leave the task to TVM as before."""
    from autosearch.deploy.database import export_database
    from autosearch.records import LogContents

    contents = read_log(os.path.join(ROOT, "tests", "data", "small_dataset.jsonl"))
    key = next(iter(contents.tasks))
    best = contents.best(key)
    own = [r for r in contents.records if r.task_key == key and r.kind != "baseline"]
    baseline = Record(kind="baseline", task_key=key, task_name=best.task_name, target=best.target, config=None,
                      result=MeasureResult(Status.OK, (best.latency / 2,)), flops=best.flops)

    def exported(retimed: float) -> tuple[int, list[str]]:
        retimes = [Record(kind="retime", task_key=key, task_name=best.task_name, target=best.target,
                          config=best.config, result=MeasureResult(Status.OK, (retimed,) * 3), flops=best.flops,
                          round=n) for n in (1, 2)]
        patched = LogContents(path="mem", tasks={key: contents.tasks[key]}, records=[*own, baseline, *retimes])
        summary = export_database(patched, str(tmp_path / f"db{retimed}"))
        return summary.records, summary.slower_than_untuned

    assert exported(best.latency / 4) == (1, [])  # its re-times: twice as fast as the untuned kernel
    assert exported(best.latency) == (0, [best.task_name])  # its re-times confirm the in-run timing


def test_export_force_leaves_no_stale_lowering_file(tmp_path, tuned, capfd):
    db = tmp_path / "db"
    shutil.copytree(tuned["db"], db)
    lowering = db / "autosearch_lowering.json"
    assert lowering.exists()  # the tuned log records how it was lowered
    # a log from before the lowering options: no lowering file of its own, compile must not read the old one
    dataset = os.path.join(ROOT, "tests", "data", "small_dataset.jsonl")
    proc = run_cli_here(capfd, "export", "--log", dataset, "--out", str(db), "--force")
    assert proc.returncode == 0, proc.stderr
    assert not lowering.exists() and (db / "database_workload.json").exists()
    # a directory holding only a lowering file is someone's database too: --force to replace it
    lowering.write_text('{"winograd": "off", "layout": "NCHW", "fast_math": "on"}\n')
    for name in ("database_workload.json", "database_tuning_record.json"):
        (db / name).unlink()
    proc = run_cli_here(capfd, "export", "--log", dataset, "--out", str(db))
    assert proc.returncode == 2 and "autosearch_lowering.json" in proc.stderr and "--force" in proc.stderr


def test_cuda_tasks_reach_metaschedule_unscheduled_and_the_tuned_build_schedules_the_rest(tmp_path):
    """TVM's CUDA legalisation ends with dlight's default schedules: the tasks must not (MetaSchedule tunes
    unscheduled functions, and TVM's own databases key them so); the tuned build keeps the database's schedule
    and gives the kernels it lacks dlight's, without which they do not build for a GPU."""
    import tvm
    import tvm_ffi
    from tvm.s_tir import dlight as dl
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.lowering import apply_database, lower
    from autosearch.frontend.target import parse_target

    target = parse_target("cuda")  # no GPU needed: nothing here runs on one
    path = str(tmp_path / "small.onnx")
    small_conv_onnx(path)
    model = import_model(path, target)
    assert model.tasks and not any("tirx.is_scheduled" in t.mod["main"].attrs for t in model.tasks)
    conv = next(t for t in model.tasks if "conv" in t.name)
    # a record with a GPU schedule other than the default one (dlight's fallback rule: a MetaSchedule design space
    # for CUDA imports TVM's tensor intrinsics, a minute)
    sch = dl.gpu.Fallback().apply(conv.mod["main"], target, False)
    db = ms.database.MemoryDatabase()
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(conv.mod), [1e-4], target,
                                                     ms.arg_info.ArgInfo.from_prim_func(conv.mod["main"])))
    lowered = lower(model.relax_mod, target, layout=model.layout, fast_math=model.fast_math)

    def kernels(mod):
        return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}

    tuned, untuned = (kernels(apply_database(lowered, target, d)) for d in (db, ms.database.MemoryDatabase()))
    assert tuned.keys() == untuned.keys() and len(tuned) == len(model.tasks)
    for f in (*tuned.values(), *untuned.values()):
        assert "threadIdx" in f.script()  # every kernel bound to GPU threads: by the database or by dlight
    [name] = [n for n in tuned if "conv" in n]
    assert tvm_ffi.structural_equal(tuned[name].body, sch.mod["main"].body)  # the database's schedule
    assert not tvm_ffi.structural_equal(tuned[name].body, untuned[name].body)  # not dlight's
