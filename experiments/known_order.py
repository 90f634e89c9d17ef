"""Which known schedule to measure first: the order by CPU (today's) against the cost model's, on real timings.

A short run on a slow machine gives most of a model's tasks two to four trials, and those are the known schedules
(:mod:`autosearch.search.known`): each CPU's best configs for the task, measured rank by rank with the host's CPU
first, then its family's, then the others'. A task whose first trials are its only ones keeps the best of them. This
measures every known config of each task on this machine, once, and then asks of the same timings: had the run
measured them in another order, what would a task hold after its first k? Orders compared:

- ``cpu``: :meth:`KnownSchedules.for_task` alone (the tuner's order before 2026-12-05, and its order unguided);
- ``model``: the same configs sorted by the run's cost model (``--cost-model``, default ``auto``: the shipped one),
  highest predicted first, the CPU order breaking ties;
- ``model, then cpu``: :func:`autosearch.search.known.by_prediction`, the tuner's order under a pre-trained model:
  the model's first, then the CPU order's first, then the model's order;
- ``best``: the fastest known config first (what no order can beat).

Each after k in 1..4 is the model's time from its tasks' best-after-k (weight x seconds, summed), so a gain on a task
the model runs nine times counts nine times. A task with one known config is the same under every order and is
left out. ``--target`` stands in for another CPU (TVM built for its ``-mcpu``), as in ``experiments.user_path``::

    python -m experiments.known_order --model yolov8n --layout NHWC --out known-order-yolov8n-xeon-amx
    python -m experiments.known_order --model yolov8n --layout NHWC \\
        --target '{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}' --out known-order-yolov8n-znver3-standin-xeon

Writes ``experiments/results/OUT.md`` (tables, the CPU named), ``OUT.png`` and ``OUT.json`` (every timing, the
state it resumes from: a task measured is not measured again).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, read_json, results_path, write_json
from experiments.lib.machine import host_label

ORDERS = ("cpu", "model", "model, then cpu", "best")
KS = (1, 2, 3, 4)


def orders(task: dict) -> dict[str, list[str]]:
    """A measured task's configs (keys, in the CPU order) in each order of :data:`ORDERS`."""
    from autosearch.search.known import by_prediction, by_score

    keys, scores, seconds = task["configs"], task["scores"], task["seconds"]
    model = by_score(keys, scores)
    best = sorted(keys, key=lambda k: (seconds[k], keys.index(k)))
    return {"cpu": list(keys), "model": model, "model, then cpu": by_prediction(keys, scores), "best": best}


def best_after(order: list[str], seconds: dict[str, float], k: int) -> float:
    """The fastest valid timing among the first ``k`` configs of ``order`` (inf if none is valid)."""
    valid = [seconds[c] for c in order[:k] if math.isfinite(seconds.get(c, math.inf))]
    return min(valid) if valid else math.inf


def summarise(tasks: list[dict]) -> dict:
    """Per order and k: the model's time from the tasks' best-after-k, and the tasks whose first config is their
    fastest known one."""
    out: dict = {"tasks": len(tasks), "model_ms": {}, "first_is_best": {}}
    ordered = [orders(t) for t in tasks]
    for order in ORDERS:
        out["model_ms"][order] = {}
        for k in KS:
            total = 0.0
            for t, o in zip(tasks, ordered):
                got = best_after(o[order], t["seconds"], k)
                total += t["weight"] * (got if math.isfinite(got) else t["untuned"])
            out["model_ms"][order][k] = total * 1e3
        out["first_is_best"][order] = sum(
            best_after(o[order], t["seconds"], 1) <= best_after(o["best"], t["seconds"], 1)
            for t, o in zip(tasks, ordered))
    return out


def measure_task(task, known, guidance: str | None, runner, seed: int) -> dict | None:
    """Every known config of ``task`` timed once on ``runner``; None when fewer than two fit its space."""
    from autosearch.search.cost_model import guides_unit, make_scorer
    from autosearch.search.space import DecisionSpace, config_key
    from autosearch.tensor_units.cpu import bf16_unit, target_mcpu
    from autosearch.tensor_units.sketch import is_bf16_unit_task
    from autosearch.types import Status

    space = DecisionSpace(task.mod, task.target, seed=seed)
    configs = known.for_task(task.workload_key, host_cpu=target_mcpu(task.target), fits=space.replayable)
    if len(configs) < 2:
        return None
    applied = [space.apply(c) for c in configs]
    baseline = runner.prepare(task)
    if not baseline.ok:
        return None
    good = [a for a in applied if a.ok]
    results = dict(zip([config_key(a.config) for a in good], runner.measure(task, [a.mod for a in good])))
    keys = [config_key(c) for c in configs]
    effective = {config_key(c): config_key(a.config) for c, a in zip(configs, applied) if a.ok}
    seconds = {}
    for key in keys:
        result = results.get(effective.get(key, ""))
        seconds[key] = result.median if result is not None and result.status == Status.OK else math.inf
    unit = bf16_unit(task.target) if is_bf16_unit_task(task.mod) else None
    if guidance is not None and guides_unit(guidance, unit):  # as the tuner: only where the model guides the task
        scores = [float(s) for s in make_scorer(guidance, space, task, seed=seed).score(configs)]
    else:
        scores = [0.0] * len(configs)
    return {"name": task.name, "key": task.workload_key, "weight": task.weight, "untuned": baseline.median,
            "configs": keys, "cpus": [next(e.cpu for e in known.by_key[task.workload_key] if e.config == c)
                                      for c in configs],
            "seconds": seconds, "scores": scores}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov8n")
    ap.add_argument("--layout", default="NHWC", choices=["NCHW", "NHWC"])
    ap.add_argument("--precision", default=None, help="lowering precision (default: run's auto)")
    ap.add_argument("--target", default=None, help="TVM target (default: this CPU); a JSON dict stands in for another")
    ap.add_argument("--cost-model", default="auto", help="the model that orders the configs (default: the shipped)")
    ap.add_argument("--known-schedules", default="shipped")
    ap.add_argument("--tasks", default=None, help="task indices or name fragments, as run --tasks (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="results name (experiments/results/OUT.*)")
    args = ap.parse_args(argv)

    from autosearch.api import MeasureOptions, load_tasks, make_runner, resolve_guidance, select_tasks
    from autosearch.errors import UserError
    from autosearch.search.known import load as load_known

    try:
        imported = load_tasks(args.model, target=args.target, layout=args.layout, precision=args.precision)
        chosen = select_tasks(imported.tasks, args.tasks)
        known = load_known(args.known_schedules)
        guidance, why = resolve_guidance(args.cost_model, imported.target, "optuna", seed=args.seed)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if known is None:
        print("error: --known-schedules none: nothing to order", file=sys.stderr)
        return 2
    state_path = results_path(args.out + ".json")
    state = read_json(state_path) if os.path.exists(state_path) else {}
    done = {t["key"]: t for t in state.get("tasks", [])}
    skipped = set(state.get("skipped", []))
    header = {"model": args.model, "layout": args.layout, "target": str(imported.target),
              "cpu": host_label(), "guided_by": why}
    todo = [t for t in chosen if t.workload_key not in done and t.workload_key not in skipped]
    started = time.perf_counter()
    with make_runner("local", imported.target, MeasureOptions(), seed=args.seed) as runner:
        for i, task in enumerate(todo, 1):
            row = measure_task(task, known, guidance, runner, args.seed)
            if row is None:
                skipped.add(task.workload_key)
            else:
                done[task.workload_key] = row
            write_json(state_path, {**header, "tasks": list(done.values()), "skipped": sorted(skipped)})
            print(f"[{i}/{len(todo)}, {time.perf_counter() - started:.0f} s] {task.name}: "
                  + (f"{len(row['seconds'])} known configs" if row else "fewer than two known configs"), flush=True)
    tasks = list(done.values())
    summary = summarise(tasks)
    _publish(args.out, header, summary, {**header, "tasks": tasks, "skipped": sorted(skipped), "summary": summary})
    return 0


def _publish(out: str, header: dict, summary: dict, data: dict) -> None:
    from autosearch.plots import figure, save

    best = summary["model_ms"]["best"]
    rows = [[order] + [fmt(summary["model_ms"][order][k], 2) for k in KS]
            + [f"{summary['model_ms'][order][2] / best[2]:.3f}x", summary["first_is_best"][order]] for order in ORDERS]
    table = markdown_table(["order", *(f"after {k} (ms)" for k in KS), "after 2 / best", "first is the fastest"], rows)
    text = (f"**Known schedules measured first, in the orders compared** ({header['model']} {header['layout']}; "
            f"{header['cpu']}; target `{header['target']}`; ordered by {header['guided_by']}): {summary['tasks']} "
            "tasks with two or more known configs, each config timed once on this machine; the model's time from "
            "each task's best after its first k known configs (weight x seconds).\n\n" + table + "\n")

    def plot(path: str) -> None:
        fig, axes = figure(size=(6.0, 4.0))
        ax = axes[0][0]
        for order in ORDERS:
            ax.plot(KS, [summary["model_ms"][order][k] for k in KS], marker="o", label=order)
        ax.set_xlabel("known configs measured per task")
        ax.set_ylabel("model time from the tasks' best (ms)")
        ax.set_xticks(KS)
        ax.set_title(f"{header['model']} {header['layout']}: known schedules in the orders compared")
        ax.legend()
        save(fig, path)

    publish(results_path(out), data=data, text=text, plot=plot)


if __name__ == "__main__":
    sys.exit(main())
