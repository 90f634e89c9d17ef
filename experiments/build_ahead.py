"""What building the next probes' kernels ahead buys a time-limited run: trials measured in the same minutes, with
and without it, in alternating fresh processes on one machine.

A task's first batch (its probe) is often one known config, and a batch of one kernel leaves every build worker but
one idle while it builds; the tuner fills them with the kernels of the tasks probed next
(:meth:`autosearch.search.tuner.Tuner._build_ahead`). Here the same ``tune`` call runs ``--pairs`` times each way,
alternating (with first, then without, ...), each in a fresh process, the finalists' re-timing left out; without
is the runner told it has no spare build worker. Reported per run: trials measured, batches, batches of one kernel,
the run's measuring seconds, and the model's estimate from the best trials::

    python -m experiments.build_ahead --model yolov8n --minutes 4 --pairs 2

Writes ``experiments/results/build-ahead[-OUT].{md,json}``. ``--pairs`` x 2 x (minutes + set-up).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path


def one_run(model: str, minutes: float, log: str, ahead: bool, seed: int) -> dict:
    """One ``tune`` in this process; without ``ahead`` the local runner reports no spare build worker."""
    from autosearch import api
    from autosearch.measure.local import LocalRunner
    from autosearch.records import read_log

    if not ahead:
        LocalRunner.spare_builds = lambda self, builds: 0
    result = api.tune(model, minutes=minutes, log=log, finalist_rounds=0, plot=False, seed=seed)
    trials = read_log(log).trials()
    sizes: list[int] = []
    for i, t in enumerate(trials):  # a batch's records are logged together, one task's, at one time
        previous = trials[i - 1] if i else None
        if previous is not None and previous.task_key == t.task_key and abs(t.finished - previous.finished) < 0.05:
            sizes[-1] += 1
        else:
            sizes.append(1)
    timing = result.summary.timing if result.summary else {}
    return {"ahead": ahead, "trials": len(trials), "batches": len(sizes),
            "batches_of_one": sizes.count(1),
            "build_secs": sum(t.result.build_secs for t in trials), "measure_secs": timing.get("measure"),
            "setup_secs": timing.get("setup"), "elapsed_secs": result.elapsed_secs, "model_ms": 1e3 * result.tuned_secs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolov8n")
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="results name suffix")
    parser.add_argument("--one", choices=["ahead", "alone"], help=argparse.SUPPRESS)  # a child process's own run
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        row = one_run(args.model, args.minutes, args.log, args.one == "ahead", args.seed)
        sys.stdout.write(json.dumps(row) + "\n")
        return 0

    from autosearch.frontend.target import parse_target
    from experiments.lib.machine import describe, fingerprint

    machine = fingerprint(parse_target(None))
    rows = []
    with tempfile.TemporaryDirectory(prefix="build-ahead-") as tmp:
        for pair in range(args.pairs):
            for arm in ("ahead", "alone"):
                log = os.path.join(tmp, f"{arm}-{pair}.jsonl")
                out = subprocess.run([sys.executable, "-m", "experiments.build_ahead", "--one", arm, "--log", log,
                                      "--model", args.model, "--minutes", str(args.minutes), "--seed",
                                      str(args.seed)], check=True, capture_output=True, text=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({**row, "pair": pair})
                sys.stderr.write(f"pair {pair} {arm}: {row['trials']} trials, {row['batches_of_one']} of "
                                 f"{row['batches']} batches of one kernel, model {row['model_ms']:.2f} ms\n")
    table = [[str(r["pair"] + 1), "ahead" if r["ahead"] else "alone", str(r["trials"]), str(r["batches"]),
              str(r["batches_of_one"]), fmt(r["build_secs"], 0), fmt(r["measure_secs"], 0), fmt(r["setup_secs"], 0),
              fmt(r["model_ms"], 2)] for r in rows]
    for ahead in (True, False):
        group = [r for r in rows if r["ahead"] == ahead]
        table.append([f"**median of {len(group)}**", "ahead" if ahead else "alone",
                      fmt(statistics.median(r["trials"] for r in group), 1), "", "",
                      fmt(statistics.median(r["build_secs"] for r in group), 0),
                      fmt(statistics.median(r["measure_secs"] for r in group), 0), "",
                      fmt(statistics.median(r["model_ms"] for r in group), 2)])
    head = ["pair", "next probes built ahead", "trials", "batches", "batches of one kernel", "build s (sum)",
            "measuring s (wall)", "task set-up s", "model estimate ms (best trials)"]
    text = (f"# Building the next probes' kernels ahead: {args.model}, {args.minutes:g} minutes a run\n\n"
            f"{describe(machine)}; `python -m experiments.build_ahead --model {args.model} "
            f"--minutes {args.minutes:g} --pairs {args.pairs}`: each run a fresh process, `tune` with the defaults "
            f"and no finalists' re-timing, the two ways alternating.\n\n" + markdown_table(head, table))
    name = "build-ahead" + (f"-{args.out}" if args.out else "")
    publish(results_path(name), data={"machine": machine, "model": args.model, "minutes": args.minutes, "runs": rows},
            text=text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
