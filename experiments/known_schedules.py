"""Write the known schedules autosearch ships (``autosearch/search/known_schedules.jsonl.gz``) from tuning logs.

Every committed tuning log and dataset under ``experiments/results/`` (``--logs`` to name others) is read; per task
and measuring CPU the fastest valid configs are kept (:class:`autosearch.search.known.KnownSchedules`) with the
task's name, shapes and lowering (a task of another shape finds its layer by them), and a
table of how many tasks each CPU covers is written beside the output (``--table``). ``--exclude-cpu NAME``
(repeatable) leaves a CPU's measurements out: the set measured on a CPU must not hold that CPU's own logs when
the point is to show how schedules transfer to it.

    python -m experiments.known_schedules --exclude-cpu emeraldrapids \\
        --table experiments/results/known-schedules.md
"""

from __future__ import annotations

import argparse
import glob
import os
from collections import Counter

from autosearch.records import read_log
from autosearch.search.known import PER_CPU, SHIPPED, KnownSchedules
from autosearch.tables import markdown_table
from autosearch.tensor_units.cpu import family_of_mcpu


def log_files(root: str = "experiments/results") -> list[str]:
    """The tuning logs and datasets under ``root`` (gzipped or not; a gzipped copy wins over its plain twin)."""
    paths = sorted(glob.glob(os.path.join(root, "**", "*.jsonl.gz"), recursive=True))
    plain = sorted(glob.glob(os.path.join(root, "**", "*.jsonl"), recursive=True))
    return paths + [p for p in plain if p + ".gz" not in paths]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs", nargs="*", help="tuning logs to read (default: every log under experiments/results)")
    ap.add_argument("--exclude-cpu", action="append", default=[], help="leave this LLVM CPU's measurements out")
    ap.add_argument("--per-cpu", type=int, default=PER_CPU, help="configs kept per task and CPU")
    ap.add_argument("--out", default=SHIPPED)
    ap.add_argument("--table", help="a Markdown table of the tasks each CPU covers")
    args = ap.parse_args(argv)
    records, used, tasks = [], [], {}
    for path in args.logs or log_files():
        contents = read_log(path)
        trials = [r for r in contents.records if r.kind in ("trial", "retime") and r.config is not None]
        if trials:
            records.extend(trials)
            used.append(path)
            tasks.update({key: {"name": t["name"], "args": t["args"], "lowering": t.get("lowering") or {}}
                          for key, t in contents.tasks.items()})  # its layer at other shapes: not its TensorIR
    known = KnownSchedules.from_records(records, per_cpu=args.per_cpu, exclude_cpus=args.exclude_cpu, tasks=tasks)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    known.write(args.out)
    tasks = Counter(cpu for entries in known.by_key.values() for cpu in {e.cpu for e in entries})
    rows = [[cpu, family_of_mcpu(cpu), n] for cpu, n in sorted(tasks.items())]
    table = markdown_table(["CPU", "family", "tasks"], rows)
    summary = (f"{len(known.by_key)} tasks, {sum(map(len, known.by_key.values()))} configs, from {len(records)} "
               f"timings in {len(used)} logs{'; excluded: ' + ', '.join(args.exclude_cpu) if args.exclude_cpu else ''}")
    print(summary)
    print(table)
    if args.table:
        with open(args.table, "w", encoding="utf-8") as fh:
            fh.write(f"Known schedules (`{os.path.relpath(args.out)}`): {summary}.\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
