"""Why a Winograd trial takes three times a direct one to build, and two ways to shorten it, on a run's best configs.

A Winograd trial built in 1.6 s where a direct convolution built in 0.56 (the fp32 quick start on a 2-vCPU Zen 4),
and Winograd trials were half of its 400: most of the run's building. TVM's pass timing puts half of such a build in
two TIR passes after loop unrolling, ``s_tir.RenormalizeSplitPattern`` and ``tirx.StmtSimplify``, which fold TOPI's
transform matrices: ``topi.utils.const_matrix`` writes each entry as a chain of ``Select`` of all 36 entries, each
comparing two ``floormod`` indices, and the Winograd schedule rules unroll the transforms, so every unrolled product
carries two such chains to fold. This builds each Winograd task's best configs of a run's log three ways::

    python -m experiments.winograd_build --log experiments/results/user-MODEL-TAG/log.jsonl --configs 3

- in TVM's default pass context (how autosearch built every kernel before);
- with the matrices as a nested ``Select`` (row, then column, zeros left out, the same ``floormod`` tests): the task
  lowered again with them, the same config applied, TVM's context. The same assembly where the unrolled chains fold
  to the same constants, but another PrimFunc, so another workload key, and other loop features: known schedules,
  exported databases and the cost model's records name and describe tasks by them (not done: it needs all three
  moved over);
- in autosearch's build context, ``s_tir.RenormalizeSplitPattern`` left out
  (:func:`autosearch.tvm_compat.build_context`, the tuning's and the model's builds since).

and compares the build seconds, whether the assembly is the same as TVM's pipeline gives, and where it is not, the
kernels' latency (both built ways timed in turns, 6 rounds of 20 cold repeats, outputs checked against the
unscheduled kernel). Writes ``experiments/results/winograd-build[-OUT].{md,json}``. Minutes.
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


def nested_const_matrix(matrix, name: str):
    """TOPI's ``const_matrix`` with each entry found row first, then column, zeros falling through to the end."""
    import tvm
    from tvm import te

    rows, cols = matrix.shape
    dtype = str(matrix.dtype)

    def entry(i, j):
        zero = tvm.tirx.const(0.0, dtype)
        out = zero
        for ii in reversed(range(rows)):
            row = zero
            for jj in reversed(range(cols)):
                if matrix[ii][jj] != 0:
                    row = tvm.tirx.Select(tvm.tirx.indexmod(j, cols) == jj, tvm.tirx.const(matrix[ii][jj], dtype), row)
            out = tvm.tirx.Select(tvm.tirx.indexmod(i, rows) == ii, row, out)
        return out

    return te.compute(matrix.shape, entry, name=name, attrs={"const_matrix": True, "schedule_rule": "None"})


def nested_transform_matrices(tile_size: int, kernel_size: int, out_dtype: str):
    """``topi.nn.winograd_util.winograd_transform_matrices`` (the same A, B, G) as :func:`nested_const_matrix`."""
    from tvm.topi.nn import winograd_util as wu

    points = wu._interpolation_points(tile_size + kernel_size - 2)
    a, b, g = wu._cook_toom_convolution(points, tile_size, kernel_size)
    dtype = "uint16" if out_dtype == "bfloat16" else out_dtype
    return tuple(nested_const_matrix(m.astype(dtype), n) for m, n in ((a, "A"), (b, "B"), (g, "G")))


def _build(mod, target, *, skip: bool) -> tuple[bytes, float, str]:
    """(artifact, seconds, assembly digest): ``autosearch.measure.kernels.build``, ``skip``: in its pass context
    (:func:`autosearch.tvm_compat.build_context`), else in TVM's default one."""
    import contextlib

    import tvm

    from autosearch.measure.prepack import pack_artifact, split_prepack
    from autosearch.tvm_compat import build_context

    mod, plan = split_prepack(mod)
    start = time.perf_counter()
    with build_context() if skip else contextlib.nullcontext():
        lib = tvm.compile(mod, target=target)
    secs = time.perf_counter() - start
    host = lib.mod.imports[0] if lib.mod.imports else lib.mod
    digest = hashlib.sha1(host.inspect_source("asm").encode()).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.so")
        lib.export_library(path)
        with open(path, "rb") as fh:
            return pack_artifact(fh.read(), plan), secs, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="a run's log with Winograd tasks (fp32)")
    parser.add_argument("--model", default="tiny-yolov2", help="the model the log tuned (to lower it again)")
    parser.add_argument("--configs", type=int, default=3, help="the best configs of each Winograd task")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default=None, help="results name suffix")
    args = parser.parse_args(argv)

    import tvm
    from tvm.topi.nn import winograd_util

    from autosearch import api
    from autosearch.frontend.target import target_to_json
    from autosearch.frontend.task import TuningTask
    from autosearch.measure.kernels import KernelRunner, build
    from autosearch.records import read_log
    from autosearch.search.space import DecisionSpace

    contents = read_log(args.log)
    measured = [k for k, h in contents.tasks.items() if any(r.ok for r in contents.trials(k))]
    keys = [k for k in measured if "winograd" in contents.tasks[k]["name"]]
    keys += [k for k in measured if k not in keys]  # the other tasks: one row in all, TVM's context against ours
    layouts = sorted({h["lowering"].get("layouts", ["NCHW"])[0] for k, h in contents.tasks.items() if k in keys})
    as_topi, nested = {}, {}
    for layout in layouts:
        for t in api.load_tasks(args.model, layout=layout, precision="fp32").tasks:
            as_topi[t.workload_key] = (layout, t.name)
        topi_matrices = winograd_util.winograd_transform_matrices
        winograd_util.winograd_transform_matrices = nested_transform_matrices
        try:
            nested.update({(layout, t.name): t for t in api.load_tasks(args.model, layout=layout,
                                                                        precision="fp32").tasks})
        finally:
            winograd_util.winograd_transform_matrices = topi_matrices
    runner = KernelRunner("cpu")
    rows, table = [], []
    for key in keys:
        header = contents.tasks[key]
        task = TuningTask.from_json(header)
        space = DecisionSpace(task.mod, task.target)
        # the same task lowered with nested matrices: Winograd's alone have them
        other = nested.get(as_topi.get(key, ("", ""))) if "winograd" in header["name"] else None
        other_space = DecisionSpace(other.mod, other.target) if other is not None else None
        reference, _ = build(tvm.ir.save_json(task.mod), target_to_json(task.target))
        runner.reference(key, reference, task.args, 0, {"repeat": 1})
        best = sorted((r for r in contents.trials(key) if r.ok), key=lambda r: r.latency)[:args.configs]
        for record in best:
            scheduled = space.apply(record.config).mod
            base, base_s, base_asm = _build(scheduled, task.target, skip=False)
            plain, plain_s, plain_asm = _build(scheduled, task.target, skip=True)
            row = {"task": header["name"], "layout": as_topi.get(key, ("?",))[0], "workload_key": key,
                   "build_s": base_s, "no_renormalize_build_s": plain_s,
                   "no_renormalize_same_asm": plain_asm == base_asm}
            if other_space is not None:
                applied = other_space.apply(record.config)
                if applied.mod is not None:
                    _, nested_s, nested_asm = _build(applied.mod, other.target, skip=False)
                    row.update(nested_key=other.workload_key, nested_build_s=nested_s,
                               nested_same_asm=nested_asm == base_asm)
            if not row["no_renormalize_same_asm"]:
                ms = in_turns(runner, key, task.args, {"tvm": base, "autosearch": plain}, args.rounds)
                row.update(ms=ms["tvm"], no_renormalize_ms=ms["autosearch"])
            rows.append(row)
            if "winograd" not in row["task"]:
                continue
            table.append([row["task"][:44], row["layout"], fmt(base_s, 2), fmt(row.get("nested_build_s"), 2),
                          {True: "yes", False: "NO"}.get(row.get("nested_same_asm"), "-"), fmt(plain_s, 2),
                          "yes" if row["no_renormalize_same_asm"] else "no",
                          fmt(row["no_renormalize_ms"] / row["ms"], 3) if "ms" in row else ""])
    for label, group in (("Winograd", [r for r in rows if "winograd" in r["task"]]),
                         ("the other tasks", [r for r in rows if "winograd" not in r["task"]])):
        ratios = [r["no_renormalize_ms"] / r["ms"] for r in group if "ms" in r]
        nested_rows = [r for r in group if "nested_build_s" in r]
        table.append([f"**{label}: {len(group)} kernels**", "", fmt(sum(r["build_s"] for r in group), 1),
                      fmt(sum(r["nested_build_s"] for r in nested_rows), 1) if nested_rows else "",
                      f"{sum(r['nested_same_asm'] for r in nested_rows)} of {len(nested_rows)}" if nested_rows else "",
                      fmt(sum(r["no_renormalize_build_s"] for r in group), 1),
                      f"{sum(r['no_renormalize_same_asm'] for r in group)} of {len(group)}",
                      f"geomean {fmt(float(np.exp(np.mean(np.log(ratios)))), 3)}, {fmt(min(ratios), 3)}-"
                      f"{fmt(max(ratios), 3)} ({len(ratios)})" if ratios else ""])
    machine = fingerprint(TuningTask.from_json(contents.tasks[keys[0]]).target)
    head = ["task", "layout", "build s, TVM's pipeline", "build s, nested matrices", "same assembly",
            "build s, without RenormalizeSplitPattern", "same assembly", "latency, without / with it"]
    text = (f"# Winograd builds of {args.model}: TVM's pipeline, nested transform matrices, one pass less\n\n"
            f"{describe(machine)}; `python -m experiments.winograd_build --log {args.log} --configs {args.configs}`; "
            f"each Winograd task's {args.configs} best configs of the log, built one at a time in this process "
            f"(one thread); latencies timed in turns, {args.rounds} rounds of 20 cold repeats, 2 threads.\n\n"
            + markdown_table(head, table))
    name = "winograd-build" + (f"-{args.out}" if args.out else "")
    write_text(results_path(f"{name}.md"), text + "\n")
    write_json(results_path(f"{name}.json"), {"machine": machine, "log": args.log, "kernels": rows})
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
