"""Siblings on against off, pair by pair: per task from the two logs, and the two tuned models timed taking turns.

A pair is two ``experiments.user_path`` result directories of one model and seed, one run with ``--siblings on`` and
one with ``off``, run one after the other. Each run's estimate was re-timed in its own spell of the shared machine,
so a run that met a slow spell reads slower whatever it found. Two views that a spell moves less:

1. **per task**, each task's best as the run chose it over the same run's untuned kernel (a spell slows both),
   the sibling tasks (:func:`autosearch.search.siblings.sibling_key`, shared with another task of the model) apart
   from the others: siblings can only help the first group, so the difference between the groups is theirs;
2. **the two tuned models**, compiled from each run's database and timed taking turns in fresh processes as
   ``report`` times runtimes (:func:`autosearch.deploy.timing.time_taking_turns`), so one spell hits both.

    python -m experiments.sibling_pairs --model path/to/yolo12n.onnx \\
        --pair experiments/results/user-yolo12n.onnx-800trials-seed1-unseen-siblings-zen4 \\
               experiments/results/user-yolo12n.onnx-800trials-seed1-unseen-nosiblings-zen4 \\
        --pair ...seed2... --out siblings-yolo12n-800trials

Writes ``experiments/results/OUT.md`` and ``OUT.json``; the compiled models live in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.machine import host_label
from experiments.lib.study.report import geomean
from experiments.lib.turns import libraries_in_turns

if TYPE_CHECKING:
    from autosearch.types import Record


@dataclass(frozen=True)
class Pair:
    """One model and seed tuned with siblings on (``on``: its log) and off, compared as the module docstring says."""

    on: str
    off: str
    per_task_sibling: float  # geometric mean over the sibling tasks of (on's best / untuned) / (off's best / untuned)
    per_task_other: float  # the same over the other tasks (the spells' share)
    sibling_better: int  # sibling tasks more than 3% faster relative to their untuned kernel with siblings on
    sibling_worse: int
    lent: int
    lent_best: int
    on_ms: float | None = None  # the tuned models taking turns: medians of all runs
    off_ms: float | None = None


def _sibling_keys(tasks: dict) -> dict[str, tuple | None]:
    """Per task key of a log: its sibling key where another task of the log shares it, else None."""
    from autosearch.search.siblings import key_of

    keys = {key: key_of(t["name"], t["args"], t.get("lowering") or {}) for key, t in tasks.items()}
    counts = Counter(k for k in keys.values() if k is not None)
    return {key: skey if skey is not None and counts[skey] > 1 else None for key, skey in keys.items()}


def _bests(log) -> dict[str, Record]:
    """Per task key: its best valid trial as the run chose it (tasks with one)."""
    return {key: best for key in log.tasks if (best := log.best(key)) is not None}


def _gains(log, bests: dict[str, Record]) -> dict[str, float]:
    """Per task key: its best over its untuned kernel's latency (tasks with both)."""
    out = {}
    for key, best in bests.items():
        untuned = log.baseline(key)
        if untuned is not None and untuned.result.ok and untuned.result.median > 0:
            out[key] = best.latency / untuned.result.median
    return out


def compare_logs(on_log: str, off_log: str) -> Pair:
    """Per task, the run with siblings on against the one without (view 1 of the module docstring)."""
    from autosearch.records import read_log
    from autosearch.search.siblings import SOURCE

    on, off = read_log(on_log), read_log(off_log)
    siblings = _sibling_keys(on.tasks)
    bests_on = _bests(on)
    gains_on, gains_off = _gains(on, bests_on), _gains(off, _bests(off))
    ratio = {k: gains_on[k] / gains_off[k] for k in gains_on.keys() & gains_off.keys()}
    sib = [r for k, r in ratio.items() if siblings.get(k) is not None]
    other = [r for k, r in ratio.items() if siblings.get(k) is None]
    lent = sum(1 for r in on.trials() if r.strategy == SOURCE)
    lent_best = sum(1 for b in bests_on.values() if b.strategy == SOURCE)
    return Pair(on=on_log, off=off_log, per_task_sibling=geomean(sib), per_task_other=geomean(other),
                sibling_better=sum(r < 0.97 for r in sib), sibling_worse=sum(r > 1.03 for r in sib),
                lent=lent, lent_best=lent_best)


def time_pair(model: str, on_db: str, off_db: str, *, rounds: int, runs: int, threads: int) -> tuple[float, float]:
    """The two databases' models compiled, then timed taking turns in fresh processes: (on ms, off ms), medians."""
    import autosearch

    with tempfile.TemporaryDirectory() as tmp:
        libraries = {label: os.path.join(tmp, f"{label}.so") for label in ("on", "off")}
        for label, db in (("on", on_db), ("off", off_db)):
            autosearch.compile(model, db, libraries[label])
        ms = libraries_in_turns(model, libraries, rounds=rounds, runs=runs, threads=threads, work=tmp).ms
    return ms["on"], ms["off"]


def _log_in(directory: str) -> str:
    for name in ("log.jsonl", "log.jsonl.gz"):
        if os.path.exists(os.path.join(directory, name)):
            return os.path.join(directory, name)
    raise SystemExit(f"no log.jsonl(.gz) in {directory}")


def table(pairs: list[Pair]) -> str:
    rows = []
    for p in pairs:
        rows.append([f"`{os.path.basename(os.path.dirname(p.on))}`", f"{p.lent} ({p.lent_best})",
                     f"{p.per_task_sibling:.3f}", f"{p.per_task_other:.3f}",
                     f"{p.per_task_sibling / p.per_task_other:.3f}", f"{p.sibling_better} / {p.sibling_worse}",
                     fmt(p.on_ms, 2) if p.on_ms else "-", fmt(p.off_ms, 2) if p.off_ms else "-",
                     f"{p.on_ms / p.off_ms:.3f}" if p.on_ms and p.off_ms else "-"])
    return markdown_table(["run with siblings on", "lent trials (ended best)", "sibling tasks on/off",
                           "other tasks on/off", "sibling tasks against the others",
                           "sibling tasks better / worse (3%)", "tuned on ms", "tuned off ms", "on / off"], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the model both runs tuned (built-in name or .onnx)")
    p.add_argument("--pair", nargs=2, action="append", required=True, metavar=("ON_DIR", "OFF_DIR"),
                   help="result directories of a run with siblings on and one with them off")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and OUT.json")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-timing", action="store_true", help="the logs alone (view 1)")
    args = p.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    pairs = []
    for on_dir, off_dir in args.pair:
        pair = compare_logs(_log_in(on_dir), _log_in(off_dir))
        if not args.no_timing:
            print(f"compiling and timing {on_dir} against {off_dir} ...", file=sys.stderr, flush=True)
            on_ms, off_ms = time_pair(args.model, os.path.join(on_dir, "db"), os.path.join(off_dir, "db"),
                                      rounds=args.rounds, runs=args.runs, threads=args.threads)
            pair = Pair(**{**asdict(pair), "on_ms": on_ms, "off_ms": off_ms})
        pairs.append(pair)
    text = (f"**Siblings on against off, pair by pair** ({host_label()}; per task: each task's best over its untuned "
            "kernel in the same run, geometric means, below 1 where siblings on did better; the tuned models: "
            f"{args.runs} runs each in {args.rounds} fresh processes apiece taking turns, {args.threads} threads, "
            "medians)\n\n" + table(pairs) + "\n")
    write_text(results_path(f"{args.out}.md"), text)
    write_json(results_path(f"{args.out}.json"), [asdict(p) for p in pairs])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
