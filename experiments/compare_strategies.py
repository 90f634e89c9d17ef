"""Search strategies vs TVM's own tuner at equal trial budgets (issue: strategies and `run`).

Random, annealing, Optuna TPE (autosearch) and ``ms.tune_tir`` (evolutionary search + XGBoost, with the
builder that does not time out) on conv tasks of tiny-YOLOv2 / YOLOv8n, same design space, same
measurement settings, several seeds, all in one script, one run at a time. The best config of each run
after B trials (for every budget B) is re-timed in a fresh measuring process, so no tool is credited
with a lucky in-run timing.

    python experiments/compare_strategies.py --tasks tiny-yolov2:1x64x52x52->1x128x52x52/winograd,... \
        --budgets 64,128 --seeds 3 [--methods random,annealing,optuna,metaschedule]

Writes experiments/results/compare_strategies.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autosearch.importer import import_model  # noqa: E402
from autosearch.measure.base import EvaluatorConfig  # noqa: E402
from autosearch.measure.local import LocalRunner  # noqa: E402
from autosearch.records import Record, TuningLog, read_log  # noqa: E402
from autosearch.strategy import parse_options  # noqa: E402
from autosearch.target import parse_target  # noqa: E402
from autosearch.tuner import Tuner  # noqa: E402
from experiments.metaschedule import tune_tir  # noqa: E402
from experiments.retiming import kernel  # noqa: E402
from experiments.task_spec import pick_task  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# a direct conv, a winograd conv (both 0.40 GFLOP as direct convolutions) and YOLOv8n's most frequent layer
DEFAULT_TASKS = ("tiny-yolov2:1x32x104x104->1x64x104x104/direct", "tiny-yolov2:1x64x52x52->1x128x52x52/winograd",
                 "yolov8n:1x64x40x40->1x64x40x40/direct")
LOGS = os.path.join(RESULTS, "logs")  # tuning logs, reused as the cost-model dataset (not committed)


def best_within(records: list[Record], budget: int) -> Record | None:
    valid = [r for r in records[:budget] if r.ok]
    return min(valid, key=lambda r: r.latency) if valid else None


def curve(records: list[Record], flops: float) -> list[float]:
    best, out = 0.0, []
    for r in records:
        if r.ok:
            best = max(best, flops / r.latency / 1e9)
        out.append(best)
    return out


def without_task(warm: list, task_key: str) -> list:
    """The warm-start logs minus every record of the task under test: the model must transfer, not recall."""
    import dataclasses

    return [dataclasses.replace(c, tasks={k: v for k, v in c.tasks.items() if k != task_key},
                                records=[r for r in c.records if r.task_key != task_key]) for c in warm]


def run_autosearch(task, target, method: str, budget: int, batch: int, seed: int, evaluator, cost_model=None,
                   log_path: str | None = None, warm_start: list | None = None, options: dict | None = None):
    log_path = log_path or os.path.join(tempfile.mkdtemp(prefix=f"cmp-{method}-"), "log.jsonl")
    if os.path.exists(log_path):
        os.unlink(log_path)
    runner = LocalRunner(target=target, evaluator=evaluator)
    start = time.perf_counter()
    with TuningLog(log_path) as log:
        Tuner(tasks=[task], runner=runner, log=log, strategy=method, budget=budget, batch=batch, seed=seed,
              strategy_options=options, cost_model=cost_model,
              warm_start=without_task(warm_start or [], task.workload_key)).run()
    wall = time.perf_counter() - start
    runner.close()
    return read_log(log_path).trials(task.workload_key), wall


def run_metaschedule(task, target, budget: int, batch: int, seed: int, evaluator):
    from autosearch.export import read_database

    work = tempfile.mkdtemp(prefix="cmp-ms-")
    run = tune_tir(task.mod, target, work, budget, per_iter=batch, fast_builder=True, evaluator=evaluator,
                   seed=seed + 1)
    records = read_database(work).records  # in the order MetaSchedule committed them
    return records, run.wall_secs


def retime(task, target, traces: list, evaluator) -> list[float]:
    """Re-time the given schedules (TVM trace JSON) in a fresh measuring process; seconds each."""
    mods = [kernel(task, trace) for trace in traces]
    runner = LocalRunner(target=target, evaluator=evaluator)
    try:
        base = runner.prepare(task)
        assert base.ok, base.error
        results = runner.measure(task, mods)
    finally:
        runner.close()
    return [r.median for r in results]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", default=",".join(DEFAULT_TASKS),
                   help="MODEL:TASK,... with TASK a LAYER/ALGORITHM, an index or a name fragment (conv tasks)")
    p.add_argument("--budgets", default="64,128")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--methods", default="random,annealing,optuna,metaschedule,annealing+xgb",
                   help="strategies; STRATEGY+MODEL is model-guided (e.g. annealing+xgb)")
    p.add_argument("--ms-per-iter", type=int, default=64,
                   help="ms.tune_tir num_trials_per_iter (its default is 64; the search costs ~30 s per iteration)")
    p.add_argument("--warm-start", action="append", default=[],
                   help="tuning log to pre-train guided methods on (repeatable); the task under test is removed")
    p.add_argument("--guided-option", action="append", default=[], metavar="KEY=VALUE",
                   help="strategy option for the model-guided methods (repeatable), e.g. parallel_size=32: "
                        "with program features every scored candidate costs ~20 ms")
    p.add_argument("--out", default="compare_strategies")
    args = p.parse_args()
    raw_options = dict(kv.split("=", 1) for kv in args.guided_option)
    guided_options = {m: parse_options(m.partition("+")[0], raw_options) for m in args.methods.split(",") if "+" in m}
    warm = [read_log(path) for path in args.warm_start]
    budgets = [int(b) for b in args.budgets.split(",")]
    methods = args.methods.split(",")
    target = parse_target(None)
    evaluator = EvaluatorConfig()
    models: dict = {}
    runs = []
    os.makedirs(LOGS, exist_ok=True)
    for spec in args.tasks.split(","):
        model_name, _, which = spec.partition(":")
        if model_name not in models:
            models[model_name] = import_model(model_name, target)
        task = pick_task(models[model_name].tasks, which)
        for seed in range(args.seeds):
            for method in methods:
                if method == "metaschedule":
                    records, wall = run_metaschedule(task, target, max(budgets), args.ms_per_iter, seed, evaluator)
                else:
                    strategy, _, cm = method.partition("+")  # e.g. annealing+xgb: model-guided
                    log_path = os.path.join(LOGS, f"{spec.replace(':', '-')}-{method}-s{seed}.jsonl")
                    records, wall = run_autosearch(task, target, strategy, max(budgets), args.batch, seed, evaluator,
                                                   cm or None, log_path, warm if cm else None,
                                                   guided_options.get(method))
                bests = {b: best_within(records, b) for b in budgets}
                traces = [bests[b].trace for b in budgets if bests[b] is not None]
                retimed = retime(task, target, traces, evaluator) if traces else []
                row = {"task": spec, "task_name": task.name, "gflop": task.gflop, "method": method, "seed": seed,
                       "wall_secs": wall, "trials": len(records), "curve": curve(records, task.flops),
                       "failed": sum(1 for r in records if not r.ok)}
                it = iter(retimed)
                for b in budgets:
                    row[f"best_gflops_{b}"] = (task.flops / next(it) / 1e9) if bests[b] is not None else 0.0
                    row[f"intune_gflops_{b}"] = bests[b].gflops if bests[b] is not None else 0.0
                runs.append(row)
                sys.stdout.write(f"{spec} seed {seed} {method:12s} wall {wall:6.1f}s "
                                 + " ".join(f"best@{b} {row[f'best_gflops_{b}']:.1f}" for b in budgets) + "\n")
                sys.stdout.flush()
                os.makedirs(RESULTS, exist_ok=True)
                with open(os.path.join(RESULTS, f"{args.out}.json"), "w") as fh:
                    json.dump({"target": str(target), "evaluator": evaluator.to_json(), "runs": runs}, fh)
    write_report(runs, budgets, methods, args.out)
    return 0


def trials_to_reach(rows: list[dict], randoms: list[dict], budget: int) -> str:
    """Median over seeds of the trials a method needs to reach random search's in-run best after ``budget``
    trials (the median of random's seeds); "> N" when a run never gets there within its N trials."""
    if not randoms:
        return "-"
    goal = statistics.median(r["curve"][min(budget, len(r["curve"])) - 1] for r in randoms if r["curve"])
    needed = []
    for r in rows:
        hit = next((i + 1 for i, g in enumerate(r["curve"]) if g >= goal), None)
        needed.append(hit if hit is not None else 10**9)
    med = statistics.median_high(needed)  # an even number of seeds: the upper middle, never a mean with "never"
    return f"> {len(rows[0]['curve'])}" if med >= 10**9 else f"{med:.0f}"


def write_report(runs: list[dict], budgets: list[int], methods: list[str], out: str) -> None:
    from autosearch.plots import figure, save

    tasks = list(dict.fromkeys(r["task"] for r in runs))
    top = max(budgets)
    header = (["task", "method"] + [f"GFLOPS@{b} (median, re-timed)" for b in budgets]
              + [f"trials to random's best@{top}", "wall s (median)"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for t in tasks:
        randoms = [r for r in runs if r["task"] == t and r["method"] == "random"]
        for m in methods:
            rows = [r for r in runs if r["task"] == t and r["method"] == m]
            if not rows:
                continue
            cells = [f"{statistics.median(r[f'best_gflops_{b}'] for r in rows):.1f}" for b in budgets]
            cells.append(trials_to_reach(rows, randoms, top))
            lines.append(f"| {t} ({rows[0]['gflop']:.2f} GFLOP) | {m} | " + " | ".join(cells)
                         + f" | {statistics.median(r['wall_secs'] for r in rows):.0f} |")
    with open(os.path.join(RESULTS, f"{out}.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    fig, axes = figure(1, len(tasks), size=(5 * len(tasks), 4))
    for ax, t in zip(axes[0], tasks):
        for m in methods:
            rows = [r for r in runs if r["task"] == t and r["method"] == m]
            if not rows:
                continue
            n = min(len(r["curve"]) for r in rows)
            med = [statistics.median(r["curve"][i] for r in rows) for i in range(n)]
            ax.plot(range(1, n + 1), med, label=m)
        ax.set_title(t)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOPS (in-run, median of seeds)")
        ax.legend(fontsize=8)
    save(fig, os.path.join(RESULTS, f"{out}.png"))


if __name__ == "__main__":
    sys.exit(main())
