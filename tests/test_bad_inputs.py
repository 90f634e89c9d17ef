"""Every command meets bad input with one line on stderr, exit code 2, no traceback, nothing overwritten.

Commands that import TVM or the cost models run in this process (``run_cli_here``: the same output, without
seconds of imports a case); the exit code and stderr of a real process are checked by the cases that keep
``run_cli`` (a truncated model, usage errors, export's errors, ``-v``)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import ROOT, run_cli, run_cli_here, small_conv_onnx

DATASET = os.path.join(ROOT, "tests", "data", "small_dataset.jsonl")
TVM_DB = os.path.join(ROOT, "tests", "data", "tvm_tune_tir_db")


def _assert_one_line_error(proc, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-1500:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert len(lines) == 1, proc.stderr[-1500:]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    model = str(d / "small.onnx")
    small_conv_onnx(model)
    truncated = str(d / "truncated.onnx")
    with open(model, "rb") as src, open(truncated, "wb") as dst:
        data = src.read()
        dst.write(data[: len(data) // 3])
    foreign = str(d / "foreign.jsonl")
    with open(foreign, "w") as fh:
        fh.write(json.dumps({"epoch": 1, "loss": 0.3}) + "\n" + "just text\n")
    other_tvm = d / "other_tvm_db"
    shutil.copytree(TVM_DB, other_tvm)
    wl = other_tvm / "database_workload.json"
    row = json.loads(wl.read_text().splitlines()[0])
    row[0] = str(int(row[0]) + 1)  # a structural hash this TVM does not compute for the module
    wl.write_text(json.dumps(row) + "\n")
    blocker = d / "a_file"
    blocker.write_text("x")
    return {"dir": d, "model": model, "truncated": truncated, "foreign": foreign, "other_tvm": str(other_tvm),
            "unwritable": str(blocker / "sub")}


def test_truncated_onnx(files):
    _assert_one_line_error(run_cli("tasks", "--model", files["truncated"]), "cannot read")


def test_run_refuses_unwritable_log(files, capfd):
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", files["model"], "--trials", "4",
                   "--log", os.path.join(files["unwritable"], "r.jsonl"))
    _assert_one_line_error(proc, "cannot write")


def test_export_of_a_foreign_log(files, tmp_path):
    _assert_one_line_error(run_cli("export", "--log", files["foreign"], "--out", str(tmp_path / "db")),
                           "no task headers")


def test_resume_of_a_file_no_run_wrote_is_refused_and_the_file_left_as_it_was(files, tmp_path, capfd):
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(bytes(range(256)) * 2)
    for path in (files["foreign"], str(junk)):
        before = open(path, "rb").read()
        proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", files["model"], "--trials", "2",
                            "--resume", "--log", path)
        _assert_one_line_error(proc, "is it an autosearch tuning log?")
        assert open(path, "rb").read() == before


def test_run_refuses_to_append_to_a_gzipped_log(files, tmp_path, capfd):
    import gzip

    log = tmp_path / "log.jsonl.gz"
    with gzip.open(log, "wt") as fh:
        fh.write(json.dumps({"v": 1, "kind": "run", "run": {"strategy": "random"}}) + "\n")
    before = log.read_bytes()
    for resume in ((), ("--resume",)):
        proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", files["model"], "--trials", "2",
                            *resume, "--log", str(log))
        _assert_one_line_error(proc, "name it without .gz")
    assert log.read_bytes() == before
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", files["model"], "--trials", "2",
                        "--log", str(tmp_path / "new.jsonl.gz"))
    _assert_one_line_error(proc, "name it without .gz")
    assert not (tmp_path / "new.jsonl.gz").exists()


def test_export_to_an_unwritable_path(files):
    _assert_one_line_error(run_cli("export", "--log", DATASET, "--out", files["unwritable"]), "cannot write")


def test_export_missing_log(tmp_path):
    _assert_one_line_error(run_cli("export", "--log", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "db")),
                           "log not found")


def test_export_bad_top_k(tmp_path):
    _assert_one_line_error(run_cli("export", "--log", DATASET, "--out", str(tmp_path / "db"), "--top-k", "0"),
                           "positive")


def test_database_from_another_tvm_version(files, tmp_path, capfd):
    proc = run_cli_here(capfd, "compile", "--model", files["model"], "--db", files["other_tvm"],
                        "--out", str(tmp_path / "m.so"))
    _assert_one_line_error(proc, "another TVM version")
    assert not os.path.exists(tmp_path / "m.so")


def test_a_database_of_another_model_compiles_untuned_and_says_so(files, tmp_path, capfd):
    db = str(tmp_path / "db")
    assert run_cli("export", "--log", DATASET, "--out", db).returncode == 0  # tiny-YOLOv2's tasks
    proc = run_cli_here(capfd, "compile", "--model", files["model"], "--db", db, "--out", str(tmp_path / "m.so"))
    assert proc.returncode == 0 and "with 0/2 tuned tasks" in proc.stdout
    assert "warning: the database holds none of the model's 2 tasks" in proc.stderr


def test_train_model_refuses_an_out_that_is_a_file_before_featurising(files, capfd):
    proc = run_cli_here(capfd, "train-model", "--log", DATASET, "--out", str(files["dir"] / "a_file"))
    _assert_one_line_error(proc, "cannot write")


def test_compile_to_an_unwritable_path(files, capfd):
    proc = run_cli_here(capfd, "compile", "--model", files["model"], "--db", TVM_DB,
                   "--out", os.path.join(files["unwritable"], "m.so"))
    _assert_one_line_error(proc, "cannot write")


def test_report_bad_runs(files, capfd):
    _assert_one_line_error(run_cli_here(capfd, "report", "--model", files["model"], "--db", TVM_DB, "--runs", "0"),
                           "positive")


def test_report_and_compare_models_check_threads_and_outputs_before_the_work(files, capfd):
    report = ("report", "--model", files["model"], "--db", TVM_DB)
    _assert_one_line_error(run_cli_here(capfd, *report, "--threads", "0"), "--threads must be positive")
    for option in ("--plot", "--markdown"):
        out = os.path.join(files["unwritable"], "out")
        _assert_one_line_error(run_cli_here(capfd, *report, option, out), "cannot write")
        _assert_one_line_error(run_cli_here(capfd, "compare-models", "--log", DATASET, option, out), "cannot write")


def test_a_ray_address_that_does_not_answer_fails_in_seconds(files):
    import socket
    import time

    with socket.socket() as sock:  # a port nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    proc = run_cli("run", "--strategy", "random", "--model", files["model"], "--trials", "2", "--runner", "ray",
                   "--ray-address", f"127.0.0.1:{port}", "--log", str(files["dir"] / "ray.jsonl"), timeout=120)
    _assert_one_line_error(proc, "does not answer")
    assert time.monotonic() - started < 60  # Ray's own join retries an unreachable head for minutes


def test_compare_models_unknown_model_and_missing_log(tmp_path, capfd):
    def compare_models(*args: str):
        return run_cli_here(capfd, "compare-models", *args)

    _assert_one_line_error(compare_models("--log", DATASET, "--models", "xgb,oracle"), "valid cost models")
    _assert_one_line_error(compare_models("--log", str(tmp_path / "nope.jsonl")), "not found")
    # a feature set that does not exist, and one given to a model with an input of its own
    _assert_one_line_error(compare_models("--log", DATASET, "--models", "xgb@pixels"), "must be one of loop, pooled")
    _assert_one_line_error(compare_models("--log", DATASET, "--models", "mlp@loop"), "has its own input")
    _assert_one_line_error(compare_models("--log", DATASET, "--models", "seq@loop"), "trace tokens")


def test_compare_models_off_a_terminal_reports_progress_in_lines_on_stderr(tmp_path, capfd):
    """Not an error case: rich draws no bar into a pipe, so a long comparison would be silent there."""
    proc = run_cli_here(capfd, "compare-models", "--log", DATASET, "--models", "rf", "--plot", str(tmp_path / "p.png"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rf: held-out tasks: ")]
    assert lines and lines[-1].startswith("rf: held-out tasks: 4/4 (")  # the committed dataset: 4 tasks
    assert "| rf " not in proc.stderr and "rf" in proc.stdout  # the table stays on stdout


def test_compare_models_by_model_needs_logs_that_name_their_models(capfd):
    # the committed dataset's task headers name no model: nothing to hold out by model
    _assert_one_line_error(run_cli_here(capfd, "compare-models", "--log", DATASET, "--models", "rf", "--split",
                                        "model", "--plot", os.devnull), "at least 2 models")


def test_unknown_sampler_lists_the_valid_ones(files, capfd):
    proc = run_cli_here(capfd, "run", "--strategy", "optuna", "--sampler", "annealer", "--model", files["model"],
                        "--log", str(files["dir"] / "s.jsonl"))
    _assert_one_line_error(proc, "tpe")


def test_usage_errors_are_one_line(files):
    proc = run_cli("run", "--model", files["model"])  # --strategy missing
    _assert_one_line_error(proc, "--strategy")
    proc = run_cli("run", "--strategy", "random", "--trials", "many")
    _assert_one_line_error(proc, "invalid int value")
    proc = run_cli("train-model", "--log", DATASET, "--out", str(files["dir"] / "m"), "--family", "lightgbm")
    _assert_one_line_error(proc, "choose from 'xgb-rank', 'blend'")
    assert not os.path.exists(files["dir"] / "m")


@pytest.mark.parametrize("content, needle", [
    ("{not json", "is corrupt"),  # e.g. a half-written file
    ('{"winograd": "auto", "layout": "NCWH", "fast_math": "on"}', "layout 'NCWH' is none of NCHW, NHWC"),
    ('["auto"]', "not a JSON object"),
])
def test_corrupt_lowering_file_is_refused_not_read_as_unknown(files, tmp_path, content, needle, capfd):
    # read as {}, compile would lower with the defaults: other workload keys, every task silently untuned
    db = tmp_path / "db"
    shutil.copytree(TVM_DB, db)
    (db / "autosearch_lowering.json").write_text(content)
    proc = run_cli_here(capfd, "compile", "--model", files["model"], "--db", str(db), "--out", str(tmp_path / "m.so"))
    _assert_one_line_error(proc, needle)
    assert "autosearch_lowering.json" in proc.stderr and not os.path.exists(tmp_path / "m.so")


def test_report_refuses_a_gpu_target(files, capfd):
    # every runtime is timed on this machine's CPU: a CUDA build would be compared with nothing
    proc = run_cli_here(capfd, "report", "--model", files["model"], "--db", TVM_DB, "--target", "cuda")
    lines = [ln for ln in proc.stderr.splitlines() if "Unable to detect CUDA version" not in ln]  # TVM's C++ log
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert "must be a CPU (llvm) target, not cuda" in lines[0]


def test_verbose_shows_the_traceback_behind_a_one_line_error(capfd):
    bad = '{"kind": "nokind"}'
    _assert_one_line_error(run_cli_here(capfd, "tasks", "--target", bad), "malformed --target")
    proc = run_cli("-v", "tasks", "--target", bad)  # a real process: the traceback printed, exit code 2
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and 'Target kind "nokind" is not defined' in proc.stderr  # TVM's own error
    assert proc.stderr.splitlines()[-1].startswith("error: malformed --target")
