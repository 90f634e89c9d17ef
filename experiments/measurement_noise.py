"""How well does a second measurement agree with the first? The ceiling of any cost model's ranking.

A cost model is scored against measured latencies, which are noisy: on a shared 2-core machine the
same kernel re-timed minutes later can differ by 10-20%. This re-times a random sample of each task's
valid records of a log (schedules replayed from their logged traces) and reports, per task, how a
perfect predictor of the re-timed latency would score against the log's label: pairwise accuracy,
Spearman's rho and top-1 score. No model can expect to beat these figures on the log's labels by more
than luck.

The label is what ``compare-models`` learns from (``autosearch.cost_models.features.labelled_trials``): the trials'
own timings, or, in a dataset that ``experiments/make_dataset.py --retime-rounds`` re-timed, the median over
its re-timing rounds. The second measurement is made the same way: ``--rounds`` fresh measuring processes
(default: the rounds the log's re-timing used, else 1), with the log's re-timing evaluator (else the
runner's default), its median over rounds compared with the label. For a re-timed dataset that is the
agreement of two independent labels of the same kind: the ceiling of the new labels.

    python -m experiments.measurement_noise --log experiments/results/dataset-yolo.jsonl --per-task 40 \\
        --out experiments/results/measurement_noise
    python -m experiments.measurement_noise --log experiments/results/dataset-study.jsonl --per-task 40 \\
        --out experiments/results/measurement_noise-study
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
import time

import numpy as np

from autosearch.cost_models.evaluate import pairwise_accuracy, spearman, top_k_score
from autosearch.cost_models.features import labelled_trials
from autosearch.measure.base import EvaluatorConfig
from autosearch.records import TuningLog, read_log
from autosearch.tables import markdown_table
from autosearch.types import Config, MeasureResult, Record
from experiments.lib.labels import logged_settings, retime

log = logging.getLogger("measurement_noise")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True)
    p.add_argument("--per-task", type=int, default=40, help="records re-timed per task (a random sample)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, help="re-timing rounds, each in a fresh process (default: the log's "
                   "re-timing rounds, else 1)")
    p.add_argument("--repeat", type=int, help="repeats per timing (default: the log's re-timing evaluator's, "
                   "else the runner's default)")
    p.add_argument("--min-repeat-ms", type=int, help="each repeat runs the kernel until it lasts this long")
    p.add_argument("--out", required=True, help="prefix of the outputs: .jsonl (re-time records), .md, .json")
    p.add_argument("--build-cache", help="directory of kernels built before (default: LOG.builds, which "
                   "make_dataset.py fills, if it exists)")
    args = p.parse_args(argv)
    build_cache = args.build_cache or (f"{args.log}.builds" if os.path.isdir(f"{args.log}.builds") else None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from autosearch.frontend.target import parse_target
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.local import LocalRunner

    contents = read_log(args.log)
    rounds, evaluator = logged_settings(contents) or (1, EvaluatorConfig())
    rounds = args.rounds or rounds
    evaluator = dataclasses.replace(evaluator, **{k: v for k, v in (("repeat", args.repeat),
                                                                    ("min_repeat_ms", args.min_repeat_ms)) if v})
    rng = np.random.default_rng(args.seed)
    by_task: dict[str, list[tuple[Record, float]]] = {}
    for rec, label in labelled_trials(contents):
        by_task.setdefault(rec.task_key, []).append((rec, label))
    rows = []
    start = time.time()
    target = parse_target(None)
    runner = LocalRunner(target=target, seed=args.seed, evaluator=evaluator, build_cache=build_cache)
    with TuningLog(f"{args.out}.jsonl") as out_log, runner:
        for key, labelled in by_task.items():
            task = TuningTask.from_json(contents.tasks[key])
            picked = [labelled[i] for i in sorted(rng.choice(len(labelled), min(args.per_task, len(labelled)),
                                                             replace=False))]
            out_log.write_task(contents.tasks[key])
            assert runner.prepare(task).ok
            results: dict[Config, list[MeasureResult]] = {}  # config -> its result in each round
            for round_no in range(1, rounds + 1):
                for r in retime(runner, task, [rec for rec, _ in picked], round_no=round_no, out=out_log, rng=rng):
                    results.setdefault(r.config, []).append(r.result)
            # the second label, made as the first: the median over rounds (records that failed a round left out)
            second_of = {c: statistics.median(x.median for x in res) for c, res in results.items()
                         if len(res) == rounds and all(x.ok for x in res)}
            both = [(label, second_of[rec.config]) for rec, label in picked if rec.config in second_of]
            first = np.array([1.0 / label for label, _ in both])
            second = np.array([1.0 / s for _, s in both])
            ratio = np.array([s / label for label, s in both])
            apart = first[:, None] > 1.1 * first[None, :]
            row = {
                "task": task.name, "n": len(both),
                "pairwise": pairwise_accuracy(first, second),
                # NaN when no two labels are 10% apart (a task whose configs all time alike)
                "pairwise_apart10": float(((second[:, None] > second[None, :])[apart]).mean()) if apart.any()
                else float("nan"),
                "spearman": spearman(first, second),
                "top1": top_k_score(first, second, 1),
                "median_ratio": float(np.median(ratio)),
                "abs_dev_median": float(np.median(np.abs(np.log(ratio / np.median(ratio))))),
            }
            rows.append(row)
            log.info("%s: %s", task.name, " ".join(f"{k}={v:.3f}" for k, v in row.items() if k != "task"))
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "task"}
    header = ["task", "re-timed", "pairwise", "pairwise, pairs > 10% apart", "Spearman", "top-1",
              "re-time / first (median)"]
    figures = ("pairwise", "pairwise_apart10", "spearman", "top1", "median_ratio")
    cells = [[r["task"], f"{r['n']:.0f}", *(f"{r[k]:.3f}" for k in figures)]
             for r in rows + [{"task": "**mean**", **mean}]]
    lines = [markdown_table(header, cells, align="-rrrrrr")]
    label = "labels (re-timed where a whole task was)" if logged_settings(contents) else "logged latencies"
    text = "\n".join(lines) + (
        f"\n\nThe {label} of {args.log} against a re-timing of {args.per_task} random records per task, the median "
        f"over {rounds} fresh measuring process(es) (repeat {evaluator.repeat}, min_repeat_ms "
        f"{evaluator.min_repeat_ms}), {time.strftime('%Y-%m-%d')}.\n")
    with open(f"{args.out}.md", "w") as fh:
        fh.write(text)
    with open(f"{args.out}.json", "w") as fh:
        json.dump({"log": args.log, "per_task": args.per_task, "rounds": rounds,
                   "evaluator": dataclasses.asdict(evaluator), "rows": rows, "mean": mean,
                   "wall_secs": time.time() - start}, fh, indent=1)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
