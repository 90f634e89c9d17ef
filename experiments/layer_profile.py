"""Where a tuned model's milliseconds go, kernel by kernel, beside OpenVINO's own per-node profile.

``report`` says how far the whole model is from OpenVINO; this says where. The tuned model is built from a
database as ``compile`` builds it and each call of the Relax VM timed (``LoadedModel.profile``; ``--runs`` forward
passes, the median per kernel); OpenVINO at its default precision and in fp32 by its ``PERF_COUNT`` (per node,
the same passes; its default only where that is not fp32). They take turns in rounds of passes, in this process,
on the same threads::

    python -m experiments.layer_profile --model tiny-yolov2 \\
        --db experiments/results/user-tiny-yolov2-quickstart-xeon-amx-v4/db --out layer-profile-tiny-yolov2

Writes ``experiments/results/OUT.md`` (per category and per kernel / node, the CPU named) and ``OUT.png``. TVM's
profiler is the Relax VM's instrument hook, a Python function: each call's cost in it is measured on an empty kernel
and taken off every call (the header says how much); OpenVINO's counters are its own. Compare kernels and
categories, and take end-to-end figures from ``report``. Nothing here is kept between runs: it takes a minute.

With ``--log`` (the run's tuning log) the convolutions are also set beside OpenVINO's layer by layer, matched by
geometry (pixels and channels in and out, filter size: a 1x1 layer flattened into rows of 32 pixels is the same
layer), and each kernel's time in the model is set beside what tuning measured for it
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
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from autosearch.errors import last_line
from autosearch.tables import fmt, markdown_table
from experiments.lib.io import results_path, write_text
from experiments.lib.machine import host_label

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


class TVMProfile:
    """The tuned model built from a database as ``compile`` builds it (for ``target``, default the host) and loaded;
    :meth:`one_pass` times each call of the Relax VM in one forward pass (``LoadedModel.profile``), each call less
    :attr:`call_cost`, the profiler's own cost per call measured on an empty kernel (:func:`instrument_cost`). A
    context manager: the library lives in a temporary directory while it is open."""

    def __init__(self, model: str, db: str, inputs: dict[str, np.ndarray], target: str | None = None) -> None:
        import tvm

        import autosearch
        from autosearch.deploy.artifact import load_model

        self._tmp = tempfile.TemporaryDirectory()
        library = os.path.join(self._tmp.name, "model.so")
        self.kernels = autosearch.compile(model, db, library, target=target).kernels
        self._loaded = load_model(library)
        self._args = [tvm.runtime.tensor(v, tvm.cpu()) for v in inputs.values()]
        for _ in range(3):  # warm-up: first-touch of the weights and the workspace
            self._loaded(*self._args)
        self.call_cost = instrument_cost()

    def one_pass(self) -> dict[str, float]:
        """Kernel name -> milliseconds in one forward pass (calls of one kernel summed), each call less the
        profiler's own cost (never below zero)."""
        return {name: max(0.0, t.seconds - t.calls * self.call_cost) * 1e3
                for name, t in self._loaded.profile(*self._args).items()}

    def __enter__(self) -> TVMProfile:
        return self

    def __exit__(self, *exc) -> None:
        self._tmp.cleanup()


def instrument_cost(passes: int = 2000) -> float:
    """Seconds the VM's instrument hook adds to a call it times (:func:`autosearch.deploy.artifact.profile_calls`):
    the median interval of an empty kernel of four tensor arguments (a convolution's data, weights, bias and
    output), called ``passes`` times as a model calls its kernels. Small next to a convolution, not next to the copies
    and casts of a few microseconds that a model calls by the dozen."""
    import tvm
    from tvm import relax, te

    from autosearch.deploy.artifact import profile_calls

    bb = relax.BlockBuilder()
    params = [relax.Var(n, relax.TensorType((1,), "float32")) for n in "abc"]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(bb.emit_te(lambda a, b, c: te.compute((1,), lambda i: a[i] + b[i] + c[i],
                                                                        name="empty"), *params))
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
    args = [tvm.runtime.tensor(np.zeros(1, "float32"), tvm.cpu()) for _ in params]
    main = vm["main"]
    for _ in range(10):
        main(*args)
    intervals = []
    for _ in range(passes):
        times = profile_calls(vm, lambda: main(*args))
        intervals += [t.seconds / t.calls for name, t in times.items() if not name.startswith("vm.")]
    return statistics.median(intervals)


def in_turns(passes: dict[str, Callable[[], dict]], runs: int, rounds: int) -> dict[str, dict]:
    """Per profiler: each key's median milliseconds over ``runs`` forward passes, the profilers taking turns in
    ``rounds`` rounds (the order reversed every other round). On a shared machine a slow spell then hits every
    runtime alike, where profiled one after the other the same OpenVINO configuration read far apart
    (``docs/results.md``)."""
    from autosearch.deploy.timing import runs_per_round
    from experiments.lib.retime import turn_order

    per_run: dict[str, dict] = {label: defaultdict(list) for label in passes}
    for r, n in enumerate(runs_per_round(runs, rounds)):
        for label in turn_order(list(passes), r):
            for _ in range(n):
                for key, ms in passes[label]().items():
                    per_run[label][key].append(ms)
    return {label: {key: statistics.median(v) for key, v in times.items()} for label, times in per_run.items()}


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


def geometry_label(in_pixels: tuple[int, int], in_channels: int, out_pixels: tuple[int, int], out_channels: int,
                   kernel: int) -> str:
    """A convolution layer as both runtimes' profiles can name it: ``80x80x64 -> 80x80x80, 3x3``."""
    (h, w), (oh, ow) = in_pixels, out_pixels
    return f"{h}x{w}x{in_channels} -> {oh}x{ow}x{out_channels}, {kernel}x{kernel}"


def tvm_conv_geometry(name: str, args: list, *, layout: str = "NCHW") -> tuple | None:
    """(in pixels, in channels, out pixels, out channels, filter size) of a fused conv task from its name and
    arguments (a log header's ``args``), or None: NHWC in fp32 (OHWI weights), bf16 (packed weights, the filter
    height second) or bf16 Winograd (3x3), NCHW direct (OIHW), fp32 Winograd (3x3) in the task's ``layout`` (its
    transformed weights do not say which). A 1x1 layer computed on rows of 32
    or 16 pixels (:mod:`autosearch.tensor_units.pointwise`) counts its pixels, not its rows; a fused max pool (the
    convolution then writes the pooled image) is named by the convolution's own output, the size of its input."""
    from autosearch.tensor_units.conv import TASK_NAME
    from autosearch.tensor_units.pooling import WINDOW_MAX
    from autosearch.tensor_units.winograd import TASK_NAME as WINOGRAD_BF16

    if "conv2d" not in name or len(args) < 3:
        return None
    data, weight, out = (tuple(int(d) for d in a[0]) for a in (args[0], args[1], args[-1]))
    if len(data) != 4 or len(out) != 4:
        return None
    if TASK_NAME in name:
        nhwc, kernel = True, weight[1]
    elif WINOGRAD_BF16 in name:  # NHWC, its 3x3 weights transformed and packed
        nhwc, kernel = True, 3
    elif "winograd" in name:
        nhwc, kernel = layout == "NHWC", 3
    elif len(weight) == 4 and weight[0] == out[3] and weight[3] == data[3] and weight[1] == weight[2]:
        nhwc, kernel = True, weight[1]
    elif len(weight) == 4 and weight[:2] == (out[1], data[1]) and weight[2] == weight[3]:
        nhwc, kernel = False, weight[2]
    else:
        return None
    (h, w, c), (oh, ow, o) = ((data[1], data[2], data[3]), (out[1], out[2], out[3])) if nhwc else (
        (data[2], data[3], data[1]), (out[2], out[3], out[1]))
    if WINDOW_MAX in name:
        oh, ow = h, w
    if (h, w) == (oh, ow) and kernel == 1 and w in (16, 32):  # rows of pixels: the image's shape is not in the task
        return None if h * w != oh * ow else ("flat", h * w, c, o)
    return (h, w), c, (oh, ow), o, kernel


def ov_conv_geometry(compiled) -> dict[str, tuple]:
    """Node name -> (in pixels, in channels, out pixels, out channels, filter size) of every ungrouped convolution
    in OpenVINO's runtime model (logical NCHW shapes, whatever layout its kernels use)."""
    out = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) != "Convolution" or op.get_input_size() < 2:
            continue
        try:
            data, weight = (list(op.input(i).get_partial_shape().to_shape()) for i in (0, 1))
            shape = list(op.output(0).get_partial_shape().to_shape())
        except RuntimeError:  # a dynamic shape
            continue
        if len(data) == 4 and len(weight) == 4 and weight[1] == data[1] and weight[2] == weight[3]:
            out[op.get_friendly_name()] = ((data[2], data[3]), data[1], (shape[2], shape[3]), shape[1], weight[2])
    return out


def ov_variants(variants: list[tuple[str, bool]], make: Callable[[bool], tuple[Callable[[], dict], dict]]
                ) -> tuple[dict[str, Callable[[], dict]], dict[str, dict], list[str]]:
    """Each OpenVINO variant's (label, fp32) pass and geometry by ``make(fp32)`` (:func:`ov_profile`), and why any
    was left out. Its default precision is left out where OpenVINO cannot compile it (bf16 on a CPU with a bf16
    unit under a oneDNN capped below it, ``--onednn-max-isa``), as ``report`` leaves out that row; fp32, the
    comparison the profile is for, must compile."""
    passes: dict[str, Callable[[], dict]] = {}
    geometry: dict[str, dict] = {}
    notes: list[str] = []
    for label, fp32 in variants:
        try:
            passes[label], geometry[label] = make(fp32)
        except RuntimeError as exc:
            if fp32:
                raise
            notes.append(f"{label} left out: OpenVINO could not compile it here ({last_line(exc)})")
    return passes, geometry, notes


def ov_profile(path: str, inputs: dict[str, np.ndarray], threads: int, *,
               fp32: bool) -> tuple[Callable[[], dict], dict[str, tuple]]:
    """(one forward pass: (node name, node type, the kernel OpenVINO chose) -> milliseconds; each convolution node's
    geometry (:func:`ov_conv_geometry`)) of OpenVINO at its default precision or in fp32, compiled and warmed up."""
    import openvino

    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": True}
    if fp32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = openvino.Core().compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    for _ in range(3):
        request.infer(inputs)

    def one_pass() -> dict[tuple[str, str, str], float]:
        request.infer(inputs)
        return {(info.node_name, info.node_type, info.exec_type): info.real_time.total_seconds() * 1e3
                for info in request.get_profiling_info() if str(info.status).endswith("EXECUTED")}

    return one_pass, ov_conv_geometry(compiled)


def per_layer(tvm_rows: list[dict], log_path: str, ov: dict[str, tuple[dict, dict]]) -> list[dict]:
    """Per convolution geometry: the tuned model's milliseconds in the model (its kernels of that geometry) and each
    OpenVINO profile's (its nodes of that geometry), with how many of each. A 1x1 layer the tuned model runs on
    rows of pixels is matched by its pixel count and channels."""
    from autosearch.frontend.alternatives import task_layouts
    from autosearch.records import read_log

    headers = read_log(log_path).tasks
    layers: dict[str, dict] = {}
    flat: dict[tuple, str] = {}  # ("flat", pixels, in, out) -> the label OpenVINO's 1x1 layer of that geometry has
    for label, (nodes, geometry) in ov.items():
        for (node, _, _), ms in nodes.items():
            g = geometry.get(node)
            if g is None:
                continue
            name = geometry_label(*g)
            if g[4] == 1 and g[0] == g[2]:
                flat[("flat", g[0][0] * g[0][1], g[1], g[3])] = name
            row = layers.setdefault(name, {"layer": name, "tvm": 0.0, "tvm_n": 0})
            row[label] = row.get(label, 0.0) + ms
            row[f"{label}_n"] = row.get(f"{label}_n", 0) + 1
    for r in tvm_rows:
        header = headers.get(r["key"])
        g = (tvm_conv_geometry(header["name"], header["args"], layout=task_layouts(header.get("lowering") or {})[0])
             if header else None)
        if g is None:
            continue
        name = flat.get(g) if g[0] == "flat" else geometry_label(*g)
        if name is None:
            continue
        row = layers.setdefault(name, {"layer": name, "tvm": 0.0, "tvm_n": 0})
        row["tvm"] += r["in_model"]
        row["tvm_n"] += r["calls"]
    return sorted(layers.values(), key=lambda row: -row["tvm"])


def layer_table(rows: list[dict], labels: list[str]) -> str:
    """Per convolution geometry: the tuned model's ms and calls, each OpenVINO profile's, and the ratio to the
    first (tuned / OpenVINO: above 1 the tuned layer is slower); the sums last."""
    body = []
    for r in rows:
        line = [r["layer"], f"{fmt(r['tvm'], 3)} ({r['tvm_n']})"]
        line += [f"{fmt(r.get(label, 0.0), 3)} ({r.get(label + '_n', 0)})" for label in labels]
        first = r.get(labels[0], 0.0)
        line.append(f"{r['tvm'] / first:.2f}x" if first and r["tvm"] else "-")
        body.append(line)
    both = [r for r in rows if r["tvm"] and r.get(labels[0])]
    tvm, first = sum(r["tvm"] for r in both), sum(r[labels[0]] for r in both)
    body.append([f"**layers in both ({len(both)})**", fmt(tvm, 3),
                 *(fmt(sum(r.get(label, 0.0) for r in both), 3) for label in labels),
                 f"{tvm / first:.2f}x" if first else "-"])
    return markdown_table(["convolution (H x W x C, in -> out, filter)", "TVM tuned ms (calls)",
                           *(f"{label} ms (nodes)" for label in labels), f"tuned / {labels[0]}"], body,
                          align="l" + "r" * (len(labels) + 2))


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
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool

    import onnx

    from autosearch.deploy.timing import openvino_default_precision
    from autosearch.frontend.importer import load_onnx, resolve_input_shapes

    name, proto = load_onnx(args.model)
    shapes = resolve_input_shapes(proto, {})
    rng = np.random.default_rng(0)
    inputs = {k: rng.uniform(0, 1, s).astype("float32") for k, s in shapes.items()}
    columns: dict[str, dict[str, float]] = {}
    items: dict[str, list[tuple[str, str, float]]] = {}
    ov: dict[str, tuple[dict, dict]] = {}
    # OpenVINO at its default precision only where that is not fp32 (a CPU with a bf16 unit): here it is the same run
    variants = [("OpenVINO fp32", True)]
    if openvino_default_precision() != "f32":
        variants.insert(0, ("OpenVINO default precision", False))
    print("building TVM tuned, compiling OpenVINO ...", file=sys.stderr, flush=True)
    with TVMProfile(args.model, args.db, inputs, args.target) as tvm_profile, \
            tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(proto, path)
        ov_passes, geometry, notes = ov_variants(
            variants, lambda fp32: ov_profile(path, inputs, args.threads, fp32=fp32))
        passes: dict[str, Callable[[], dict]] = {"TVM tuned": tvm_profile.one_pass, **ov_passes}
        for note in notes:
            print(note, file=sys.stderr, flush=True)
        print(f"profiling {', '.join(passes)} in {args.rounds} rounds ...", file=sys.stderr, flush=True)
        medians = in_turns(passes, args.runs, args.rounds)
        compiled_kernels = tvm_profile.kernels
        call_cost = tvm_profile.call_cost
    kernels = medians.pop("TVM tuned")
    items["TVM tuned"] = sorted(((k, tvm_category(k), ms) for k, ms in kernels.items()), key=lambda x: -x[2])
    for label, nodes in medians.items():
        ov[label] = (nodes, geometry[label])
        items[label] = sorted(((f"{n} ({t}, {e})", ov_category(t), ms) for (n, t, e), ms in nodes.items()),
                              key=lambda x: -x[2])
    for label, rows in items.items():
        by: dict[str, float] = defaultdict(float)
        for _, category, ms in rows:
            by[category] += ms
        columns[label] = dict(by)
    title = f"{name}: per-kernel profile, {args.threads} threads ({host_label()})"
    parts = [f"**{title}**; database `{args.db}`, {args.runs} profiled passes each, taking turns in {args.rounds} "
             f"rounds, medians; TVM's calls each less the profiler's own {call_cost * 1e6:.1f} us (an empty "
             "kernel's, so timed)" + ("" if len(variants) > 1 else "; OpenVINO's default precision is fp32 on this CPU")
             + "".join(f"; {note}" for note in notes) + ".", "",
             category_table(columns), ""]
    for label, rows in items.items():
        parts += [f"**{label}**: the {args.top} slowest of {len(rows)}", "",
                  top_table(rows, sum(ms for _, _, ms in rows), args.top), ""]
    if args.log:
        print("the kernels as tuned ...", file=sys.stderr, flush=True)
        rows = as_tuned(kernels, compiled_kernels, args.log, args.retime)
        parts += ["**Convolutions layer by layer** (matched by geometry; each side's milliseconds in its own profile, "
                  "summed over the layers of that geometry)", "", layer_table(per_layer(rows, args.log, ov), list(ov)),
                  ""]
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
