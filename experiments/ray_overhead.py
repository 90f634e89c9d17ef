"""What the Ray device pool costs: trials per minute of LocalRunner vs the Ray pool on one machine.

The same random configs of one small tiny-YOLOv2 conv task are measured by LocalRunner (2 build
processes), then by the embedded Ray pool with 1 and with 2 build workers, one runner after the other
(never two measurements at once). Start-up (workers / Ray, reference and baseline) is reported apart
from the measuring loop, and the per-config latencies are compared with LocalRunner's.

    python -m experiments.ray_overhead [--trials 32] [--batch 16] [--task N]

Writes experiments/results/ray_overhead.json and prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from autosearch.frontend.importer import import_model
from autosearch.frontend.target import parse_target
from autosearch.measure.base import EvaluatorConfig
from autosearch.measure.local import LocalRunner
from autosearch.search.space import DecisionSpace
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_json
from experiments.lib.tasks import pick_task


def sample_mods(space: DecisionSpace, n: int, seed: int) -> list:
    """``n`` applicable random configs (the same list for every runner)."""
    return [a.mod for a in space.sample_applied(np.random.default_rng(seed), n)]


def bench(label: str, make_runner, task, mods: list, batch: int) -> dict:
    start = time.perf_counter()
    runner = make_runner()
    runner.warm_up()
    baseline = runner.prepare(task)
    startup = time.perf_counter() - start
    results = []
    t0 = time.perf_counter()
    for i in range(0, len(mods), batch):
        results += runner.measure(task, mods[i:i + batch])
    wall = time.perf_counter() - t0
    phases = dict(runner.phase_secs)
    runner.close()
    ok = [r for r in results if r.ok]
    return {
        "runner": label, "trials": len(results), "ok": len(ok), "startup_secs": startup, "wall_secs": wall,
        "trials_per_min": 60 * len(results) / wall, "build_secs": phases["build"], "run_secs": phases["run"],
        "best_gflops": max((r.gflops(task.flops) for r in ok), default=0.0),
        "baseline_ms": baseline.median * 1e3 if baseline.ok else None,
        "medians": [r.median if r.ok else None for r in results],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-yolov2")
    p.add_argument("--task", default=None, help="LAYER/ALGORITHM, index or name fragment (default: the smallest "
                                                 "conv task)")
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    from autosearch.measure.ray_pool import RayRunner

    target = parse_target(None)
    tasks = import_model(args.model, target).tasks
    if args.task is None:
        task = min((t for t in tasks if "conv2d" in t.name), key=lambda t: t.flops)
    else:
        try:
            task = pick_task(tasks, args.task)
        except ValueError as exc:
            raise SystemExit(str(exc)) from exc
    space = DecisionSpace(task.mod, target, seed=args.seed)
    mods = sample_mods(space, args.trials, args.seed)
    evaluator = EvaluatorConfig()
    runners = [
        ("local, 2 build workers", lambda: LocalRunner(target=target, evaluator=evaluator, build_workers=2)),
        ("ray, 1 build worker", lambda: RayRunner(target=target, evaluator=evaluator, build_workers=1)),
        ("ray, 2 build workers", lambda: RayRunner(target=target, evaluator=evaluator, build_workers=2)),
    ]
    rows = [bench(label, make, task, mods, args.batch) for label, make in runners]

    local = rows[0]["medians"]
    for row in rows:
        ratios = [m / ref for m, ref in zip(row["medians"], local) if m and ref]
        row["median_latency_ratio_vs_local"] = statistics.median(ratios) if ratios else None
    out = {"task": {"model": args.model, "index": task.index, "name": task.name, "gflop": task.gflop},
           "target": str(target), "evaluator": evaluator.to_json(), "trials": args.trials,
           "batch": args.batch, "rows": rows}
    write_json(results_path("ray_overhead.json"), out)

    header = ["runner", "start-up s", "loop s", "trials/min", "build s", "run s", "ok", "best GFLOPS",
              "latency vs local"]
    table = [[r["runner"], f"{r['startup_secs']:.1f}", f"{r['wall_secs']:.1f}", f"{r['trials_per_min']:.1f}",
              f"{r['build_secs']:.1f}", f"{r['run_secs']:.1f}", f"{r['ok']}/{r['trials']}", f"{r['best_gflops']:.1f}",
              "-" if r["median_latency_ratio_vs_local"] is None else f"{r['median_latency_ratio_vs_local']:.2f}x"]
             for r in rows]
    lines = [f"Task {task.index} of {args.model} ({task.name}, {task.gflop:.3f} GFLOP), {args.trials} random "
             f"configs (the same for every runner), batch {args.batch}", "", markdown_table(header, table)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
