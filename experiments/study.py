"""The strategy study: which strategy and which cost model reach a fast kernel with the fewest measurements.

Methods x conv tasks x seeds x budgets from a TOML file (``experiments/study.toml``; a tiny one to check the
machinery first, ``experiments/study-smoke.toml``): every autosearch strategy, model-guided ones, and TVM's own
``ms.tune_tir`` with and without Droplet post-optimisation, on the same design space and evaluator. Each (method,
task, seed) is one run of the largest budget in a fresh process, stored when it ends; when every run of a task is
done, each run's best config at each budget is re-timed in fresh processes, the methods interleaved. A killed study
continues where it stopped; shards (``--shard I/N``, by task) or a Ray cluster (``--ray-address``) spread it over
sittings and machines, all filling one results directory (``experiments/results/NAME/``; layout in
``experiments/lib/study/store.py``). ``--aggregate`` reads that directory and writes
``experiments/results/NAME.{md,json}``, ``NAME-profile.png``, ``NAME-tasks.png`` and ``NAME-readme.md``; with
``--readme`` it also rewrites README's study block.

    python -m experiments.study experiments/study-smoke.toml                  # run (or continue) the study
    python -m experiments.study experiments/study.toml --shard 0/2            # this machine: tasks 0, 2, 4, ...
    python -m experiments.study experiments/study.toml --aggregate --readme   # tables, plots, README block
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from autosearch.errors import UserError
from experiments.lib.io import ROOT, results_path, write_text
from experiments.lib.study.config import ConfigError, StudyConfig, load_config
from experiments.lib.study.store import RunKey, Store, shard_tasks
from experiments.lib.tasks import TaskSpec


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--shard takes I/N (e.g. 0/2), not {text!r}") from exc
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"--shard {text}: need 0 <= I < N")
    return i, n


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", help="the study's TOML file")
    p.add_argument("--results", help="results directory (default: experiments/results/NAME)")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N", help="do only the tasks at positions "
                   "I, I+N, ... of the configuration (several machines or sittings, one results directory)")
    p.add_argument("--task", action="append", default=[], metavar="SPEC", help="only this task (repeatable)")
    p.add_argument("--retry-failed", action="store_true", help="run again the runs that failed before")
    p.add_argument("--no-retime", action="store_true", help="tune only; re-time later (another sitting)")
    p.add_argument("--ray-address", help="spread the tasks over a Ray cluster: one task per node at a time, on "
                   "nodes that advertise this machine's device key (see README, --runner ray); 'local': a "
                   "private one-node cluster here")
    p.add_argument("--aggregate", action="store_true", help="write tables and plots from the results directory")
    p.add_argument("--readme", action="store_true", help="with --aggregate: rewrite README's study block")
    p.add_argument("--out", help="with --aggregate: output stem (default: experiments/results/NAME)")
    p.add_argument("--child", nargs=3, metavar=("TASK", "METHOD", "SEED"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _selected(config: StudyConfig, args) -> list[TaskSpec]:
    tasks = shard_tasks(config.tasks, args.shard)
    if args.task:
        try:
            wanted = {str(TaskSpec.parse(t)) for t in args.task}
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        unknown = wanted - {str(t) for t in config.tasks}
        if unknown:
            raise ConfigError(f"--task {sorted(unknown)[0]} is not a task of {config.path}")
        tasks = [t for t in tasks if str(t) in wanted]
    return tasks


def _retimer(config: StudyConfig, store: Store):
    """After a task's runs: its re-timing rounds on this machine."""
    from experiments.lib.machine import fingerprint
    from experiments.lib.study.retiming import local_measurer, retime_task
    from experiments.lib.study.runs import host_task

    def retime(spec: TaskSpec) -> None:
        task = host_task(store, spec)
        measure, fresh, close = local_measurer(task)
        try:
            ran = retime_task(config, store, spec, measure=measure, fresh=fresh, machine=fingerprint(task.target))
        finally:
            close()
        if ran:
            print(f"[retime] {spec}: {ran} round(s)", flush=True)

    return retime


def run(config: StudyConfig, store: Store, args) -> int:
    from experiments.lib.study.runs import extract_tasks, launch_child, sit

    tasks = _selected(config, args)
    with open(config.path) as fh:
        write_text(os.path.join(store.root, "config.toml"), fh.read())  # the last configuration used, for the record
    if args.ray_address:
        from experiments.lib.study.ray_sitting import sit_on_ray

        for line in sit_on_ray(config, store, args.ray_address, tasks, retry_failed=args.retry_failed):
            print(line, flush=True)
        return 0
    extract_tasks(config, store, tasks)
    starts: dict[RunKey, float] = {}

    def on_run(key: RunKey, what: str) -> None:
        if what == "start":
            starts[key] = time.perf_counter()
            print(f"[run] {key} ...", flush=True)
        else:
            print(f"[run] {key}: {what} in {time.perf_counter() - starts[key]:.0f} s", flush=True)

    report = sit(config, store, tasks, retry_failed=args.retry_failed,
                 launch=lambda key: launch_child(config, store, key), on_run=on_run,
                 after_task=None if args.no_retime else _retimer(config, store))
    print(f"{len(report.done)} runs done now, {len(report.skipped)} skipped (finished before or held elsewhere), "
          f"{len(report.failed)} failed" + (" (see the .error files; --retry-failed)" if report.failed else ""))
    print(f"next: python -m experiments.study {os.path.relpath(config.path, ROOT)} --aggregate")
    return 1 if report.failed else 0


def aggregate(config: StudyConfig, store: Store, args) -> int:
    from experiments.lib.study.report import aggregate as write_tables
    from experiments.lib.study.report import replace_block

    stem = args.out or results_path(config.name)
    payload = write_tables(config, store, stem)
    with open(stem + ".md") as fh:
        print(fh.read())
    if args.readme:
        if not config.readme:
            raise ConfigError(f"{config.path} says readme = false (a smoke configuration's numbers are meaningless): "
                              "README's study block is written from the full study only")
        readme = os.path.join(ROOT, "README.md")
        with open(readme) as fh:
            text = fh.read()
        with open(stem + "-readme.md") as fh:
            write_text(readme, replace_block(text, fh.read()))
        print(f"README.md: study block rewritten from {payload['progress']['runs_done']} runs")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.child else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
        store = Store(os.path.abspath(args.results or results_path(config.name)))
        if args.child:
            from experiments.lib.study.runs import run_one

            task, method, seed = args.child
            key = RunKey(TaskSpec.parse(task), method, int(seed))
            store.write_result(key, run_one(config, store, key))
            return 0
        return aggregate(config, store, args) if args.aggregate else run(config, store, args)
    except (ConfigError, UserError) as exc:
        if args.child:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
