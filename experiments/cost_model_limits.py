"""Where held-out ranking is limited: features, noise, or data? Four checks on a cost-model dataset.

1. Within one task: fit the model on ``--train`` records of the task, rank the rest (no transfer needed).
2. Noise: the share of measured pairs closer than 10% in throughput, and the held-out pairwise accuracy
   on the pairs further apart than that.
3. By distance: held-out pairwise accuracy of pairs by their measured throughput ratio (1-1.1x, ...,
   > 5x): misordered pairs far apart are effects the features miss, not noise.
4. Data: leave-one-task-out over the tasks of the ``--log`` logs, training on their other tasks and,
   with ``--extra-log``, on every record of those logs too (records of the held-out task excluded).

    python -m experiments.cost_model_limits --log experiments/results/dataset-yolo.jsonl \\
        --log experiments/results/dataset-yolo-2.jsonl [--model xgb-rank@loop+asm]
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

from autosearch.cost_models.evaluate import pairwise_accuracy, task_metrics
from autosearch.cost_models.features import build_dataset, read_logs
from autosearch.search.cost_model import make_cost_model
from experiments.lib.loo import task_splits
from experiments.lib.stats import close_share, pairs_by_ratio

log = logging.getLogger("cost_model_limits")


RATIOS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, np.inf)


def held_out(X, y, groups, folds, model: str, seed: int, by_ratio: dict | None = None) -> dict[str, float]:
    """Mean held-out metrics over ``folds``, plus pairwise accuracy on pairs > 10% apart; ``by_ratio``
    collects (pairs, ordered right) per throughput-ratio bucket (a tied prediction counts half, as everywhere)."""
    rows = []
    for _, train, test in task_splits(groups, folds):
        pred = make_cost_model(model, seed=seed).fit(X[train], y[train], groups[train]).predict(X[test])
        if by_ratio is not None:
            for bucket, (pairs, ok) in pairs_by_ratio(y[test], pred, RATIOS).items():
                before = by_ratio.get(bucket, (0, 0.0))
                by_ratio[bucket] = (before[0] + pairs, before[1] + ok)
        metrics = task_metrics(y[test], pred, ranker=True)
        metrics.pop("rmse")  # scores, not throughputs, for a ranker
        metrics["apart10"] = pairwise_accuracy(y[test], pred, ratio=1.1)
        metrics["close_share"] = close_share(y[test], ratio=1.1)
        rows.append(metrics)
    return {k: float(np.nanmean([r[k] for r in rows])) for k in rows[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", action="append", required=True, help="a dataset whose tasks are held out (repeatable)")
    p.add_argument("--extra-log", action="append", default=[], help="more training records (repeatable)")
    p.add_argument("--model", default="xgb")
    p.add_argument("--train", type=int, default=120, help="within-task check: training records per task")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")

    kind = make_cost_model(args.model).input_kind
    held = read_logs(args.log)  # each log read once: its tasks are the folds, its records train
    data = build_dataset([*held, *read_logs(args.extra_log)], kinds=(kind,))
    own_keys = list(dict.fromkeys(r.task_key for c in held for r in c.trials()))
    folds = [data.task_keys.index(k) for k in own_keys if k in data.task_keys]
    X, y, groups = data.X(kind), data.y, data.groups

    rng = np.random.default_rng(args.seed)
    within = []
    for g in folds:
        idx = rng.permutation(np.flatnonzero(groups == g))
        train, test = idx[: args.train], idx[args.train:]
        model = make_cost_model(args.model, seed=args.seed).fit(X[train], y[train], groups[train])
        within.append(pairwise_accuracy(y[test], model.predict(X[test])))
    log.info("within one task (%d train records): pairwise accuracy median %.3f, range %.2f-%.2f",
             args.train, np.median(within), min(within), max(within))

    dataset_only = np.isin(groups, folds)
    by_ratio: dict = {}
    alone = held_out(X[dataset_only], y[dataset_only], groups[dataset_only], folds, args.model, args.seed, by_ratio)
    log.info("held out, trained on %s only (%d records): %s", " + ".join(args.log), int(dataset_only.sum()),
             " ".join(f"{k}={v:.3f}" for k, v in alone.items()))
    total = sum(p for p, _ in by_ratio.values())
    for (lo, hi), (pairs, ok) in by_ratio.items():
        log.info("pairs %.2f-%sx apart: %5.1f%% of pairs, ordered %.3f right", lo,
                 f"{hi:.2f}" if np.isfinite(hi) else "inf", 100 * pairs / max(1, total), ok / max(1, pairs))
    if args.extra_log:
        more = held_out(X, y, groups, folds, args.model, args.seed)
        log.info("held out, plus %d records of %d tasks from the extra logs: %s", int((~dataset_only).sum()),
                 len(data.task_keys) - len(folds), " ".join(f"{k}={v:.3f}" for k, v in more.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
