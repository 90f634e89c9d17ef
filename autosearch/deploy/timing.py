"""End-to-end timing of a built model (and of ONNX Runtime, OpenVINO) in fresh processes, with peak memory.

TVM's thread pool pins the main thread to a core when it starts, and anything started after it
inherits that: ONNX Runtime in the same process ran 2.3x slower here. So every runtime (TVM untuned,
TVM tuned, ONNX Runtime, OpenVINO) is timed in its own process (``python -m autosearch.deploy.bench``), which
also reports its peak resident memory.

Peak memory is reported above a **baseline**: the peak of a fresh process that imports the same runtime's
libraries and loads the same inputs but no model (:func:`baseline_peak`). The interpreter and the runtime's
shared libraries cost the same whatever the model (importing TVM alone maps a few hundred MiB of library),
and differ between runtimes, so each runtime is measured against its own; what is left is what the model
costs: weights, activations, the kernels' code and the runtime's per-model structures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np


@dataclass
class Timing:
    """End-to-end latency of one runtime (milliseconds) and its processes' peak resident memory (bytes)."""

    name: str
    runs: list[float]
    output_path: str = ""
    error: str = ""
    peak_bytes: int = 0  # the largest peak of its processes, over loading the model and all runs
    load_peak_bytes: int = 0  # ... over loading it (and reading the inputs)
    run_peak_bytes: int | None = None  # ... over the runs only (None: the system cannot reset the peak)
    baseline_bytes: int = 0  # the peak of a process that imports the runtime and loads no model
    process_medians: list[float] = field(default_factory=list)  # the median of each process's runs, in turn order

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.error

    @property
    def model_peak_bytes(self) -> int | None:
        """The peak the model adds: its processes' peak above the runtime's baseline (None until both are known)."""
        return self.peak_bytes - self.baseline_bytes if self.peak_bytes and self.baseline_bytes else None

    def merge_peaks(self, other: Timing) -> None:
        """Keep the larger peaks of another process of the same runtime."""
        self.peak_bytes = max(self.peak_bytes, other.peak_bytes)
        self.load_peak_bytes = max(self.load_peak_bytes, other.load_peak_bytes)
        if other.run_peak_bytes is not None:
            self.run_peak_bytes = max(self.run_peak_bytes or 0, other.run_peak_bytes)

    def stats(self) -> dict[str, float]:
        a = np.asarray(self.runs)
        return {"mean": float(a.mean()), "median": float(np.median(a)), "max": float(a.max()),
                "min": float(a.min()), "std": float(a.std())}


@dataclass(frozen=True)
class Runtime:
    """One runtime to time: the name shown in the report, how ``autosearch.deploy.bench`` runs it (``kind``:
    tvm, ort, ov = OpenVINO in fp32, ov-default = OpenVINO in its default precision) and the model file
    (a compiled TVM library or the ONNX file)."""

    name: str
    kind: str
    path: str
    precision: str = "f32"  # what it computes in: lower ones are checked with a looser tolerance


def _bench(args: list[str], *, threads: int, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Run ``python -m autosearch.deploy.bench ARGS`` with ``threads`` threads: (its JSON line, "") or (None, error)."""
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "autosearch.deploy.bench", *args, "--threads", str(threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return None, lines[-1] if lines else f"exit code {proc.returncode}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


def time_in_subprocess(runtime: Runtime, *, inputs_path: str, runs: int, threads: int, out_dir: str,
                       timeout: float = 3600) -> Timing:
    """Time a runtime in a fresh process with ``threads`` threads; its outputs are saved in ``out_dir``
    (one file per runtime name) for the correctness check."""
    output_path = os.path.join(out_dir, re.sub(r"[^A-Za-z0-9]+", "-", runtime.name).strip("-") + ".npz")
    data, error = _bench([runtime.kind, runtime.path, "--inputs", inputs_path, "--runs", str(runs),
                          "--output", output_path], threads=threads, timeout=timeout)
    if data is None:
        return Timing(runtime.name, [], error=error)
    return Timing(runtime.name, data["runs_ms"], output_path=output_path, peak_bytes=data["peak_bytes"],
                  load_peak_bytes=data["load_peak_bytes"], run_peak_bytes=data["run_peak_bytes"])


def baseline_peak(kind: str, *, inputs_path: str, threads: int, timeout: float = 600) -> int:
    """The peak resident memory (bytes) of a fresh process that imports runtime ``kind``'s libraries and reads
    the inputs, as ``autosearch.deploy.bench`` does before it loads a model, and loads none (see the module
    docstring); 0 if it fails."""
    data, _ = _bench([kind, "--baseline", "--inputs", inputs_path], threads=threads, timeout=timeout)
    return int(data["peak_bytes"]) if data is not None else 0


def add_baselines(timings: list[Timing], runtimes: list[Runtime], *, inputs_path: str, threads: int) -> None:
    """Set each timing's baseline: one baseline process per runtime library (kinds that share one share it)."""
    from autosearch.deploy.bench import library_of

    peaks: dict[str, int] = {}
    for timing, runtime in zip(timings, runtimes):
        library = library_of(runtime.kind)
        if library not in peaks:
            peaks[library] = baseline_peak(runtime.kind, inputs_path=inputs_path, threads=threads)
        timing.baseline_bytes = peaks[library]


def runs_per_round(runs: int, rounds: int) -> list[int]:
    """``runs`` split over ``rounds`` (no more rounds than runs; where it does not divide, the first rounds take one
    more): how every comparison that takes turns spreads its runs."""
    rounds = max(1, min(rounds, runs))
    return [runs // rounds + (1 if i < runs % rounds else 0) for i in range(rounds)]


T = TypeVar("T")


def turn_order(items: Sequence[T], round_index: int) -> list[T]:
    """``items`` in their order in even rounds, reversed in odd ones: each is first as often as last, so a drift of
    the machine over a round favours none of them."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def time_taking_turns(runtimes: list[Runtime], *, rounds: int, runs: int, inputs_path: str, threads: int,
                      out_dir: str) -> list[Timing]:
    """Time several runtimes in ``rounds`` fresh processes apiece, taking turns (A B C A B C ...),
    ``runs`` forward passes in all per runtime. On a shared machine a slow spell then hits every
    runtime alike instead of the one that happened to be running (seen here: ONNX Runtime at 55 ms in
    one window and 82 ms in another)."""
    out = [Timing(r.name, []) for r in runtimes]
    for n in runs_per_round(runs, rounds):
        for timing, runtime in zip(out, runtimes):
            if timing.error:
                continue
            t = time_in_subprocess(runtime, inputs_path=inputs_path, runs=n, threads=threads, out_dir=out_dir)
            timing.runs.extend(t.runs)
            if t.runs:
                timing.process_medians.append(float(np.median(t.runs)))
            timing.error = t.error
            timing.output_path = timing.output_path or t.output_path
            timing.merge_peaks(t)
    return out


# Processes of one runtime further apart than this moved with the machine, not with their repeats: on a shared VM
# a process runs at one of a few paces for its whole life (docs/results.md, "How many processes a report needs").
PACE_SPREAD = 1.25


def _middle(medians: list[float]) -> tuple[float, float]:
    """The paces a runtime's median rests on: the middle half of its processes' medians (all of them, under 4). A
    slow process or two among ten leave it where it is; a spell that slows a third of them moves it."""
    if len(medians) < 4:
        return min(medians), max(medians)
    low, high = np.percentile(medians, [25, 75])
    return float(low), float(high)


def pace_note(timings: list[Timing]) -> str:
    """A line for a report in which the middle half of a runtime's processes ran at paces more than
    :data:`PACE_SPREAD` apart (the widest named), else "": its median rests on paces that far apart, and a ratio
    of two runtimes closer than that may not hold in the next report."""
    spreads = []
    for t in timings:
        if len(t.process_medians) > 1 and min(t.process_medians) > 0:
            low, high = _middle(t.process_medians)
            spreads.append((high / low, low, high, t))
    if not spreads:
        return ""
    spread, low, high, widest = max(spreads, key=lambda s: s[0])
    if spread <= PACE_SPREAD:
        return ""
    return (f"the machine's pace moved while timing: the middle of {widest.name}'s {len(widest.process_medians)} "
            f"processes ran {low:.2f}-{high:.2f} ms ({spread:.2f}x apart); ratios of runtimes closer than that may "
            f"not hold: run report again to confirm")


def openvino_default_precision() -> str | None:
    """The precision OpenVINO's CPU plugin infers in when not told (``f32``; ``bf16`` on CPUs with AMX
    or AVX512-BF16, ``f16`` on some ARM CPUs), or None when OpenVINO is not installed."""
    try:
        import openvino
    except ImportError:
        return None
    return openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


def random_inputs(shapes: dict[str, tuple[int, ...]], *, seed: int = 0) -> dict[str, np.ndarray]:
    """Random image-like inputs (0..1), by input name: with ``seed`` 0, the ones ``report`` runs every runtime on."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(0, 1, size=shape).astype("float32") for name, shape in shapes.items()}


def save_inputs(shapes: dict[str, tuple[int, ...]], path: str, *, seed: int = 0) -> None:
    """:func:`random_inputs`, saved for the runtimes' processes: the same for every runtime."""
    np.savez(path, **random_inputs(shapes, seed=seed))


SLICE_MIN = 16  # elements a slice needs to be judged on its own magnitude (fewer: logits, one detection's fields)
FLOOR = 1e-6  # by default no slice is held to less than this share of its output's largest value (fp32's rounding)


def relative_error(x: np.ndarray, y: np.ndarray, *, floor: float = FLOOR) -> float:
    """How far ``x`` is from the reference ``y``: the largest |x-y| of a slice over that slice's largest |y|, the
    slices being the output whole and each index of every axis but the first (a channel, a row, a field of every
    detection) where a slice has at least :data:`SLICE_MIN` elements. Against the output's largest value alone a
    detector's scores go unseen: on a noise image a YOLO head's boxes reach 640 and its class scores 1e-4, so a
    wrong score moved that error by less than 1e-6; each channel against its own scale sees it. A slice whose
    largest value is under ``floor`` x the output's largest is judged against that instead: a lower precision's
    rounding is of the order of the values it adds up, and where they cancel, or a ReLU's threshold falls near a
    nearly dead channel, its error relative to that channel alone says nothing. NaN or inf where the reference is
    finite: inf."""
    if x.shape != y.shape:
        return float("inf")
    x, y = x.astype(np.float64), y.astype(np.float64)
    diff = np.abs(x - y)
    if not np.isfinite(diff).all():
        return 0.0 if np.array_equal(x, y, equal_nan=True) else float("inf")
    magnitude = np.abs(y)
    largest = max(float(magnitude.max(initial=0.0)), 1e-12)
    floor = max(largest * floor, 1e-12)
    worst = float(diff.max(initial=0.0)) / largest
    for axis in range(1, x.ndim):
        if x.size // x.shape[axis] < SLICE_MIN:
            continue
        others = tuple(a for a in range(x.ndim) if a != axis)
        scale = np.maximum(magnitude.max(axis=others), floor)
        worst = max(worst, float((diff.max(axis=others) / scale).max()))
    return worst


def max_relative_error(a_path: str, b_path: str, *, floor: float = FLOOR) -> float:
    """:func:`relative_error` of two saved runs, the worst over their outputs (inf when they differ in names or
    shapes)."""
    with np.load(a_path) as a, np.load(b_path) as b:
        if sorted(a.files) != sorted(b.files):
            return float("inf")
        return max((relative_error(a[name], b[name], floor=floor) for name in a.files), default=0.0)
