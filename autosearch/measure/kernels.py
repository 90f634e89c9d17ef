"""What runs inside build and measurement workers: compile, load, check, time.

Imports only what building for a CPU/GPU target needs (not ``tvm.s_tir.tensor_intrin``, which
costs ~27 s to import and which MetaSchedule's default builder imports in every worker).
"""

from __future__ import annotations

import io
import os
import statistics
import tempfile
import time
from typing import Any

import numpy as np


def build(mod_json: str, target: dict[str, Any]) -> tuple[bytes, float]:
    """Compile a scheduled PrimFunc module; returns (shared library bytes, seconds)."""
    import tvm

    start = time.perf_counter()
    mod = tvm.ir.load_json(mod_json)
    lib = tvm.compile(mod, target=tvm.target.Target(target))
    with tempfile.TemporaryDirectory(prefix="autosearch-build-") as tmp:
        path = os.path.join(tmp, "kernel.so")
        lib.export_library(path)
        with open(path, "rb") as fh:
            data = fh.read()
    return data, time.perf_counter() - start


def make_inputs(args: list[tuple[tuple[int, ...], str]], seed: int) -> list[np.ndarray]:
    """Deterministic random arguments; outputs are random too, so a kernel that skips writes is caught."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in args:
        if np.dtype(dtype).kind == "f":
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        elif np.dtype(dtype).kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            out.append(rng.integers(0, 4, size=shape).astype(dtype))
    return out


def compare(outputs: list[np.ndarray], reference: list[np.ndarray], rtol: float) -> str:
    """Empty string if every argument matches the reference, else what differs."""
    for i, (got, want) in enumerate(zip(outputs, reference)):
        if got.shape != want.shape:
            return f"argument {i}: shape {got.shape} != {want.shape}"
        if not np.all(np.isfinite(got) == np.isfinite(want)):
            return f"argument {i}: non-finite values where the reference has none"
        scale = float(np.max(np.abs(want[np.isfinite(want)]))) if want.size else 0.0
        atol = rtol * max(scale, 1e-6) * 0.1
        bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            idx = tuple(int(x[0]) for x in np.nonzero(bad))
            return (f"argument {i}: {int(bad.sum())} of {bad.size} values differ "
                    f"(at {idx}: {float(got[idx]):.6g} vs reference {float(want[idx]):.6g})")
    return ""


class KernelRunner:
    """Loads built kernels and times them on one device; keeps each task's reference in memory."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._references: dict[str, list[np.ndarray]] = {}
        self._tmp = tempfile.mkdtemp(prefix="autosearch-run-")

    def _load(self, artifact: bytes):
        import tvm

        path = os.path.join(self._tmp, f"k{time.monotonic_ns()}.so")
        with open(path, "wb") as fh:
            fh.write(artifact)
        try:
            return tvm.runtime.load_module(path)
        finally:
            os.unlink(path)

    def _dev(self):
        import tvm

        return tvm.device(self.device, 0)

    def _call_once(self, func, host_args: list[np.ndarray]) -> list[np.ndarray]:
        import tvm

        dev = self._dev()
        arrays = [tvm.runtime.tensor(a, dev) for a in host_args]
        func(*arrays)
        dev.sync()
        return [a.numpy() for a in arrays]

    def set_reference(self, task_key: str, reference: bytes) -> None:
        """Install a reference computed elsewhere (the npz bytes :meth:`reference` returned)."""
        with np.load(io.BytesIO(reference)) as data:
            self._references[task_key] = [data[f"a{i}"] for i in range(len(data.files))]

    def has_reference(self, task_key: str) -> bool:
        return task_key in self._references

    def reference(self, task_key: str, artifact: bytes, args, seed: int, evaluator: dict) -> dict[str, Any]:
        """Run the unscheduled kernel: its outputs become the task's reference; also time it."""
        module = self._load(artifact)
        inputs = make_inputs(args, seed)
        outputs = self._call_once(module["main"], inputs)
        self._references[task_key] = outputs
        buf = io.BytesIO()
        np.savez(buf, **{f"a{i}": a for i, a in enumerate(outputs)})
        timing = self._time(module, inputs, evaluator)
        return {"reference": buf.getvalue(), **timing}

    def run(self, task_key: str, artifact: bytes, args, seed: int, evaluator: dict) -> dict[str, Any]:
        """Check one kernel against the reference, then time it. Raises only for loader/runtime errors."""
        import tvm

        start = time.perf_counter()
        module = self._load(artifact)
        inputs = make_inputs(args, seed)
        reference = self._references.get(task_key)
        if reference is None:
            raise RuntimeError(f"no reference for task {task_key}")
        check_start = time.perf_counter()
        outputs = self._call_once(module["main"], inputs)
        once = time.perf_counter() - check_start
        mismatch = compare(outputs, reference, evaluator.get("check_rtol", 1e-3))
        if mismatch:
            return {"wrong_result": mismatch, "run_secs": time.perf_counter() - start}
        slow_after = evaluator.get("slow_after")
        if slow_after and once > slow_after:
            # the first call of a fresh process also pays for thread-pool start-up: confirm with a second
            confirm = time.perf_counter()
            module["main"](*[tvm.runtime.tensor(a, self._dev()) for a in inputs])
            self._dev().sync()
            once = min(once, time.perf_counter() - confirm)
        if slow_after and once > slow_after:
            # Far slower than the task's best: one (cold) run is enough to know it will not win, and
            # repeating a kernel of seconds would dominate the tuning time.
            return {"latencies": [once], "median": once, "run_secs": time.perf_counter() - start,
                    "note": "timed once: far slower than the best so far"}
        timing = self._time(module, inputs, evaluator)
        timing["run_secs"] = time.perf_counter() - start
        return timing

    def _time(self, module, inputs: list[np.ndarray], evaluator: dict) -> dict[str, Any]:
        import tvm

        dev = self._dev()
        arrays = [tvm.runtime.tensor(a, dev) for a in inputs]
        timer = module.time_evaluator(
            "main", dev,
            number=int(evaluator.get("number", 1)),
            repeat=int(evaluator.get("repeat", 5)),
            min_repeat_ms=int(evaluator.get("min_repeat_ms", 0)),
            f_preproc="cache_flush_cpu_non_first_arg" if evaluator.get("cache_flush", True) else "",
        )
        results = [float(x) for x in timer(*arrays).results]
        return {"latencies": results, "median": statistics.median(results)}
