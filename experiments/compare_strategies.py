"""Search strategies vs TVM's own tuner at equal trial budgets (issue: strategies and `run`).

Random, annealing, Optuna TPE (autosearch) and ``ms.tune_tir`` (evolutionary search + XGBoost, with the
builder that does not time out) on conv tasks of tiny-YOLOv2 / YOLOv8n, same design space, same
measurement settings, several seeds, all in one script, one run at a time. The best config of each run
after B trials (for every budget B) is re-timed in a fresh measuring process, so no tool is credited
with a lucky in-run timing.

    python -m experiments.compare_strategies --tasks tiny-yolov2:1x64x52x52->1x128x52x52/winograd,... \
        --budgets 64,128 --seeds 3 [--methods random,annealing,optuna,metaschedule]

Writes experiments/results/compare_strategies.{json,md,png}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from autosearch.frontend.importer import import_model
from autosearch.frontend.target import parse_target
from autosearch.measure.base import EvaluatorConfig
from autosearch.records import read_log
from autosearch.search.strategy import parse_options
from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.loo import without_task
from experiments.lib.metaschedule import tune_tir
from experiments.lib.retime import retime_secs
from experiments.lib.stats import NEVER, median_trials, trials_to_reach
from experiments.lib.tasks import TaskSpec, pick_task
from experiments.lib.tuning import best_so_far, best_within, run_autosearch

# a direct conv, a winograd conv (both 0.40 GFLOP as direct convolutions) and YOLOv8n's most frequent layer
DEFAULT_TASKS = ("tiny-yolov2:1x32x104x104->1x64x104x104/direct", "tiny-yolov2:1x64x52x52->1x128x52x52/winograd",
                 "yolov8n:1x64x40x40->1x64x40x40/direct")
LOGS = results_path("logs")  # tuning logs, reused as the cost-model dataset (not committed)


def run_metaschedule(task, target, budget: int, batch: int, seed: int, evaluator):
    from autosearch.deploy.database import read_database

    work = tempfile.mkdtemp(prefix="cmp-ms-")
    run = tune_tir(task.mod, target, work, budget, per_iter=batch, fast_builder=True, evaluator=evaluator,
                   seed=seed + 1)
    records = read_database(work).records  # in the order MetaSchedule committed them
    return records, run.wall_secs


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
        parsed = TaskSpec.parse(spec)
        if (parsed.model, parsed.layout) not in models:
            models[parsed.model, parsed.layout] = import_model(parsed.model, target, layout=parsed.layout)
        task = pick_task(models[parsed.model, parsed.layout].tasks, parsed.which, layout=parsed.layout)
        for seed in range(args.seeds):
            for method in methods:
                if method == "metaschedule":
                    records, wall = run_metaschedule(task, target, max(budgets), args.ms_per_iter, seed, evaluator)
                else:
                    strategy, _, cm = method.partition("+")  # e.g. annealing+xgb: model-guided
                    log_path = os.path.join(LOGS, f"{spec.replace(':', '-')}-{method}-s{seed}.jsonl")
                    run = run_autosearch(
                        task, target, strategy, max(budgets), args.batch, seed, evaluator=evaluator,
                        cost_model=cm or None, log_path=log_path,
                        warm_start=without_task(warm, task.workload_key) if cm else (),
                        options=guided_options.get(method))
                    records, wall = run.records, run.wall_secs
                bests = {b: best_within(records, b) for b in budgets}
                traces = [bests[b].trace for b in budgets if bests[b] is not None]
                retimed = retime_secs(task, target, traces, evaluator=evaluator) if traces else []
                row = {"task": spec, "task_name": task.name, "gflop": task.gflop, "method": method, "seed": seed,
                       "wall_secs": wall, "trials": len(records), "curve": best_so_far(records, task.flops),
                       "failed": sum(1 for r in records if not r.ok)}
                it = iter(retimed)
                for b in budgets:
                    row[f"best_gflops_{b}"] = (task.flops / next(it) / 1e9) if bests[b] is not None else 0.0
                    row[f"intune_gflops_{b}"] = bests[b].gflops if bests[b] is not None else 0.0
                runs.append(row)
                sys.stdout.write(f"{spec} seed {seed} {method:12s} wall {wall:6.1f}s "
                                 + " ".join(f"best@{b} {row[f'best_gflops_{b}']:.1f}" for b in budgets) + "\n")
                sys.stdout.flush()
                write_json(results_path(f"{args.out}.json"),
                           {"target": str(target), "evaluator": evaluator.to_json(), "runs": runs}, indent=None)
    write_report(runs, budgets, methods, args.out)
    return 0


def trials_to_random_best(rows: list[dict], randoms: list[dict], budget: int) -> str:
    """Median over seeds of the trials a method needs to reach random search's in-run best after ``budget``
    trials (the median of random's seeds); "> N" when a run never gets there within its N trials."""
    if not randoms:
        return "-"
    goal = statistics.median(r["curve"][min(budget, len(r["curve"])) - 1] for r in randoms if r["curve"])
    # the curves are best GFLOPS so far: reaching the goal is a "latency" of -GFLOPS at or below -goal
    med = median_trials([trials_to_reach([-g for g in r["curve"]], -goal) for r in rows])
    return f"> {len(rows[0]['curve'])}" if med == NEVER else f"{med:.0f}"


def write_report(runs: list[dict], budgets: list[int], methods: list[str], out: str) -> None:
    from autosearch.plots import figure, save
    from experiments.lib.plots import step_curves

    tasks = list(dict.fromkeys(r["task"] for r in runs))
    top = max(budgets)
    header = (["task", "method"] + [f"GFLOPS@{b} (median, re-timed)" for b in budgets]
              + [f"trials to random's best@{top}", "wall s (median)"])
    table = []
    for t in tasks:
        randoms = [r for r in runs if r["task"] == t and r["method"] == "random"]
        for m in methods:
            rows = [r for r in runs if r["task"] == t and r["method"] == m]
            if not rows:
                continue
            table.append([f"{t} ({rows[0]['gflop']:.2f} GFLOP)", m]
                         + [fmt(statistics.median(r[f"best_gflops_{b}"] for r in rows)) for b in budgets]
                         + [trials_to_random_best(rows, randoms, top),
                            fmt(statistics.median(r["wall_secs"] for r in rows), 0)])
    text = markdown_table(header, table) + "\n"
    write_text(results_path(f"{out}.md"), text)
    sys.stdout.write(text)
    fig, axes = figure(1, len(tasks), size=(5 * len(tasks), 4))
    for ax, t in zip(axes[0], tasks):
        curves = {}
        for m in methods:
            rows = [r for r in runs if r["task"] == t and r["method"] == m]
            if rows:
                n = min(len(r["curve"]) for r in rows)
                curves[m] = [statistics.median(r["curve"][i] for r in rows) for i in range(n)]
        step_curves(ax, curves, ylabel="best GFLOPS (in-run, median of seeds)")
        ax.set_title(t)
        ax.legend(fontsize=8)
    save(fig, results_path(f"{out}.png"))


if __name__ == "__main__":
    sys.exit(main())
