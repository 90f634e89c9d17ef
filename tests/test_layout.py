"""``--layout NHWC``: conv2d lowered to NHWC for tuning, export records it, compile and report follow it."""

from __future__ import annotations

import json
import os

import pytest

from autosearch.records import read_log
from tests.conftest import run_cli_here, small_conv_onnx, tune_and_export

AUTO_TRIALS = 6  # --layout auto: one trial for each of the small model's six tasks


@pytest.fixture(scope="module")
def tuned_nhwc(tmp_path_factory):
    """Four tasks (conv, pool and the two transposes around them), each measured: the scheduler's first pass gives
    the conv two trials (by its FLOPs) and the others one."""
    return tune_and_export(tmp_path_factory.mktemp("nhwc"), small_conv_onnx, trials=5, batch=5,
                           options=("--layout", "NHWC", "--finalist-rounds", "0"))


def test_nhwc_tasks_are_nhwc_convolutions(imported):
    nchw = imported("tiny-yolov2", winograd="auto")
    nhwc = imported("tiny-yolov2", winograd="auto", layout="NHWC")
    assert nhwc.layout == "NHWC" and nhwc.alternatives == nchw.alternatives > 0  # the same winograd candidates
    # same convolutions, other layout; NHWC writes leakyrelu as maximum(x, 0.1 * x): one multiply more per element
    assert nhwc.flops == pytest.approx(nchw.flops, rel=2e-3)
    convs = [t for t in nhwc.tasks if "conv2d" in t.name]
    assert convs and all(t.lowering["layout"] == "NHWC" for t in nhwc.tasks)
    for t in convs:  # data N,H,W,C and weights O,H,W,I (winograd: alpha, alpha, O, I): input channels last in both
        (data, _), (weight, _) = t.args[:2]
        assert data[-1] == weight[-1] and data[1] == data[2] and weight[1] == weight[2] or (
            "winograd" in t.name and weight[:2] == (6, 6) and weight[-1] == data[-1])
    assert {t.workload_key for t in convs}.isdisjoint(t.workload_key for t in nchw.tasks)


def test_nhwc_round_trip_export_compile_report_matches_onnxruntime(tuned_nhwc, capfd):
    with open(os.path.join(tuned_nhwc["db"], "autosearch_lowering.json")) as fh:
        assert json.load(fh)["layout"] == "NHWC"
    out = os.path.join(str(tuned_nhwc["work"]), "model.so")
    proc = run_cli_here(capfd, "compile", "--model", tuned_nhwc["model"], "--db", tuned_nhwc["db"], "--out", out)
    assert proc.returncode == 0, proc.stderr
    contents = read_log(tuned_nhwc["log"])
    faster = [k for k in contents.tasks if contents.best(k).latency < contents.baseline(k).latency]
    assert faster and f"{len(faster)}/{len(contents.tasks)} tuned" in proc.stdout  # the database's layout was used
    md, png = (os.path.join(str(tuned_nhwc["work"]), name) for name in ("report.md", "report.png"))
    proc = run_cli_here(capfd, "report", "--model", tuned_nhwc["model"], "--db", tuned_nhwc["db"], "--runs", "2",
                        "--rounds", "2", "--untuned-runs", "1", "--plot", png, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "DIFFERS" not in proc.stdout
    table = open(md).read().split("\n\n")[0].splitlines()  # the runtimes' table, before the notes
    runs = [c.strip() for c in table[0].split("|")].index("runs")
    rows = {line.split("|")[1].strip(): line.split("|")[runs].strip() for line in table if line.startswith("| ")}
    assert rows["TVM tuned"] == rows["ONNX Runtime"] == "2"  # 1 + 1 runs: two rounds taking turns, pooled


def test_resume_refuses_another_layout(tuned_nhwc, capfd):
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", tuned_nhwc["model"], "--trials", "20",
                        "--log", tuned_nhwc["log"], "--resume", "--layout", "NCHW")
    assert proc.returncode == 2 and "tuned with --layout NHWC" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------- --layout auto
def test_layout_totals_count_each_model_once_with_its_faster_winograd_alternative():
    from autosearch.frontend.alternatives import choose_layout, layout_totals

    both, nchw, nhwc = ["NCHW", "NHWC"], ["NCHW"], ["NHWC"]
    entries = [
        ({"layouts": both}, 1, 1.0),  # shared: counts in both models
        ({"layouts": nchw, "layer": "L", "algorithm": "direct"}, 1, 4.0),
        ({"layouts": nchw, "layer": "L", "algorithm": "winograd"}, 1, 2.0),  # the layer's faster form
        ({"layouts": nhwc}, 2, 1.25),  # weight 2
        ({"layout": "NCHW"}, 1, 100.0),  # a fixed-layout task is no part of the rivalry
    ]
    totals = layout_totals(entries)
    assert totals == {"NCHW": 1.0 + 2.0, "NHWC": 1.0 + 2.5}
    assert choose_layout(totals) == "NCHW"
    assert choose_layout(layout_totals(entries + [({"layouts": nchw}, 1, 1.0)])) == "NHWC"
    assert choose_layout(layout_totals(entries[:3] + [({"layouts": nhwc}, 1, None)])) == "NCHW"  # NHWC unknown
    assert layout_totals(entries[-1:]) == {}


@pytest.fixture(scope="module")
def tuned_auto(tmp_path_factory):
    """Six tasks (conv and pool in each layout, NHWC's two transposes), one trial each, as the scheduler's first
    pass gives them."""
    return tune_and_export(tmp_path_factory.mktemp("auto"), small_conv_onnx, trials=AUTO_TRIALS, batch=AUTO_TRIALS,
                           options=("--layout", "auto", "--finalist-rounds", "0"))


def test_auto_tunes_both_layouts_exports_the_faster_and_compile_follows(tuned_auto, capfd):
    from autosearch.frontend.alternatives import choose_layout, layout_totals, model_latency, task_layouts

    contents = read_log(tuned_auto["log"])
    lowerings = [h["lowering"] for h in contents.tasks.values()]
    assert all(lw["layout"] == "auto" for lw in lowerings)
    assert {layout for lw in lowerings for layout in task_layouts(lw)} == {"NCHW", "NHWC"}
    measured = {r.task_key for r in contents.trials() if r.ok}
    assert any("NHWC" not in task_layouts(contents.tasks[k]["lowering"]) for k in measured)  # both tuned
    assert any("NCHW" not in task_layouts(contents.tasks[k]["lowering"]) for k in measured)

    with open(os.path.join(tuned_auto["db"], "autosearch_lowering.json")) as fh:
        lowering = json.load(fh)
    totals = layout_totals((h["lowering"], h["weight"], model_latency(
        contents.best(k).latency if contents.best(k) else None, contents.baseline(k).latency))
        for k, h in contents.tasks.items())
    assert lowering["layout"] == choose_layout(totals) in ("NCHW", "NHWC")
    assert lowering["layout_totals"] == pytest.approx(totals)
    from autosearch.frontend.database_files import read_database

    exported = set(read_database(tuned_auto["db"]).tasks)
    assert exported and all(lowering["layout"] in task_layouts(contents.tasks[k]["lowering"]) for k in exported)

    out = os.path.join(str(tuned_auto["work"]), "model.so")
    proc = run_cli_here(capfd, "compile", "--model", tuned_auto["model"], "--db", tuned_auto["db"], "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert f" with {len(exported)}/" in proc.stdout  # compiled in the chosen layout: every exported task is found


def test_resume_of_an_auto_log_stays_auto(tuned_auto, capfd):
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", tuned_auto["model"], "--trials",
                        str(AUTO_TRIALS + 1), "--log", tuned_auto["log"], "--resume", "--finalist-rounds", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "conv2d auto" in proc.stdout
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", tuned_auto["model"], "--trials",
                        str(AUTO_TRIALS + 2), "--log", tuned_auto["log"], "--resume", "--layout", "NHWC")
    assert proc.returncode == 2 and "tuned with --layout auto" in proc.stderr
