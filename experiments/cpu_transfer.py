"""How well a ranker trained on one CPU's records orders another CPU's configs, per CPU (LLVM name), not per vendor.

``train-model`` reports held-out accuracy per CPU *family* (AMD, Intel). A Zen 3 and a Zen 4 are one family but not
one ISA: the Zen 3 has AVX2 alone, and its kernels are built for 256-bit vectors where the shipped model's AMD records
were built for 512. This sets each CPU's records beside models trained on its own other tasks ("same"), on each other
CPU's ("from X"), on every other CPU's ("from the others": what a model that never saw this CPU, as the shipped
one, can do) and on all. Folds are by task (a task's records on every CPU in one fold), fp32 records only::

    python -m experiments.cpu_transfer --log experiments/results/dataset-pretrain.jsonl.gz \\
        --log experiments/results/dataset-pretrain-xeon.jsonl.gz \\
        --log experiments/results/user-yolov8n-15min-seed1-zen3/log.jsonl.gz ... --out cpu-transfer

``--log LABEL=PATH`` files a log under ``LABEL`` instead of its CPU: the records a guided run measured (the configs
its model picked) beside a dataset's (configs drawn at random), say. Writes ``experiments/results/OUT.md``, ``.json``
and ``.png``. Accuracy is pairwise (the share of a task's config
pairs put in their measured order) over all pairs and over pairs more than 10% apart (closer ones are mostly noise);
each CPU's figure is the mean over folds weighted by tasks. Featurising is cached (the feature store), so a second
run takes the training time alone.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from autosearch.cost_models.evaluate import pairwise_accuracy
from autosearch.cost_models.features import read_logs
from autosearch.cost_models.loop_features import FEATURE_NAMES
from autosearch.cost_models.pretrained import FEATURES, log_cpu, ranking_set
from autosearch.search.cost_model import make_cost_model
from autosearch.tables import fmt, markdown_table
from autosearch.tensor_units.cpu import family_of_mcpu
from experiments.lib.io import publish, results_path

log = logging.getLogger("cpu_transfer")


def sources(cpu_of_row: np.ndarray, tested: str, without: str = "") -> dict[str, np.ndarray]:
    """The training rows of each column for CPU ``tested``; with ``without``, also every CPU's but that one (a
    model as the shipped one was before that CPU's records joined it)."""
    cpus = sorted(set(cpu_of_row.tolist()))
    out = {"same": cpu_of_row == tested}
    out.update({f"from {c}": cpu_of_row == c for c in cpus if c != tested})
    if len(cpus) > 2:
        out["from the others"] = cpu_of_row != tested
    if without and without != tested and without in cpus:
        out[f"all but {without}"] = cpu_of_row != without
    out["all"] = np.ones(len(cpu_of_row), dtype=bool)
    return out


def column_order(names, cpus) -> list[str]:
    """Columns in one order for every row: own, each other CPU, the others, all but one, all."""
    order = ["same", *(f"from {c}" for c in cpus), "from the others"]
    return sorted(set(names), key=lambda n: (order.index(n) if n in order else len(order) + (n == "all"), n))


def transfer(X, y, groups, task_of_group, cpu_of_group, fold_of_task, *, seed: int, model: str,
             without: str = "") -> dict:
    """Per tested CPU and training source: held-out pairwise accuracy (all pairs; pairs > 10% apart) and tasks, on
    the folds of ``fold_of_task`` (``RankingSet.task_folds``, as train-model folds)."""
    row_fold = fold_of_task[task_of_group[groups]]
    cpu_of_row = cpu_of_group[groups]
    out: dict[str, dict] = {}
    for tested in sorted(set(cpu_of_group.tolist())):
        columns: dict[str, list[tuple[float, float, int]]] = {}
        for name, rows in sources(cpu_of_row, tested, without).items():
            for fold in np.unique(fold_of_task).tolist():
                test = (row_fold == fold) & (cpu_of_row == tested)
                train = rows & (row_fold != fold)
                if not test.any() or len(np.unique(groups[train])) < 2:
                    continue
                pred = make_cost_model(model, seed=seed).fit(X[train], y[train], groups[train]).predict(X[test])
                columns.setdefault(name, []).append((
                    pairwise_accuracy(y[test], pred, groups[test]),
                    pairwise_accuracy(y[test], pred, groups[test], ratio=1.1),
                    len(np.unique(groups[test]))))
                log.info("%s, %s, fold %d: %.3f", tested, name, fold, columns[name][-1][0])
        out[tested] = {name: {"pairwise": _mean([a for a, _, _ in v], [n for *_, n in v]),
                              "pairwise_10pct": _mean([b for _, b, _ in v], [n for *_, n in v]),
                              "groups": int(sum(n for *_, n in v))}
                       for name, v in columns.items()}
    return out


def _mean(values, weights) -> float:
    keep = [(v, w) for v, w in zip(values, weights) if np.isfinite(v)]
    return float(np.average([v for v, _ in keep], weights=[w for _, w in keep])) if keep else float("nan")


def table(result: dict, counts: dict[str, tuple[int, int, int]], labels: set[str]) -> str:
    """The accuracy table; ``labels`` are the rows named by their CPU (the others by a ``--log LABEL=``)."""
    names = column_order((n for cols in result.values() for n in cols), list(result))
    rows = []
    for cpu, cols in result.items():
        logs, records, tasks = counts[cpu]
        rows.append([f"{family_of_mcpu(cpu)} {cpu}" if cpu in labels else cpu, f"{logs} / {records:,} / {tasks}",
                     *[f"{fmt(cols[n]['pairwise'], 3)} ({fmt(cols[n]['pairwise_10pct'], 3)})" if n in cols else "-"
                       for n in names]])
    return markdown_table(["tested on", "logs / records / tasks", *names], rows)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = column_order((n for cols in result.values() for n in cols), list(result))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + i * width for j in range(len(result))]
        ax.bar(xs, [result[c].get(name, {}).get("pairwise", np.nan) for c in result], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(result))], list(result))
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("held-out pairwise accuracy")
    ax.set_title("ranking a CPU's configs, by the CPUs the model was trained on")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", action="append", required=True,
                    help="a tuning log or dataset (repeat); LABEL=PATH files it under LABEL, not its CPU")
    ap.add_argument("--out", default="cpu-transfer", help="results name under experiments/results/")
    ap.add_argument("--model", default=f"xgb-rank@{FEATURES}", help="the ranker (the shipped model's family)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--without", default="", help="add a column trained on every CPU's records but this one's")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    labelled = [spec.split("=", 1) if "=" in spec else ["", spec] for spec in args.log]
    contents = read_logs([path for _, path in labelled])
    data = ranking_set(contents, on_progress=lambda done, total: log.info("featurised %d of %d", done, total)
                       if done == total or done % 500 < 20 else None)
    cpus = np.asarray([label or log_cpu(c) for (label, _), c in zip(labelled, contents)])
    cpu_of_group = cpus[data.log_of_group]
    # fp32 records only: a model of fp32 schedules cannot rank those tensorised onto a bf16 unit, nor the reverse
    fp32 = data.X[:, FEATURE_NAMES.index("tensor_unit")] == 0
    X, y, groups = data.X[fp32], data.y[fp32], data.groups[fp32]
    result = transfer(X, y, groups, data.task_of_group, cpu_of_group, data.task_folds(args.folds, seed=args.seed),
                      seed=args.seed, model=args.model, without=args.without)
    counts = {cpu: (int((cpus == cpu).sum()), int((cpu_of_group[groups] == cpu).sum()),
                    len(set(data.task_of_group[np.unique(groups[cpu_of_group[groups] == cpu])].tolist())))
              for cpu in result}
    text = (f"**Held-out pairwise accuracy by the CPU tested on and the CPUs trained on** (`{args.model}`, "
            f"{args.folds} folds by task, seed {args.seed}, fp32 records; in brackets: pairs more than 10% "
            f"apart)\n\n{table(result, counts, set(cpus) - {label for label, _ in labelled})}\n\nLogs: "
            + ", ".join(f"`{p}`" for p in args.log) + "\n")
    base = results_path(args.out)
    publish(base, data={"model": args.model, "folds": args.folds, "seed": args.seed, "logs": args.log,
                        "without": args.without, "counts": counts, "result": result},
            text=text, plot=lambda p: plot(result, p))


if __name__ == "__main__":
    main()
