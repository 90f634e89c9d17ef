"""Time to a fast model: end-to-end latency against tuning minutes, autosearch vs MetaSchedule vs the peers.

Each method tunes a whole model once, for ``--minutes`` of wall time, uninterrupted; afterwards the script
rebuilds what the method had found at every checkpoint (``--every`` minutes) and times all those builds, ONNX
Runtime and OpenVINO (in fp32, and in its default precision where that is bf16) side by side, taking turns in fresh
processes, so a slow spell of the shared machine hits every line of the plot alike and the ratios come from one
timing session:

- autosearch methods run ``python -m autosearch run`` (``default``: run's defaults; ``none``: ``--cost-model
  none``; more with ``--method NAME=ARGS``), each in a process of its own that is stopped at the minute. A
  checkpoint's build is ``autosearch.export`` of the log's prefix whose records had finished by then, then
  ``autosearch.compile`` (the API, in this process): what a user who stopped the run at that minute would have
  got (less the finalists' re-timing, which needs the end of the run).
- ``metaschedule``: TVM's own ``ms.tune_tasks`` (evolutionary search + XGBoost, the gradient task scheduler) on
  the tasks of the model as TVM lowers it by itself (direct NCHW convolutions, exact math; weights prepacked as
  in TVM's CPU recipe), with the same evaluator and threads and our fast builder (TVM's default builder imports
  its CUDA intrinsics in every worker and times out on this size of machine). Its database's record file grows
  as it tunes; the parent notes its length every few seconds, and a checkpoint's build is the database cut
  there.

Resumable: tuning state, builds and timing rounds are kept in ``experiments/results/ttq-MODEL/state.json``; a
killed autosearch tuning continues with ``run --resume`` for the minutes it still owes, a killed MetaSchedule
tuning starts again (it cannot resume). Tables and the PNG: ``experiments/results/time_to_quality-MODEL.*``
(``-MODEL-TAG`` with ``--tag``).

    python -m experiments.time_to_quality --model tiny-yolov2 --minutes 30 --every 3
    python -m experiments.time_to_quality --model yolov8n --methods default,none,metaschedule
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import autosearch
from autosearch.api import DEFAULT_ROUNDS, DEFAULT_RUNS
from autosearch.frontend.target import host_cores
from autosearch.tables import fmt, markdown_table
from experiments.lib.io import ROOT, read_json, results_path, write_json, write_text
from experiments.lib.machine import host_label
from experiments.lib.metaschedule import RECORD_FILE, RecordClock

METHODS = {"default": [], "none": ["--cost-model", "none"]}  # autosearch run's extra arguments
PEERS = {"ort": "ONNX Runtime", "ov": "OpenVINO fp32"}  # autosearch.deploy.bench kinds -> names (and :func:`peers`)
MS_LOWERING = {"winograd": "off", "layout": "NCHW", "fast_math": "off"}  # TVM's own lowering of the model
POLL_SECS = 2.0


# ---------------------------------------------------------------------------------------------- state
class State:
    """The experiment's progress, written atomically after every step so a killed run loses one step at most."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict = read_json(path) if os.path.exists(path) else {}

    def method(self, name: str) -> dict:
        return self.data.setdefault("methods", {}).setdefault(name, {})

    def save(self) -> None:
        write_json(self.path, self.data)


def _wait_until(proc: subprocess.Popen, deadline: float, *, every: Callable[[], None] | None = None) -> bool:
    """Wait for ``proc`` until ``deadline`` (perf_counter); True if it ended by itself. ``every`` is called
    at each poll (to keep the state current: a killed sitting then keeps the tuning time it spent)."""
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            return True
        if every is not None:
            every()
        time.sleep(POLL_SECS)
    return proc.poll() is not None


def redo(state: State, name: str, work: str) -> None:
    """Forget one method's tuning, checkpoints and builds, and every timing round (the method's new builds must
    be timed taking turns with the others, in one session, or the ratios would cross sittings)."""
    state.data.get("methods", {}).pop(name, None)
    state.data.pop("timing", None)
    doomed = [os.path.join(work, f"{name}{suffix}") for suffix in (".jsonl", ".out")]
    doomed += glob.glob(os.path.join(work, "db", f"{name}-*")) + glob.glob(os.path.join(work, "lib", f"{name}-*"))
    if name == "metaschedule":
        doomed.append(os.path.join(work, "metaschedule"))
    for path in doomed:
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    state.save()


# ---------------------------------------------------------------------------------------------- autosearch
def tune_autosearch(state: State, name: str, extra: list[str], args, work: str) -> None:
    """``run`` until the method has had ``--minutes`` of tuning wall time (several sittings add up). A run whose
    trials run out before the minutes is resumed with more, as a user who wants more would (``run --resume``
    with a larger ``--trials``), at the pace it has kept: how many trials fit in a minute differs between models
    (many small tasks measure faster), and the budget also sizes each task's first pass, so it is not set huge."""
    st = state.method(name)
    log = os.path.join(work, f"{name}.jsonl")
    segments = st.setdefault("segments", [])
    st.setdefault("trials", int(math.ceil(args.minutes * args.trials_per_minute)))
    while not st.get("finished"):
        spent = sum(end - start for start, end in segments)
        owed = args.minutes * 60 - spent
        if owed <= 5:
            return
        before = _trials_in(log)
        if before >= st["trials"]:  # the budget ran out before the minutes: more, at the pace kept so far
            more = int(math.ceil(before / max(spent, 1.0) * owed))
            st["trials"] = before + max(more, 1)
            st.setdefault("extended", []).append({"after_trials": before, "after_min": round(spent / 60, 2),
                                                  "trials": st["trials"]})
        cmd = [sys.executable, "-m", "autosearch", "run", "--strategy", "optuna", "--model", args.model,
               "--trials", str(st["trials"]), "--log", log, *extra]
        if os.path.exists(log):
            cmd.append("--resume")
        print(f"[{name}] tuning {owed / 60:.1f} min more: {shlex.join(cmd[2:])}", flush=True)
        with open(os.path.join(work, f"{name}.out"), "a") as out:
            wall_start, start = time.time(), time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            segments.append([wall_start, wall_start])

            def spent_so_far(wall_start: float = wall_start, start: float = start) -> None:
                segments[-1][1] = wall_start + (time.perf_counter() - start)
                state.save()

            ended = _wait_until(proc, start + owed, every=spent_so_far)
            if not ended:  # SIGTERM is Ctrl-C for run: the log keeps every finished batch
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            segments[-1][1] = wall_start + (time.perf_counter() - start)
        state.save()
        if not ended:
            return  # the minutes are spent
        if proc.returncode != 0:
            raise SystemExit(f"[{name}] run failed (exit code {proc.returncode}): see {work}/{name}.out")
        if _trials_in(log) == before:  # nothing left to measure: the space is exhausted
            st["finished"] = True
            state.save()


def _trials_in(log: str) -> int:
    if not os.path.exists(log):
        return 0
    with open(log) as fh:
        return sum('"kind":"trial"' in line for line in fh)


def tuning_secs(segments: list[list[float]], wall: float) -> float:
    """Tuning seconds spent up to wall-clock time ``wall`` (epoch seconds), over all sittings."""
    return sum(max(0.0, min(end, wall) - start) for start, end in segments)


def autosearch_snapshot(work: str, name: str, segments, minute: float, out_dir: str) -> bool:
    """The log's prefix finished within ``minute`` minutes of tuning, exported as a database in ``out_dir``."""
    log = os.path.join(work, f"{name}.jsonl")
    cut = minute * 60
    lines = []
    trials = 0
    with open(log) as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            finished = rec.get("finished")
            if finished is not None and tuning_secs(segments, float(finished)) > cut:
                break
            trials += rec.get("kind") == "trial"
            lines.append(line)
    if not trials:
        return False
    prefix = os.path.join(out_dir + ".jsonl")
    with open(prefix, "w") as fh:
        fh.writelines(lines)
    shutil.rmtree(out_dir, ignore_errors=True)
    try:
        autosearch.export(prefix, out_dir)
    except autosearch.UserError as exc:  # e.g. --layout auto before both layouts' models were measured
        print(f"[{name}] no build at {minute:g} min: error: {exc}", flush=True)
        return False
    return True


# ---------------------------------------------------------------------------------------------- MetaSchedule
def metaschedule_child(model: str, work_dir: str, trials: int, seed: int) -> None:
    """Runs in its own process: ``ms.tune_tasks`` over the model's tasks as TVM lowers it by itself."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target, target_num_cores
    from experiments.lib.metaschedule import builder_and_runner

    target = parse_target(None)
    imported = import_model(model, target, **MS_LOWERING)
    os.makedirs(work_dir, exist_ok=True)
    write_json(os.path.join(work_dir, "autosearch_lowering.json"), MS_LOWERING, indent=None)
    builder, runner = builder_and_runner(target)
    contexts = [ms.TuneContext(mod=t.mod, target=target, space_generator="post-order-apply",
                               search_strategy="evolutionary", task_name=t.name, rand_state=seed + i,
                               num_threads=target_num_cores(target)).clone()
                for i, t in enumerate(imported.tasks)]
    ms.tune_tasks(tasks=contexts, task_weights=[float(t.weight) for t in imported.tasks], work_dir=work_dir,
                  max_trials_global=trials, num_trials_per_iter=16, builder=builder, runner=runner,
                  database=ms.database.JSONDatabase(work_dir=work_dir))


def tune_metaschedule(state: State, args, work: str) -> None:
    st = state.method("metaschedule")
    if st.get("complete"):  # done, even when its timeline is empty (no record within the minutes)
        return
    ms_dir = os.path.join(work, "metaschedule")
    shutil.rmtree(ms_dir, ignore_errors=True)  # MetaSchedule cannot resume: a killed tuning starts again
    trials = int(math.ceil(args.minutes * args.trials_per_minute * 4))  # time, not trials, ends it
    cmd = [sys.executable, "-m", "experiments.time_to_quality", "--metaschedule-child", "--model", args.model,
           "--work-dir", ms_dir, "--trials", str(trials), "--seed", str(args.seed)]
    print(f"[metaschedule] tuning {args.minutes} min", flush=True)
    start = time.perf_counter()
    # the database's record file grows as MetaSchedule tunes: when each record appeared is when it was found
    with open(os.path.join(work, "metaschedule.out"), "w") as out, \
            RecordClock(os.path.join(ms_dir, RECORD_FILE), start, POLL_SECS) as clock:
        env = {**os.environ, "PYTHONPATH": ROOT}
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)
        ended = _wait_until(proc, start + args.minutes * 60)
        if not ended:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    st.update(timeline=clock.timeline(), complete=True, returncode=proc.returncode)
    state.save()


def metaschedule_snapshot(work: str, timeline, minute: float, out_dir: str) -> bool:
    n = max((count for secs, count in timeline if secs <= minute * 60), default=0)
    if not n:
        return False
    ms_dir = os.path.join(work, "metaschedule")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    shutil.copy(os.path.join(ms_dir, "database_workload.json"), out_dir)
    shutil.copy(os.path.join(ms_dir, "autosearch_lowering.json"), out_dir)
    with open(os.path.join(ms_dir, RECORD_FILE)) as src, open(os.path.join(out_dir, RECORD_FILE), "w") as dst:
        for i, line in enumerate(src):
            if i >= n:
                break
            dst.write(line)
    return True


# ---------------------------------------------------------------------------------------------- builds, timing
def build_checkpoints(state: State, args, work: str) -> None:
    minutes = [args.every * (i + 1) for i in range(int(args.minutes // args.every))]
    for name in args.methods:
        st = state.method(name)
        builds = st.setdefault("builds", {})
        for minute in minutes:
            key = f"{minute:g}"
            if key in builds:
                continue
            out_dir = os.path.join(work, "db", f"{name}-{key}")
            os.makedirs(os.path.dirname(out_dir), exist_ok=True)
            if name == "metaschedule":
                have = metaschedule_snapshot(work, st["timeline"], minute, out_dir)
            else:
                have = autosearch_snapshot(work, name, st["segments"], minute, out_dir)
            if not have:
                builds[key] = None
                continue
            lib = os.path.join(work, "lib", f"{name}-{key}.so")
            os.makedirs(os.path.dirname(lib), exist_ok=True)
            print(f"[{name}] compiling the {key}-minute database", flush=True)
            autosearch.compile(args.model, out_dir, lib)
            builds[key] = lib
            state.save()


def peers(default_precision: str | None) -> dict[str, str]:
    """The peers' bench kinds and names: ONNX Runtime, and OpenVINO (when installed) in fp32 and, where its default
    precision is another (bf16 on a CPU with AMX or AVX512-BF16), in that too: the runtime a user gets without
    asking, the one the tensor units have to beat."""
    out = {"ort": PEERS["ort"]}
    if default_precision is not None:
        out["ov"] = PEERS["ov"]
        if default_precision != "f32":
            out["ov-default"] = f"OpenVINO {default_precision} (its default)"
    return out


def time_everything(state: State, args, work: str) -> None:
    """Every build and the peers, taking turns in fresh processes, ``--rounds`` rounds (resumable by round)."""
    from autosearch.deploy.timing import Runtime, openvino_default_precision, save_inputs, time_in_subprocess
    from autosearch.frontend.importer import load_onnx, resolve_input_shapes

    _, proto = load_onnx(args.model)
    onnx_path, inputs = os.path.join(work, "model.onnx"), os.path.join(work, "inputs.npz")
    if not os.path.exists(onnx_path):
        import onnx

        onnx.save(proto, onnx_path)
        save_inputs(resolve_input_shapes(proto, {}), inputs)
    runtimes = [Runtime(f"{m}@{k}", "tvm", lib) for m in args.methods
                for k, lib in state.method(m).get("builds", {}).items() if lib]
    state.data["openvino_precision"] = openvino_default_precision()
    runtimes += [Runtime(kind, kind, onnx_path) for kind in peers(state.data["openvino_precision"])]
    timing = state.data.setdefault("timing", {})
    runs_per_round = max(1, args.runs // args.rounds)
    out_dir = os.path.join(work, "outputs")
    os.makedirs(out_dir, exist_ok=True)
    for r in range(args.rounds):
        for runtime in runtimes:
            entry = timing.setdefault(runtime.name, {"runs": [], "rounds": 0})
            if entry["rounds"] > r:
                continue
            t = time_in_subprocess(runtime, inputs_path=inputs, runs=runs_per_round, threads=args.threads,
                                   out_dir=out_dir)
            entry["runs"].extend(t.runs)
            entry["rounds"] = r + 1
            entry["error"] = t.error
            state.save()
        print(f"timing round {r + 1}/{args.rounds} done", flush=True)


def _name(args) -> str:
    """The results' name: the model, and the tag that sets this comparison apart from another of the model."""
    return f"{args.model}-{args.tag}" if args.tag else args.model


def write_results(state: State, args) -> None:
    import numpy as np

    timing = state.data.get("timing", {})
    median = {k: float(np.median(v["runs"])) for k, v in timing.items() if v.get("runs")}
    minutes = sorted({float(k) for m in args.methods for k in state.method(m).get("builds", {})})
    stem = results_path(f"time_to_quality-{_name(args)}")
    curves = {m: [(t, median.get(f"{m}@{t:g}")) for t in minutes] for m in args.methods}
    names = peers(state.data.get("openvino_precision", "f32"))
    peer_ms = {name: median[kind] for kind, name in names.items() if kind in median}
    header = ["method"] + [f"{t:g} min" for t in minutes]
    rows = [[m] + [fmt(v) for _, v in curves[m]] for m in args.methods]
    rows += [[p] + [fmt(v)] * len(minutes) for p, v in peer_ms.items()]
    lines = [markdown_table(header, rows)]
    pace = trials_per_minute(state, args)
    if pace:
        pace_rows = []
        for m, (trials, minutes) in pace.items():
            ratio = (minutes / trials) / (pace["none"][1] / pace["none"][0]) if "none" in pace and trials else None
            pace_rows.append([m, trials, fmt(minutes), fmt(trials / minutes), f"{fmt(ratio, 2)}x" if ratio else "-"])
        lines += ["", markdown_table(["method", "trials", "tuning min", "trials per min", "wall per trial vs none"],
                                     pace_rows)]
    cpu = state.data.get("cpu", "")
    resumed = [f"{m} ran out of its {e['after_trials']:,} trials at {e['after_min']:g} min and was resumed with "
               f"--trials {e['trials']:,}" for m in args.methods for e in state.method(m).get("extended", [])]
    caption = (f"\nEnd-to-end median latency (ms) of {args.model} after t minutes of tuning, {args.threads} threads, "
               f"all builds and peers timed taking turns in fresh processes ({args.rounds} rounds); {cpu}."
               + (f" {'; '.join(resumed)}." if resumed else "") + "\n")
    write_text(stem + ".md", "\n".join(lines) + "\n" + caption)
    write_json(stem + ".json", {"model": args.model, "cpu": cpu, "threads": args.threads, "medians_ms": median,
                                "pace": pace, "minutes": minutes, "state": state.data})
    plot_curves({m: [(t, v) for t, v in c if v] for m, c in curves.items()}, peer_ms, stem + ".png",
                title=f"{args.model}: time to a fast model ({cpu})")
    print("\n".join(lines) + caption + f"plot: {stem}.png")


def trials_per_minute(state: State, args) -> dict[str, tuple[int, float]]:
    """Per autosearch method: (trials measured, tuning minutes) over its whole tuning."""
    out = {}
    work = results_path(f"ttq-{_name(args)}")
    for m in args.methods:
        segments = state.method(m).get("segments")
        log = os.path.join(work, f"{m}.jsonl")
        if m == "metaschedule" or not segments or not os.path.exists(log):
            continue
        trials, last = 0, 0.0  # until the last trial finished: a run may end its trials before its minutes
        with open(log) as fh:
            for line in fh:
                if '"kind":"trial"' in line:
                    trials += 1
                    last = max(last, float(json.loads(line).get("finished", 0.0)))
        out[m] = (trials, tuning_secs(segments, last) / 60)
    return out


def plot_curves(curves: dict[str, list[tuple[float, float]]], peer_ms: dict[str, float], path: str, *,
                title: str) -> str:
    """End-to-end latency against tuning minutes, one line per method; the peers as horizontal lines."""
    from autosearch.plots import figure, save

    fig, axes = figure(size=(8.0, 5.0))
    ax = axes[0, 0]
    for label, points in curves.items():
        if points:
            ax.plot(*zip(*points), marker="o", label=label)
    for i, (name, ms) in enumerate(peer_ms.items()):
        ax.axhline(ms, linestyle="--", color=f"C{len(curves) + i}", label=name)
    ax.set_xlabel("tuning wall time (min)")
    ax.set_ylabel("end-to-end latency (ms, median)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-yolov2")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--every", type=float, default=3, help="checkpoint interval (minutes)")
    p.add_argument("--methods", default="default,none,metaschedule")
    p.add_argument("--method", action="append", default=[], metavar="NAME=ARGS",
                   help="another autosearch method: NAME and run's extra arguments")
    p.add_argument("--trials-per-minute", type=float, default=40.0,
                   help="autosearch's --trials = minutes x this (the run stops at the minutes anyway)")
    p.add_argument("--threads", type=int, default=host_cores())
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed forward passes per build, over all rounds")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="fresh processes per build, taking turns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", help="results as ttq-MODEL-TAG/ and time_to_quality-MODEL-TAG.* (another comparison)")
    p.add_argument("--redo", action="append", default=[], metavar="METHOD",
                   help="tune this method again from scratch (its results are dropped; every line is re-timed)")
    p.add_argument("--metaschedule-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    p.add_argument("--trials", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.metaschedule_child:
        metaschedule_child(args.model, args.work_dir, args.trials, args.seed)
        return 0
    methods = dict(METHODS)
    for spec in args.method:
        name, _, extra = spec.partition("=")
        methods[name] = shlex.split(extra)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.methods if m != "metaschedule" and m not in methods]
    if unknown:
        p.error(f"unknown method(s) {', '.join(unknown)}; define them with --method NAME=ARGS")
    work = results_path(f"ttq-{_name(args)}")
    os.makedirs(work, exist_ok=True)
    state = State(os.path.join(work, "state.json"))
    state.data.setdefault("cpu", host_label())
    for name in args.redo:
        if name not in args.methods:
            p.error(f"--redo {name}: not among --methods")
        redo(state, name, work)
    state.save()
    for name in args.methods:  # one tuning at a time: two on 2 cores spoil both
        if name == "metaschedule":
            tune_metaschedule(state, args, work)
        else:
            tune_autosearch(state, name, methods[name], args, work)
    build_checkpoints(state, args, work)
    time_everything(state, args, work)
    write_results(state, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
