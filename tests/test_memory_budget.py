"""``export --memory-budget`` end to end: a real two-layer run tuned both ways, exported under budgets between
all direct and all Winograd, compiled and reported; a budget nothing meets, one line and exit code 2."""

from __future__ import annotations

import json
import os

import pytest

from autosearch.deploy.memory import MIB
from tests.conftest import run_cli, run_cli_here

WINOGRAD_SPEEDUP = 5.0  # the test's log says Winograd is this much faster on both layers (see the fixture)


@pytest.fixture(scope="module")
def tuned(tuned_two_wide, tmp_path_factory):
    """The shared short real run (both layers tuned direct and as Winograd), its log rewritten so that Winograd is
    the faster on both layers whatever the short run found: the budget has something to give up. This module
    writes into a directory of its own."""
    from autosearch.records import read_log

    run = {**tuned_two_wide, "work": tmp_path_factory.mktemp("budget")}
    algorithm = {k: (h.get("lowering") or {}).get("algorithm") for k, h in read_log(run["log"]).tasks.items()}
    assert sorted(a for a in algorithm.values() if a) == ["direct", "direct", "winograd", "winograd"]
    faster = os.path.join(str(run["work"]), "winograd-faster.jsonl")
    with open(run["log"]) as src, open(faster, "w") as dst:
        for line in src:
            rec = json.loads(line)
            if rec.get("kind") == "trial" and algorithm.get(rec["task"]["key"]) == "winograd":
                rec["result"]["latencies"] = [x / WINOGRAD_SPEEDUP for x in rec["result"].get("latencies", [])]
            dst.write(json.dumps(rec) + "\n")
    return {**run, "log": faster}


@pytest.fixture(scope="module")
def options(tuned, target):
    from autosearch.deploy.budget import import_tuned_model, model_options
    from autosearch.deploy.database import memory_database
    from autosearch.records import read_log

    contents = read_log(tuned["log"])
    model = import_tuned_model(contents, tuned["model"], target)
    [nchw] = model_options(contents, model.relax_mod, target, memory_database(contents), fast_math="on")
    return nchw


def _export(tuned, out: str, budget_bytes: float) -> list[str]:
    """``export --memory-budget``'s arguments."""
    return ["export", "--log", tuned["log"], "--out", out, "--memory-budget", f"{budget_bytes / MIB:.6f}",
            "--model", tuned["model"]]


def test_a_budget_between_all_direct_and_all_winograd_gives_up_winograd_layers_and_fits(tuned, options, capfd):
    from autosearch.deploy.database import lowering_of
    from autosearch.deploy.memory import MemoryEstimate
    from autosearch.records import read_log

    assert sorted(lowering_of(read_log(tuned["log"]))["choices"].values()) == ["winograd", "winograd"]  # by speed
    m = options.memory
    extras = sorted(layer.extra_bytes for layer in options.layers)

    def peak(extra: int) -> int:
        return MemoryEstimate(m.weight_bytes + extra, m.planned_bytes, m.unplanned_bytes, m.scratch_bytes).peak_bytes()

    assert peak(0) < peak(extras[-1]) < peak(sum(extras))
    budget = peak(extras[-1]) + 4096  # room for either layer's Winograd kernels, not for both
    out = os.path.join(str(tuned["work"]), "db-budget")
    proc = run_cli_here(capfd, *_export(tuned, out, budget))
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(out, "autosearch_lowering.json")) as fh:
        lowering = json.load(fh)
    assert sorted(lowering["choices"].values()) == ["direct", "winograd"]
    assert "1 of 2 layers as winograd" in proc.stdout
    recorded = lowering["memory_budget"]
    assert recorded["predicted_bytes"] <= recorded["budget_bytes"] <= budget

    # compile and report build the choice, and report puts the prediction beside the measured peak
    md, png = (os.path.join(str(tuned["work"]), name) for name in ("report.md", "report.png"))
    proc = run_cli_here(capfd, "report", "--model", tuned["model"], "--db", out, "--runs", "2", "--rounds", "1",
                        "--untuned-runs", "1", "--markdown", md, "--plot", png)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in open(md).read().splitlines() if ln.startswith("memory budget"))
    assert "1 of 2 layers as winograd" in line and "predicted peak" in line and "measured" in line, line
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "DIFFERS" not in proc.stdout


def test_a_budget_no_choice_meets_is_one_line_and_exit_code_2(tuned, options):
    # a real process: exit code 2, one line, no traceback
    proc = run_cli(*_export(tuned, os.path.join(str(tuned["work"]), "db-tiny"), options.memory.peak_bytes() / 2))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "no choice fits" in proc.stderr, proc.stderr
    assert not os.path.exists(os.path.join(str(tuned["work"]), "db-tiny"))  # nothing written


def test_an_existing_out_directory_is_refused_before_any_model_is_imported(tuned, capfd, monkeypatch):
    """A wrong --out fails first, not after the minutes --memory-budget spends importing and compiling."""
    import autosearch.deploy.budget

    def imported(*args, **kwargs):
        raise AssertionError("the model was imported before --out was checked")

    monkeypatch.setattr(autosearch.deploy.budget, "import_tuned_model", imported)
    out = os.path.join(str(tuned["work"]), "db-existing")
    os.makedirs(out, exist_ok=True)
    open(os.path.join(out, "database_workload.json"), "w").close()
    proc = run_cli_here(capfd, *_export(tuned, out, 1e12))
    assert proc.returncode == 2 and "already holds" in proc.stderr and "--force" in proc.stderr, proc.stderr


def test_memory_budget_needs_the_model(tuned, capfd):
    proc = run_cli_here(capfd, "export", "--log", tuned["log"], "--out", os.path.join(str(tuned["work"]), "db-x"),
                        "--memory-budget", "100")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --memory-budget needs --model: the model the log "\
                                                           "was tuned on"


def test_memory_experiment_measures_its_variants_and_resumes(tuned, tmp_path):
    """experiments/memory.py's smoke path: two variants measured and tabulated; a rerun measures nothing again."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    cmd = [sys.executable, "-m", "experiments.memory", "--model", tuned["model"], "--log",
           tuned["log"], "--results", str(tmp_path), "--only", "tuned,ort-no-arena", "--runs", "1", "--rounds", "1"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "[tuned]" in first.stdout and "[ort-no-arena]" in first.stdout
    results = json.load(open(tmp_path / "memory-model.json"))["variants"]
    assert set(results) == {"tuned", "ort-no-arena"}
    for r in results.values():
        assert r["model_peak_bytes"] == r["peak_bytes"] - r["baseline_bytes"] > 0 and r["median_ms"] > 0
    assert results["tuned"]["estimate"]["weight_bytes"] > 0
    rows = [ln for ln in (tmp_path / "memory-model.md").read_text().splitlines() if ln.startswith("| ")]
    assert len(rows) == 3 and rows[1].startswith("| tuned (NCHW")  # the header and two rows
    assert (tmp_path / "memory-model.png").stat().st_size > 0
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert again.returncode == 0 and "[tuned]" not in again.stdout, again.stderr[-2000:]
