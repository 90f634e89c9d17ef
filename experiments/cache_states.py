"""A task's best configs timed with the kernel's arguments flushed (``run``'s default) and with every core's caches
left dirty, as the layers before a kernel leave them in a forward pass (``run --cache-state dirty``): do the two
order the configs alike?

``experiments/in_flow.py`` found a tuned model's kernels running 1.2-1.3x their warm time inside the pass, and the
dirty state reproducing that. Here the ``--top`` best distinct configs of each named task of a tuning log (as the
tuner ranked them) are built once and timed by the tuner's own runner in both states, the states taking turns in
``--rounds`` rounds, each in a measuring process of its own::

    python -m experiments.cache_states --log experiments/results/user-yolov8n-15min-xeon-amx-v10/log.jsonl \\
        --tasks fused_conv2d_bf1611_add9_fast_sigmoid7_multiply7_cast101,... --out cache-states-yolov8n-xeon-amx

Writes ``experiments/results/OUT.md`` / ``.json`` / ``.png``: per task, each config's median in both states, and the
dirty time of the flushed state's winner against the dirty state's own winner.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import host_label

STATES = ("flushed", "dirty")


def time_states(log, key: str, records: list, rounds: int) -> dict[str, list[float]]:
    """Per state, each record's seconds over ``rounds`` rounds in fresh processes, the states taking turns
    (:func:`experiments.lib.retime.settings_in_turns`; ``inf`` for a config that failed a round)."""
    from autosearch.api import MeasureOptions
    from autosearch.frontend.task import TuningTask
    from autosearch.tensor_units.intrinsics import register_for
    from experiments.lib.retime import schedule, settings_in_turns

    task = TuningTask.from_json(log.tasks[key])
    jobs = []
    for rec in records:
        register_for(json.dumps(rec.trace))  # the tensor intrinsics its trace names
        jobs.append((task, schedule(task, rec.trace)))
    return settings_in_turns(task.target, {s: MeasureOptions(cache_state=s) for s in STATES}, jobs, rounds,
                             progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))


def task_rows(name: str, records: list, times: dict[str, list[float]]) -> tuple[list[list], dict]:
    flushed, dirty = np.array(times["flushed"]), np.array(times["dirty"])
    by_flushed, by_dirty = int(np.nanargmin(flushed)), int(np.nanargmin(dirty))
    rows = [[f"{name[:48]} #{i}" + (" (flushed's best)" if i == by_flushed else "")
             + (" (dirty's best)" if i == by_dirty else ""), rec.trial, fmt(rec.result.median * 1e3, 4),
             fmt(flushed[i] * 1e3, 4), fmt(dirty[i] * 1e3, 4), f"{dirty[i] / flushed[i]:.2f}x"]
            for i, rec in enumerate(records)]
    summary = {"task": name, "configs": len(records), "flushed_best": by_flushed, "dirty_best": by_dirty,
               "dirty_of_flushed_best": float(dirty[by_flushed]), "dirty_best_secs": float(dirty[by_dirty]),
               "gain": float(dirty[by_flushed] / dirty[by_dirty])}
    return rows, summary


def plot(data: dict, path: str, title: str) -> None:
    from autosearch.plots import figure, save

    tasks = data["tasks"]
    fig, axes = figure(1, len(tasks), size=(3.2 * len(tasks), 3.2))
    for ax, task in zip(axes[0], tasks, strict=True):
        f = np.array(task["times"]["flushed"]) * 1e3
        d = np.array(task["times"]["dirty"]) * 1e3
        ax.scatter(f, d, s=14)
        ax.scatter([f[task["flushed_best"]]], [d[task["flushed_best"]]], s=40, facecolors="none", edgecolors="C3",
                   label="flushed's best")
        ax.scatter([f[task["dirty_best"]]], [d[task["dirty_best"]]], s=40, marker="s", facecolors="none",
                   edgecolors="C2", label="dirty's best")
        ax.set_xlabel("flushed ms")
        ax.set_ylabel("dirty ms")
        ax.set_title(task["task"][:36], fontsize=7)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=8)
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="a tuning log")
    p.add_argument("--tasks", required=True, help="task names of the log, comma-separated")
    p.add_argument("--top", type=int, default=12, help="distinct configs per task, the tuner's best first")
    p.add_argument("--rounds", type=int, default=4, help="rounds, the two states taking turns")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md, .json and .png")
    args = p.parse_args(argv)
    if args.top < 2 or args.rounds < 1:
        p.error("--top must be at least 2 and --rounds at least 1")

    from autosearch.errors import UserError
    from autosearch.records import read_log

    log = read_log(args.log)
    keys = {h["name"]: key for key, h in log.tasks.items()}
    data: dict = {"log": args.log, "host": host_label(), "rounds": args.rounds, "tasks": []}
    rows: list[list] = []
    for name in args.tasks.split(","):
        if name not in keys:
            raise UserError(f"no task {name!r} in {args.log}")
        records = log.ranked(keys[name])[: args.top]  # distinct configs, best first as the tuner ranked them
        print(f"{name}: {len(records)} configs, {args.rounds} rounds ...", file=sys.stderr, flush=True)
        times = time_states(log, keys[name], records, args.rounds)
        task_table, summary = task_rows(name, records, times)
        rows += task_table
        data["tasks"].append({**summary, "trials": [r.trial for r in records], "times": times})
    gains = [t["gain"] for t in data["tasks"]]
    title = f"A task's best configs timed flushed and dirty ({host_label()})"
    configs = markdown_table(["config", "trial", "as run ms", "flushed ms", "dirty ms", "dirty / flushed"], rows,
                             align="lrrrrr")
    winners = markdown_table(
        ["task", "dirty ms of flushed's best", "dirty's best ms", "flushed's best / dirty's best (dirty)"],
        [[t["task"][:60], fmt(t["dirty_of_flushed_best"] * 1e3, 4), fmt(t["dirty_best_secs"] * 1e3, 4),
          f"{t['gain']:.2f}x"] for t in data["tasks"]], align="lrrr")
    text = (f"**{title}**; `{args.log}`, the tuner's {args.top} best distinct configs per task, {args.rounds} rounds "
            f"in turns\n\n{configs}\n\n{winners}\n\nGeometric mean over the tasks: "
            f"{statistics.geometric_mean(gains):.3f}x\n")
    publish(results_path(args.out), data=data, text=text, plot=lambda path: plot(data, path, title))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
