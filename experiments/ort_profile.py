"""Where ONNX Runtime spends a forward pass: its own profiler, per operator type and per conv layer.

The peer baseline's per-layer times, to put next to the per-task table of ``report`` (which layers
autosearch's schedules still lose on, and where ORT runs extra passes: SiLU as separate QuickGelu
nodes, NCHWc reorders).

    python -m experiments.ort_profile --model yolov8n [--threads 2] [--runs 25]

Writes experiments/results/ort_profile-MODEL.md. The profiler adds overhead: compare layers, not totals.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np

from autosearch.frontend.importer import load_onnx, resolve_input_shapes
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_text


def conv_layers(proto) -> dict[str, str]:
    """Conv node name -> "Cin -> Cout, HxW, KxK[, stride s]" from ONNX shape inference."""
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(proto)
    values = list(inferred.graph.value_info) + list(inferred.graph.input)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}
    weights = {i.name: list(i.dims) for i in inferred.graph.initializer}
    out = {}
    for node in inferred.graph.node:
        if node.op_type != "Conv" or node.input[1] not in weights or node.input[0] not in shapes:
            continue
        x, w = shapes[node.input[0]], weights[node.input[1]]
        stride = next((list(a.ints) for a in node.attribute if a.name == "strides"), [1, 1])[0]
        out[node.name] = (f"{x[1]} -> {w[0]}, {x[2]}x{x[3]}, {w[2]}x{w[3]}"
                          + (f", stride {stride}" if stride != 1 else ""))
    return out


def main() -> int:
    import onnx
    import onnxruntime as ort

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="yolov8n")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=25)
    args = p.parse_args()
    name, proto = load_onnx(args.model)
    shapes = resolve_input_shapes(proto, {})
    work = tempfile.mkdtemp(prefix="ort-profile-")
    path = os.path.join(work, "model.onnx")
    onnx.save(proto, path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
    opts.enable_profiling, opts.profile_file_prefix = True, os.path.join(work, "profile")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {k: rng.random(s, dtype=np.float32) for k, s in shapes.items()}
    sess.run(None, feed)
    for _ in range(args.runs):
        sess.run(None, feed)
    with open(sess.end_profiling()) as fh:
        events = [e for e in json.load(fh) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    runs = args.runs + 1
    by_op: dict[str, float] = collections.defaultdict(float)
    by_node: dict[str, float] = collections.defaultdict(float)
    for e in events:
        by_op[e["args"].get("op_name", "?")] += e["dur"] / runs / 1e3
        by_node[e["name"].replace("_kernel_time", "").replace("_out0_nchwc", "")] += e["dur"] / runs / 1e3
    layers = conv_layers(proto)
    by_layer: dict[str, list[float]] = collections.defaultdict(list)
    for node, ms in by_node.items():
        if node in layers:
            by_layer[layers[node]].append(ms)
    ops = [[op, f"{ms:.2f}"] for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])]
    convs = [[layer, len(times), f"{float(np.median(times)):.3f}", f"{sum(times):.3f}"]
             for layer, times in sorted(by_layer.items(), key=lambda kv: -sum(kv[1]))]
    lines = [f"# ONNX Runtime {ort.__version__} profile of {name}, {args.threads} threads, {args.runs} runs", "",
             markdown_table(["operator", "ms per pass"], ops), "",
             markdown_table(["conv layer (NCHW)", "count", "ms each (median)", "ms total"], convs)]
    out = write_text(results_path(f"ort_profile-{name}.md"), "\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + f"\n\nwritten: {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
