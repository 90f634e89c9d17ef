"""Why a Winograd trial takes three times a direct one to build, and what shortens it, on a run's best configs.

A Winograd trial built in 1.6 s where a direct convolution built in 0.56 (the fp32 quick start on a 2-vCPU Zen 4),
and Winograd trials were half of its 400: most of the run's building. TVM's pass timing puts half of such a build in
two TIR passes after loop unrolling, ``s_tir.RenormalizeSplitPattern`` and ``tirx.StmtSimplify``, which fold TOPI's
transform matrices: ``topi.utils.const_matrix`` writes each entry as a chain of ``Select`` of all 36 entries, each
comparing two ``floormod`` indices, and the Winograd schedules unroll the transforms, so every unrolled product
carries two such chains to fold. This builds each Winograd task's best configs of a run's log three ways::

    python -m experiments.winograd_build --log experiments/results/user-MODEL-TAG/log.jsonl --configs 3

- in TVM's default pass context, the scheduled kernel as it is (how autosearch built every kernel before 2026-12-01);
- in autosearch's build context, ``s_tir.RenormalizeSplitPattern`` left out
  (:func:`autosearch.tvm_compat.build_context`, the tuning's and the model's builds since);
- and in that context with the matrices' chains nested (row, then column, zeros left out) on the scheduled kernel
  (:mod:`autosearch.frontend.const_matrices`: every build since 2026-12-07; the task, its key and its features as
  they were),

and compares the build seconds (TVM's compile, the object file written and linked), whether the assembly is the same
as TVM's pipeline gives (the nested build: as the build without the pass gives), and where it is not, the kernels'
latency (both built ways timed in turns, 6 rounds of 20 cold repeats, outputs checked against the unscheduled
kernel). Writes ``experiments/results/winograd-build[-OUT].{md,json}``. Minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.machine import describe, fingerprint
from experiments.lib.retime import in_turns


def _build(mod, target, *, skip: bool, nest: bool = False) -> tuple[bytes, float, str]:
    """(artifact, seconds, assembly digest) of a scheduled kernel, built as ``autosearch.measure.kernels.build``
    builds it, less its other rewrites: ``skip``, in its pass context (:func:`autosearch.tvm_compat.build_context`),
    else in TVM's default one; ``nest``, the matrices' chains nested first."""
    import contextlib

    import tvm

    from autosearch.frontend.const_matrices import nest_const_matrices
    from autosearch.measure.prepack import pack_artifact, split_prepack
    from autosearch.tvm_compat import build_context

    mod, plan = split_prepack(mod)
    start = time.perf_counter()
    if nest:
        mod = nest_const_matrices(mod)
    with build_context() if skip else contextlib.nullcontext():
        lib = tvm.compile(mod, target=target)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.so")
        lib.export_library(path)
        secs = time.perf_counter() - start
        host = lib.mod.imports[0] if lib.mod.imports else lib.mod
        digest = hashlib.sha1(host.inspect_source("asm").encode()).hexdigest()
        with open(path, "rb") as fh:
            return pack_artifact(fh.read(), plan), secs, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="a run's log with Winograd tasks")
    parser.add_argument("--configs", type=int, default=3, help="the best configs of each Winograd task")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default=None, help="results name suffix")
    args = parser.parse_args(argv)

    import tvm

    from autosearch.frontend.target import target_to_json
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.kernels import KernelRunner, build
    from autosearch.records import read_log
    from autosearch.search.space import DecisionSpace

    contents = read_log(args.log)
    measured = [k for k in contents.tasks if any(r.ok for r in contents.trials(k))]
    keys = [k for k in measured if "winograd" in contents.tasks[k]["name"]]
    keys += [k for k in measured if k not in keys]  # the other tasks: their rows in the totals alone
    runner = KernelRunner("cpu")
    rows, table = [], []
    for key in keys:
        header = contents.tasks[key]
        task = TuningTask.from_json(header)
        space = DecisionSpace(task.mod, task.target)
        reference, _ = build(tvm.ir.save_json(task.mod), target_to_json(task.target))
        runner.reference(key, reference, task.args, 0, {"repeat": 1})
        best = sorted((r for r in contents.trials(key) if r.ok), key=lambda r: r.latency)[:args.configs]
        for record in best:
            scheduled = space.apply(record.config).mod
            base, base_s, base_asm = _build(scheduled, task.target, skip=False)
            plain, plain_s, plain_asm = _build(scheduled, task.target, skip=True)
            nested, nested_s, nested_asm = _build(scheduled, task.target, skip=True, nest=True)
            row = {"task": header["name"], "layout": (header["lowering"].get("layouts") or ["NCHW"])[0],
                   "workload_key": key, "build_s": base_s, "no_renormalize_build_s": plain_s,
                   "no_renormalize_same_asm": plain_asm == base_asm, "nested_build_s": nested_s,
                   "nested_same_asm": nested_asm == plain_asm}
            builds = {"tvm": base}
            if not row["no_renormalize_same_asm"]:
                builds["autosearch"] = plain
            if not row["nested_same_asm"]:
                builds["nested"] = nested
            if len(builds) > 1:
                ms = in_turns(runner, key, task.args, builds, args.rounds)
                row.update(ms=ms["tvm"], **{f"{k}_ms": v for k, v in ms.items() if k != "tvm"})
            rows.append(row)
            sys.stderr.write(f"{header['name'][:44]} {base_s:.2f} {plain_s:.2f} {nested_s:.2f} s\n")
            if "winograd" not in row["task"]:
                continue
            table.append([row["task"][:44], row["layout"], fmt(base_s, 2), fmt(plain_s, 2),
                          "yes" if row["no_renormalize_same_asm"] else "no",
                          fmt(row["autosearch_ms"] / row["ms"], 3) if "autosearch_ms" in row else "",
                          fmt(nested_s, 2), "yes" if row["nested_same_asm"] else "NO",
                          fmt(row["nested_ms"] / row["ms"], 3) if "nested_ms" in row else ""])

    def spread(ratios: list[float]) -> str:
        if not ratios:
            return ""
        return (f"geomean {fmt(float(np.exp(np.mean(np.log(ratios)))), 3)}, {fmt(min(ratios), 3)}-"
                f"{fmt(max(ratios), 3)} ({len(ratios)})")

    for label, group in (("Winograd", [r for r in rows if "winograd" in r["task"]]),
                         ("the other tasks", [r for r in rows if "winograd" not in r["task"]])):
        if not group:
            continue
        table.append([f"**{label}: {len(group)} kernels**", "", fmt(sum(r["build_s"] for r in group), 1),
                      fmt(sum(r["no_renormalize_build_s"] for r in group), 1),
                      f"{sum(r['no_renormalize_same_asm'] for r in group)} of {len(group)}",
                      spread([r["autosearch_ms"] / r["ms"] for r in group if "autosearch_ms" in r]),
                      fmt(sum(r["nested_build_s"] for r in group), 1),
                      f"{sum(r['nested_same_asm'] for r in group)} of {len(group)}",
                      spread([r["nested_ms"] / r["ms"] for r in group if "nested_ms" in r])])
    machine = fingerprint(TuningTask.from_json(contents.tasks[keys[0]]).target)
    head = ["task", "layout", "build s, TVM's pipeline", "build s, without RenormalizeSplitPattern",
            "same assembly as TVM's", "latency / TVM's", "build s, and the matrices nested",
            "same assembly as without the pass", "latency / TVM's"]
    text = (f"# Winograd builds: TVM's pipeline, one pass less, the matrices nested\n\n"
            f"{describe(machine)}; `python -m experiments.winograd_build --log {args.log} --configs {args.configs}`; "
            f"each Winograd task's {args.configs} best configs of the log, built one at a time in this process "
            f"(one thread; the object file written and linked); kernels whose assembly differs timed in turns, "
            f"{args.rounds} rounds of 20 cold repeats, 2 threads.\n\n" + markdown_table(head, table))
    name = "winograd-build" + (f"-{args.out}" if args.out else "")
    write_text(results_path(f"{name}.md"), text + "\n")
    write_json(results_path(f"{name}.json"), {"machine": machine, "log": args.log, "kernels": rows})
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
