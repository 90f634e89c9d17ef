"""Where a tuned model's milliseconds go, kernel by kernel, beside OpenVINO's own per-node profile: the library's
``profile`` (:mod:`autosearch.deploy.profile`; ``python -m autosearch profile``), written to the results with the
CPU named, and what only an experiment needs beside it::

    python -m experiments.layer_profile --model tiny-yolov2 \\
        --db experiments/results/user-tiny-yolov2-quickstart-xeon-amx-v4/db --out layer-profile-tiny-yolov2

Writes ``experiments/results/OUT.md`` (per category, per kernel / node, the convolutions layer by layer) and
``OUT.png``. ``--target`` and ``--onednn-max-isa`` profile a stand-in (a database tuned for a CPU with fewer features,
OpenVINO's oneDNN capped alike: ``experiments/user_path.py``).

With ``--log`` (the run's tuning log) each kernel's time in the model is also set beside what tuning measured for it
(its task's best latency, per call, times the calls a forward pass makes: the run's own estimate of the model);
``--retime`` then times each task's best config again alone, warm as MetaSchedule times it (repeats of 20 ms, the caches
flushed before each repeat, so every call after the first finds the weights in cache) and cold (one call per
flushed repeat, as a layer meets its weights in the model), the two taking turns in three rounds of fresh
processes::

    python -m experiments.layer_profile --model yolov8n --db .../db --log .../log.jsonl --retime --out ...
"""

from __future__ import annotations

import argparse
import os
import sys

from experiments.lib.io import results_path, write_text
from experiments.lib.machine import host_label


def retime_rows(profile, log_path: str) -> None:
    """Each of ``profile``'s kernels beside its task as tuned (``profile.as_tuned``) given two more columns: its
    task's best config timed alone again now, warm and cold (:func:`retimed`), times its calls."""
    from autosearch.records import read_log

    log = read_log(log_path)
    rows = profile.as_tuned
    for row, (warm, cold) in zip(rows, retimed(log, [log.best(r.key) for r in rows])):
        row.extra["alone, warm"], row.extra["alone, cold"] = warm * 1e3 * row.calls, cold * 1e3 * row.calls


RETIME_ROUNDS = 3  # one timing of a kernel moved 2x between back-to-back probes on a 2-vCPU VM (docs/results.md)


def retimed(log, records: list, rounds: int = RETIME_ROUNDS) -> list[tuple[float, float]]:
    """(warm, cold) seconds of each record's config, built from its trace and timed alone, warm (MetaSchedule's
    evaluator) and cold (one call per repeat, caches flushed before each), scored over ``rounds`` rounds in fresh
    processes, the two ways taking turns (:func:`experiments.lib.retime.settings_in_turns`; ``inf`` if one failed)."""
    import json

    from autosearch.api import MeasureOptions
    from autosearch.frontend.task import TuningTask
    from autosearch.tensor_units.intrinsics import register_for
    from experiments.lib.retime import schedule, settings_in_turns

    tasks = {r.task_key: TuningTask.from_json(log.tasks[r.task_key]) for r in records}
    jobs = []
    for record in records:
        register_for(json.dumps(record.trace))  # the tensor intrinsics its trace names
        jobs.append((tasks[record.task_key], schedule(tasks[record.task_key], record.trace)))
    # warm: 5 repeats of 20 ms (run --min-repeat-ms 20); cold: run's default, one call per flushed repeat
    settings = {"warm": MeasureOptions(repeat=5, min_repeat_ms=20), "cold": MeasureOptions()}
    secs = settings_in_turns(next(iter(tasks.values())).target, settings, jobs, rounds,
                             progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    return [(secs["warm"][i], secs["cold"][i]) for i in range(len(records))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="built-in model or .onnx")
    p.add_argument("--db", required=True, help="the tuned database (export's output)")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and OUT.png")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5, help="the runtimes take turns in this many rounds of passes")
    p.add_argument("--top", type=int, default=15, help="kernels / nodes listed per runtime")
    p.add_argument("--log", help="the run's tuning log: each kernel in the model beside its task as tuned")
    p.add_argument("--retime", action="store_true", help="with --log: time each task's best config alone again, "
                   "warm and cold")
    p.add_argument("--target", help="the target the database was tuned for (a JSON dict), when it is not the host's: "
                   "a CPU stood in for with fewer features (experiments/user_path.py --target)")
    p.add_argument("--onednn-max-isa", help="OpenVINO's oneDNN kernels capped alike (ONEDNN_MAX_CPU_ISA, e.g. "
                   "AVX512_CORE_BF16)")
    args = p.parse_args(argv)
    if args.onednn_max_isa:
        os.environ["ONEDNN_MAX_CPU_ISA"] = args.onednn_max_isa  # before OpenVINO loads oneDNN
    if args.retime and not args.log:
        p.error("--retime needs --log")

    import autosearch
    from autosearch.errors import UserError

    print("building TVM tuned, compiling OpenVINO, then profiling in turns ...", file=sys.stderr, flush=True)
    png = results_path(f"{args.out}.png")
    try:
        profile = autosearch.profile(args.model, args.db, log=args.log, target=args.target, runs=args.runs,
                                     rounds=args.rounds, threads=args.threads, top=args.top, plot=png,
                                     on_message=lambda line: print(line, file=sys.stderr, flush=True))
    except UserError as exc:
        p.exit(2, f"layer_profile: error: {exc}\n")
    if args.retime:
        print("each best config timed alone again ...", file=sys.stderr, flush=True)
        retime_rows(profile, args.log)
    title = f"{profile.model}: per-kernel profile, {args.threads} threads ({host_label()})"
    text = f"**{title}**; database `{args.db}`: " + profile.markdown(args.top)
    write_text(results_path(f"{args.out}.md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
