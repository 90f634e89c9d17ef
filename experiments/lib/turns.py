"""Compiled models timed the way ``report`` times them: taking turns in fresh processes, beside peer runtimes.

Experiments that set two builds of one model side by side (a rewrite on and off, two runs' databases, the CLI's and
the API's) time them here, so one spell of the machine hits every build alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Turns:
    """Medians (ms) by runtime name, and each library's largest relative output error against ONNX Runtime's (only
    when ONNX Runtime ran among the peers)."""

    ms: dict[str, float]
    error: dict[str, float]


def libraries_in_turns(model: str, libraries: Mapping[str, str], *, peers: Sequence[str] = (), rounds: int,
                       runs: int, threads: int, work: str) -> Turns:
    """``libraries`` (name -> a compiled library of ``model``) and ``peers`` (``"ort"``: ONNX Runtime;
    ``"ov-default"``: OpenVINO at its default precision, left out where OpenVINO is not installed) timed taking
    turns, ``rounds`` rounds of fresh processes and ``runs`` forward passes in all, on ``threads`` threads, on one
    random input (``work``: a directory for the ONNX file, the input and the outputs). A runtime that fails is an
    error, never a figure."""
    import numpy as np
    import onnx

    from autosearch.deploy import timing
    from autosearch.frontend.importer import load_onnx, resolve_input_shapes

    proto = load_onnx(model)[1]
    onnx_path, inputs = os.path.join(work, "model.onnx"), os.path.join(work, "inputs.npz")
    onnx.save(proto, onnx_path)
    timing.save_inputs(resolve_input_shapes(proto, {}), inputs)
    runtimes = [timing.Runtime(name, "tvm", path) for name, path in libraries.items()]
    if "ort" in peers:
        runtimes.append(timing.Runtime("ONNX Runtime", "ort", onnx_path))
    if "ov-default" in peers and (ov := timing.openvino_default_precision()):
        runtimes.append(timing.Runtime(f"OpenVINO {ov}", "ov-default", onnx_path))
    timings = timing.time_taking_turns(runtimes, rounds=rounds, runs=runs, inputs_path=inputs, threads=threads,
                                       out_dir=work)
    for t in timings:
        if not t.ok:
            raise RuntimeError(f"timing {t.name} failed: {t.error}")
    by_name = {t.name: t for t in timings}
    reference = by_name["ONNX Runtime"].output_path if "ONNX Runtime" in by_name else None
    return Turns(ms={t.name: float(np.median(t.runs)) for t in timings},
                 error={name: timing.max_relative_error(by_name[name].output_path, reference)
                        for name in libraries} if reference else {})


__all__ = ["Turns", "libraries_in_turns"]
