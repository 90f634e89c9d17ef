"""ONNX model (built-in YOLO or a user's file) -> Relax -> MetaSchedule tuning tasks.

The built-in models live in the ``autosearch.workloads`` plug-in package; the core finds them by name through
the plug-in registry (:data:`BUILTIN_MODELS`, a view of :mod:`autosearch.plugins`), resolved lazily, so importing
the core imports no model builder.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import re
import traceback
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import onnx

from autosearch import plugins
from autosearch.errors import UserError, last_line
from autosearch.frontend.lowering import DEFAULT_FAST_MATH, OLD_LOWERING
from autosearch.frontend.static_graph import stderr_to_log
from autosearch.frontend.task import TuningTask, schedulable, task_from_module

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImportedModel:
    """A model ready for tuning: the Relax module TVM compiles and the tasks it is made of."""

    name: str
    onnx_model: onnx.ModelProto  # the graph TVM imported: inputs fixed, shape arithmetic folded (static_graph)
    input_shapes: dict[str, tuple[int, ...]]
    relax_mod: Any  # before legalisation: what compile_relax wants, so database keys match
    tasks: list[TuningTask]
    winograd: str = "auto"  # how conv2d was lowered (autosearch.frontend.lowering); the tuned build must match
    layout: str = "NCHW"  # conv2d layout of the lowering, or "auto": both, tuned side by side (frontend.alternatives)
    fast_math: str = DEFAULT_FAST_MATH  # "on": vectorisable sigmoid / exp / softmax (autosearch.frontend.lowering)
    precision: str = OLD_LOWERING["precision"]  # fp32 / bf16 / auto: bf16 convolutions (autosearch.tensor_units)
    precision_note: str = ""  # why the precision is what it is on this target (run headers say it)
    layout_note: str = ""  # with layout "auto": why it tunes one layout's model, if it does (run headers say it)

    @property
    def target(self):
        """The TVM target the tasks were extracted for."""
        return self.tasks[0].target

    @property
    def flops(self) -> float:
        """FLOPs of one forward pass as TVM counts them, each layer once (its direct alternative when
        ``--winograd auto`` offers two; the NCHW model when ``--layout auto`` offers two)."""
        from autosearch.frontend.alternatives import task_layouts

        first = self.layouts[0] if self.layouts else ""
        return sum(t.flops * t.weight for t in self.tasks
                   if t.lowering.get("algorithm") not in ("winograd", "bf16", "bf16-winograd")
                   and first in task_layouts(t.lowering))

    @property
    def layouts(self) -> tuple[str, ...]:
        """The concrete layouts whose models the tasks make up: two where ``--layout auto`` tunes both."""
        from autosearch.frontend.alternatives import concrete_layouts

        return concrete_layouts(t.lowering for t in self.tasks)

    @property
    def alternatives(self) -> int:
        """Layers offered to the tuner both ways (direct and winograd)."""
        return sum(1 for t in self.tasks if t.lowering.get("algorithm") == "winograd")

    @property
    def bf16_alternatives(self) -> int:
        """Layers offered to the tuner in fp32 and in bf16."""
        return sum(1 for t in self.tasks if t.lowering.get("algorithm") == "bf16")

    @property
    def bf16_winograd_alternatives(self) -> int:
        """Layers offered to the tuner as bf16 Winograd too (on the AVX512-BF16 dot product)."""
        return sum(1 for t in self.tasks if t.lowering.get("algorithm") == "bf16-winograd")

    @property
    def bf16_tasks(self) -> int:
        """Tasks of bf16 convolutions, matmuls and attentions on a bf16 unit (alternatives or not)."""
        from autosearch.tensor_units.intrinsics import rounds_to_bf16

        return sum(1 for t in self.tasks if rounds_to_bf16(t.name, ()))


# name -> "module:function", a view of the plug-in registry's group "autosearch.workloads" (autosearch.plugins);
# the function builds the model's ONNX graph (deterministic random weights from a keyword-only ``seed``), so
# nothing is downloaded.
BUILTIN_MODELS: Mapping[str, str] = plugins.View(plugins.WORKLOADS)


def build_model(name: str, *, seed: int = 0) -> onnx.ModelProto:
    """The built-in model ``name`` with random weights drawn from ``seed``."""
    if name not in BUILTIN_MODELS:
        raise UserError(f"unknown built-in model {name!r}; built-in models: {', '.join(sorted(BUILTIN_MODELS))}")
    return plugins.load(plugins.WORKLOADS, name)(seed=seed)


def load_onnx(model: str, *, seed: int = 0) -> tuple[str, onnx.ModelProto]:
    """A built-in model name or a path to an ``.onnx`` file -> (display name, ModelProto)."""
    if model in BUILTIN_MODELS:
        return model, build_model(model, seed=seed)
    looks_like_path = model.endswith(".onnx") or os.sep in model or os.path.exists(model)
    if not looks_like_path:
        raise UserError(f"unknown model {model!r}; built-in models: {', '.join(sorted(BUILTIN_MODELS))}, "
                        "or a path to an .onnx file")
    if not os.path.isfile(model):
        raise UserError(f"ONNX file not found: {model}")
    try:
        proto = onnx.load(model)
    except Exception as exc:  # DecodeError, OSError, ...
        raise UserError(f"cannot read {model} as an ONNX model: {type(exc).__name__}") from exc
    if not proto.graph.node:
        raise UserError(f"{model} is not an ONNX model (no graph nodes)")
    return os.path.splitext(os.path.basename(model))[0], proto


def parse_input_shapes(spec: str | None) -> dict[str, tuple[int, ...]]:
    """``--input-shape images:1,3,320,320`` (several separated by ';'); a bare shape names no input."""
    if not spec:
        return {}
    out: dict[str, tuple[int, ...]] = {}
    for part in spec.split(";"):
        name, sep, dims = part.rpartition(":") if ":" in part else ("", "", part)
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError as exc:
            raise UserError(f"malformed --input-shape {spec!r}: use NAME:1,3,640,640") from exc
        if not shape or any(d <= 0 for d in shape):
            raise UserError(f"malformed --input-shape {spec!r}: dimensions must be positive integers")
        out[name.strip()] = shape
    return out


def _graph_inputs(proto: onnx.ModelProto) -> list[tuple[str, list[int | str | None], int]]:
    initializers = {i.name for i in proto.graph.initializer}
    out = []
    for value in proto.graph.input:
        if value.name in initializers:
            continue
        ttype = value.type.tensor_type
        dims: list[int | str | None] = []
        for d in ttype.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None))
        out.append((value.name, dims, ttype.elem_type))
    return out


def resolve_input_shapes(proto: onnx.ModelProto, overrides: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Static shapes for every graph input: the file's own, with ``--input-shape`` overriding."""
    inputs = _graph_inputs(proto)
    if "" in overrides:
        if len(inputs) != 1:
            raise UserError(f"--input-shape needs input names: the model has inputs {[n for n, _, _ in inputs]}")
        overrides = {inputs[0][0]: overrides[""]}
    unknown = set(overrides) - {n for n, _, _ in inputs}
    if unknown:
        raise UserError(f"--input-shape names unknown input(s) {sorted(unknown)}; "
                        f"the model's inputs: {[n for n, _, _ in inputs]}")
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims, _ in inputs:
        if name in overrides:
            shape = overrides[name]
            if len(shape) != len(dims):
                raise UserError(f"--input-shape for {name!r} has rank {len(shape)}, the model's input has rank "
                                f"{len(dims)} ({_fmt_dims(dims)})")
            for want, have in zip(shape, dims):
                if isinstance(have, int) and have != want:
                    raise UserError(f"--input-shape {name}:{','.join(map(str, shape))} does not fit the "
                                    f"model's static input shape {_fmt_dims(dims)}")
            shapes[name] = shape
        elif all(isinstance(d, int) for d in dims):
            shapes[name] = tuple(dims)  # type: ignore[arg-type]
        else:
            raise UserError(f"input {name!r} has dynamic shape {_fmt_dims(dims)}; "
                            f"give it with --input-shape {name}:1,3,640,640")
    return shapes


def _fmt_dims(dims) -> str:
    return "x".join(str(d) if d is not None else "?" for d in dims)


def check_supported_ops(proto: onnx.ModelProto) -> None:
    """Name the ONNX ops TVM's Relax importer lacks, each with its first node, before it fails deep inside."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    supported = _get_convert_map()
    first: dict[str, str] = {}
    for i, node in enumerate(proto.graph.node):
        if node.op_type not in supported:
            first.setdefault(node.op_type, node.name or f"#{i}")
    if first:
        ops = ", ".join(f"{op} (node {name!r})" for op, name in first.items())
        raise UserError(f"ONNX op{'s' if len(first) > 1 else ''} not supported by TVM's Relax importer: {ops}")


def make_static(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """``proto`` with its inputs fixed to ``shapes`` and its run-time shape arithmetic folded
    (:mod:`autosearch.frontend.static_graph`); an op TVM lacks is named before any folding error."""
    from autosearch.frontend.static_graph import make_static as fold

    try:
        return fold(proto, shapes)
    except UserError:
        check_supported_ops(proto)  # onnxsim stumbles on ops it cannot run: name the op, not the stumble
        raise


def to_relax(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]):
    """ONNX -> Relax with inference-only ops decomposed: the module both tasks and compile start from."""
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    check_supported_ops(proto)
    dtypes = {}
    for name, _, elem in _graph_inputs(proto):
        dtypes[name] = onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "float32"
    printed = io.StringIO()  # TVM's importer prints the failing operator with its inputs' IR: said in one line here
    with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
        warnings.simplefilter("ignore")
        try:
            mod = from_onnx(proto, shape_dict={k: list(v) for k, v in shapes.items()}, dtype_dict=dtypes)
        except Exception as exc:
            failed = re.search(r"Error converting operator (\w+)", printed.getvalue())
            where = f" at its {failed.group(1)} operator" if failed else ""
            hint = ""
            if any(node.op_type == "NonMaxSuppression" for node in proto.graph.node):
                hint = (" (the graph runs NonMaxSuppression, whose output size depends on the image: export the"
                        " model without it, Ultralytics' default, and run NMS after it; YOLOv10 and YOLO26 also"
                        " export NMS-free with nms=False)")
            # the traceback's frames hold the importer's half-built function, whose BlockBuilder warns on fd 2 as
            # it goes: let it go now, its warning to the debug log, not after the one-line error at exit
            with stderr_to_log("TVM's importer"):
                traceback.clear_frames(exc.__traceback__)
                gc.collect()
            raise UserError(f"TVM could not import the ONNX model{where}: {last_line(exc)}{hint}") from exc
    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod = relax.transform.CanonicalizeBindings()(mod)
    return mod


def legalize(relax_mod, target, *, winograd: str = "auto", layout: str = "NCHW",
             fast_math: str = DEFAULT_FAST_MATH, precision: str | None = None, folder=None):
    """The preparation task extraction and the tuned build share (:mod:`autosearch.frontend.lowering`)."""
    from autosearch.frontend.lowering import lower

    return lower(relax_mod, target, winograd=winograd, layout=layout, fast_math=fast_math, precision=precision,
                 folder=folder)


def _extract(relax_mod, target, lowering_mode: str, label: str, layout: str = "NCHW",
             fast_math: str = DEFAULT_FAST_MATH, precision: str = "fp32",
             precision_label: str | None = None, *, folder=None) -> list[TuningTask]:
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    lowered = legalize(relax_mod, target, winograd=lowering_mode, layout=layout, fast_math=fast_math,
                       precision=precision, folder=folder)
    # a reshape alone in its kernel becomes a view of the same memory in the build (RewriteDataflowReshape, the
    # first of the backend's dataflow passes): no kernel runs, so there is no task to tune
    lowered = relax.transform.RewriteDataflowReshape()(lowered)
    lowering = {"winograd": label, "layout": layout, "fast_math": fast_math,
                "precision": precision_label or precision}
    return [task_from_module(t.dispatched[0], target, name=t.task_name, weight=int(t.weight), lowering=lowering)
            for t in ms.relax_integration.extract_tasks(lowered, target) if schedulable(t.dispatched[0])]


def extract_tasks(relax_mod, target, *, winograd: str = "auto", layout: str = "NCHW",
                  fast_math: str = DEFAULT_FAST_MATH, precision: str = "fp32", folder=None,
                  layouts: tuple[str, ...] | None = None) -> list[TuningTask]:
    """One TuningTask per distinct fused TIR function, heaviest (FLOPs x weight) first.

    ``winograd="auto"`` (CPU targets): the model is lowered twice, all direct and with every candidate
    layer as winograd (:mod:`autosearch.frontend.winograd`); the tasks of both are merged, so each candidate layer
    is tuned both ways and its tasks carry ``lowering["layer"]`` and ``lowering["algorithm"]``.
    ``layout="NHWC"``: convolutions in NHWC (``lowering["layout"]``), with the same winograd alternatives in fp32
    (none beside a bf16 one: ``precision`` ``auto`` or ``bf16``).
    ``layout="auto"`` (CPU targets): the tasks of both layouts, merged; each carries ``lowering["layout"] ==
    "auto"`` and ``lowering["layouts"]``, the layouts whose model runs it (:mod:`autosearch.frontend.alternatives`).
    With ``precision="auto"`` on a CPU whose bf16 unit doubles its fp32 rate, the NHWC model alone where the layers
    bf16 can run carry nearly all its FLOPs (:data:`~autosearch.frontend.alternatives.NHWC_ONLY_BF16_SHARE`); with
    ``precision="bf16"`` the NHWC model alone on any CPU (bf16 asked for, and the NCHW model would run none);
    ``layouts``: the concrete layouts to tune instead of that choice (a resumed run's, from its log).
    ``fast_math``: ``lowering["fast_math"]``. ``precision`` (as :func:`autosearch.frontend.lowering.resolve_precision`
    resolved it): ``bf16`` lowers the eligible NHWC convolutions to bf16; ``auto`` offers them both ways, like
    winograd (algorithms ``fp32`` and ``bf16``); NCHW convolutions stay fp32. ``lowering["precision"]``.
    ``folder``: the :class:`~autosearch.frontend.fold.ConstantFolder` all these lowerings share (None: a new one).
    """
    from autosearch.frontend.alternatives import NHWC_ONLY_BF16_SHARE, bf16_share
    from autosearch.frontend.fold import ConstantFolder
    from autosearch.frontend.lowering import LAYOUTS, converts_layout
    from autosearch.frontend.winograd import task_layer
    from autosearch.tensor_units.cpu import bf16_doubles_fp32, bf16_unit

    folder = folder if folder is not None else ConstantFolder()

    if layout == "auto":
        if target.kind.name != "llvm":  # NHWC is a CPU lowering: other targets keep the model's NCHW
            return extract_tasks(relax_mod, target, winograd=winograd, layout="NCHW", fast_math=fast_math,
                                 precision=precision, folder=folder)

        def concrete_tasks(concrete: str) -> list[TuningTask]:
            return extract_tasks(relax_mod, target, winograd=winograd, layout=concrete, fast_math=fast_math,
                                 precision=precision, folder=folder)

        extracted: dict[str, list[TuningTask]] = {}
        chosen = LAYOUTS if layouts is None else tuple(layouts)
        if layouts is None and precision == "bf16":  # asked for bf16 convolutions: NCHW would run none
            chosen = ("NHWC",)
        elif layouts is None and precision == "auto" and bf16_doubles_fp32(target):  # (NHWC_ONLY_BF16_SHARE)
            extracted["NHWC"] = concrete_tasks("NHWC")
            if bf16_share(extracted["NHWC"]) >= NHWC_ONLY_BF16_SHARE:
                chosen = ("NHWC",)
        merged: dict[str, tuple[TuningTask, list[str]]] = {}
        for concrete in (layout for layout in LAYOUTS if layout in chosen):
            for t in extracted.get(concrete) or concrete_tasks(concrete):
                first, runs_in = merged.setdefault(t.workload_key, (t, []))
                runs_in.append(concrete)
                if "layer" in t.lowering and "layer" not in first.lowering:
                    # a task both layouts run (a matmul, a softmax) that the NHWC model's bf16 lowering made part of
                    # a layer's fp32 alternative: it keeps that label, or the layer would have its bf16 side alone
                    label = {"layer": t.lowering["layer"], "algorithm": t.lowering["algorithm"]}
                    merged[t.workload_key] = (TuningTask(**{**first.__dict__,
                                                            "lowering": {**first.lowering, **label}}), runs_in)
        tasks = [TuningTask(**{**t.__dict__, "lowering": {**t.lowering, "layout": "auto", "layouts": runs_in}})
                 for t, runs_in in merged.values()]
    elif converts_layout(target, layout):
        if precision == "auto":
            # every layer fp32, lowered as under auto (the activations between convolutions the tile unit can run in
            # bf16, tensor_units.activations), so its tasks are those of the model export keeps
            fp32 = _extract(relax_mod, target, "off", winograd, layout, fast_math, "auto", precision, folder=folder)
            bf16 = _extract(relax_mod, target, "off", winograd, layout, fast_math, "candidates", precision,
                            folder=folder)
            if bf16_unit(target) == "AVX512-BF16":  # the wide 3x3 layers as bf16 Winograd too (tensor_units.winograd)
                bf16 += _extract(relax_mod, target, "off", winograd, layout, fast_math, "winograd", precision,
                                 folder=folder)
            tasks = _merge_alternatives(fp32, bf16, _precision_classifier(bf16))
        elif winograd == "off" or precision != "fp32":  # bf16 convolutions have no winograd form
            tasks = _extract(relax_mod, target, "off", winograd, layout, fast_math, precision, folder=folder)
        else:  # each candidate layer direct and as NHWC winograd, as in NCHW below
            direct = _extract(relax_mod, target, "off", winograd, layout, fast_math, precision, folder=folder)
            candidates = _extract(relax_mod, target, "candidates", winograd, layout, fast_math, precision,
                                  folder=folder)
            tasks = _merge_alternatives(direct, candidates, task_layer)
    elif winograd == "off" or target.kind.name != "llvm":
        tasks = _extract(relax_mod, target, "off", winograd, fast_math=fast_math, precision_label=precision,
                         folder=folder)
    else:
        direct = _extract(relax_mod, target, "off", winograd, fast_math=fast_math, precision_label=precision,
                          folder=folder)
        candidates = _extract(relax_mod, target, "candidates", winograd, fast_math=fast_math,
                              precision_label=precision, folder=folder)
        tasks = _merge_alternatives(direct, candidates, task_layer)
    tasks.sort(key=lambda t: (-t.flops * t.weight, t.name))
    return [TuningTask(**{**t.__dict__, "index": i}) for i, t in enumerate(tasks)]


def _precision_classifier(bf16_tasks: list[TuningTask]):
    """The (name, args) -> (layer key, "fp32" | "bf16") classifier of a model's precision alternatives: a fused
    attention's tasks are one layer with its fp32 tasks, the two matmuls and the softmax whose score matrix it
    computes (:mod:`autosearch.tensor_units.attention`, keyed by that matrix's shape); every other task as
    :func:`_precision_layer` says."""
    from autosearch.tensor_units.attention import TASK_NAME, attention_key

    def score_key(shape) -> str | None:
        return attention_key(shape[:-2], shape[-2], shape[-1]) if len(shape) >= 3 else None

    def fused_key(args) -> str:  # a fused task's q (*batch, m, d) and k (*batch, d, n): its scores' shape
        return attention_key(args[0][0][:-2], args[0][0][-2], args[1][0][-1])

    fused = {fused_key(t.args) for t in bf16_tasks if TASK_NAME in t.name}
    # the matmuls the bf16 lowering keeps as matmuls: outside any attention, whatever their shapes
    matmul_keys = {layer[0] for t in bf16_tasks if "matmul" in t.name and len(t.args) >= 3
                   and (layer := _matmul_layer(t.name, t.args)) is not None}

    def classify(name: str, args) -> tuple[str, str] | None:
        if TASK_NAME in name:
            return fused_key(args), "bf16"
        if "matmul" in name and len(args) >= 3:
            layer = _matmul_layer(name, args)
            if layer is not None and layer[0] in matmul_keys:
                return layer
        if fused and ("matmul" in name or "softmax" in name) and len(args) >= 2:
            for shape in (tuple(args[-1][0]), tuple(args[0][0])):  # the scores a matmul writes, the probabilities
                key = score_key(shape)  # the other reads, the scores the softmax reads
                if key in fused:
                    return key, "fp32"
        return _precision_layer(name, args)

    return classify


def _precision_layer(name: str, args) -> tuple[str, str] | None:
    """(layer key, "fp32" | "bf16") of an NHWC conv task (:mod:`autosearch.tensor_units.conv`) or a batch matmul task
    (:func:`_matmul_layer`), or None. A convolution's filter height is the weight's second dimension in both: OHWI in
    fp32, packed ``(O / 32, KH, ...)`` in bf16."""
    from autosearch.frontend.winograd import BF16_WINOGRAD, precision_layer_key
    from autosearch.tensor_units.conv import TASK_NAME
    from autosearch.tensor_units.pooling import WINDOW_MAX
    from autosearch.tensor_units.winograd import TASK_NAME as WINOGRAD_TASK

    if "matmul" in name and len(args) >= 3:
        return _matmul_layer(name, args)
    if "conv2d" not in name or len(args) < 3:
        return None
    data, weight, out = tuple(args[0][0]), tuple(args[1][0]), tuple(args[-1][0])
    if len(data) != 4 or len(out) != 4:
        return None
    if WINDOW_MAX in name:  # the pooling fused in: the convolution's own output is the size of its input
        out = (*data[:3], out[3])
    if TASK_NAME in name:
        return precision_layer_key(data, out, weight[1]), "bf16"
    if WINOGRAD_TASK in name:  # its weights transformed and packed: the filter is 3x3
        return precision_layer_key(data, out, 3), BF16_WINOGRAD
    ok = len(weight) == 4 and weight[0] == out[3] and weight[3] == data[3]
    return (precision_layer_key(data, out, weight[1]), "fp32") if ok else None


def _matmul_layer(name: str, args) -> tuple[str, str] | None:
    """(layer key, "fp32" | "bf16") of a matmul task (:mod:`autosearch.tensor_units.matmul`): both take the matmul's
    operands as their first two arguments, ``(*batch, m, k)`` and ``(*batch, k, n)``; a linear layer's bf16 task
    takes its B packed (seven axes), so its ``(k, n)`` are A's last axis and the output's (the task's last
    argument)."""
    from autosearch.tensor_units.matmul import TASK_NAME, layer_key

    a, b, out = tuple(args[0][0]), tuple(args[1][0]), tuple(args[-1][0])
    algorithm = "bf16" if TASK_NAME in name else "fp32"
    if algorithm == "bf16" and len(b) == 7 and len(a) >= 2:  # a linear layer, its B packed
        b = (a[-1], out[-1])
    linear = len(b) == 2 and len(a) >= 2 and a[-1] == b[0]
    if not linear and (len(a) < 3 or len(a) != len(b) or a[:-2] != b[:-2] or a[-1] != b[-2]):
        return None
    return layer_key(a, b), algorithm


def _merge_alternatives(first: list[TuningTask], second: list[TuningTask], classify) -> list[TuningTask]:
    """The tasks of two lowerings of one model, merged; a layer whose tasks differ between them (``classify``:
    name, args -> (layer key, algorithm) or None) carries ``lowering["layer"]`` and ``lowering["algorithm"]``."""
    by_key = {t.workload_key: t for t in first}
    for t in second:
        by_key.setdefault(t.workload_key, t)
    found = {key: classify(t.name, t.args) for key, t in by_key.items()}
    layers: dict[str, set[str]] = {}
    for layer in filter(None, found.values()):
        layers.setdefault(layer[0], set()).add(layer[1])
    tasks = []
    for key, t in by_key.items():
        layer = found[key]
        if layer is not None and len(layers[layer[0]]) > 1:  # a layer with both alternatives
            t = TuningTask(**{**t.__dict__, "lowering": {**t.lowering, "layer": layer[0], "algorithm": layer[1]}})
        tasks.append(t)
    return tasks


def _dynamic_shape_message(name: str, proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]],
                           exc: Exception) -> str | None:
    """A one-line error when lowering failed on a tensor whose shape stays unknown for static inputs (TVM
    fails in several ways there: an assertion in legalisation, a symbolic shape in a task); None when the
    graph has no such tensor and the failure is not that assertion (an internal error, traceback kept)."""
    from autosearch.frontend.static_graph import first_dynamic_node, format_shapes

    node = first_dynamic_node(proto)
    if node is None and "ShapeExpr" not in str(exc):
        return None
    where = f": {node.op_type} node {node.name!r} sizes its output from data" if node is not None else ""
    return (f"model {name!r} has tensor shapes that stay dynamic with input shape {format_shapes(shapes)}{where}; "
            "TVM tunes static shapes only")


def import_model(model: str, target, *, input_shape: str | None = None, seed: int = 0,
                 winograd: str = "auto", layout: str = "NCHW",
                 fast_math: str = DEFAULT_FAST_MATH, precision: str = OLD_LOWERING["precision"],
                 layouts: tuple[str, ...] | None = None) -> ImportedModel:
    """The whole path: name or file -> ONNX -> Relax -> tasks for ``target`` (``winograd``: see
    :mod:`autosearch.frontend.winograd`; ``layout``, ``fast_math``, ``precision``: :mod:`autosearch.frontend.lowering`;
    ``precision`` is resolved for the target first: ``auto`` is fp32 where the CPU has no bf16 unit). ``layouts``:
    with ``layout="auto"``, the concrete layouts to tune (None: as :func:`extract_tasks` chooses)."""
    from autosearch.frontend.lowering import (
        LAYOUT_MODES,
        check_fast_math,
        check_layout,
        check_winograd,
        resolve_precision,
    )

    check_winograd(winograd)
    check_layout(layout, modes=LAYOUT_MODES)
    check_fast_math(fast_math)
    precision, precision_note = resolve_precision(precision, target, layout)
    name, proto = load_onnx(model, seed=seed)
    shapes = resolve_input_shapes(proto, parse_input_shapes(input_shape))
    proto = make_static(proto, shapes)
    relax_mod = to_relax(proto, shapes)
    try:
        tasks = extract_tasks(relax_mod, target, winograd=winograd, layout=layout, fast_math=fast_math,
                              precision=precision, layouts=layouts)
    except UserError:
        raise
    except Exception as exc:  # TVM on data-dependent shapes: AssertionError, TypeError, ...
        message = _dynamic_shape_message(name, proto, shapes, exc)
        if message is None:
            raise
        raise UserError(message) from exc
    if not tasks:
        raise UserError(f"model {name!r} gave no tuning tasks for target {target}")
    log.info("model %s: %d tasks, %.3f GFLOP", name, len(tasks), sum(t.flops * t.weight for t in tasks) / 1e9)
    if layout == "auto" and target.kind.name != "llvm":  # NHWC is a CPU lowering: the model keeps its NCHW
        layout = "NCHW"
    return ImportedModel(name=name, onnx_model=proto, input_shapes=shapes, relax_mod=relax_mod, tasks=tasks,
                         winograd=winograd, layout=layout, fast_math=fast_math, precision=precision,
                         precision_note=precision_note,
                         layout_note=_layout_note(tasks, precision) if layout == "auto" and layouts is None else "")


def _layout_note(tasks: list[TuningTask], precision: str) -> str:
    """Why ``--layout auto`` tunes the NHWC model alone, when it does (else "")."""
    from autosearch.frontend.alternatives import bf16_share, concrete_layouts

    if concrete_layouts(t.lowering for t in tasks) != ("NHWC",):
        return ""
    if precision == "bf16":
        return "the NHWC model alone: --precision bf16 asks for bf16 convolutions, and they are NHWC"
    return (f"the NHWC model alone: layers that can run in bf16 carry {100 * bf16_share(tasks):.1f}% of its FLOPs, "
            "and bf16 convolutions are NHWC (an NCHW model would run all in fp32)")
