"""Where a tuned model's milliseconds go, kernel by kernel, beside OpenVINO's own per-node profile.

``report`` says how far the whole model is from OpenVINO; this says where. The tuned model is built from a
database as ``compile`` builds it and each call of the Relax VM timed (``LoadedModel.profile``; ``--runs`` forward
passes, the median per kernel); OpenVINO at its default precision and in fp32 by its ``PERF_COUNT`` (per node,
the same passes). One after the other, in this process, on the same threads::

    python -m experiments.layer_profile --model tiny-yolov2 \\
        --db experiments/results/user-tiny-yolov2-quickstart-xeon-amx-v4/db --out layer-profile-tiny-yolov2

Writes ``experiments/results/OUT.md`` (per category and per kernel / node, the CPU named) and ``OUT.png``. The
profilers add their own overhead (a few microseconds per call): compare kernels and
categories, and take end-to-end figures from ``report``. Nothing here is kept between runs: it takes a minute.

With ``--log`` (the run's tuning log) each kernel's time in the model is set beside what tuning measured for it
(its task's best latency, per call, times the calls a forward pass makes: the run's own estimate of the model);
``--retime`` then times each task's best config again alone, warm as MetaSchedule times it (repeats of 20 ms, the caches
flushed before each repeat, so every call after the first finds the weights in cache) and cold (one call per
flushed repeat, as a layer meets its weights in the model)::

    python -m experiments.layer_profile --model yolov8n --db .../db --log .../log.jsonl --retime --out ...
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict

import numpy as np

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_text
from experiments.lib.machine import cpu_model

CATEGORIES = ("convolution", "pooling", "layout and casts", "other")


def tvm_category(name: str) -> str:
    """The category of a TVM kernel, by the operations its fused name lists."""
    if "conv2d" in name or "matmul" in name:
        return "convolution"
    if "pool" in name:
        return "pooling"
    if any(op in name for op in ("transpose", "layout", "cast", "reshape", "concat")):
        return "layout and casts"
    return "other"


def ov_category(node_type: str) -> str:
    """The category of an OpenVINO node, by its type."""
    if node_type in ("Convolution", "GroupConvolution", "MatMul", "FullyConnected"):
        return "convolution"
    if node_type in ("MaxPool", "AvgPool"):
        return "pooling"
    if node_type in ("Reorder", "Transpose", "Convert", "Reshape", "Concat", "Concatenation"):
        return "layout and casts"
    return "other"


def tvm_kernels(model: str, db: str, inputs: dict[str, np.ndarray], runs: int) -> tuple[dict[str, float], list]:
    """(kernel name -> median milliseconds per forward pass (calls of one kernel summed), the compiled model's
    kernels with their tasks and calls) of the model built with ``db``."""
    import tvm

    import autosearch
    from autosearch.deploy.artifact import load_model

    with tempfile.TemporaryDirectory() as tmp:
        library = os.path.join(tmp, "model.so")
        compiled = autosearch.compile(model, db, library)
        loaded = load_model(library)
        args = [tvm.runtime.tensor(v, tvm.cpu()) for v in inputs.values()]
        for _ in range(3):  # warm-up: first-touch of the weights and the workspace
            loaded(*args)
        per_run: dict[str, list[float]] = defaultdict(list)
        for _ in range(runs):
            for name, seconds in loaded.profile(*args).items():
                per_run[name].append(seconds * 1e3)
    return {name: statistics.median(v) for name, v in per_run.items()}, compiled.kernels


PREPACKED = "_prepacked"  # the suffix a kernel's name gets in the library when its weights are prepacked


def as_tuned(profile: dict[str, float], kernels: list, log_path: str, retime: bool) -> list[dict]:
    """Per kernel of ``profile`` that runs a task of the log: its milliseconds in the model, and the task's best
    latency x calls as tuning measured it (and, with ``retime``, as re-timed alone now, warm and cold)."""
    from autosearch.records import read_log

    log = read_log(log_path)
    by_name = {k.name: k for k in kernels}
    rows = []
    for name, ms in profile.items():
        kernel = by_name.get(name[: -len(PREPACKED)] if name.endswith(PREPACKED) else name)
        best = log.best(kernel.workload_key) if kernel is not None else None
        if best is None or kernel.calls == 0:
            continue
        rows.append({"kernel": name, "category": tvm_category(name), "calls": kernel.calls, "in_model": ms,
                     "tuned": best.latency * 1e3 * kernel.calls, "key": kernel.workload_key, "record": best})
    if retime:
        for row, (warm, cold) in zip(rows, retimed(log, [r["record"] for r in rows])):
            row["warm"], row["cold"] = warm * 1e3 * row["calls"], cold * 1e3 * row["calls"]
    return rows


def retimed(log, records: list) -> list[tuple[float, float]]:
    """(warm, cold) seconds of each record's config, built from its trace and timed alone, warm (MetaSchedule's
    evaluator) and cold (one call per repeat, caches flushed before each)."""
    import json

    from autosearch.api import MeasureOptions, make_runner
    from autosearch.frontend.task import TuningTask
    from autosearch.search.space import replay
    from autosearch.tensor_units.intrinsics import register_for

    tasks = {r.task_key: TuningTask.from_json(log.tasks[r.task_key]) for r in records}
    target = next(iter(tasks.values())).target
    timings = {}
    # warm: 5 repeats of 20 ms (run --min-repeat-ms 20); cold: run's default, one call per flushed repeat
    for label, options in (("warm", MeasureOptions(repeat=5, min_repeat_ms=20)), ("cold", MeasureOptions())):
        runner = make_runner("local", target, options)
        try:
            for i, record in enumerate(records):
                print(f"  {label} {i + 1}/{len(records)} {record.task_name}", file=sys.stderr, flush=True)
                task = tasks[record.task_key]
                register_for(json.dumps(record.trace))  # the tensor intrinsics its trace names
                runner.prepare(task)
                [result] = runner.measure(task, [replay(task.mod, record.trace).mod])
                timings[(label, i)] = result.median if result.ok else float("nan")
        finally:
            runner.close()
    return [(timings[("warm", i)], timings[("cold", i)]) for i in range(len(records))]


def tuned_table(rows: list[dict], limit: int) -> str:
    """Per category, then the kernels that lose most in the model: in the model vs as tuned (x calls)."""
    timed = "warm" in (rows[0] if rows else {})
    heads = ["kernel", "calls", "in the model ms", "as tuned ms", "in the model / as tuned"]
    if timed:
        heads += ["alone, warm ms", "alone, cold ms"]

    def line(label, group, calls=""):
        model, tuned = sum(r["in_model"] for r in group), sum(r["tuned"] for r in group)
        out = [label, str(calls), fmt(model, 3), fmt(tuned, 3), f"{model / tuned:.2f}x" if tuned else "-"]
        if timed:
            out += [fmt(sum(r["warm"] for r in group), 3), fmt(sum(r["cold"] for r in group), 3)]
        return out

    table = [line(f"**{c}**", [r for r in rows if r["category"] == c]) for c in CATEGORIES
             if any(r["category"] == c for r in rows)]
    table.append(line("**all tuned kernels**", rows))
    for r in sorted(rows, key=lambda r: r["tuned"] - r["in_model"])[:limit]:
        table.append(line(r["kernel"][:70], [r], r["calls"]))
    return markdown_table(heads, table)


def ov_nodes(path: str, inputs: dict[str, np.ndarray], runs: int, threads: int, *,
             fp32: bool) -> dict[tuple[str, str, str], float]:
    """(node name, node type, the kernel OpenVINO chose) -> median milliseconds per forward pass."""
    import openvino

    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": True}
    if fp32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    request = openvino.Core().compile_model(path, "CPU", config).create_infer_request()
    for _ in range(3):
        request.infer(inputs)
    per_run: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for _ in range(runs):
        request.infer(inputs)
        for info in request.get_profiling_info():
            if str(info.status).endswith("EXECUTED"):
                key = (info.node_name, info.node_type, info.exec_type)
                per_run[key].append(info.real_time.total_seconds() * 1e3)
    return {key: statistics.median(v) for key, v in per_run.items()}


def category_table(columns: dict[str, dict[str, float]]) -> str:
    """Per category, each runtime's milliseconds."""
    names = list(columns)
    rows = [[c, *(fmt(columns[n].get(c, 0.0), 3) for n in names)] for c in CATEGORIES]
    rows.append(["**all**", *(fmt(sum(columns[n].values()), 3) for n in names)])
    return markdown_table(["category", *(f"{n} ms" for n in names)], rows)


def top_table(items: list[tuple[str, str, float]], total: float, limit: int) -> str:
    rows = [[name[:90], category, fmt(ms, 3), f"{100 * ms / total:.1f}%"] for name, category, ms in items[:limit]]
    return markdown_table(["kernel / node", "category", "ms", "share"], rows)


def plot(columns: dict[str, dict[str, float]], path: str, title: str) -> None:
    from autosearch.plots import figure, save

    fig, axes = figure(size=(8, 3.2), grid="x")
    ax = axes[0][0]
    names = list(columns)
    left = np.zeros(len(names))
    for category in CATEGORIES:
        widths = np.array([columns[n].get(category, 0.0) for n in names])
        ax.barh(names, widths, left=left, label=category)
        left += widths
    ax.set_xlabel("ms per forward pass (profiled)")
    ax.set_title(title, fontsize=9)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="built-in model or .onnx")
    p.add_argument("--db", required=True, help="the tuned database (export's output)")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and OUT.png")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--top", type=int, default=15, help="kernels / nodes listed per runtime")
    p.add_argument("--log", help="the run's tuning log: each kernel in the model beside its task as tuned")
    p.add_argument("--retime", action="store_true", help="with --log: time each task's best config alone again, "
                   "warm and cold")
    args = p.parse_args(argv)
    if args.retime and not args.log:
        p.error("--retime needs --log")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool

    import onnx

    from autosearch.frontend.importer import load_onnx, resolve_input_shapes

    name, proto = load_onnx(args.model)
    shapes = resolve_input_shapes(proto, {})
    rng = np.random.default_rng(0)
    inputs = {k: rng.uniform(0, 1, s).astype("float32") for k, s in shapes.items()}
    columns: dict[str, dict[str, float]] = {}
    items: dict[str, list[tuple[str, str, float]]] = {}
    print("profiling TVM tuned ...", file=sys.stderr, flush=True)
    kernels, compiled_kernels = tvm_kernels(args.model, args.db, inputs, args.runs)
    items["TVM tuned"] = sorted(((k, tvm_category(k), ms) for k, ms in kernels.items()), key=lambda x: -x[2])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(proto, path)
        for label, fp32 in (("OpenVINO default precision", False), ("OpenVINO fp32", True)):
            print(f"profiling {label} ...", file=sys.stderr, flush=True)
            nodes = ov_nodes(path, inputs, args.runs, args.threads, fp32=fp32)
            items[label] = sorted(((f"{n} ({t}, {e})", ov_category(t), ms) for (n, t, e), ms in nodes.items()),
                                  key=lambda x: -x[2])
    for label, rows in items.items():
        by: dict[str, float] = defaultdict(float)
        for _, category, ms in rows:
            by[category] += ms
        columns[label] = dict(by)
    title = f"{name}: per-kernel profile, {args.threads} threads ({cpu_model()})"
    parts = [f"**{title}**; database `{args.db}`, {args.runs} profiled passes, medians.", "",
             category_table(columns), ""]
    for label, rows in items.items():
        parts += [f"**{label}**: the {args.top} slowest of {len(rows)}", "",
                  top_table(rows, sum(ms for _, _, ms in rows), args.top), ""]
    if args.log:
        print("the kernels as tuned ...", file=sys.stderr, flush=True)
        rows = as_tuned(kernels, compiled_kernels, args.log, args.retime)
        parts += [f"**TVM tuned, in the model against as tuned** (`{args.log}`: each task's best latency x the "
                  "calls a forward pass makes" + ("; then each best config timed alone again, warm as MetaSchedule "
                  "times it and cold, one call per flushed repeat" if args.retime else "")
                  + f"); the {args.top} kernels that lose most in the model", "", tuned_table(rows, args.top), ""]
    write_text(results_path(f"{args.out}.md"), "\n".join(parts))
    plot(columns, results_path(f"{args.out}.png"), title)
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
