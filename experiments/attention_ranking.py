"""Which records let a ranker order the schedules of a fused attention and of a bf16 matmul?

A fused attention (:mod:`autosearch.tensor_units.attention`) is one kernel of two GEMMs on the AMX tiles and a
softmax between them; its configs' times spread 2-10x within a task, so a ranker matters there as anywhere. The
shipped model was trained on convolutions (fp32 on two CPU families, bf16 on AMX). This measures, on tasks of a
network no model here was trained on (YOLO12n's tuning logs), pairwise accuracy and top-1 within each task of
``xgb-rank`` on the loop features (the shipped model's family), trained on:

- ``convolutions``: the ``--base`` logs (the shipped model's training set before attentions);
- ``convolutions + attentions``: and the ``--attention`` logs (``experiments/attention_zoo.py``: attentions of ten
  other shapes, measured by ``train-model --measure``);
- ``attentions alone``: the ``--attention`` logs alone.

``--model NAME=DIR`` also scores model directories as they are (the shipped model before and after the attention
records), not refit. Test sets: the fused attentions of the ``--test`` logs, their bf16 matmuls (a run with the
matmuls as bf16 tasks, the attention unfused), and, for the two refit models that hold attentions, the attention
tasks of ``--attention`` held out by task (5 folds). Features come through the feature cache; the table and PNG
are rewritten whole.

    python -m experiments.attention_ranking --base experiments/results/dataset-pretrain.jsonl.gz \\
        --base experiments/results/dataset-pretrain-xeon.jsonl.gz \\
        --base experiments/results/dataset-bf16-xeon-amx.jsonl.gz \\
        --attention experiments/results/dataset-attention-xeon-amx.jsonl.gz \\
        --test experiments/results/user-yolo12n.onnx-10min-fused-attention-xeon-amx/log.jsonl.gz \\
        --test experiments/results/user-yolo12n.onnx-10min-fused-attention-seed2-xeon-amx/log.jsonl.gz \\
        --test experiments/results/user-yolo12n.onnx-10min-matmul-xeon-amx/log.jsonl.gz \
        --model "shipped before=OLD_DIR" --model "shipped now=cost_models/pretrained_model" --out attention-ranking
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.tensor_features import FOLDS, Records, fold_average, load, scores

log = logging.getLogger("attention_ranking")
MODELS = ("convolutions", "convolutions + attentions", "attentions alone")  # refit here
VARIANT = "bf16 records, with tensor features"  # all of the loop features: what train-model trains


def joined(parts: list[Records]) -> Records:
    """One record set of several, group numbers renumbered."""
    offsets = np.cumsum([0, *(len(p.keys) for p in parts[:-1])])
    return Records(X=np.vstack([p.X for p in parts]), y=np.concatenate([p.y for p in parts]),
                   groups=np.concatenate([p.groups + o for p, o in zip(parts, offsets)]),
                   keys=[k for p in parts for k in p.keys], bf16=np.concatenate([p.bf16 for p in parts]),
                   names=[n for p in parts for n in p.names])


def of_kind(records: Records, kind: str) -> np.ndarray:
    """The groups of ``records`` whose task is of this kind (a task name's part: ``attention_bf16``, ...)."""
    return np.asarray([g for g, name in enumerate(records.names) if kind in name], dtype=np.int64)


def held_out(train: Records, attention_groups: np.ndarray, *, seed: int) -> dict[str, float]:
    """5 folds by task over the attention groups: each fold ranked by a model of all the other groups."""
    order = np.random.default_rng(seed).permutation(attention_groups)
    parts = []
    for f in range(FOLDS):
        test = order[f::FOLDS]
        if len(test):
            fit = np.setdiff1d(np.arange(len(train.keys)), test)
            parts.append(scores(train, fit, train, test, VARIANT, seed=seed))
    return fold_average(parts)


def as_is(directory: str, test: Records, groups: np.ndarray) -> dict[str, float]:
    """A model directory's ranking of ``groups`` of ``test``, without any refit."""
    from autosearch.cost_models.evaluate import pairwise_accuracy, top_k_score
    from autosearch.cost_models.pretrained import load_model_dir

    rows = test.rows(groups)
    pred = load_model_dir(directory).predict(test.X[rows])
    y, g = test.y[rows], test.groups[rows]
    return {"pairwise": float(pairwise_accuracy(y, pred, g)),
            "top1": float(np.mean([top_k_score(y[g == k], pred[g == k], 1) for k in np.unique(g)])),
            "tasks": int(len(np.unique(g))), "records": int(len(y))}


def evaluate(base: Records, attention: Records, test: Records, *, seed: int,
             models: dict[str, str] | None = None) -> dict[str, dict[str, dict]]:
    from autosearch.tensor_units import attention as attention_unit
    from autosearch.tensor_units import matmul

    train_sets = {MODELS[0]: base, MODELS[1]: joined([base, attention]), MODELS[2]: attention}
    tests = {"YOLO12n attentions": of_kind(test, attention_unit.TASK_NAME),
             "YOLO12n bf16 matmuls": of_kind(test, matmul.TASK_NAME)}
    out: dict[str, dict[str, dict]] = {}
    for name, directory in (models or {}).items():
        out[name] = {split: as_is(directory, test, groups) for split, groups in tests.items() if len(groups)}
    for name, train in train_sets.items():
        every = np.arange(len(train.keys))
        out[name] = {split: scores(train, every, test, groups, VARIANT, seed=seed)
                     for split, groups in tests.items() if len(groups)}
        if name != MODELS[0]:
            out[name]["zoo attentions, held out"] = held_out(train, of_kind(train, attention_unit.TASK_NAME),
                                                             seed=seed)
    return out


def splits_of(results: dict[str, dict[str, dict]]) -> list[str]:
    """The test sets scored, in order of first appearance (the held-out zoo set only for models that hold it)."""
    return list(dict.fromkeys(s for per in results.values() for s in per))


def table(results: dict[str, dict[str, dict]]) -> str:
    splits = splits_of(results)
    rows = [[model, *(f"{fmt(per[s]['pairwise'], 3)} / {fmt(per[s]['top1'], 2)}" if s in per else "-"
                      for s in splits)] for model, per in results.items()]
    first = {s: next(per[s] for per in results.values() if s in per) for s in splits}
    sizes = "; ".join(f"{s}: {first[s]['tasks']} task groups, {first[s]['records']} records" for s in splits)
    return (markdown_table(["xgb-rank trained on", *(f"{s}: pairwise / top-1" for s in splits)], rows)
            + f"\n\n{sizes}. Chance is 0.5 pairwise.\n")


def plot(results: dict[str, dict[str, dict]], path: str,
         title: str = "ranking the schedules of fused attentions and bf16 matmuls") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = splits_of(results)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    width = 0.8 / len(results)
    for i, (model, per) in enumerate(results.items()):
        xs = np.arange(len(splits)) + (i - (len(results) - 1) / 2) * width
        ax.bar(xs, [per[s]["pairwise"] if s in per else 0 for s in splits], width, label=model)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(splits)), splits, fontsize=8)
    ax.set_ylim(0.3, 1.0)
    ax.set_ylabel("pairwise accuracy")
    ax.legend(fontsize=8, loc="upper right", title="xgb-rank trained on", title_fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ranking_main(argv: list[str] | None, *, description: str, added: str, helps: tuple[str, str, str], evaluate,
                 title: str) -> int:
    """The command line of a ranking experiment: ``--base`` logs, the ``--ADDED`` logs whose records are the
    question, ``--test`` logs, ``--model NAME=DIR`` scored as they are; ``evaluate(base, added, test, seed=,
    models=)`` gives the results, written as JSON, Markdown and PNG under ``--out``."""
    ap = argparse.ArgumentParser(description=description)
    for flag, text in zip(("--base", f"--{added}", "--test"), helps):
        ap.add_argument(flag, action="append", required=True, help=f"{text} (repeatable)")
    ap.add_argument("--out", required=True, help="experiments/results/OUT.{md,json,png}")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=DIR",
                    help="also score this model directory as it is (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    models = dict(spec.split("=", 1) for spec in args.model)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    added_logs = getattr(args, added.replace("-", "_"))
    results = evaluate(load(args.base), load(added_logs), load(args.test), seed=args.seed, models=models)
    publish(results_path(args.out), data={"base": args.base, added.replace("-", "_"): added_logs, "test": args.test,
                                          "models": models, "seed": args.seed, "results": results},
            text=table(results), plot=lambda png: plot(results, png, title))
    return 0


def main(argv: list[str] | None = None) -> int:
    return ranking_main(argv, description=__doc__.splitlines()[0], added="attention",
                        helps=("training log of convolutions", "training log of attentions",
                               "tuning log of the network to test on"),
                        evaluate=evaluate, title="ranking the schedules of fused attentions and bf16 matmuls")


if __name__ == "__main__":
    sys.exit(main())
