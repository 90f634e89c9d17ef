"""A tuning run on a machine another process keeps busy now and then: how many timings its busy spells slowed, how
many the run caught and took again, and what the run ends with.

A user's machine runs other things; a two-thread kernel with one core taken reads a scheduler timeslice (~4 ms)
per call, whatever it is. This runs ``run`` as a user types it (a fresh process, the results' log) while a busy
loop holds the machine's last core ``--busy`` seconds of every ``--period`` (none with ``--period 0``: the quiet
control), then reads the log:

    python -m experiments.busy_machine --model yolov8n --trials 400 --busy 1 --period 4 --tag busy-zen5
    python -m experiments.busy_machine --model yolov8n --trials 400 --period 0 --tag quiet-zen5

Writes ``experiments/results/busy-MODEL-TAG/`` (``run.txt``, ``log.jsonl``) and ``busy-MODEL-TAG.{md,json}``:
per run, the timings slowed to 3x their task's best or more that the run kept (a task's best over its trials and
its finalists' re-times), those it caught and timed again (why: repeats split, threads waited) and what that
gave, and the run's own estimates of its model. Resumable: a finished run is read again, not repeated.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections import Counter

from autosearch.records import read_log
from autosearch.tables import markdown_table
from autosearch.types import Record
from experiments.lib.io import ROOT, publish, results_path, write_json
from experiments.lib.machine import host_label

SLOW = 3.0  # a timing at this multiple of its task's best or more reads as slowed, not as a slow schedule
NOTE = re.compile(r"timed again at the end of its batch: (.*?) \(fastest .*?; kept the (first|second)")


def _busy(core: int, busy: float, period: float, stop) -> None:
    """Hold ``core`` ``busy`` seconds of every ``period`` until ``stop`` is set (a child process)."""
    os.sched_setaffinity(0, {core})
    while not stop.is_set():
        end = time.monotonic() + busy
        while time.monotonic() < end:
            pass
        stop.wait(period - busy)


def run_once(out_dir: str, model: str, trials: int, seed: int, busy: float, period: float) -> float:
    """``run`` with the busy spells beside it; its wall seconds (the log stays in ``out_dir``)."""
    log = os.path.join(out_dir, "log.jsonl")
    args = ["run", "--strategy", "optuna", "--model", model, "--trials", str(trials), "--seed", str(seed),
            "--log", os.path.relpath(log, ROOT)]
    stop = multiprocessing.Event()
    spells = None
    if period > 0:
        spells = multiprocessing.Process(target=_busy, args=(max(os.sched_getaffinity(0)), busy, period, stop),
                                         daemon=True)
        spells.start()
    start = time.perf_counter()
    try:
        with open(os.path.join(out_dir, "run.txt"), "w") as out:
            out.write(f"$ python -m autosearch {' '.join(args)}\n")
            out.flush()
            proc = subprocess.run([sys.executable, "-m", "autosearch", *args], cwd=ROOT, stdout=out,
                                  stderr=subprocess.STDOUT)
    finally:
        stop.set()
        if spells is not None:
            spells.join(timeout=10)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): see {out_dir}/run.txt")
    return time.perf_counter() - start


def summarise(records: list[Record]) -> dict:
    """What the log's records (:func:`autosearch.records.read_log`) say of its timings (see the module docstring)."""
    best: dict[str, float] = {}
    for r in records:
        if r.kind in ("trial", "retime") and r.ok:
            best[r.task_key] = min(best.get(r.task_key, float("inf")), r.latency)
    trials = [r for r in records if r.kind == "trial" and r.ok]
    slow = [r for r in trials if r.latency >= SLOW * best[r.task_key]]
    stalls = [r for r in slow if 3.5e-3 < r.latency < 4.5e-3]  # a timeslice a call, whatever the kernel
    notes = [NOTE.search(r.result.error) for r in trials]
    caught = Counter(("threads waited" if "threads waited" in m.group(1) else "repeats split", m.group(2))
                     for m in notes if m)
    waited = [r.result for r in trials if r.result.waited is not None]
    return {"ok_trials": len(trials), "slow": len(slow), "timeslice_stalls": len(stalls),
            "caught": {f"{why}, kept the {kept}": n for (why, kept), n in sorted(caught.items())},
            "caught_total": sum(caught.values()),
            "waited_counted": len(waited), "waited_over_10pct": sum(1 for w in waited if w.waited_through)}


def estimates(run_txt: str) -> dict:
    """The run's own model estimates (ms): from its best trials, and with its finalists re-timed."""
    text = open(run_txt).read().replace("\n", " ")
    found = re.search(r"estimated model: ([0-9.]+) ms from the best trials, ([0-9.]+) ms with the finalists", text)
    return {"trials_ms": float(found.group(1)), "retimed_ms": float(found.group(2))} if found else {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="yolov8n")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--busy", type=float, default=1.0, help="seconds of each busy spell")
    parser.add_argument("--period", type=float, default=4.0, help="seconds from one spell to the next; 0: none")
    parser.add_argument("--tag", required=True)
    args = parser.parse_args(argv)
    if args.period and not 0 < args.busy < args.period:
        parser.error("--busy must be above 0 and below --period")
    name = f"busy-{os.path.basename(args.model).removesuffix('.onnx')}-{args.tag}"
    out_dir = results_path(name)
    os.makedirs(out_dir, exist_ok=True)
    log = os.path.join(out_dir, "log.jsonl")
    done = os.path.join(out_dir, "wall.json")
    if not os.path.exists(done):
        for stale in (log, log + ".gz"):
            if os.path.exists(stale):
                os.remove(stale)  # a run killed midway: its trials and its spells would not add up
        wall = run_once(out_dir, args.model, args.trials, args.seed, args.busy, args.period)
        write_json(done, {"seconds": wall})
    with open(done) as fh:
        wall = json.load(fh)["seconds"]
    found = log if os.path.exists(log) else log + ".gz"
    data = {"model": args.model, "trials": args.trials, "seed": args.seed, "busy": args.busy, "period": args.period,
            "host": host_label(), "wall_seconds": wall, **summarise(read_log(found).records),
            **estimates(os.path.join(out_dir, "run.txt"))}
    spells = (f"a busy loop on the last core {args.busy:g} s of every {args.period:g} s" if args.period
              else "no busy spells (quiet control)")
    rows = [[k, json.dumps(v) if isinstance(v, dict) else v] for k, v in data.items() if k not in ("host",)]
    text = (f"**{args.model}, {args.trials} trials, {spells}** ({data['host']})\n\n"
            + markdown_table(["", "value"], rows) + "\n")
    publish(results_path(name), data=data, text=text)


if __name__ == "__main__":
    main()
