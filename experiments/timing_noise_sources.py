"""Where does the re-timing noise of a label come from: the process, the call, or the repeats?

``experiments/measurement_noise.py`` finds two fresh-process timings of the same kernel far apart (a median
absolute log-ratio of 8-25% per task), while the 10 repeats of one timing agree within a few per cent and the
disagreement is not correlated in time (no slow drift of the machine). Something fixed for one timing call but
drawn anew for the next makes the difference. Candidates: the measuring process (its threads' placement on the
cores, its heap), or the call itself (the kernel loaded again, its arrays allocated again at other addresses).

This times a sample of each task's kernels of a dataset in ``--passes`` passes under two conditions, with the
dataset's label evaluator, every kernel loaded from the dataset's build cache:

- ``same process``: one fresh measuring process, every pass timing every kernel again (each call loads the
  kernel and allocates its arrays anew);
- ``fresh process``: a fresh measuring process for every pass.

Per kernel, the spread of its pass medians (standard deviation of their log) in each condition, against the
spread of the repeats within one call. If the same-process spread is as large as the fresh-process one, the
noise is drawn per call (placement of the arrays), and labels get cleaner by timing each kernel over several
calls (allocations); if it is small, the noise is drawn per process, and only more processes help.

    python -m experiments.timing_noise_sources --log experiments/results/dataset-study.jsonl --tasks 8 \\
        --per-task 12 --passes 3 --out experiments/results/timing_noise_sources

Writes OUT.md, OUT.json (and OUT.jsonl: every timing, as retime records). Time it alone on the machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

from autosearch.cost_models.features import labelled_trials
from autosearch.records import TuningLog, read_log
from autosearch.tables import markdown_table
from autosearch.types import Record
from experiments.lib.io import write_json, write_text
from experiments.lib.labels import LABEL_EVALUATOR, logged_settings, retime
from experiments.lib.machine import host_label

log = logging.getLogger("timing_noise_sources")
CONDITIONS = ("same process", "fresh process")


def spread(medians: list[float]) -> float:
    """Standard deviation of the log of a kernel's timings (about the relative spread)."""
    return float(np.std(np.log(medians), ddof=1)) if len(medians) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", required=True, help="a dataset of experiments/make_dataset.py (with LOG.builds)")
    p.add_argument("--tasks", type=int, default=8, help="tasks, spread over the dataset's order")
    p.add_argument("--per-task", type=int, default=12)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not os.path.exists(args.log):
        p.error(f"not found: {args.log}")
    build_cache = f"{args.log}.builds" if os.path.isdir(f"{args.log}.builds") else None

    from autosearch.frontend.target import parse_target
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.local import LocalRunner

    contents = read_log(args.log)
    evaluator = (logged_settings(contents) or (1, LABEL_EVALUATOR))[1]
    by_task: dict[str, list[Record]] = {}
    for rec, _ in labelled_trials(contents):
        by_task.setdefault(rec.task_key, []).append(rec)
    keys = list(by_task)
    keys = [keys[i] for i in np.linspace(0, len(keys) - 1, min(args.tasks, len(keys))).round().astype(int)]
    rng = np.random.default_rng(args.seed)
    timings: dict[str, dict[tuple[str, str], list[float]]] = {c: {} for c in CONDITIONS}
    cvs: list[float] = []
    start = time.time()
    runner = LocalRunner(target=parse_target(None), seed=args.seed, evaluator=evaluator, build_cache=build_cache)
    with TuningLog(f"{args.out}.jsonl") as out, runner:
        for n, key in enumerate(keys, start=1):
            task = TuningTask.from_json(contents.tasks[key])
            records = by_task[key]
            picked = [records[i] for i in sorted(rng.choice(len(records), min(args.per_task, len(records)),
                                                            replace=False))]
            out.write_task(contents.tasks[key])
            assert runner.prepare(task).ok
            runner.refresh()
            for c, condition in enumerate(CONDITIONS):
                for pass_no in range(args.passes):
                    for r in retime(runner, task, picked, round_no=100 * c + pass_no + 1, out=out, rng=rng,
                                    fresh=condition == "fresh process"):
                        if r.result.ok:
                            timings[condition].setdefault((key, repr(r.config)), []).append(r.result.median)
                            cvs.append(float(np.std(r.result.latencies) / np.mean(r.result.latencies)))
            log.info("task %d/%d %s done (%.0f s)", n, len(keys), task.name, time.time() - start)

    rows = {}
    for condition in CONDITIONS:
        spreads = [spread(v) for v in timings[condition].values() if len(v) == args.passes]
        rows[condition] = {"kernels": len(spreads), "median_spread": float(np.median(spreads)),
                           "mean_spread": float(np.mean(spreads))}
    rows["repeats within a call"] = {"kernels": len(cvs), "median_spread": float(np.median(cvs)),
                                     "mean_spread": float(np.mean(cvs))}
    machine = host_label()
    table = markdown_table(["timings of one kernel", "kernels", "spread (median)", "spread (mean)"],
                           [[name, r["kernels"], f"{r['median_spread']:.3f}", f"{r['mean_spread']:.3f}"]
                            for name, r in rows.items()], align="-rrr")
    text = table + (
        f"\n\nSpread: the standard deviation of the log of a kernel's {args.passes} pass medians (for the repeats: "
        f"their coefficient of variation within one call). {len(keys)} tasks of {args.log}, {args.per_task} kernels "
        f"each, evaluator repeat {evaluator.repeat}, min_repeat_ms {evaluator.min_repeat_ms}; {machine}; "
        f"{time.strftime('%Y-%m-%d')}, {time.time() - start:.0f} s.\n")
    write_text(f"{args.out}.md", text)
    write_json(f"{args.out}.json", {"log": args.log, "tasks": len(keys), "per_task": args.per_task,
                                    "passes": args.passes, "machine": machine, "rows": rows,
                                    "wall_secs": time.time() - start})
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
