"""How many re-timing rounds does a label need? The ceiling of R-round labels, measured for R = 1..N, projected on.

A dataset label is the median of a kernel's timings over R rounds, each in a fresh measuring process
(``experiments/lib/labels.py``). Its ceiling is how well two such labels, made independently, agree: no cost model
can agree with the labels better. ``experiments/measurement_noise.py`` measures it for the R a dataset used; this
measures it as a function of R, to tell what more rounds would buy and what they would cost.

A sample of ``--per-task`` kernels of each of ``--tasks`` tasks (spread over the dataset's order) is timed in
2N rounds (N = ``--max-rounds``), every round a fresh measuring process per task, tasks in an order rotated from
round to round, with the dataset's label evaluator. For each R <= N, every ordered pair of disjoint R-round
subsets gives two independent R-round labels of every kernel (median over its subset's rounds); their agreement
(pairwise accuracy, pairwise on pairs more than 10% apart, Spearman, top-1) is averaged over the pairs of subsets,
then over tasks.

Beyond N a model projects it: per task, a kernel's log-timing is its own level plus a round's level plus Gaussian
noise of the task's residual variance (two-way, kernels x rounds); two labels of R simulated rounds are compared
as above. The kernels' levels are their mean over the 2N rounds, shrunk so that their spread leaves out the noise
that mean still holds. The projection is checked against the measured R <= N in the same table, and gives the
rounds a ceiling (``--goal``) needs and the hours a dataset of the log's size would take to re-time that often,
at the time per kernel and round measured here.

    python -m experiments.label_rounds --log experiments/results/dataset-study.jsonl --tasks 12 --per-task 40 \\
        --max-rounds 3 --out experiments/results/label_rounds

Resumable: the timings go to OUT.jsonl as they are made (retime records); run the same command again and it times
only what is missing (``--max-minutes`` stops it between batches). Writes OUT.md, OUT.json and OUT.png. Time it
alone on the machine.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import time
import zlib

import numpy as np

from autosearch.cost_models.evaluate import pairwise_accuracy, spearman, top_k_score
from autosearch.cost_models.features import labelled_trials
from autosearch.errors import UserError
from autosearch.records import TuningLog, read_log
from autosearch.search.finalists import rotated
from autosearch.tables import markdown_table
from autosearch.types import Config, Record
from experiments.lib.io import write_json, write_text
from experiments.lib.labels import LABEL_EVALUATOR, logged_settings, retime
from experiments.lib.machine import describe, fingerprint, identity
from experiments.lib.stats import mean as finite_mean
from experiments.lib.stats import standard_error

log = logging.getLogger("label_rounds")
METRICS = ("pairwise", "pairwise_apart10", "spearman", "top1")
SIMULATIONS = 200  # simulated pairs of labels per task and R


def agreement(first: np.ndarray, second: np.ndarray) -> dict[str, float]:
    """How well latencies ``second`` order the kernels as ``first`` does (latencies in seconds, one per kernel)."""
    a, b = 1.0 / np.asarray(first), 1.0 / np.asarray(second)  # throughput: higher is better
    apart = a[:, None] > 1.1 * a[None, :]
    return {"pairwise": pairwise_accuracy(a, b),
            "pairwise_apart10": float((b[:, None] > b[None, :])[apart].mean()) if apart.any() else float("nan"),
            "spearman": spearman(a, b), "top1": top_k_score(a, b, 1)}


def split_pairs(rounds: int, r: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every ordered pair of disjoint ``r``-subsets of ``range(rounds)``."""
    out = []
    for a in itertools.combinations(range(rounds), r):
        rest = [i for i in range(rounds) if i not in a]
        out += [(a, b) for b in itertools.combinations(rest, r)]
    return out


def measured(timings: np.ndarray, max_r: int) -> dict[int, dict[str, float]]:
    """Mean agreement of two independent R-round labels, R = 1..max_r; ``timings`` is kernels x rounds (seconds)."""
    out = {}
    for r in range(1, max_r + 1):
        rows = [agreement(np.median(timings[:, list(a)], axis=1), np.median(timings[:, list(b)], axis=1))
                for a, b in split_pairs(timings.shape[1], r)]
        out[r] = {m: finite_mean([row[m] for row in rows]) for m in METRICS}
    return out


def projected(timings: np.ndarray, max_r: int, *, rng: np.random.Generator) -> dict[int, dict[str, float]]:
    """The agreement of two R-round labels under the Gaussian model of the module's docstring, R = 1..max_r."""
    logs = np.log(timings)
    kernels, rounds = logs.shape
    level = logs.mean(axis=1)
    residual = logs - level[:, None] - logs.mean(axis=0)[None, :] + logs.mean()
    sigma2 = float((residual ** 2).sum() / ((kernels - 1) * (rounds - 1)))
    spread = level - level.mean()
    shrink = np.sqrt(max(0.0, spread.var() - sigma2 / rounds) / spread.var()) if spread.var() > 0 else 0.0
    truth = level.mean() + shrink * spread
    out = {}
    for r in range(1, max_r + 1):
        rows = []
        for _ in range(SIMULATIONS):
            noise = rng.normal(0.0, np.sqrt(sigma2), size=(2, kernels, r))
            first, second = np.exp(truth[None, :] + np.median(noise, axis=2))
            rows.append(agreement(first, second))
        out[r] = {m: finite_mean([row[m] for row in rows]) for m in METRICS}
    return out


def sample(contents, tasks: int, per_task: int, seed: int) -> dict[str, list[Record]]:
    """``per_task`` random labelled records of each of ``tasks`` tasks spread over the log's order."""
    by_task: dict[str, list[Record]] = {}
    for rec, _ in labelled_trials(contents):
        by_task.setdefault(rec.task_key, []).append(rec)
    keys = list(by_task)
    keys = [keys[i] for i in np.linspace(0, len(keys) - 1, min(tasks, len(keys))).round().astype(int)]
    rng = np.random.default_rng(seed)
    return {key: [by_task[key][i] for i in sorted(rng.choice(len(by_task[key]), min(per_task, len(by_task[key])),
                                                            replace=False))] for key in keys}


def measure(args, contents, picked: dict[str, list[Record]], target,
            machine: dict) -> tuple[dict[str, dict[Config, dict[int, float | None]]], list[float]]:
    """Time every picked kernel in every round that OUT.jsonl lacks; returns task -> config -> round -> median
    seconds (None: failed), and the seconds each timing of the rounds after the first took (build and run: the
    first round also builds the kernels), what was there before included. A resume on another machine is
    refused: its timings would be mixed with these."""
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.local import LocalRunner

    path = f"{args.out}.jsonl"
    before = read_log(path) if os.path.exists(path) else None
    earlier = [run["machine"] for run in before.runs if isinstance(run.get("machine"), dict)] if before else []
    if earlier and identity(earlier[-1]) != identity(machine):
        raise UserError(f"{path} was timed on {describe(earlier[-1])}, this is {describe(machine)}: timings of two "
                        "machines are not mixed; choose another --out")
    timings: dict[str, dict[Config, dict[int, float | None]]] = {key: {} for key in picked}
    secs: list[float] = []

    def add(rec: Record) -> None:
        timings[rec.task_key].setdefault(rec.config, {})[rec.round] = rec.result.median if rec.ok else None
        if rec.round > 1:
            secs.append(rec.result.build_secs + rec.result.run_secs)

    for rec in before.records if before else ():
        if rec.kind == "retime" and rec.task_key in timings:
            add(rec)
    evaluator = (logged_settings(contents) or (1, LABEL_EVALUATOR))[1]
    build_cache = f"{args.log}.builds" if os.path.isdir(f"{args.log}.builds") else f"{args.out}.builds"
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes is not None else float("inf")
    prepared: set[str] = set()
    runner = LocalRunner(target=target, seed=args.seed, evaluator=evaluator, build_cache=build_cache)
    with TuningLog(path, resume=True) as out, runner:
        out.write_run({"experiment": "label_rounds", "machine": machine})
        for key in picked:
            if before is None or key not in before.tasks:
                out.write_task(contents.tasks[key])
        for round_no in range(1, 2 * args.max_rounds + 1):
            for key in rotated(list(picked), round_no - 1):
                todo = [r for r in picked[key] if round_no not in timings[key].get(r.config, {})]
                if not todo or time.time() > deadline:
                    continue
                task = TuningTask.from_json(contents.tasks[key])
                if key not in prepared:
                    if not runner.prepare(task).ok:
                        raise RuntimeError(f"{task.name}: its reference does not build")
                    prepared.add(key)
                rng = np.random.default_rng([args.seed, round_no, zlib.crc32(key.encode())])
                start = time.time()
                for r in retime(runner, task, todo, round_no=round_no, out=out, rng=rng, deadline=deadline):
                    add(r)
                log.info("round %d/%d, %s: %d timed in %.0f s", round_no, 2 * args.max_rounds, task.name, len(todo),
                         time.time() - start)
    return timings, secs


def plot(path: str, table: dict[int, dict], goal: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, title in ((axes[0], "pairwise", "pairwise accuracy"), (axes[1], "top1", "top-1 score")):
        rs = sorted(table)
        ax.plot(rs, [table[r]["projected"][metric] for r in rs], "-", color="tab:blue", label="projected")
        got = [r for r in rs if table[r]["measured"]]
        ax.errorbar(got, [table[r]["measured"][metric] for r in got], yerr=[table[r]["se"][metric] for r in got],
                    fmt="o", color="tab:orange", capsize=3, label="measured (± SE over tasks)")
        if metric == "pairwise":
            ax.axhline(goal, color="grey", linestyle="--", label=f"goal {goal}")
        ax.set_xlabel("rounds per label (fresh processes)")
        ax.set_title(f"two independent labels: {title}")
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True, help="a dataset of experiments/make_dataset.py")
    p.add_argument("--tasks", type=int, default=12, help="tasks, spread over the dataset's order")
    p.add_argument("--per-task", type=int, default=40)
    p.add_argument("--max-rounds", type=int, default=3, help="N: labels of up to N rounds are measured (2N rounds)")
    p.add_argument("--project-to", type=int, default=16, help="project the ceiling up to this many rounds")
    p.add_argument("--goal", type=float, default=0.97, help="the pairwise ceiling to find the rounds for")
    p.add_argument("--max-minutes", type=float, help="stop timing after this long (run again to resume)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="prefix of the outputs: .jsonl (every timing), .md, .json, .png")
    args = p.parse_args(argv)
    if not os.path.exists(args.log):
        p.error(f"not found: {args.log}")
    if args.max_rounds < 1 or args.project_to < args.max_rounds:
        p.error("--max-rounds must be at least 1 and --project-to at least --max-rounds")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from autosearch.frontend.target import parse_target

    start = time.time()
    contents = read_log(args.log)
    picked = sample(contents, args.tasks, args.per_task, args.seed)
    target = parse_target(None)
    machine = fingerprint(target)
    try:
        timings, secs = measure(args, contents, picked, target, machine)
    except UserError as exc:
        p.error(str(exc))
    rounds = 2 * args.max_rounds
    complete = {key: np.array([[by_round[n] for n in range(1, rounds + 1)] for by_round in by_config.values()
                               if all(by_round.get(n) is not None for n in range(1, rounds + 1))])
                for key, by_config in timings.items()}
    complete = {key: t for key, t in complete.items() if len(t) >= 2}
    if len(complete) < len(picked):
        log.info("%d of %d tasks have every round: run the same command again to finish", len(complete), len(picked))
    if not complete:
        return 0
    rng = np.random.default_rng(args.seed)
    per_task = {key: {"measured": measured(t, args.max_rounds), "projected": projected(t, args.project_to, rng=rng)}
                for key, t in complete.items()}
    table: dict[int, dict] = {}
    for r in range(1, args.project_to + 1):
        got = [v["measured"][r] for v in per_task.values()] if r <= args.max_rounds else []
        table[r] = {
            "measured": {m: finite_mean([g[m] for g in got]) for m in METRICS} if got else {},
            "se": {m: standard_error([g[m] for g in got]) for m in METRICS}
            if len(got) > 1 else {m: 0.0 for m in METRICS},
            "projected": {m: float(np.mean([v["projected"][r][m] for v in per_task.values()])) for m in METRICS},
        }
    secs_per_timing = statistics.mean(secs) if secs else float("nan")  # per kernel and round, after the first
    dataset_records = len(labelled_trials(contents))
    hours_per_round = dataset_records * secs_per_timing / 3600
    needed = next((r for r in sorted(table) if table[r]["projected"]["pairwise"] >= args.goal), None)

    header = ["rounds per label", "pairwise", "pairwise, pairs > 10% apart", "Spearman", "top-1", "projected pairwise",
              "projected top-1", "re-timing the dataset"]
    rows = []
    for r, row in table.items():
        got = row["measured"]
        cells = ([f"{got[m]:.3f} ± {row['se'][m]:.3f}" for m in METRICS] if got else ["", "", "", ""])
        rows.append([r, *cells, f"{row['projected']['pairwise']:.3f}", f"{row['projected']['top1']:.3f}",
                     f"{r * hours_per_round:.1f} h"])
    lines = [markdown_table(header, rows, align="r" * len(header))]
    verdict = (f"The projected pairwise ceiling reaches {args.goal} at {needed} rounds per label: "
               f"{needed * hours_per_round:.0f} h of re-timing for the {dataset_records:,} records of the dataset."
               if needed else f"The projection does not reach {args.goal} within {args.project_to} rounds.")
    n_kernels = sum(len(t) for t in complete.values())
    text = "\n".join(lines) + (
        f"\n\n{verdict}\n\nTwo labels of the same kernels, each the median over R rounds of timing in a fresh "
        f"measuring process, the rounds disjoint; measured for R <= {args.max_rounds} from {rounds} rounds "
        f"(the mean over every pair of disjoint R-round subsets, then over tasks, ± the standard error over tasks), "
        f"projected by the Gaussian model of experiments/label_rounds.py. {len(complete)} tasks of {args.log}, "
        f"{n_kernels} kernels timed {rounds} times; {secs_per_timing:.2f} s per kernel and round "
        f"(a fresh process per task and round, kernels loaded built). {describe(machine)}; "
        f"{time.strftime('%Y-%m-%d')}.\n")
    write_text(f"{args.out}.md", text)
    write_json(f"{args.out}.json", {
        "log": args.log, "tasks": len(complete), "per_task": args.per_task, "rounds_timed": rounds,
        "machine": {k: v for k, v in machine.items() if k != "host"}, "secs_per_timing": secs_per_timing,
        "dataset_records": dataset_records,
        "hours_per_round": hours_per_round, "goal": args.goal, "rounds_for_goal": needed,
        "table": {str(r): row for r, row in table.items()},
        "by_task": {contents.tasks[k]["name"]: {kind: {str(r): v for r, v in d.items()} for kind, d in vals.items()}
                    for k, vals in per_task.items()},
        "wall_secs": time.time() - start})
    plot(f"{args.out}.png", table, args.goal)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
