"""Can a ranker trained on measured records guide the tasks tensorised onto a bf16 unit, and what do the features
of the tensorised block (``autosearch.cost_models.loop_features``: ``tensor_*``) buy it?

The loop features read a loop body's stores; a block tensorised onto AMX or the AVX512-BF16 dot product has a call
for a body, so before those features the GEMM that does a bf16 task's work was invisible to every cost model, and
the shipped model, trained on fp32 schedules, did not guide such tasks. This measures, on the bf16 tasks of tuning
logs (pairwise accuracy and top-1 within each task, the product's ``xgb-rank`` on the loop features):

- ``fp32 records``: a model trained on the fp32 tasks alone (what the shipped model was);
- ``bf16 records, without tensor features``: trained on every task, the ``tensor_*`` columns dropped;
- ``bf16 records, with tensor features``: the same, all columns (what ``train-model`` now trains).

``--dataset OUT`` also writes the bf16 tasks' records of ``--train`` (run and task headers, trials) as one gzipped log:
the bf16 part of the shipped model's training set (``docs/cost-models.md``).

``--runs NAME=LOG ...`` instead compares runs of one model (e.g. guided and unguided, from
``experiments/time_to_quality.py``; a NAME given several times: its runs of several seeds, the i-th of each name
compared): on the bf16 tasks both logs hold, the fastest config after n trials of the task
over the fastest either run found (geometric mean over the tasks that got n trials in every run), the search-level
view that an end-to-end figure blurs.

Two splits: 5 folds by task within ``--train`` logs (each held-out task's records predicted by a model trained on
the others' tasks), and, with ``--test``, a model trained on all of ``--train`` ranking the bf16 tasks of the
``--test`` logs that ``--train`` does not hold (another network: YOLO11n against YOLOv8n + tiny-YOLOv2). Features
come through the feature cache, so a second run costs seconds; the table and PNG are rewritten whole.

    python -m experiments.tensor_features \\
        --train experiments/results/user-yolov8n-25min-zero-xeon-amx-v11/log.jsonl.gz \\
        --train experiments/results/user-tiny-yolov2-quickstart-xeon-amx-v7/log.jsonl.gz \\
        --test experiments/results/user-yolo11n-15min-zero-xeon-amx-v2/log.jsonl.gz --out tensor-features-amx
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path

log = logging.getLogger("tensor_features")
VARIANTS = ("fp32 records", "bf16 records, without tensor features", "bf16 records, with tensor features")
FOLDS = 5


@dataclass
class Records:
    """Loop features of every valid record of some logs, one ranking group per (log, task)."""

    X: np.ndarray
    y: np.ndarray  # throughput normalised within its group
    groups: np.ndarray
    keys: list[str]  # per group: the task's workload key
    bf16: np.ndarray  # per group: the task is tensorised onto a bf16 unit
    names: list[str] = field(default_factory=list)  # per group: the task's name

    def rows(self, groups: np.ndarray) -> np.ndarray:
        return np.isin(self.groups, groups)


def load(logs: list[str]) -> Records:
    from autosearch.cost_models.feature_store import as_store
    from autosearch.cost_models.features import build_dataset, read_logs
    from autosearch.cost_models.loop_features import FEATURE_NAMES

    unit = FEATURE_NAMES.index("tensor_unit")
    Xs, ys, gs, keys, names = [], [], [], [], []
    for contents in read_logs(logs):
        part = build_dataset([contents], kinds=("loop",), store=as_store(None))
        if not len(part):
            continue
        Xs.append(part.X("loop"))
        ys.append(part.y)
        gs.append(part.groups + len(keys))
        keys.extend(part.task_keys)
        names.extend(part.task_names.get(k, "") for k in part.task_keys)
    X, groups = np.vstack(Xs), np.concatenate(gs)
    bf16 = np.asarray([bool(np.any(X[groups == g, unit] > 0)) for g in range(len(keys))])
    return Records(X=X, y=np.concatenate(ys), groups=groups, keys=keys, bf16=bf16, names=names)


def write_bf16_records(logs: list[str], out: str) -> tuple[int, int]:
    """The lines of ``logs`` that belong to tasks whose operands are bf16 (run headers, their task headers and
    trials), into the gzipped log ``out``; returns (tasks, trials)."""
    import gzip
    import json

    tasks: set[str] = set()
    trials = 0
    tmp = f"{out}.tmp"
    with gzip.open(tmp, "wt") as dst:
        for path in logs:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as src:
                for line in src:
                    record = json.loads(line)
                    kind = record.get("kind")
                    if kind == "task" and any(dtype == "bfloat16" for _, dtype in record["task"]["args"]):
                        tasks.add(record["task"]["workload_key"])
                    elif kind != "run" and (record.get("task") or {}).get("key") not in tasks:
                        continue
                    trials += kind == "trial"
                    dst.write(line if line.endswith("\n") else line + "\n")
    import os

    os.replace(tmp, out)
    return len(tasks), trials


def columns(variant: str) -> np.ndarray:
    from autosearch.cost_models.loop_features import FEATURE_NAMES

    keep = [i for i, name in enumerate(FEATURE_NAMES)
            if variant.endswith("with tensor features") or not name.startswith("tensor_")]
    return np.asarray(keep)


def scores(train: Records, train_groups: np.ndarray, test: Records, test_groups: np.ndarray, variant: str, *,
           seed: int) -> dict[str, float]:
    """Fit ``variant`` on ``train_groups`` of ``train``; pairwise accuracy and top-1 on ``test_groups`` of ``test``."""
    from autosearch.cost_models.evaluate import pairwise_accuracy, top_k_score
    from autosearch.search.cost_model import make_cost_model

    if variant == "fp32 records":
        train_groups = train_groups[~train.bf16[train_groups]]
    cols = columns(variant)
    fit_rows, test_rows = train.rows(train_groups), test.rows(test_groups)
    model = make_cost_model("xgb-rank@loop", seed=seed)
    model.fit(train.X[fit_rows][:, cols], train.y[fit_rows], train.groups[fit_rows])
    pred = model.predict(test.X[test_rows][:, cols])
    y, groups = test.y[test_rows], test.groups[test_rows]
    top1 = [top_k_score(y[groups == g], pred[groups == g], 1) for g in np.unique(groups)]
    return {"pairwise": float(pairwise_accuracy(y, pred, groups)), "top1": float(np.mean(top1)),
            "tasks": int(len(np.unique(groups))), "records": int(len(y))}


def fold_average(parts: list[dict[str, float]]) -> dict[str, float]:
    """Several folds' :func:`scores` as one: accuracies weighted by each fold's tasks, sizes summed."""
    w = np.asarray([p["tasks"] for p in parts], dtype=np.float64)
    return {"pairwise": float(np.average([p["pairwise"] for p in parts], weights=w)),
            "top1": float(np.average([p["top1"] for p in parts], weights=w)),
            "tasks": int(w.sum()), "records": int(sum(p["records"] for p in parts))}


def within(records: Records, *, seed: int) -> dict[str, dict[str, float]]:
    """5 folds by task over ``records``: each fold's bf16 tasks ranked by a model trained on the other folds."""
    tasks = sorted(set(records.keys))
    order = np.random.default_rng(seed).permutation(len(tasks))
    fold_of_task = {tasks[t]: i % FOLDS for i, t in enumerate(order)}
    fold = np.asarray([fold_of_task[k] for k in records.keys])
    out = {}
    for variant in VARIANTS:
        parts = []
        for f in range(FOLDS):
            test = np.flatnonzero((fold == f) & records.bf16)
            if len(test):
                parts.append(scores(records, np.flatnonzero(fold != f), records, test, variant, seed=seed))
        out[variant] = fold_average(parts)
    return out


def across(train: Records, test: Records, *, seed: int) -> dict[str, dict[str, float]]:
    """A model of all of ``train`` ranking the bf16 tasks of ``test`` that ``train`` does not hold."""
    seen = set(train.keys)
    test_groups = np.flatnonzero(test.bf16 & np.asarray([k not in seen for k in test.keys]))
    every = np.arange(len(train.keys))
    return {variant: scores(train, every, test, test_groups, variant, seed=seed) for variant in VARIANTS}


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    splits = list(results)
    header = ["model trained on", *(f"{s}: pairwise / top-1" for s in splits)]
    rows = [[variant, *(f"{fmt(results[s][variant]['pairwise'], 3)} / {fmt(results[s][variant]['top1'], 2)}"
                        for s in splits)] for variant in VARIANTS]
    sizes = "; ".join(f"{s}: {results[s][VARIANTS[0]]['tasks']} bf16 tasks, {results[s][VARIANTS[0]]['records']} "
                      "records" for s in splits)
    return markdown_table(header, rows) + f"\n\n{sizes}. Chance is 0.5 pairwise.\n"


def plot(results: dict[str, dict[str, dict[str, float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(results)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(VARIANTS)
    for i, variant in enumerate(VARIANTS):
        xs = np.arange(len(splits)) + (i - (len(VARIANTS) - 1) / 2) * width
        ax.bar(xs, [results[s][variant]["pairwise"] for s in splits], width, label=variant)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(splits)), splits)
    ax.set_ylim(0.4, 1.0)
    ax.set_ylabel("pairwise accuracy, bf16 tasks")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("ranking schedules tensorised onto a bf16 unit")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


TRIAL_COUNTS = (2, 4, 6, 8, 12, 16, 24, 32, 48)


def bf16_trials(path: str) -> dict[str, list[float]]:
    """Per task of a tuning log tensorised onto a bf16 unit (a convolution, matmul or fused attention:
    ``autosearch.search.dataset.tensorised``; the bf16 pools and copies between them are not tensorised), its trials'
    latencies in order (inf where a trial failed)."""
    from autosearch.records import read_log
    from autosearch.search.dataset import tensorised

    contents = read_log(path)
    bf16 = {key for key, header in contents.tasks.items() if tensorised(header.get("name", ""))}
    out: dict[str, list[float]] = {}
    for r in contents.trials():
        if r.task_key in bf16:
            out.setdefault(r.task_key, []).append(r.result.median if r.ok else float("inf"))
    return out


def seeded_runs(specs: list[str]) -> dict[str, dict[str, list[float]]]:
    """``NAME=LOG`` specs -> per name, its logs' bf16 trials; a name given again (another seed of that run) adds
    its tasks as tasks of their own, keyed by the occurrence (``KEY#1``), so the i-th seeds of the names compare."""
    runs: dict[str, dict[str, list[float]]] = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        seen = runs.setdefault(name, {})
        nth = len({key.rpartition("#")[2] for key in seen})
        seen.update({f"{key}#{nth}": trials for key, trials in bf16_trials(path).items()})
    return runs


def convergence(runs: dict[str, dict[str, list[float]]]) -> dict[str, dict[int, tuple[float, int]]]:
    """Per run and trial count n: (geometric mean over the tasks every run gave n trials of best-after-n over the
    best any run found, those tasks)."""
    keys = set.intersection(*(set(trials) for trials in runs.values()))
    out: dict[str, dict[int, tuple[float, int]]] = {name: {} for name in runs}
    for n in TRIAL_COUNTS:
        tasks = [k for k in keys if all(len(trials[k]) >= n for trials in runs.values())]
        if not tasks:
            continue
        best = {k: min(min(trials[k]) for trials in runs.values()) for k in tasks}
        for name, trials in runs.items():
            ratios = [min(trials[k][:n]) / best[k] for k in tasks]
            out[name][n] = (float(np.exp(np.mean(np.log(ratios)))), len(tasks))
    return out


def convergence_table(conv: dict[str, dict[int, tuple[float, int]]]) -> str:
    counts = sorted({n for per in conv.values() for n in per})
    first = next(iter(conv.values()))
    header = ["run", *(f"{n} trials ({first[n][1]} tasks)" for n in counts)]
    rows = [[name, *(f"{per[n][0]:.3f}x" for n in counts)] for name, per in conv.items()]
    return (markdown_table(header, rows) + "\n\nThe fastest config after n trials of a bf16 task over the fastest any "
            "run found for it (geometric mean over the tasks every run gave n trials; 1.000x: found by then).\n")


def plot_convergence(conv: dict[str, dict[int, tuple[float, int]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, per in conv.items():
        counts = sorted(per)
        ax.plot(counts, [per[n][0] for n in counts], marker="o", label=name)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("trials of the task")
    ax.set_ylabel("best so far / best found")
    ax.set_title("bf16 tasks: how close each run's search got, by trials")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", action="append", default=[], help="tuning log (repeatable)")
    ap.add_argument("--runs", nargs="+", metavar="NAME=LOG", help="compare these runs' search on their bf16 tasks")
    ap.add_argument("--test", action="append", default=[], help="tuning log of another network (repeatable)")
    ap.add_argument("--out", required=True, help="experiments/results/OUT.{md,json,png}")
    ap.add_argument("--dataset", help="also write the bf16 tasks' records of --train to this gzipped log")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    base = results_path(args.out)
    if args.runs:
        runs = seeded_runs(args.runs)
        conv = convergence(runs)
        publish(base, data={"runs": args.runs, "convergence": {name: {str(n): v for n, v in per.items()}
                                                               for name, per in conv.items()}},
                text=convergence_table(conv), plot=lambda png: plot_convergence(conv, png))
        return 0
    if not args.train:
        ap.error("--train (or --runs) is required")
    if args.dataset:
        n_tasks, n_trials = write_bf16_records(args.train, args.dataset)
        log.info("%s: %d trials of %d bf16 tasks", args.dataset, n_trials, n_tasks)
    train = load(args.train)
    results = {"held-out tasks": within(train, seed=args.seed)}
    if args.test:
        results["another network"] = across(train, load(args.test), seed=args.seed)
    publish(base, data={"train": args.train, "test": args.test, "seed": args.seed, "results": results},
            text=table(results), plot=lambda png: plot(results, png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
