"""Whole-model builds with a tuning database applied, and end-to-end timing in fresh processes.

TVM's thread pool pins the main thread to a core when it starts, and anything started after it
inherits that: ONNX Runtime in the same process ran 2.3x slower here. So every runtime (TVM untuned,
TVM tuned, ONNX Runtime, OpenVINO) is timed in its own process (``python -m autosearch.bench``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosearch.errors import UserError
from autosearch.lowering import DEFAULT_FAST_MATH


@dataclass
class CompiledModel:
    path: str
    tuned_tasks: list[str] = field(default_factory=list)
    missing_tasks: list[str] = field(default_factory=list)  # tasks the database has no record for

    @property
    def task_count(self) -> int:
        """Tasks of the compiled model (a layer tuned both ways counts once: the alternative compiled)."""
        return len(self.tuned_tasks) + len(self.missing_tasks)


def compile_model(relax_mod, target, tasks, db, out_path: str, *, winograd="auto",
                  layout="NCHW", fast_math=DEFAULT_FAST_MATH) -> CompiledModel:
    """Build the whole model with the database applied (MetaSchedule's apply-database pass, weights
    prepacked as the schedules want them, lowered with ``layout`` and ``fast_math``); tasks missing from
    the database keep TVM's default code. Without a database: TVM's default build (the untuned baseline)."""
    from autosearch.lowering import winograd_policy
    from autosearch.tvm_compat import import_tensor_intrinsics

    import_tensor_intrinsics(str(target.kind.name), str(dict(target.export()).get("mtriple", "")))
    policy = winograd_policy(winograd)
    out = CompiledModel(path=out_path)
    for task in (t for t in tasks if policy.uses(t.lowering)):  # a layer's unused alternative is no task
        (out.tuned_tasks if db is not None and db.has_workload(task.mod) else out.missing_tasks).append(task.name)
    try:
        if db is None:
            import tvm

            ex = tvm.compile(relax_mod, target=target)
        else:
            from autosearch.lowering import build_tuned

            ex = build_tuned(relax_mod, target, db, winograd=winograd, layout=layout, fast_math=fast_math)
    except Exception as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        raise UserError(f"TVM could not compile the model: {lines[-1][:300] if lines else type(exc).__name__}") from exc
    directory = os.path.dirname(os.path.abspath(out_path))
    try:
        os.makedirs(directory, exist_ok=True)
        ex.export_library(out_path)
    except OSError as exc:
        raise UserError(f"cannot write {out_path}: {exc.strerror}") from exc
    return out


@dataclass
class Timing:
    """End-to-end latency of one runtime (milliseconds)."""

    name: str
    runs: list[float]
    output_path: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.error

    def stats(self) -> dict[str, float]:
        a = np.asarray(self.runs)
        return {"mean": float(a.mean()), "median": float(np.median(a)), "max": float(a.max()),
                "min": float(a.min()), "std": float(a.std())}


@dataclass(frozen=True)
class Runtime:
    """One runtime to time: the name shown in the report, how ``autosearch.bench`` runs it (``kind``:
    tvm, ort, ov = OpenVINO in fp32, ov-default = OpenVINO in its default precision) and the model file
    (a compiled TVM library or the ONNX file)."""

    name: str
    kind: str
    path: str
    precision: str = "f32"  # what it computes in: lower ones are checked with a looser tolerance


def time_in_subprocess(runtime: Runtime, *, inputs_path: str, runs: int, threads: int, out_dir: str,
                       timeout: float = 3600) -> Timing:
    """Time a runtime in a fresh process with ``threads`` threads; its outputs are saved in ``out_dir``
    (one file per runtime name) for the correctness check."""
    output_path = os.path.join(out_dir, re.sub(r"[^A-Za-z0-9]+", "-", runtime.name).strip("-") + ".npz")
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "autosearch.bench", runtime.kind, runtime.path, "--inputs", inputs_path,
           "--runs", str(runs), "--threads", str(threads), "--output", output_path]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Timing(runtime.name, [], error=f"timed out after {timeout:.0f} s")
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        return Timing(runtime.name, [], error=lines[-1] if lines else f"exit code {proc.returncode}")
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return Timing(runtime.name, data["runs_ms"], output_path=output_path)


def time_taking_turns(runtimes: list[Runtime], *, rounds: int, runs: int, inputs_path: str, threads: int,
                      out_dir: str) -> list[Timing]:
    """Time several runtimes in ``rounds`` fresh processes apiece, taking turns (A B C A B C ...),
    ``runs`` forward passes in all per runtime. On a shared machine a slow spell then hits every
    runtime alike instead of the one that happened to be running (seen here: ONNX Runtime at 55 ms in
    one window and 82 ms in another)."""
    rounds = max(1, min(rounds, runs))
    out = [Timing(r.name, []) for r in runtimes]
    for n in (runs // rounds + (1 if i < runs % rounds else 0) for i in range(rounds)):
        for timing, runtime in zip(out, runtimes):
            if timing.error:
                continue
            t = time_in_subprocess(runtime, inputs_path=inputs_path, runs=n, threads=threads, out_dir=out_dir)
            timing.runs.extend(t.runs)
            timing.error = t.error
            timing.output_path = timing.output_path or t.output_path
    return out


def openvino_default_precision() -> str | None:
    """The precision OpenVINO's CPU plugin infers in when not told (``f32``; ``bf16`` on CPUs with AMX
    or AVX512-BF16, ``f16`` on some ARM CPUs), or None when OpenVINO is not installed."""
    try:
        import openvino
    except ImportError:
        return None
    return openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


def save_inputs(shapes: dict[str, tuple[int, ...]], path: str, *, seed: int = 0) -> None:
    """Random image-like inputs (0..1), the same for every runtime."""
    rng = np.random.default_rng(seed)
    np.savez(path, **{name: rng.uniform(0, 1, size=shape).astype("float32") for name, shape in shapes.items()})


def max_relative_error(a_path: str, b_path: str) -> float:
    """Largest |a-b| / max|b| over all outputs of two saved runs."""
    with np.load(a_path) as a, np.load(b_path) as b:
        if sorted(a.files) != sorted(b.files):
            return float("inf")
        worst = 0.0
        for name in a.files:
            x, y = a[name], b[name]
            if x.shape != y.shape:
                return float("inf")
            scale = max(float(np.abs(y).max()), 1e-12)
            worst = max(worst, float(np.abs(x - y).max()) / scale)
        return worst
