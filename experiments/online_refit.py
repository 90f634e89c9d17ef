"""How should a pre-trained model take in a run's own measurements? A simulation of a run's first records.

A pre-trained model guides a run from its first batch and is refit after each one
(``autosearch.cost_models.pretrained``). This simulates that on a re-timed dataset without tuning anything: leave
one network out, pre-train on the others' tasks, then for each held-out task draw ``k`` of its records at random as
"what the run has measured", refit on them the way the product does, and rank the task's other records. Variants:

- ``xgb-rank pre-trained`` / ``online``: the booster alone, as shipped / after ``online_rounds`` trees grown on the
  ``k`` records on top of it (XGBoost's continued training: ``PretrainedModel.fit``);
- ``mlp-rank pre-trained`` / ``fine-tuned``: the network alone, as pre-trained / a copy trained on the ``k``
  records from its weights (a few dozen steps at a quarter of its learning rate);
- ``blend pre-trained`` / ``online`` / ``online + fine-tuned``: both, each scaled by its spread on the training
  records; ``online`` = the grown trees beside the network as pre-trained (what ``PretrainedModel`` does).

Every model is fitted with the product's classes (``PretrainedModel``, ``RankingMLP``); only the fine-tuning loop
is this script's (the product does not fine-tune: this measures whether it should). Each network's fold is stored
when it ends; a killed run continues at the next fold.

    python -m experiments.online_refit --log experiments/results/dataset-study.jsonl.gz \\
        --out experiments/results/online_refit
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
import time
from typing import Any

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import read_json, write_json, write_text

log = logging.getLogger("online_refit")
VARIANTS = ("xgb-rank pre-trained", "xgb-rank online", "mlp-rank pre-trained", "mlp-rank fine-tuned",
            "blend pre-trained", "blend online", "blend online + fine-tuned")


def fine_tuned(network, X: np.ndarray, y: np.ndarray, *, seed: int):
    """A copy of a fitted ``RankingMLP`` trained further on one task's records, from its weights and encoding."""
    from autosearch.cost_models._torch import fit_ranker, ranking_steps, session

    tuned = copy.deepcopy(network)
    Z = tuned.encoder_(X)
    steps = ranking_steps(len(Z), n_epochs=network.n_epochs, min_steps=20, max_steps=200,
                          per_step=network.tasks_per_step * network.records_per_task)
    with session(seed, network.n_jobs):
        net = tuned.network_
        fit_ranker(net, lambda rows: net(Z[rows])[:, 0], y, None, name="fine-tune", steps=steps,
                   learning_rate=network.learning_rate / 4, weight_decay=network.weight_decay,
                   grad_clip=network.grad_clip, tasks_per_step=1, records_per_task=network.records_per_task,
                   gain_scale=network.gain_scale, rng=np.random.default_rng(seed))
    return tuned


def run_fold(dataset, fold, ks: list[int], *, seed: int) -> dict[str, Any]:
    """Pre-train on the fold's training tasks; per held-out task and ``k``, every variant's pairwise and top-1."""
    import xgboost as xgb

    from autosearch.cost_models.evaluate import task_metrics
    from autosearch.cost_models.pretrained import PretrainedModel
    from autosearch.search.cost_model import make_cost_model

    X, y, groups = dataset.X("loop"), dataset.y, dataset.groups
    train = np.isin(groups, fold.train)
    start = time.perf_counter()
    blend = make_cost_model("blend@loop", seed=seed).fit(X[train], y[train], groups[train])
    trees, network = blend.members_
    booster = trees.estimator_.get_booster()
    params = {k: v for k, v in trees.estimator_.get_xgb_params().items()
              if v is not None and k not in ("n_jobs", "nthread", "random_state", "seed", "verbosity")}
    spreads = [float(s) for s in blend.spreads_]
    pretrain_secs = time.perf_counter() - start
    rng = np.random.default_rng(seed)
    rows_out: list[dict[str, Any]] = []
    for g in fold.test:
        rows = np.flatnonzero(groups == g)
        for k in ks:
            if len(rows) < k + 20:  # too few left to rank
                continue
            perm = rng.permutation(rows)
            seen, rest = perm[:k], perm[k:]
            seen_y = y[seen] / y[seen].max()  # a run normalises by its best so far
            online = PretrainedModel(booster=booster, manifest={"params": params, "spreads": spreads},
                                     directory="", network=network, seed=seed).fit(X[seen], seen_y)
            d_rest = xgb.DMatrix(X[rest].astype(np.float32))
            tree_pre, tree_online = booster.predict(d_rest), online.refit_.predict(d_rest)
            net_pre = network.predict(X[rest])
            net_tuned = fine_tuned(network, X[seen], seen_y, seed=seed).predict(X[rest])
            preds = {
                "xgb-rank pre-trained": tree_pre, "xgb-rank online": tree_online,
                "mlp-rank pre-trained": net_pre, "mlp-rank fine-tuned": net_tuned,
                "blend pre-trained": tree_pre / spreads[0] + net_pre / spreads[1],
                "blend online": online.predict(X[rest]),
                "blend online + fine-tuned": tree_online / spreads[0] + net_tuned / spreads[1],
            }
            for variant, pred in preds.items():
                m = task_metrics(y[rest], np.asarray(pred, dtype=np.float64), ranker=True)
                rows_out.append({"task": dataset.task_keys[g], "k": k, "variant": variant,
                                 "pairwise": m["pairwise"], "top1": m["top1"]})
    return {"fold": fold.name, "pretrain_secs": pretrain_secs, "train_records": int(train.sum()), "rows": rows_out}


def summarise(folds: list[dict[str, Any]], ks: list[int]) -> tuple[str, dict[str, Any]]:
    rows = [r for f in folds for r in f["rows"]]
    summary: dict[str, Any] = {}
    table = []
    for variant in VARIANTS:
        line = [variant]
        for k in ks:
            mine = [r for r in rows if r["variant"] == variant and r["k"] == k]
            pw, t1 = (float(np.mean([r[m] for r in mine])) if mine else float("nan") for m in ("pairwise", "top1"))
            summary[f"{variant} @{k}"] = {"pairwise": pw, "top1": t1, "tasks": len(mine)}
            line += [fmt(pw, 3), fmt(t1, 3)]
        table.append(line)
    header = ["variant"] + [f"{m} @{k}" for k in ks for m in ("pairwise", "top-1")]
    return markdown_table(header, table), summary


def plot(summary: dict[str, Any], ks: list[int], path: str) -> str:
    from autosearch.plots import figure, save

    fig, axes = figure(1, 2, size=(11, 4))
    for ax, metric in zip(axes.flat, ("pairwise", "top1")):
        width = 0.8 / len(ks)
        for i, k in enumerate(ks):
            values = [summary[f"{v} @{k}"][metric] for v in VARIANTS]
            ax.barh(np.arange(len(VARIANTS)) + i * width, values, height=width, label=f"{k} records measured")
        ax.set_yticks(np.arange(len(VARIANTS)) + 0.4 - width / 2, VARIANTS)
        ax.invert_yaxis()
        ax.set_xlim(0.6 if metric == "pairwise" else 0.5, 0.9)
        ax.set_xlabel(f"held-out {'pairwise accuracy' if metric == 'pairwise' else 'top-1'} (other records)")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(ks), fontsize=9)
    return save(fig, path, rect=(0, 0, 1, 0.93))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", action="append", required=True, help="re-timed dataset log(s) of at least 2 networks")
    p.add_argument("--out", required=True, help="prefix: OUT.json (folds, as they finish), OUT.md, OUT.png")
    p.add_argument("--k", default="16,48", help="records a run has measured when it refits (comma-separated)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    ks = [int(k) for k in args.k.split(",")]
    store = f"{args.out}.json"
    done = read_json(store) if os.path.exists(store) else {"k": ks, "seed": args.seed, "folds": []}
    if done["k"] != ks or done["seed"] != args.seed:
        p.error(f"{store} holds k={done['k']}, seed {done['seed']}: use another --out")

    from autosearch.cost_models.evaluate import comparison_dataset, comparison_folds

    dataset = comparison_dataset(args.log, ["blend@loop"], seed=args.seed, split="model")
    finished = {f["fold"] for f in done["folds"]}
    for fold in comparison_folds(dataset, "model"):
        if fold.name in finished:
            continue
        log.info("held-out network %s: pre-training on %d tasks", fold.name, len(fold.train))
        done["folds"].append(run_fold(dataset, fold, ks, seed=args.seed))
        write_json(store, done)
    from autosearch.frontend.target import cpu_model

    table, summary = summarise(done["folds"], ks)
    done["summary"] = summary
    done["machine"] = cpu_model()
    write_json(store, done)
    records = sum(f["train_records"] for f in done["folds"]) // max(1, len(done["folds"]))
    write_text(f"{args.out}.md", "\n".join([
        "# Online refit of a pre-trained model: a simulation of a run's first records", "",
        table, "",
        f"Leave one network out ({', '.join(f['fold'] for f in done['folds'])}; about {records} pre-training records "
        f"per fold), per held-out task: k of its records drawn at random (seed {args.seed}) as what the run has "
        "measured, the rest ranked; mean over tasks. Machine: " + done["machine"] + ". `python "
        "experiments/online_refit.py " + " ".join(f"--log {x}" for x in args.log) + f" --out {args.out}`.", ""]))
    plot(summary, ks, f"{args.out}.png")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
