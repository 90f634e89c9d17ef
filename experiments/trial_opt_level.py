"""Where a trial's build goes, and what LLVM's optimisation level buys in it: scheduled kernels of a run built at the
target's level (3) and at lower ones, their build seconds by phase, their machine code compared, their latency timed.

Building is most of a tuning run's time on a slow CPU (one build worker's seconds are the run's trials per minute),
and a scheduled kernel's loops are already tiled, unrolled and vectorised by its schedule: what LLVM's -O3 adds over
-O2 or -O1 to such a kernel is the question. Each kernel of a sample of a run's measured configs (and each task's
best) is built one way after another in this process, one thread, in autosearch's build context
(:func:`autosearch.tvm_compat.build_context`), as :func:`autosearch.measure.kernels.build` builds it: TVM's TIR
passes, LLVM's IR optimisation (``target.build.llvm``) and the object file written, each timed; the ``.text``
sections compared; where they differ, the builds are timed in turns (``--rounds`` rounds of 20 cold repeats, two
threads, outputs checked against the unscheduled kernel)::

    python -m experiments.trial_opt_level --log experiments/results/user-MODEL-TAG/log.jsonl --sample 30

Writes ``experiments/results/trial-opt-level[-OUT].{md,json}``. Minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import random
import subprocess
import sys
import tempfile
import time

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import describe, fingerprint
from experiments.lib.retime import in_turns
from experiments.lib.study.report import geomean


class PhaseClock:
    """Seconds spent in TVM's ``codegen_build`` (LLVM IR made and optimised) while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._module = importlib.import_module("tvm.tirx.build")
        self._original = self._module.codegen_build

    def __enter__(self) -> PhaseClock:
        def timed(mod, target):
            start = time.perf_counter()
            try:
                return self._original(mod, target)
            finally:
                self.seconds += time.perf_counter() - start

        self._module.codegen_build = timed
        return self

    def __exit__(self, *exc) -> None:
        self._module.codegen_build = self._original


def text_digest(path: str) -> str:
    """SHA-1 of an object file's ``.text`` section (machine code only: debug sections and names left out)."""
    out = path + ".text"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.text", path, out], check=True)
    with open(out, "rb") as fh:
        return hashlib.sha1(fh.read()).hexdigest()


def build_phases(mod, target: dict, level: int, tmp: str) -> dict:
    """Build ``mod`` (a scheduled module as a trial hands it to TVM: :func:`autosearch.measure.kernels.as_compiled`) at
    LLVM ``level``: seconds of each phase, the artifact."""
    import tvm
    from tvm.support import cc

    from autosearch.tvm_compat import build_context

    target = tvm.target.Target({**target, "opt-level": level})
    with PhaseClock() as clock:
        start = time.perf_counter()
        with build_context(target.kind.name):
            lib = tvm.compile(mod, target=target)
        compile_s = time.perf_counter() - start
    obj, so = os.path.join(tmp, f"o{level}.o"), os.path.join(tmp, f"o{level}.so")
    start = time.perf_counter()
    lib.mod.write_to_file(obj)
    object_s = time.perf_counter() - start
    start = time.perf_counter()
    cc.create_shared(so, [obj])
    link_s = time.perf_counter() - start
    with open(so, "rb") as fh:
        artifact = fh.read()
    return {"tir_s": compile_s - clock.seconds, "llvm_ir_s": clock.seconds, "object_s": object_s, "link_s": link_s,
            "build_s": compile_s + object_s + link_s, "text": text_digest(obj), "artifact": artifact}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="a run's log (its measured configs are built again)")
    parser.add_argument("--sample", type=int, default=30, help="measured configs drawn at random (seeded)")
    parser.add_argument("--best", type=int, default=1, help="and the best N configs of each task sampled")
    parser.add_argument("--levels", default="3,2,1", help="LLVM levels, the first the reference (the target's)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="results name suffix")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]

    import tvm

    from autosearch.frontend.target import target_to_json
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.kernels import KernelRunner, as_compiled, build
    from autosearch.measure.prepack import pack_artifact
    from autosearch.records import read_log
    from autosearch.search.space import DecisionSpace

    contents = read_log(args.log)
    measured = [(k, r) for k in contents.tasks for r in contents.trials(k) if r.ok]
    random.Random(args.seed).shuffle(measured)
    chosen = [("sample", k, r) for k, r in measured[:args.sample]]
    for key in dict.fromkeys(k for _, k, _ in chosen):  # the sampled tasks' best: each new task costs a reference
        ok = sorted((r for r in contents.trials(key) if r.ok), key=lambda r: r.latency)
        chosen += [("best", key, r) for r in ok[:args.best]]
    runner = KernelRunner("cpu")
    spaces, rows = {}, []
    tmp = tempfile.mkdtemp(prefix="trial-opt-level-")
    for i, (why, key, record) in enumerate(chosen):
        header = contents.tasks[key]
        if key not in spaces:
            task = TuningTask.from_json(header)
            reference, _ = build(tvm.ir.save_json(task.mod), target_to_json(task.target))
            runner.reference(key, reference, task.args, 0, {"repeat": 1})
            spaces[key] = (task, DecisionSpace(task.mod, task.target))
        task, space = spaces[key]
        mod, plan = as_compiled(space.apply(record.config).mod)
        built = {level: build_phases(mod, target_to_json(task.target), level, tmp) for level in levels}
        row = {"why": why, "task": header["name"], "workload_key": key, "winograd": "winograd" in header["name"],
               "logged_ms": record.latency * 1e3,
               **{f"o{level}": {k: v for k, v in b.items() if k != "artifact"} for level, b in built.items()}}
        for level in levels[1:]:
            row[f"o{level}"]["same_text"] = built[level]["text"] == built[levels[0]]["text"]
        differing = {lv: pack_artifact(b["artifact"], plan) for lv, b in built.items()
                     if lv == levels[0] or not row[f"o{lv}"]["same_text"]}
        if len(differing) > 1:
            ms = in_turns(runner, key, task.args, differing, args.rounds)
            for level, value in ms.items():
                row[f"o{level}"]["ms"] = value
        rows.append(row)
        sys.stderr.write(f"[{i + 1}/{len(chosen)}] {header['name'][:48]} "
                         + " ".join(f"O{lv} {row[f'o{lv}']['build_s']:.2f}s" for lv in levels) + "\n")

    def phase_row(label: str, group: list[dict], level: int) -> list[str]:
        def total(field: str) -> float:
            return sum(r[f"o{level}"][field] for r in group)

        same = f"{sum(r[f'o{level}'].get('same_text', True) for r in group)} of {len(group)}"
        ratios = [r[f"o{level}"]["ms"] / r[f"o{levels[0]}"]["ms"] for r in group if "ms" in r[f"o{level}"]]
        spread = (f"{fmt(geomean(ratios), 3)} ({fmt(min(ratios), 3)}-{fmt(max(ratios), 3)}, {len(ratios)})"
                  if ratios and level != levels[0] else "")
        return [label, f"-O{level}", fmt(total("tir_s"), 1), fmt(total("llvm_ir_s"), 1), fmt(total("object_s"), 1),
                fmt(total("link_s"), 1), fmt(total("build_s"), 1),
                fmt(total("build_s") / sum(r[f"o{levels[0]}"]["build_s"] for r in group), 2),
                same if level != levels[0] else "", spread]

    table = []
    for label, group in (("Winograd", [r for r in rows if r["winograd"]]),
                         ("direct and others", [r for r in rows if not r["winograd"]]),
                         ("all", rows), ("each task's best", [r for r in rows if r["why"] == "best"])):
        if group:
            table += [phase_row(f"{label} ({len(group)})", group, level) for level in levels]
    machine = fingerprint(spaces[chosen[0][1]][0].target)
    head = ["kernels", "LLVM level", "TIR passes s", "LLVM IR s", "object file s", "link s", "build s",
            "build, of -O3's", "same machine code", "latency / -O3's (geomean, range, kernels timed)"]
    text = (f"# Scheduled kernels built at LLVM -O{' / -O'.join(map(str, levels))}: build phases, machine code, "
            f"latency\n\n{describe(machine)}; `python -m experiments.trial_opt_level --log {args.log} "
            f"--sample {args.sample} --best {args.best} --levels {args.levels}`: {args.sample} of the log's measured "
            f"configs drawn at random (seed {args.seed}) and the best {args.best} of each task among them, built one "
            f"way after another in this process (one thread); kernels whose machine code differs timed in turns, "
            f"{args.rounds} rounds of 20 cold repeats, 2 threads, outputs checked.\n\n" + markdown_table(head, table))
    name = "trial-opt-level" + (f"-{args.out}" if args.out else "")
    publish(results_path(name), data={"machine": machine, "log": args.log, "levels": levels, "kernels": rows},
            text=text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
