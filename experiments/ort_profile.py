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

from autosearch.frontend.importer import load_onnx
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_text


def _nchw(shape: list[int]) -> list[int]:
    """A tensor shape as NCHW: ORT's blocked NCHWc shapes (N, C/b, H, W, b) folded back."""
    return [shape[0], shape[1] * shape[4], shape[2], shape[3]] if len(shape) == 5 else list(shape)


def profile(proto, threads: int, runs: int) -> list[dict]:
    """ONNX Runtime's profiler over ``runs`` passes at ``threads`` threads: its node events."""
    import onnx
    import onnxruntime as ort

    from autosearch.frontend.importer import resolve_input_shapes

    with tempfile.TemporaryDirectory(prefix="ort-profile-") as work:
        path = os.path.join(work, "model.onnx")
        onnx.save(proto, path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.enable_profiling, opts.profile_file_prefix = True, os.path.join(work, "profile")
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feed = {k: rng.random(s, dtype=np.float32) for k, s in resolve_input_shapes(proto, {}).items()}
        for _ in range(runs):  # the first pass (warm-up) is profiled too: ORT cannot start its profiler later
            sess.run(None, feed)
        with open(sess.end_profiling()) as fh:
            return [e for e in json.load(fh) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def conv_events(events: list[dict], runs: int) -> list[tuple[str, float]]:
    """(``layer@KxK``, ms per pass) of each conv node in a :func:`profile` of ``runs`` passes. The layer is keyed
    by its NCHW input and output shapes, as :func:`autosearch.frontend.winograd.layer_key` keys TVM's tasks: ORT
    names a fused conv after the last node it absorbed (``LeakyRelu_3_out0_nchwc``), so the shapes in its event,
    not the name, say which layer it is."""
    from autosearch.frontend.winograd import layer_key

    per_node: dict[tuple[str, str], float] = collections.defaultdict(float)
    for e in events:
        a = e["args"]
        if a.get("op_name") not in ("Conv", "FusedConv", "NchwcConv"):
            continue
        shapes = (a["input_type_shape"][0], a["input_type_shape"][1], a["output_type_shape"][0])
        (data,), (weight,), (result,) = (list(t.values()) for t in shapes)
        key = f"{layer_key(_nchw(data), _nchw(result))}@{weight[-2]}x{weight[-1]}"
        per_node[(e["name"], key)] += e["dur"] / runs / 1e3
    return [(key, ms) for (_, key), ms in per_node.items()]


def main() -> int:
    import onnxruntime as ort

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="yolov8n")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=25)
    args = p.parse_args()
    name, proto = load_onnx(args.model)
    events = profile(proto, args.threads, args.runs)
    by_op: dict[str, float] = collections.defaultdict(float)
    for e in events:
        by_op[e["args"].get("op_name", "?")] += e["dur"] / args.runs / 1e3
    by_layer: dict[str, list[float]] = collections.defaultdict(list)
    for key, ms in conv_events(events, args.runs):
        by_layer[key].append(ms)
    ops = [[op, f"{ms:.2f}"] for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])]
    convs = [[layer.replace("->", " -> "), len(times), f"{float(np.median(times)):.3f}", f"{sum(times):.3f}"]
             for layer, times in sorted(by_layer.items(), key=lambda kv: -sum(kv[1]))]
    lines = [f"# ONNX Runtime {ort.__version__} profile of {name}, {args.threads} threads, {args.runs} runs", "",
             markdown_table(["operator", "ms per pass"], ops), "",
             markdown_table(["conv layer (NCHW in -> out @ kernel)", "count", "ms each (median)", "ms total"], convs)]
    out = write_text(results_path(f"ort_profile-{name}.md"), "\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + f"\n\nwritten: {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
