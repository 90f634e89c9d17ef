"""experiments/time_to_quality.py's tuning loop: the minutes, not the first guess of a trial budget, end a method's
tuning. ``autosearch run`` is replaced by a stand-in process that appends trial records to its log (what the loop
reads and decides from); real runs are tested elsewhere, and this is about the loop's decisions."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from experiments import time_to_quality as ttq

# measures 20 trials a second until the log holds --trials (with EXHAUSTED set, none: a spent space), then exits
FAKE_RUN = r"""
import json, os, sys, time
args = sys.argv[1:]
log, trials = args[args.index("--log") + 1], int(args[args.index("--trials") + 1])
have = sum('"kind":"trial"' in line for line in open(log)) if os.path.exists(log) else 0
with open(log, "a") as fh:
    for _ in range(0 if os.environ.get("EXHAUSTED") else trials - have):
        time.sleep(0.05)
        fh.write(json.dumps({"kind": "trial", "finished": time.time()}, separators=(",", ":")) + "\n")
        fh.flush()
"""


def _patch_run(monkeypatch, calls: list[list[str]]) -> None:
    real = subprocess.Popen

    def popen(cmd, **kwargs):
        calls.append(cmd)
        return real([sys.executable, "-c", FAKE_RUN, *cmd[3:]], **kwargs)

    monkeypatch.setattr(ttq.subprocess, "Popen", popen)


def _args(minutes: float) -> argparse.Namespace:
    return argparse.Namespace(model="m", minutes=minutes, trials_per_minute=40.0)


def test_a_budget_that_runs_out_before_the_minutes_is_resumed_with_more_at_the_pace_kept(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    _patch_run(monkeypatch, calls)
    state = ttq.State(str(tmp_path / "state.json"))
    ttq.tune_autosearch(state, "default", [], _args(minutes=0.15), str(tmp_path))  # 9 s: 6 trials at first

    budgets = [int(c[c.index("--trials") + 1]) for c in calls]
    assert budgets[0] == 6 and len(calls) >= 2, budgets
    assert "--resume" not in calls[0] and all("--resume" in c for c in calls[1:])
    assert budgets == sorted(budgets) and len(set(budgets)) == len(budgets)  # each sitting asked for more
    st = json.load(open(tmp_path / "state.json"))["methods"]["default"]
    assert [e["trials"] for e in st["extended"]] == budgets[1:]
    assert not st.get("finished")  # the minutes ended it, not the trials
    spent = sum(end - start for start, end in st["segments"])
    assert 0.15 * 60 - 5 < spent < 0.15 * 60 + 5
    assert budgets[-2] < ttq._trials_in(str(tmp_path / "default.jsonl")) <= budgets[-1]

    calls.clear()  # spent: a second call tunes no more
    ttq.tune_autosearch(ttq.State(str(tmp_path / "state.json")), "default", [], _args(minutes=0.15), str(tmp_path))
    assert calls == []


def test_a_killed_sitting_keeps_the_tuning_time_it_spent(tmp_path, monkeypatch):
    """The state is kept current while a run tunes: the experiment killed mid-run (the machine stopped) resumes
    owing only the minutes it had not spent."""
    calls: list[list[str]] = []
    _patch_run(monkeypatch, calls)
    monkeypatch.setattr(ttq, "POLL_SECS", 0.1)
    seen: list[float] = []

    def wait(proc, deadline, *, every=None):  # the experiment is killed 1.5 s into the run
        end = ttq.time.perf_counter() + 1.5
        while ttq.time.perf_counter() < end:
            every()
            seen.append(sum(b - a for a, b in json.load(open(tmp_path / "state.json"))["methods"]["d"]["segments"]))
            ttq.time.sleep(0.1)
        proc.kill()
        raise KeyboardInterrupt

    monkeypatch.setattr(ttq, "_wait_until", wait)
    try:
        ttq.tune_autosearch(ttq.State(str(tmp_path / "state.json")), "d", [], _args(minutes=1.0), str(tmp_path))
    except KeyboardInterrupt:
        pass
    spent = sum(b - a for a, b in json.load(open(tmp_path / "state.json"))["methods"]["d"]["segments"])
    assert 1.3 < spent < 2.5 and seen == sorted(seen) and seen[0] < seen[-1]


def test_a_run_that_measures_nothing_more_ends_the_method(tmp_path, monkeypatch):
    calls: list[list[str]] = []
    _patch_run(monkeypatch, calls)
    monkeypatch.setenv("EXHAUSTED", "1")
    state = ttq.State(str(tmp_path / "state.json"))
    ttq.tune_autosearch(state, "none", ["--cost-model", "none"], _args(minutes=1.0), str(tmp_path))
    assert len(calls) == 1 and calls[0][-2:] == ["--cost-model", "none"]
    assert json.load(open(tmp_path / "state.json"))["methods"]["none"]["finished"] is True
    assert os.path.exists(tmp_path / "none.out")


def test_redo_drops_one_methods_tuning_and_builds_and_every_timing_round(tmp_path):
    work = tmp_path
    for rel in ["metaschedule/database_tuning_record.json", "metaschedule.out", "none.jsonl", "none.out",
                "db/metaschedule-9/x.json", "db/none-9/x.json", "lib/metaschedule-9.so", "lib/none-9.so"]:
        os.makedirs(os.path.dirname(work / rel), exist_ok=True)
        (work / rel).write_text("x")
    state = ttq.State(str(work / "state.json"))
    state.data = {"methods": {"metaschedule": {"complete": True, "builds": {"9": "lib/metaschedule-9.so"}},
                              "none": {"finished": True, "builds": {"9": "lib/none-9.so"}}},
                  "timing": {"none@9": {"runs": [1.0], "rounds": 3}, "ort": {"runs": [1.0], "rounds": 3}}}
    ttq.redo(state, "metaschedule", str(work))
    assert set(state.data["methods"]) == {"none"} and "timing" not in state.data
    assert json.loads((work / "state.json").read_text()) == state.data
    left = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file() and p.name != "state.json")
    assert left == ["db/none-9/x.json", "lib/none-9.so", "none.jsonl", "none.out"]


def test_openvino_is_a_peer_in_fp32_and_in_its_default_precision_where_that_is_another():
    assert ttq.peers(None) == {"ort": "ONNX Runtime"}  # OpenVINO not installed
    assert ttq.peers("f32") == {"ort": "ONNX Runtime", "ov": "OpenVINO fp32"}
    bf16 = ttq.peers("bf16")
    assert list(bf16) == ["ort", "ov", "ov-default"] and bf16["ov-default"] == "OpenVINO bf16 (its default)"


def test_a_finished_metaschedule_tuning_is_not_run_again_even_without_a_record(tmp_path, monkeypatch):
    """MetaSchedule can have no record within the minutes (its first come after every task's first search): a
    resumed experiment keeps that result, it does not tune again."""
    def popen(*args, **kwargs):
        raise AssertionError("MetaSchedule tuned again")

    monkeypatch.setattr(ttq.subprocess, "Popen", popen)
    state = ttq.State(str(tmp_path / "state.json"))
    state.method("metaschedule").update(timeline=[], complete=True, returncode=-9)
    ttq.tune_metaschedule(state, argparse.Namespace(minutes=1.0, trials_per_minute=40.0, model="m", seed=0),
                          str(tmp_path))
    assert state.method("metaschedule")["timeline"] == []
