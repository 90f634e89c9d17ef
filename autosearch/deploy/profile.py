"""Where a tuned model's milliseconds go, kernel by kernel, beside OpenVINO's own per-node profile.

``report`` says how far the whole model is from the runtimes a user would pick instead; this says where. The tuned
model is built from a database as ``compile`` builds it and each call of the Relax VM is timed
(:meth:`~autosearch.deploy.artifact.LoadedModel.profile`); OpenVINO, in fp32 and at its default precision where that
is not fp32 (bf16 on a CPU with a bf16 unit), by its ``PERF_COUNT`` counters, per node. They take turns in rounds of
forward passes, in this process, on the same threads, so a slow spell of a shared machine slows all of them alike
(profiled one after the other, one configuration of OpenVINO read far apart: docs/results.md). Each kernel's and
node's figure is its median over the passes.

Kernels and nodes are grouped into categories (convolutions and matrix products, pooling, layout and casts, the
rest), and the convolutions are set beside OpenVINO's layer by layer, matched by geometry (pixels and channels in
and out, filter size; a 1x1 layer the tuned model computes on rows of pixels by its pixel count): the question a
tuned model's profile answers is which layers lose to OpenVINO, not which kernel names differ.

TVM 0.27 has no runtime profiler for the Relax VM, so the hook that times each call is a Python function: its own
cost per call is measured on an empty kernel and taken off every call (:func:`instrument_cost`); OpenVINO's counters
are its own. Compare kernels and categories here, and take end-to-end latency from ``report``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from autosearch.tables import fmt, markdown_table

CATEGORIES = ("convolution", "pooling", "layout and casts", "other")
TUNED = "TVM tuned"
OPENVINO_FP32 = "OpenVINO fp32"
OPENVINO_DEFAULT = "OpenVINO default precision"
PREPACKED = "_prepacked"  # the suffix a kernel's name gets in the library when its weights are prepacked
WARM_UP_PASSES = 3  # first-touch of the weights and the workspace, before anything is timed


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


def _bold(label: str) -> str:
    return f"**{label}**"


@dataclass
class Table:
    """A table of the profile as rows of cells, built once and written as Markdown (:meth:`markdown`) or printed by
    the CLI (:func:`autosearch.console.print_profile`). The first ``left`` columns are text, the rest figures."""

    header: list[str]
    rows: list[list[str]]
    left: int = 1
    aligned: bool = False  # Markdown's columns aligned so (left, then right), not left by default

    def markdown(self) -> str:
        align = "l" * self.left + "r" * (len(self.header) - self.left) if self.aligned else ""
        return markdown_table(self.header, self.rows, align=align)


@dataclass
class KernelTime:
    """One kernel of the tuned model, or one node of OpenVINO's, in one forward pass (its calls summed)."""

    name: str  # TVM: the kernel's symbol; OpenVINO: "node (type, the kernel OpenVINO chose)"
    category: str
    ms: float


@dataclass
class LayerRow:
    """One convolution geometry: its milliseconds in each runtime, summed over its layers, and how many."""

    layer: str  # "80x80x64 -> 80x80x80, 3x3" (H x W x C in -> out, filter)
    ms: dict[str, float] = field(default_factory=dict)  # runtime -> milliseconds
    count: dict[str, int] = field(default_factory=dict)  # runtime -> calls (TVM) or nodes (OpenVINO)

    def ratio(self, peer: str) -> float | None:
        """The tuned model's time over ``peer``'s on this geometry (above 1: the tuned layers are slower)."""
        tuned, other = self.ms.get(TUNED, 0.0), self.ms.get(peer, 0.0)
        return tuned / other if tuned and other else None


@dataclass
class AsTuned:
    """A kernel of the tuned model beside its task as the run measured it: its milliseconds in the model and its
    task's best latency times the calls a forward pass makes (the run's own estimate of the model, re-timed where
    its finalists were: :meth:`~autosearch.records.LogContents.best_seconds`). A kernel slower in the model than as
    tuned meets the model's caches and neighbours, not its own schedule's limits."""

    kernel: str
    key: str  # its task's workload key
    category: str
    calls: int
    in_model: float  # ms per forward pass, its calls summed
    tuned: float  # ms, the task's best x calls
    extra: dict[str, float] = field(default_factory=dict)  # further columns (ms) a caller adds: e.g. re-timed alone


@dataclass
class LayerProfile:
    """A profile of the tuned model and OpenVINO's, taken in turns (:func:`layer_profile`)."""

    model: str
    runtimes: list[str]  # TVM tuned first, then each OpenVINO profile taken
    kernels: dict[str, list[KernelTime]]  # runtime -> its kernels or nodes, slowest first
    layers: list[LayerRow]  # per convolution geometry, the tuned model's slowest first
    tasks: list[TunedKernel]  # the tuned model's kernels that run a task, with their tasks
    runs: int
    rounds: int
    threads: int
    call_cost: float  # seconds the profiler's hook adds to each TVM call, taken off each
    notes: list[str] = field(default_factory=list)  # what was left out, and why
    as_tuned: list[AsTuned] = field(default_factory=list)  # with a tuning log: each kernel beside its task as tuned
    log: str = ""  # that log

    @property
    def categories(self) -> dict[str, dict[str, float]]:
        """Runtime -> category -> milliseconds per forward pass."""
        out = {}
        for runtime, rows in self.kernels.items():
            by: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
            for row in rows:
                by[row.category] += row.ms
            out[runtime] = by
        return out

    def total(self, runtime: str) -> float:
        return sum(row.ms for row in self.kernels[runtime])

    def category_table(self, *, strong: Callable[[str], str] = _bold) -> Table:
        """Per category, each runtime's milliseconds, then all of them."""
        columns = self.categories
        rows = [[c, *(fmt(columns[r][c], 3) for r in self.runtimes)] for c in CATEGORIES]
        rows.append([strong("all"), *(fmt(self.total(r), 3) for r in self.runtimes)])
        return Table(["category", *(f"{r} ms" for r in self.runtimes)], rows)

    def kernel_table(self, runtime: str, top: int) -> tuple[str, Table]:
        """("the N slowest of M", the table) of ``runtime``'s ``top`` slowest kernels or nodes and their shares."""
        items, total = self.kernels[runtime], self.total(runtime) or 1.0
        return (f"the {min(top, len(items))} slowest of {len(items)}",
                Table(["kernel / node", "category", "ms", "share"],
                      [[k.name[:90], k.category, fmt(k.ms, 3), f"{100 * k.ms / total:.1f}%"] for k in items[:top]],
                      left=2))

    def markdown(self, top: int = 15) -> str:
        """The tables: per category, each runtime's slowest ``top`` kernels or nodes, the convolutions layer by
        layer and, with a tuning log, the ``top`` kernels that lose most in the model against their tasks as tuned."""
        parts = [f"{self.runs} profiled passes each, taking turns in {self.rounds} rounds, {self.threads} threads, "
                 f"medians; TVM's calls each less the profiler's own {self.call_cost * 1e6:.1f} us"
                 + "".join(f"; {note}" for note in self.notes), "", self.category_table().markdown(), ""]
        for runtime in self.runtimes:
            title, table = self.kernel_table(runtime, top)
            parts += [f"**{runtime}**: {title}", "", table.markdown(), ""]
        peers = self.runtimes[1:]
        if peers and self.layers:
            parts += ["**Convolutions layer by layer** (matched by geometry; each runtime's milliseconds summed over "
                      "its layers of that geometry)", "", layer_table(self.layers, peers).markdown(), ""]
        if self.as_tuned:
            parts += [f"**{TUNED}, in the model against as tuned** (`{self.log}`: each task's best latency x the calls "
                      f"a forward pass makes); the {top} kernels that lose most in the model", "",
                      as_tuned_table(self.as_tuned, top).markdown(), ""]
        return "\n".join(parts)


def layer_table(layers: list[LayerRow], peers: list[str], *, strong: Callable[[str], str] = _bold,
                by_ratio: bool = False) -> Table:
    """Per convolution geometry: the tuned model's milliseconds (calls), each peer's (nodes) and the ratio to the
    first peer, in ``layers``' order or, ``by_ratio``, the layers furthest behind first; then the layers both have."""
    first = peers[0]
    if by_ratio:
        layers = sorted((r for r in layers if r.ratio(first)), key=lambda r: -r.ratio(first))
    body = []
    for row in layers:
        ratio = row.ratio(first)
        body.append([row.layer, f"{fmt(row.ms.get(TUNED, 0.0), 3)} ({row.count.get(TUNED, 0)})",
                     *(f"{fmt(row.ms.get(p, 0.0), 3)} ({row.count.get(p, 0)})" for p in peers),
                     f"{ratio:.2f}x" if ratio else "-"])
    both = [row for row in layers if row.ratio(first)]
    tuned, other = sum(r.ms[TUNED] for r in both), sum(r.ms[first] for r in both)
    body.append([strong(f"layers in both ({len(both)})"), fmt(tuned, 3),
                 *(fmt(sum(r.ms.get(p, 0.0) for r in both), 3) for p in peers),
                 f"{tuned / other:.2f}x" if other else "-"])
    return Table(["convolution (H x W x C, in -> out, filter)", f"{TUNED} ms (calls)",
                  *(f"{p} ms (nodes)" for p in peers), f"tuned / {first}"], body, aligned=True)


def as_tuned_rows(tasks: list[TunedKernel], log) -> list[AsTuned]:
    """Each kernel of ``tasks`` whose task the tuning log (:class:`~autosearch.records.LogContents`) has a valid
    trial of, beside that task's best."""
    rows = []
    for kernel in tasks:
        best = log.best_seconds(kernel.key)
        if best is not None:
            rows.append(AsTuned(kernel.name, kernel.key, tvm_category(kernel.name), kernel.calls, kernel.ms,
                                best * 1e3 * kernel.calls))
    return rows


def as_tuned_table(rows: list[AsTuned], limit: int, *, strong: Callable[[str], str] = _bold) -> Table:
    """Per category, all, then the ``limit`` kernels that lose most in the model: in the model against as tuned
    (and each ``extra`` column the rows carry)."""
    extra = list(dict.fromkeys(name for r in rows for name in r.extra))

    def line(label: str, group: list[AsTuned], calls="") -> list[str]:
        model, tuned = sum(r.in_model for r in group), sum(r.tuned for r in group)
        return [label, str(calls), fmt(model, 3), fmt(tuned, 3), f"{model / tuned:.2f}x" if tuned else "-",
                *(fmt(sum(r.extra.get(name, 0.0) for r in group), 3) for name in extra)]

    table = [line(strong(c), [r for r in rows if r.category == c]) for c in CATEGORIES
             if any(r.category == c for r in rows)]
    table.append(line(strong("all tuned kernels"), rows))
    for r in sorted(rows, key=lambda r: r.tuned - r.in_model)[:limit]:
        table.append(line(r.kernel[:70], [r], r.calls))
    return Table(["kernel", "calls", "in the model ms", "as tuned ms", "in the model / as tuned",
                  *(f"{name} ms" for name in extra)], table)


# ------------------------------------------------------------------------------------------------- profilers
class TunedProfiler:
    """The tuned model, built and loaded; :meth:`one_pass` times each call of the Relax VM in one forward pass, each
    call less :attr:`call_cost` (:func:`instrument_cost`). The library is written to ``out_dir``, which must outlive
    the profiling (:func:`layer_profile` keeps it in a temporary directory until the passes are done)."""

    def __init__(self, imported, target, database, out_dir: str, args: list, *, policy, layer_layouts=None,
                 threads: int | None = None) -> None:
        from autosearch.deploy.artifact import load_model
        from autosearch.deploy.build import compile_model

        library = os.path.join(out_dir, "model.so")
        compiled = compile_model(imported.relax_mod, target, imported.tasks, database, library, winograd=policy,
                                 layout=imported.layout, fast_math=imported.fast_math, layer_layouts=layer_layouts)
        self.kernels = compiled.kernels
        self.mismatch = compiled.mismatch  # why the "tuned" model is the untuned one, or None
        self._loaded = load_model(library, threads=threads)
        self._args = args
        for _ in range(WARM_UP_PASSES):
            self._loaded(*self._args)
        self.call_cost = instrument_cost()

    def one_pass(self) -> dict[str, float]:
        """Kernel name -> milliseconds in one forward pass (its calls summed), each call less the profiler's own
        cost (never below zero); the VM's own builtins left out."""
        return {name: max(0.0, t.seconds - t.calls * self.call_cost) * 1e3
                for name, t in self._loaded.profile(*self._args).items() if not name.startswith("vm.")}


def instrument_cost(passes: int = 2000) -> float:
    """Seconds the VM's instrument hook adds to a call it times (:func:`autosearch.deploy.artifact.profile_calls`):
    the median interval of an empty kernel of three tensor arguments, called ``passes`` times as a model calls its
    kernels. Small next to a convolution, not next to the copies and casts of a few microseconds that a model calls
    by the dozen."""
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


def ov_profiler(path: str, inputs: dict[str, np.ndarray], threads: int, *,
                fp32: bool) -> tuple[Callable[[], dict], dict[str, tuple]]:
    """(one forward pass: (node name, node type, the kernel OpenVINO chose) -> milliseconds; each convolution node's
    geometry (:func:`ov_conv_geometry`)) of OpenVINO at its default precision or in fp32, compiled and warmed up."""
    import openvino

    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": True}
    if fp32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = openvino.Core().compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    for _ in range(WARM_UP_PASSES):
        request.infer(inputs)

    def one_pass() -> dict[tuple[str, str, str], float]:
        request.infer(inputs)
        return {(info.node_name, info.node_type, info.exec_type): info.real_time.total_seconds() * 1e3
                for info in request.get_profiling_info() if str(info.status).endswith("EXECUTED")}

    return one_pass, ov_conv_geometry(compiled)


def ov_profilers(variants: list[tuple[str, bool]], make: Callable[[bool], tuple[Callable[[], dict], dict]]
                 ) -> tuple[dict[str, Callable[[], dict]], dict[str, dict], list[str]]:
    """Each OpenVINO variant's (label, fp32) pass and geometry by ``make(fp32)`` (:func:`ov_profiler`), and why any
    was left out. Its default precision is left out where OpenVINO cannot compile it (bf16 on a CPU with a bf16 unit
    under a oneDNN capped below it, ``ONEDNN_MAX_CPU_ISA``), as ``report`` leaves out that row; fp32, the comparison
    every CPU has, must compile."""
    from autosearch.errors import last_line

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


def in_turns(passes: dict[str, Callable[[], dict]], runs: int, rounds: int) -> dict[str, dict]:
    """Per profiler: each key's median milliseconds over ``runs`` forward passes, the profilers taking turns in
    ``rounds`` rounds (:func:`~autosearch.deploy.timing.turn_order`)."""
    from autosearch.deploy.timing import runs_per_round, turn_order

    per_run: dict[str, dict] = {label: defaultdict(list) for label in passes}
    for r, n in enumerate(runs_per_round(runs, rounds)):
        for label in turn_order(list(passes), r):
            for _ in range(n):
                for key, ms in passes[label]().items():
                    per_run[label][key].append(ms)
    return {label: {key: statistics.median(v) for key, v in times.items()} for label, times in per_run.items()}


# -------------------------------------------------------------------------------------------------- geometry
def geometry_label(in_pixels: tuple[int, int], in_channels: int, out_pixels: tuple[int, int], out_channels: int,
                   kernel: int) -> str:
    """A convolution layer as both runtimes' profiles can name it: ``80x80x64 -> 80x80x80, 3x3``."""
    (h, w), (oh, ow) = in_pixels, out_pixels
    return f"{h}x{w}x{in_channels} -> {oh}x{ow}x{out_channels}, {kernel}x{kernel}"


def tvm_conv_geometry(name: str, args: list, *, layout: str = "NCHW") -> tuple | None:
    """(in pixels, in channels, out pixels, out channels, filter size) of a fused conv task from its name and
    arguments (a task's ``args``), or None: NHWC in fp32 (OHWI weights), bf16 (packed weights, the filter height
    second) or bf16 Winograd (3x3), NCHW direct (OIHW), fp32 Winograd (3x3) in the task's ``layout`` (its
    transformed weights do not say which). A 1x1 layer computed on rows of 32 or 16 pixels
    (:mod:`autosearch.tensor_units.pointwise`) gives ``("flat", pixels, in, out)``: its rows do not say the image's
    shape; a fused max pool (the convolution then writes the pooled image) is named by the convolution's own
    output, the size of its input."""
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


@dataclass
class TunedKernel:
    """A kernel of the tuned model's profile with what the geometry needs: its milliseconds in the model, its calls
    per forward pass, and its task's header (a log's or a database's: ``name``, ``args``, ``lowering``)."""

    name: str
    ms: float
    calls: int
    key: str  # its task's workload key
    header: dict | None


def per_layer(tuned: list[TunedKernel], ov: dict[str, tuple[dict, dict]]) -> list[LayerRow]:
    """Per convolution geometry: the tuned model's milliseconds (its kernels of that geometry) and each OpenVINO
    profile's (its nodes of that geometry: ``ov`` maps a label to (node -> ms, node -> geometry)), with how many of
    each; the tuned model's slowest first. A 1x1 layer the tuned model runs on rows of pixels is matched by its pixel
    count and channels."""
    from autosearch.frontend.alternatives import task_layouts

    layers: dict[str, LayerRow] = {}
    flat: dict[tuple, str] = {}  # ("flat", pixels, in, out) -> the label OpenVINO's 1x1 layer of that geometry has
    for label, (nodes, geometry) in ov.items():
        for (node, _, _), ms in nodes.items():
            g = geometry.get(node)
            if g is None:
                continue
            name = geometry_label(*g)
            if g[4] == 1 and g[0] == g[2]:
                flat[("flat", g[0][0] * g[0][1], g[1], g[3])] = name
            row = layers.setdefault(name, LayerRow(name))
            row.ms[label] = row.ms.get(label, 0.0) + ms
            row.count[label] = row.count.get(label, 0) + 1
    for kernel in tuned:
        header = kernel.header
        g = (tvm_conv_geometry(header["name"], header["args"], layout=task_layouts(header.get("lowering") or {})[0])
             if header else None)
        if g is None:
            continue
        name = flat.get(g) if g[0] == "flat" else geometry_label(*g)
        if name is None:
            continue
        row = layers.setdefault(name, LayerRow(name))
        row.ms[TUNED] = row.ms.get(TUNED, 0.0) + kernel.ms
        row.count[TUNED] = row.count.get(TUNED, 0) + kernel.calls
    return sorted(layers.values(), key=lambda row: -row.ms.get(TUNED, 0.0))


def tuned_kernels(profile: dict[str, float], kernels: list, headers: dict[str, dict]) -> list[TunedKernel]:
    """The kernels of a tuned model's ``profile`` (name -> ms) that run a task: each with its calls (the compiled
    model's :class:`~autosearch.deploy.build.Kernel` list) and its task's header (``headers``: workload key ->
    header)."""
    by_name = {k.name: k for k in kernels}
    out = []
    for name, ms in profile.items():
        kernel = by_name.get(name.removesuffix(PREPACKED))
        if kernel is not None and kernel.calls:
            out.append(TunedKernel(name, ms, kernel.calls, kernel.workload_key, headers.get(kernel.workload_key)))
    return out


# ---------------------------------------------------------------------------------------------------- the run
def layer_profile(model: str, db: str, *, target, policy, layer_layouts: dict[str, str] | None = None,
                  layout: str, fast_math: str, input_shape: str | None = None, runs: int, rounds: int,
                  threads: int | None = None, log: str | None = None, plot: str | None = None,
                  on_message: Callable[[str], None] | None = None) -> LayerProfile:
    """Profile ``model`` built with the database ``db`` (lowered as ``policy``, ``layout``, ``fast_math`` and
    ``layer_layouts`` say: :func:`autosearch.api.profile` reads them from the database) and OpenVINO's (when
    installed) on the same random input, taking turns; with ``log`` (the run's tuning log) each kernel beside its
    task as tuned; the PNG at ``plot``. ``on_message``: a line at each step."""
    import onnx
    import tvm

    from autosearch.deploy.build import import_to_run_here
    from autosearch.deploy.report import OPENVINO_MISSING
    from autosearch.deploy.timing import openvino_default_precision

    say = on_message or (lambda line: None)
    database, imported, threads = import_to_run_here("profile", model, db, target=target, policy=policy,
                                                     layout=layout, fast_math=fast_math, input_shape=input_shape,
                                                     threads=threads)
    rng = np.random.default_rng(0)
    inputs = {name: rng.uniform(0, 1, shape).astype("float32") for name, shape in imported.input_shapes.items()}
    precision = openvino_default_precision()
    notes = []
    if precision is None:
        notes.append(OPENVINO_MISSING)
        say(OPENVINO_MISSING)
    variants = [] if precision is None else [(OPENVINO_FP32, True)]
    if precision not in (None, "f32"):
        variants.insert(0, (f"{OPENVINO_DEFAULT} ({precision})", False))
    say("building the tuned model" + (", compiling OpenVINO" if variants else "") + " ...")
    with tempfile.TemporaryDirectory(prefix="autosearch-profile-") as tmp:
        args = [tvm.runtime.tensor(v, tvm.cpu()) for v in inputs.values()]
        tuned = TunedProfiler(imported, target, database, tmp, args, policy=policy, layer_layouts=layer_layouts,
                              threads=threads)
        if tuned.mismatch:
            notes.append(f"warning: {tuned.mismatch}")
            say(f"warning: {tuned.mismatch}")
        path = os.path.join(tmp, "model.onnx")
        if variants:
            onnx.save(imported.onnx_model, path)
        ov_passes, geometry, left_out = ov_profilers(
            variants, lambda fp32: ov_profiler(path, inputs, threads, fp32=fp32))
        notes += left_out
        passes: dict[str, Callable[[], dict]] = {TUNED: tuned.one_pass, **ov_passes}
        say(f"profiling {', '.join(passes)}: {runs} passes each in {rounds} rounds ...")
        medians = in_turns(passes, runs, rounds)
    headers = {t.workload_key: t.to_json() for t in imported.tasks}
    tuned_ms = medians.pop(TUNED)
    kernels = {TUNED: sorted((KernelTime(k, tvm_category(k), ms) for k, ms in tuned_ms.items()),
                             key=lambda k: -k.ms)}
    for label, nodes in medians.items():
        kernels[label] = sorted((KernelTime(f"{n} ({t}, {e})", ov_category(t), ms) for (n, t, e), ms in nodes.items()),
                                key=lambda k: -k.ms)
    tasks = tuned_kernels(tuned_ms, tuned.kernels, headers)
    layers = per_layer(tasks, {label: (nodes, geometry[label]) for label, nodes in medians.items()})
    result = LayerProfile(model=imported.name, runtimes=list(kernels), kernels=kernels, layers=layers, tasks=tasks,
                          runs=runs, rounds=rounds, threads=threads, call_cost=tuned.call_cost, notes=notes)
    if log:
        from autosearch.records import read_log

        result.as_tuned, result.log = as_tuned_rows(tasks, read_log(log)), log
    if plot:
        plot_profile(result, plot)
    return result


def plot_profile(profile: LayerProfile, path: str) -> None:
    """Each runtime's forward pass as a bar of its categories and, where OpenVINO was profiled, the convolution
    geometries' tuned / OpenVINO ratios (above 1: the tuned layers are slower)."""
    from autosearch.plots import figure, save

    peers = profile.runtimes[1:]
    rows = [r for r in profile.layers if peers and r.ratio(peers[0])]
    bars = 0.6 + 0.45 * len(profile.runtimes)  # inches: the categories' panel, a bar per runtime
    layers = 0.9 + 0.16 * len(rows)  # the layers' panel, a bar per geometry
    fig, axes = figure(2 if rows else 1, size=(9, bars + (layers if rows else 0.4)), grid="x",
                       heights=[bars, layers] if rows else None)
    ax = axes[0][0]
    columns = profile.categories
    left = np.zeros(len(profile.runtimes))
    for category in CATEGORIES:
        widths = np.array([columns[r][category] for r in profile.runtimes])
        ax.barh(profile.runtimes, widths, left=left, label=category)
        left += widths
    ax.set_xlabel("ms per forward pass (profiled)")
    fig.suptitle(f"{profile.model}: per-kernel profile, {profile.threads} threads", fontsize=9)
    ax.invert_yaxis()
    ax.legend(fontsize=8, ncol=len(CATEGORIES), loc="lower left", bbox_to_anchor=(0.0, 1.0), frameon=False)
    if rows:
        ax = axes[1][0]
        ratios = [r.ratio(peers[0]) for r in rows]
        ax.barh([r.layer for r in rows], ratios, color=["tab:red" if x > 1 else "tab:green" for x in ratios])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel(f"tuned / {peers[0]} (per convolution geometry; above 1: tuned slower)")
        ax.tick_params(axis="y", labelsize=6)
        ax.invert_yaxis()
    save(fig, path)
