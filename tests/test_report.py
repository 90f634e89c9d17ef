"""``report`` on a small model: TVM untuned and tuned, ONNX Runtime and OpenVINO, each timed in fresh processes
taking turns, outputs checked against ONNX Runtime; no temporary files left behind; without OpenVINO, one line."""

from __future__ import annotations

import os
import tempfile

import pytest
from rich.console import Console

import autosearch
from autosearch.console import print_report
from autosearch.deploy import report as report
from autosearch.deploy.timing import openvino_default_precision
from tests.conftest import ROOT, run_cli, small_conv_onnx

TVM_DB = os.path.join(ROOT, "tests", "data", "tvm_tune_tir_db")
ORT_SESSION_FILE = ".ses"  # ONNX Runtime's telemetry session file, written in TMPDIR when it is imported


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("report") / "small.onnx")
    small_conv_onnx(path)
    return path


def test_report_times_openvino_and_leaves_no_temporary_files(model, tmp_path, monkeypatch):
    precision = openvino_default_precision()
    assert precision is not None  # the test extra installs OpenVINO
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the timing processes
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # this one
    plotted: list[list[str]] = []
    panels: list = []
    plot_bars = report.plot_bars
    monkeypatch.setattr(report, "plot_bars", lambda labels, bars, *a, **k: plotted.append(list(labels))
                        or panels.extend(bars) or plot_bars(labels, bars, *a, **k))
    md, png = str(tmp_path / "report.md"), str(tmp_path / "report.png")
    console = Console(record=True, width=200)
    result = autosearch.report(model, TVM_DB, runs=4, rounds=2, untuned_runs=1, markdown=md, plot=png,
                               on_message=lambda line: console.print(line, markup=False))
    print_report(console, result)
    figures = result.figures
    text = console.export_text()

    openvino = ["OpenVINO (fp32)"]
    if precision != "f32":  # bf16 on CPUs with AMX or AVX512-BF16: shown beside the fp32 row, held to its own tolerance
        openvino.append(f"OpenVINO (default precision: {precision})")
        assert figures["max_rel_error_vs_ort"][openvino[1]] <= report.LOW_PRECISION_TOLERANCE
        assert f"({precision} inference: tolerance" in text
    assert figures["openvino_default_precision"] == precision
    # TVM_DB holds none of this model's tasks: the "tuned" build is the untuned one, and the report says so
    assert "warning: the database holds none of the model's 2 tasks" in text
    assert figures["max_rel_error_vs_ort"]["OpenVINO (fp32)"] <= report.TOLERANCE
    assert list(figures["runtimes"]) == ["TVM untuned", "TVM tuned", "ONNX Runtime", *openvino]
    assert all(figures["runtimes"][name]["median"] > 0 for name in figures["runtimes"])
    # each runtime that took turns, a median per process (2 rounds; untuned TVM is timed apart, in seconds a run)
    assert {name: len(m) for name, m in figures["process_medians"].items()} == \
        {"TVM tuned": 2, "ONNX Runtime": 2, **{name: 2 for name in openvino}}
    if result.pace:  # a spell of the machine while this test timed: said with the table, and in the Markdown
        assert " ".join(result.pace.split()) in " ".join(text.split()) and result.pace in open(md).read()
    for name in openvino:
        assert f"{name} output vs ONNX Runtime: max relative error" in text
    assert "DIFFERS" not in text and "not installed" not in text
    table = open(md).read()
    assert all(f"| {name} |" in table for name in openvino)
    assert len(plotted[0]) == len(figures["runtimes"]) and sum("OpenVINO" in label for label in plotted[0]) == len(
        openvino)
    assert os.path.getsize(png) > 0
    assert set(os.listdir(tmp)) <= {ORT_SESSION_FILE}  # compiled models, inputs and outputs removed

    # peak memory: every runtime's process against a process that imported the same runtime and loaded no model
    for name, memory in figures["memory"].items():
        assert 0 < memory["baseline_bytes"] < memory["peak_bytes"], name
        assert memory["model_peak_bytes"] == memory["peak_bytes"] - memory["baseline_bytes"], name
        assert memory["peak_bytes"] == max(memory["load_peak_bytes"], memory["run_peak_bytes"]), name
    assert "| peak MiB |" in table.splitlines()[0] and "peak MiB" in text
    # TVM's computed memory, untuned and tuned: the weights bound into each module and the planned activations
    computed = figures["tvm_memory"]
    assert set(computed) == {"TVM untuned", "TVM tuned"}
    for estimate in computed.values():
        assert estimate["weight_bytes"] >= 32 * 16 * 9 * 4  # the conv's kernel, prepacked or not
        assert 0 < estimate["planned_bytes"] <= estimate["unplanned_bytes"]
        assert estimate["peak_bytes"] >= estimate["weight_bytes"] + estimate["planned_bytes"]
    assert "| TVM tuned |" in table.split("TVM memory (MiB)")[1]
    latency, memory_panel = panels
    assert memory_panel.values == [figures["memory"][name]["model_peak_bytes"] / 2**20 for name in figures["runtimes"]]


def test_report_without_openvino_says_so_in_one_line_and_completes(model, tmp_path):
    hidden = tmp_path / "hide" / "openvino"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("hidden by the test")\n')
    path = os.pathsep.join(p for p in (str(hidden.parent), os.environ.get("PYTHONPATH")) if p)
    md = str(tmp_path / "report.md")
    proc = run_cli("report", "--model", model, "--db", TVM_DB, "--runs", "2", "--rounds", "1", "--untuned-runs", "1",
                   "--markdown", md, "--plot", str(tmp_path / "report.png"), env={"PYTHONPATH": path})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [ln for ln in proc.stdout.splitlines() if "OpenVINO" in ln] == [report.OPENVINO_MISSING]
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "DIFFERS" not in proc.stdout
    # the database holds none of this model's tasks: ONNX Runtime beats the untuned build, and report says what next
    assert (f"ONNX Runtime ran faster than TVM tuned: python -m autosearch profile --model {model} --db {TVM_DB} "
            "shows where its time goes") in " ".join(proc.stdout.split())
    table = open(md).read()
    assert "| ONNX Runtime |" in table and "| OpenVINO" not in table and report.OPENVINO_MISSING in table


def test_a_report_of_one_layout_per_convolution_lists_the_kernels_it_built(tmp_path):
    """A database holding both layouts' tasks, export's choice of one layout per convolution beside it: the report
    builds that model and counts its kernels (the transposes between layouts untuned), not the NCHW model's tasks."""
    import json

    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from autosearch.api import _target
    from autosearch.deploy.database import LOWERING_FILE
    from autosearch.frontend.database_files import RECORD_FILE, WORKLOAD_FILE
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.lowering import DEFAULT_FAST_MATH
    from tests.test_layer_layouts import FIRST, SECOND, leaky_convs_onnx

    path, db = str(tmp_path / "leaky.onnx"), tmp_path / "db"
    leaky_convs_onnx(path)
    db.mkdir()
    database = JSONDatabase(path_workload=str(db / WORKLOAD_FILE), path_tuning_record=str(db / RECORD_FILE),
                            allow_missing=True)
    for task in import_model(path, _target(None), layout="auto", precision="fp32", winograd="off").tasks:
        database.commit_workload(task.mod)
    (db / LOWERING_FILE).write_text(json.dumps({"winograd": "off", "layout": "NCHW", "fast_math": DEFAULT_FAST_MATH,
                                                "precision": "fp32", "layer_layouts": {FIRST: "NHWC", SECOND: "NCHW"}}))
    result = autosearch.report(path, str(db), runs=2, rounds=1, untuned_runs=1, plot=str(tmp_path / "r.png"))
    convs = [t.name for t in result.per_task if "conv2d" in t.name]
    assert len(convs) == 2 and sum("maximum" in name for name in convs) == 1  # NHWC's leaky ReLU, NCHW's
    assert result.missing_tasks and all("conv2d" not in name for name in result.missing_tasks)
    assert any("transpose" in name for name in result.missing_tasks)
    assert result.task_count == len(result.per_task) == result.tuned_tasks + len(result.missing_tasks)
    assert "DIFFERS" not in " ".join(check.line(name, markup=False) for name, check in result.checks.items())
