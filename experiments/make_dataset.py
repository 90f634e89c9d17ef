"""Measure a cost-model dataset: random and "tuned" configs of N YOLO tasks, into a tuning log.

A cost-model study needs, per task, both random configs (the spread a model must order) and good
ones (where search needs it to be right), measured by the real pipeline: import the model, build
each task's DecisionSpace, measure with the LocalRunner, log every trial with its applied trace.
"Tuned" configs are mutations of the best configs measured so far (one decision changed), a
search-free stand-in for what a tuner visits late in a run.

Labels: with ``--retime-rounds R`` (R > 0), once every task has its trials, every valid trial is re-timed R
times, each time in a fresh measuring process with more repeats and no slow-kernel shortcut
(``experiments/lib/labels.py``); the dataset's label of a record is then the median over those rounds
(``autosearch.cost_models.features.labelled_trials``), not its in-search timing. The settings go into the log (a run
header), and ``experiments/measurement_noise.py --log OUT`` re-labels a sample the same way to measure the
ceiling of the new labels. Each task header names the models the task is a layer of (``"models"``; a conv
shared by two networks is measured once): ``compare-models --split model`` holds out one model at a time.

The study dataset (10,800 records: 36 tasks of 4 models x 300; many hours on 2 cores, resumable: run it again
with ``--resume`` after an interruption or a ``--max-minutes`` stop). ``spread:N`` takes N conv2d tasks spread
evenly over the model's FLOPs range; a layer two networks share is one task, so the 8 + 8 + 10 + 12 picks below are
36 tasks, not 38 (tiny-YOLOv2 and YOLOv3-tiny share two):

    python -m experiments.make_dataset --model tiny-yolov2 --tasks spread:8 --model yolov3-tiny --tasks spread:8 \\
        --model yolov8n --tasks spread:10 --model yolo11n --tasks spread:12 --per-task 300 --retime-rounds 2 \\
        --out experiments/results/dataset-study.jsonl --resume --max-minutes 1440

Example (the committed test dataset, ~4-5 minutes on 2 cores):

    python -m experiments.make_dataset --model tiny-yolov2 --tasks 8,6,5,4 --per-task 40 \\
        --out tests/data/small_dataset.jsonl --seed 0

``--tasks 4`` (a count) takes the 4 cheapest conv2d tasks; ``spread:4`` 4 conv2d tasks spread evenly from
the cheapest to the costliest; a comma list takes those task indices (``--tasks 5,`` is task 5 alone).
``--model yolov8n:NHWC`` lowers that model's convolutions to NHWC (``run --layout``). Every kernel built is kept
in ``OUT.builds/`` (``--build-cache``): the re-timing rounds load them instead of building each one again, which
was half of each re-time; delete the directory once the dataset is complete. ``--resume`` continues
a log that an earlier, interrupted call wrote: tasks with ``--per-task`` trials are skipped, a partly measured
task goes on from its logged configs (none is measured twice), and the re-timing goes on from the re-times
logged. ``--model`` and ``--tasks`` repeat, pairwise, for a dataset of several models (the compare-models
dataset of the README, ~45 minutes on 2 cores):

    python -m experiments.make_dataset --model tiny-yolov2 --tasks 5,6,7,8,12,14 \\
        --model yolov8n --tasks 1,6,8,12,16,37,40 --per-task 180 \\
        --out experiments/results/dataset-yolo.jsonl --max-minutes 80

The training set of the shipped pre-trained cost model (13 YOLOv8n NHWC conv tasks and tiny-YOLOv2's 15 conv
tasks, direct and Winograd, 64 configs each; gzipped and committed; then ``train-model --log
experiments/results/dataset-pretrain.jsonl.gz --out cost_models/pretrained_model``):

    python -m experiments.make_dataset --model yolov8n:NHWC --tasks 0,1,2,4,5,7,10,12,17,19,27,29,31 \\
        --model tiny-yolov2 --tasks 14,13,12,11,10,9,8,7,6,5,4,3,2,1,0 --per-task 64 --seed 3 \\
        --out experiments/results/dataset-pretrain.jsonl --resume --max-minutes 45

and the second part of the compare-models dataset (three more Winograd kernels, two more direct ones; 11
minutes), read together with the first (``compare-models --log dataset-yolo.jsonl --log dataset-yolo-2.jsonl``):

    python -m experiments.make_dataset --model yolov8n --tasks 5,24,27,43,45 --per-task 180 \\
        --out experiments/results/dataset-yolo-2.jsonl --seed 1 --max-minutes 35
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time

import numpy as np

from autosearch.records import TuningLog, read_log
from autosearch.search.dataset import RANDOM_FRACTION, TaskSampler
from autosearch.types import Record
from experiments.lib.labels import LABEL_EVALUATOR, LABEL_ROUNDS, relabel, settings_json
from experiments.lib.tasks import select_tasks

log = logging.getLogger("make_dataset")


def measure_task(task, runner, tuning_log: TuningLog, *, per_task: int, random_fraction: float, batch: int,
                 rng: np.random.Generator, deadline: float, logged: list[Record] = (),
                 models: list[str] = ()) -> int:
    """Baseline, then ``per_task`` trials of one task (``logged``: its records from an interrupted call, which
    count and are not measured again; ``models``: the networks the task is a layer of, for its header); returns
    the number of trials logged now (:class:`autosearch.search.dataset.TaskSampler`, one task at a time)."""
    sampler = TaskSampler(task, runner, tuning_log, per_task=per_task, random_fraction=random_fraction, rng=rng,
                          logged=logged, models=models)
    start_done = sampler.done
    while not sampler.finished and time.time() < deadline:
        sampler.step(batch)
    measured = sampler.measured
    best = min(measured.values()) if measured else float("inf")
    log.info("%s: %d trials, %d ok, best %.1f GFLOPS (baseline %.2f GFLOPS)", task.name, sampler.done, len(measured),
             task.flops / best / 1e9 if measured else 0.0, sampler.baseline.gflops(task.flops))
    return sampler.done - start_done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", help="built-in model name or .onnx path (repeatable; "
                   "default tiny-yolov2)")
    p.add_argument("--tasks", action="append", help="per --model, in order: a count (cheapest conv2d "
                   "tasks) or task indices: 8,6,5 (default 4)")
    p.add_argument("--per-task", type=int, default=40, help="measured trials per task")
    p.add_argument("--random-fraction", type=float, default=RANDOM_FRACTION,
                   help="share of random configs, rest mutated")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", required=True, help="tuning log to write (must not exist, unless --resume)")
    p.add_argument("--resume", action="store_true", help="continue the log --out that an earlier call wrote")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-minutes", type=float, default=30.0, help="stop measuring after this wall time")
    p.add_argument("--retime-rounds", type=int, default=0,
                   help=f"re-time every valid trial this many times, each in a fresh process, for cleaner labels "
                        f"(0: the trials' own timings are the labels; the study uses {LABEL_ROUNDS})")
    p.add_argument("--retime-repeat", type=int, default=LABEL_EVALUATOR.repeat, help="repeats per re-time")
    p.add_argument("--retime-min-repeat-ms", type=int, default=LABEL_EVALUATOR.min_repeat_ms,
                   help="each repeat runs the kernel until it lasts this long")
    p.add_argument("--build-cache", help="directory keeping every built kernel, so the re-timing (and "
                   "measurement_noise.py) loads them instead of building again (default: OUT.builds; 'none': off)")
    args = p.parse_args(argv)
    build_cache = None if args.build_cache == "none" else (args.build_cache or f"{args.out}.builds")
    models = args.model or ["tiny-yolov2"]
    specs = args.tasks or ["4"] * len(models)
    if len(specs) != len(models):
        p.error(f"{len(models)} --model but {len(specs)} --tasks: give one --tasks per --model")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target
    from autosearch.measure.local import LocalRunner

    start = time.time()
    deadline = start + 60 * args.max_minutes
    target = parse_target(None)
    tasks: dict[str, object] = {}  # workload key -> task: a layer shared by two models is one task
    task_models: dict[str, list[str]] = {}
    for spec_model, spec in zip(models, specs):
        name, _, layout = spec_model.partition(":")
        for task in select_tasks(import_model(name, target, layout=layout.upper() or "NCHW").tasks, spec):
            tasks.setdefault(task.workload_key, task)
            task_models.setdefault(task.workload_key, [])
            if name not in task_models[task.workload_key]:
                task_models[task.workload_key].append(name)
    log.info("%d tasks: %s", len(tasks), ", ".join(f"{t.index}:{t.name} ({t.gflop:.3f} GFLOP, "
                                                   f"{'+'.join(task_models[k])})" for k, t in tasks.items()))
    logged: dict[str, list[Record]] = {}
    if args.resume and os.path.exists(args.out):
        for rec in read_log(args.out).records:
            logged.setdefault(rec.task_key, []).append(rec)
    total = 0
    with TuningLog(args.out, resume=args.resume) as tuning_log:
        evaluator = dataclasses.replace(LABEL_EVALUATOR, repeat=args.retime_repeat,
                                        min_repeat_ms=args.retime_min_repeat_ms)
        run = {"experiment": "make_dataset", "argv": sys.argv[1:] if argv is None else list(argv)}
        if args.retime_rounds:
            run["retime"] = settings_json(args.retime_rounds, evaluator)
        tuning_log.write_run(run)
        pending = [(i, key) for i, key in enumerate(tasks)
                   if sum(r.kind == "trial" for r in logged.get(key, ())) < args.per_task]
        if pending:  # (a resume that only re-times starts no trial runner)
            with LocalRunner(target=target, seed=args.seed, build_cache=build_cache) as runner:
                for i, key in pending:
                    # one generator per task, seeded by what the task has logged: a resumed task draws a fresh stream
                    rng = np.random.default_rng([args.seed, i, len(logged.get(key, ()))])
                    total += measure_task(tasks[key], runner, tuning_log, per_task=args.per_task,
                                          random_fraction=args.random_fraction, batch=args.batch, rng=rng,
                                          deadline=deadline, logged=logged.get(key, []), models=task_models[key])
        log.info("wrote %d trials of %d tasks to %s in %.0f s", total, len(tasks), args.out, time.time() - start)
        if args.retime_rounds > 0 and time.time() < deadline:
            with LocalRunner(target=target, seed=args.seed, evaluator=evaluator, build_cache=build_cache) as runner:
                retimed = relabel(read_log(args.out), tasks, runner, tuning_log, rounds=args.retime_rounds,
                                  seed=args.seed, deadline=deadline)
            log.info("re-timed %d records (%d rounds) in %.0f s in all", retimed, args.retime_rounds,
                     time.time() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
