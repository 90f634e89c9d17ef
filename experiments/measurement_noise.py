"""How well does a second measurement agree with the first? The ceiling of any cost model's ranking.

A cost model is scored against measured latencies, which are noisy: on a shared 2-core machine the
same kernel re-timed minutes later can differ by 10-20%. This re-times a random sample of each task's
valid records of a log in a fresh measuring process (same evaluator, schedules replayed from their
logged traces) and reports, per task, how a perfect predictor of the re-timed latency would score
against the logged one: pairwise accuracy, Spearman's rho and top-1 score. No model can expect to
beat these figures on the log's labels by more than luck.

    python experiments/measurement_noise.py --log experiments/results/dataset-yolo.jsonl --per-task 40 \\
        --out experiments/results/measurement_noise
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import numpy as np

from autosearch.records import Record, TuningLog, read_log
from cost_models.evaluate import pairwise_accuracy, spearman, top_k_score
from cost_models.features import valid_trials

log = logging.getLogger("measurement_noise")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True)
    p.add_argument("--per-task", type=int, default=40, help="records re-timed per task (a random sample)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="prefix of the outputs: .jsonl (re-time records), .md, .json")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.measure.local import LocalRunner
    from autosearch.target import parse_target
    from autosearch.task import TuningTask

    contents = read_log(args.log)
    rng = np.random.default_rng(args.seed)
    by_task: dict[str, list[Record]] = {}
    for rec in valid_trials(contents):
        by_task.setdefault(rec.task_key, []).append(rec)
    rows = []
    start = time.time()
    target = parse_target(None)
    with TuningLog(f"{args.out}.jsonl") as out_log, LocalRunner(target=target, seed=args.seed) as runner:
        for key, records in by_task.items():
            task = TuningTask.from_json(contents.tasks[key])
            picked = [records[i] for i in sorted(rng.choice(len(records), min(args.per_task, len(records)),
                                                            replace=False))]
            out_log.write_task(contents.tasks[key])
            assert runner.prepare(task).ok
            mods = []
            for rec in picked:
                sch = Schedule(task.mod)
                Trace.apply_json_to_schedule(rec.trace, sch)
                mods.append(sch.mod)
            results = runner.measure(task, mods)
            out_log.append([Record(kind="retime", task_key=key, task_name=rec.task_name, target=rec.target,
                                   config=rec.config, result=res, flops=rec.flops, trace=rec.trace)
                            for rec, res in zip(picked, results)])
            ok = [i for i, r in enumerate(results) if r.ok]
            first = np.array([1.0 / picked[i].latency for i in ok])
            second = np.array([1.0 / results[i].median for i in ok])
            ratio = np.array([results[i].median / picked[i].latency for i in ok])
            apart = first[:, None] > 1.1 * first[None, :]
            row = {
                "task": task.name, "n": len(ok),
                "pairwise": pairwise_accuracy(first, second),
                "pairwise_apart10": float(((second[:, None] > second[None, :])[apart]).mean()),
                "spearman": spearman(first, second),
                "top1": top_k_score(first, second, 1),
                "median_ratio": float(np.median(ratio)),
                "abs_dev_median": float(np.median(np.abs(np.log(ratio / np.median(ratio))))),
            }
            rows.append(row)
            log.info("%s: %s", task.name, " ".join(f"{k}={v:.3f}" for k, v in row.items() if k != "task"))
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "task"}
    header = ("| task | re-timed | pairwise | pairwise, pairs > 10% apart | Spearman | top-1 "
              "| re-time / first (median) |")
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows + [{"task": "**mean**", **mean}]:
        lines.append(f"| {r['task']} | {r['n']:.0f} | {r['pairwise']:.3f} | {r['pairwise_apart10']:.3f} | "
                     f"{r['spearman']:.3f} | {r['top1']:.3f} | {r['median_ratio']:.3f} |")
    text = "\n".join(lines) + (f"\n\nThe logged latency of {args.log} against a re-timing in a fresh process "
                               f"({args.per_task} random records per task), {time.strftime('%Y-%m-%d')}.\n")
    with open(f"{args.out}.md", "w") as fh:
        fh.write(text)
    with open(f"{args.out}.json", "w") as fh:
        json.dump({"log": args.log, "per_task": args.per_task, "rows": rows, "mean": mean,
                   "wall_secs": time.time() - start}, fh, indent=1)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
