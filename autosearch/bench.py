"""Time one runtime in this (fresh) process: ``python -m autosearch.bench {tvm,ort,ov,ov-default} PATH ...``.

``ov`` is OpenVINO told to infer in fp32 (comparable with the others); ``ov-default`` is OpenVINO in
its default precision (bf16 on CPUs with AMX or AVX512-BF16).

Prints one JSON line ``{"runs_ms": [...]}`` and saves the outputs for the correctness check.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _tvm(path: str, inputs: dict[str, np.ndarray], runs: int) -> tuple[list[float], list[np.ndarray]]:
    import tvm
    from tvm import relax

    dev = tvm.cpu()
    vm = relax.VirtualMachine(tvm.runtime.load_module(path), dev)
    args = [tvm.runtime.tensor(v, dev) for v in inputs.values()]
    out = vm["main"](*args)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = vm["main"](*args)
        dev.sync()
        times.append((time.perf_counter() - start) * 1e3)
    outs = [out] if hasattr(out, "numpy") else list(out)
    return times, [o.numpy() for o in outs]


def _ort(path: str, inputs: dict[str, np.ndarray], runs: int, threads: int) -> tuple[list[float], list[np.ndarray]]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = dict(inputs)
    outs = sess.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        outs = sess.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    return times, outs


def _openvino(path: str, inputs: dict[str, np.ndarray], runs: int, threads: int,
              fp32: bool) -> tuple[list[float], list[np.ndarray]]:
    import openvino

    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if fp32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    request = openvino.Core().compile_model(path, "CPU", config).create_infer_request()
    feed = dict(inputs)  # by input name, as in the ONNX file
    result = request.infer(feed)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = request.infer(feed)
        times.append((time.perf_counter() - start) * 1e3)
    return times, [np.array(v, copy=True) for v in result.values()]  # the request reuses its buffers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autosearch.bench")
    p.add_argument("kind", choices=["tvm", "ort", "ov", "ov-default"])
    p.add_argument("path")
    p.add_argument("--inputs", required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    with np.load(args.inputs) as data:
        inputs = {k: data[k] for k in data.files}
    if args.kind == "tvm":
        times, outs = _tvm(args.path, inputs, args.runs)
    elif args.kind == "ort":
        times, outs = _ort(args.path, inputs, args.runs, args.threads)
    else:
        times, outs = _openvino(args.path, inputs, args.runs, args.threads, fp32=args.kind == "ov")
    np.savez(args.output, **{f"out{i}": o for i, o in enumerate(outs)})
    sys.stdout.write(json.dumps({"runs_ms": times}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
