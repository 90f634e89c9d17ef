"""Time one runtime in this (fresh) process: ``python -m autosearch.deploy.bench KIND PATH ...``.

Kinds: ``tvm`` (a compiled library, its weights file beside it: :mod:`autosearch.deploy.artifact`), ``ort`` (ONNX
Runtime), ``ort-no-arena`` (ONNX Runtime without its CPU memory arena: every tensor from malloc), ``ov`` (OpenVINO
told to infer in fp32, comparable with the others), ``ov-default`` (OpenVINO in its default precision: bf16 on
CPUs with AMX or AVX512-BF16).

Prints one JSON line ``{"runs_ms": [...], "peak_bytes": ..., "load_peak_bytes": ..., "run_peak_bytes": ...}``
and saves the outputs for the correctness check. The peaks are this process's peak resident set (Linux
``VmHWM``, else ``ru_maxrss``): after loading the model, and over the warm-up and timed runs alone (Linux can
reset the peak in between; elsewhere ``run_peak_bytes`` is null). ``--baseline`` imports the runtime's
libraries and reads the inputs, loads no model and runs nothing: the process a model's peak is measured
against (:func:`autosearch.deploy.timing.baseline_peak`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import numpy as np

KINDS = ("tvm", "ort", "ort-no-arena", "ov", "ov-default")


def library_of(kind: str) -> str:
    """The runtime library a kind runs on (kinds of one library share a baseline)."""
    return kind.split("-")[0]


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (bytes)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux kilobytes
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def reset_peak_rss() -> bool:
    """Reset the peak to the current resident set (Linux: ``5`` to ``/proc/self/clear_refs``); False if the
    system cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


Session = tuple[Callable[[], object], Callable[[object], list[np.ndarray]]]  # (one forward pass, its outputs)


def _import_tvm():
    from autosearch.tvm_compat import lighten_tvm_import

    lighten_tvm_import()  # each timed round is a fresh process: PyTorch, unused, not imported in each
    import tvm
    from tvm import relax  # noqa: F401 - the VM, loaded with the model

    from autosearch.deploy import artifact

    return tvm, artifact, tvm.cpu()


def _tvm(path: str, inputs: dict[str, np.ndarray], threads: int) -> Session:
    tvm, artifact, dev = _import_tvm()
    model = artifact.load_model(path)  # the library and the weights file beside it
    args = [tvm.runtime.tensor(v, dev) for v in inputs.values()]

    def run():
        out = model(*args)
        dev.sync()
        return out

    return run, lambda out: [o.numpy() for o in ([out] if hasattr(out, "numpy") else list(out))]


def _import_ort():
    import onnxruntime as ort

    return ort


def _ort(path: str, inputs: dict[str, np.ndarray], threads: int, *, arena: bool = True) -> Session:
    ort = _import_ort()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = arena
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = dict(inputs)
    return (lambda: sess.run(None, feed)), list


def _import_openvino():
    import openvino

    core = openvino.Core()
    core.get_property("CPU", "FULL_DEVICE_NAME")  # loads the CPU plugin's library, as compiling a model does
    return core


def _openvino(path: str, inputs: dict[str, np.ndarray], threads: int, *, fp32: bool) -> Session:
    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if fp32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    request = _import_openvino().compile_model(path, "CPU", config).create_infer_request()
    feed = dict(inputs)  # by input name, as in the ONNX file
    # the request reuses its buffers: copy the outputs
    return (lambda: request.infer(feed)), lambda result: [np.array(v, copy=True) for v in result.values()]


IMPORTS = {"tvm": _import_tvm, "ort": _import_ort, "ov": _import_openvino}


def _open(kind: str, path: str, inputs: dict[str, np.ndarray], threads: int) -> Session:
    if kind == "tvm":
        return _tvm(path, inputs, threads)
    if kind in ("ort", "ort-no-arena"):
        return _ort(path, inputs, threads, arena=kind == "ort")
    return _openvino(path, inputs, threads, fp32=kind == "ov")


def measure(kind: str, path: str, inputs: dict[str, np.ndarray], runs: int, threads: int) -> dict:
    """Load the model, run it once to warm up and ``runs`` times timed: latencies (ms), outputs and peaks."""
    run, outputs = _open(kind, path, inputs, threads)
    load_peak = peak_rss_bytes()
    reset = reset_peak_rss()
    out = run()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = run()
        times.append((time.perf_counter() - start) * 1e3)
    result = outputs(out)
    run_peak = peak_rss_bytes()
    return {"runs_ms": times, "outputs": result, "load_peak_bytes": load_peak,
            "run_peak_bytes": run_peak if reset else None, "peak_bytes": max(load_peak, run_peak)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autosearch.deploy.bench")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("path", nargs="?", help="the compiled library (tvm) or the ONNX file")
    p.add_argument("--inputs", required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output", help="where to save the outputs (.npz)")
    p.add_argument("--baseline", action="store_true", help="import the runtime and read the inputs; load no model")
    args = p.parse_args(argv)
    if not args.baseline and (args.path is None or args.output is None):
        p.error("PATH and --output are needed unless --baseline")
    with np.load(args.inputs) as data:
        inputs = {k: data[k] for k in data.files}
    if args.baseline:
        IMPORTS[library_of(args.kind)]()
        peak = peak_rss_bytes()
        sys.stdout.write(json.dumps({"runs_ms": [], "peak_bytes": peak, "load_peak_bytes": peak,
                                     "run_peak_bytes": None}) + "\n")
        return 0
    result = measure(args.kind, args.path, inputs, args.runs, args.threads)
    np.savez(args.output, **{f"out{i}": o for i, o in enumerate(result.pop("outputs"))})
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
