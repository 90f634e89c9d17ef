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

from autosearch.measure.flush import cache_function
from autosearch.measure.queueing import run_delay_seconds, waited_share


def as_compiled(mod) -> tuple[Any, Any]:
    """(the module TVM is handed, prepack plan or None) for a scheduled PrimFunc module.

    A kernel that rewrites its weights' layout is split first, as TVM splits it when it compiles the
    model (see :mod:`autosearch.measure.prepack`); then the build's rewrites run
    (:func:`autosearch.frontend.rewrites.build_rewrites`), as in the model's build.
    """
    from autosearch.frontend.rewrites import build_rewrites
    from autosearch.measure.prepack import split_prepack

    mod, plan = split_prepack(mod)
    return build_rewrites(mod), plan


def build(mod_json: str, target: dict[str, Any]) -> tuple[bytes, float]:
    """Compile a scheduled PrimFunc module (:func:`as_compiled`); returns (artifact bytes, seconds). The
    artifact carries the prepack plan."""
    import tvm

    from autosearch.measure.prepack import pack_artifact
    from autosearch.tvm_compat import build_context

    start = time.perf_counter()
    mod, plan = as_compiled(tvm.ir.load_json(mod_json))
    target = tvm.target.Target(target)
    with build_context(target.kind.name):  # as the model's build (autosearch.frontend.lowering.build_module)
        lib = tvm.compile(mod, target=target)
    with tempfile.TemporaryDirectory(prefix="autosearch-build-") as tmp:
        path = os.path.join(tmp, "kernel.so")
        lib.export_library(path)
        with open(path, "rb") as fh:
            data = fh.read()
    return pack_artifact(data, plan), time.perf_counter() - start


# bf16 keeps 8 significant bits: a product of two rounded operands is within 2^-8 of the exact one. A bf16
# kernel and its reference round the same operands and differ in how they accumulate in fp32, which on a long
# reduction can cancel to values far below the products: relative 2^-7 per value, and an absolute floor of 2^-8
# of the output's largest value (the size of one rounding error of the largest terms).
BF16_RTOL = 2.0**-7
BF16_ATOL_SHARE = 2.0**-8


def _host_array(x: np.ndarray) -> np.ndarray:
    """bf16 arrays as fp32 (exact), for comparisons and for files numpy reads back without ml_dtypes."""
    return x.astype(np.float32) if x.dtype.name == "bfloat16" else x


def make_inputs(args: list[tuple[tuple[int, ...], str]], seed: int) -> list[np.ndarray]:
    """Deterministic random arguments; outputs are random too, so a kernel that skips writes is caught."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in args:
        if dtype == "bfloat16":
            import ml_dtypes

            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(ml_dtypes.bfloat16))
        elif np.dtype(dtype).kind == "f":
            out.append(rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
        elif np.dtype(dtype).kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            out.append(rng.integers(0, 4, size=shape).astype(dtype))
    return out


def check_tolerance(args: list[tuple[tuple[int, ...], str]], rtol: float, *,
                    bf16: int = 0) -> tuple[float, float]:
    """(relative tolerance, absolute floor as a share of the output's largest value) for a task's arguments:
    ``rtol`` and a tenth of it, or bf16's (:data:`BF16_RTOL`) when the task computes on bf16 operands (``bf16`` >=
    1, or a bf16 argument). ``bf16`` = 2: two products in a chain, the first's result rounded to bf16 again before
    the second (a fused attention's probabilities): the first's error reaches the second's operands, and each such
    link gets four times the tolerance (two more bits)."""
    if bf16 or any(dtype == "bfloat16" for _, dtype in args):
        scale = 4.0 ** (max(bf16, 1) - 1)
        return max(rtol, BF16_RTOL * scale), BF16_ATOL_SHARE * scale
    return rtol, rtol * 0.1


def compare(outputs: list[np.ndarray], reference: list[np.ndarray], rtol: float,
            atol_share: float | None = None) -> str:
    """Empty string if every argument matches the reference, else what differs (``atol_share``: the absolute
    tolerance as a share of the largest reference value, a tenth of ``rtol`` by default)."""
    for i, (got, want) in enumerate(zip(outputs, reference, strict=True)):
        got, want = _host_array(got), _host_array(want)
        if got.shape != want.shape:
            return f"argument {i}: shape {got.shape} != {want.shape}"
        if not np.all(np.isfinite(got) == np.isfinite(want)):
            return f"argument {i}: non-finite values where the reference has none"
        scale = float(np.max(np.abs(want[np.isfinite(want)]))) if want.size else 0.0
        atol = max(scale, 1e-6) * (rtol * 0.1 if atol_share is None else atol_share)
        bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            idx = tuple(int(x[0]) for x in np.nonzero(bad))
            return (f"argument {i}: {int(bad.sum())} of {bad.size} values differ "
                    f"(at {idx}: {float(got[idx]):.6g} vs reference {float(want[idx]):.6g})")
    return ""


MIN_REPEATS = 5  # a kernel timed one call per repeat gets at least this many, whatever its budget
INPUT_CACHE_TASKS = 2  # tasks whose inputs a measuring process keeps (a batch is of one task)


def fitted(evaluator: dict, once: float, flush: float = 0.0) -> dict:
    """``evaluator`` with its repeats cut to its budget when each repeat is one call (``min_repeat_ms`` 0): as many as
    fit in ``repeat_budget_ms`` at ``once`` seconds a call and ``flush`` seconds for the cache flush before it, at
    most ``repeat``, at least ``MIN_REPEATS``.

    The flush counts because a repeat costs the run both: it evicts the weights and the output line by line, and
    with TVM's own flush (a CPU without ``clflushopt``) that took several times the kernel on a VM."""
    budget = evaluator.get("repeat_budget_ms")
    if evaluator.get("min_repeat_ms", 0) or not budget or once <= 0:
        return evaluator
    repeat = int(evaluator.get("repeat", 1))
    fits = int(budget / 1e3 / (once + max(0.0, flush)))
    return {**evaluator, "repeat": max(min(repeat, MIN_REPEATS), min(repeat, fits))}


class KernelRunner:
    """Loads built kernels and times them on one device; keeps each task's reference in memory."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._references: dict[str, list[np.ndarray]] = {}
        self._input_cache: dict[tuple, list[np.ndarray]] = {}  # (args, seed) -> inputs, oldest first
        self._flush: dict[str, float] = {}  # task key -> seconds of one flush of its arguments
        self._flush_names: dict[str, str] = {}  # cache state -> the time evaluator's preprocessing here, made once
        self._measured_on: str | None = None
        self._pool_bound = False  # TVM's thread pool bound to this process's cores (the first kernel loaded)
        self._threads = 1  # the pool's threads, once bound
        # the process's cores, as its parent gave them: binding a pool of several threads holds this one to the first
        self._cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
        if device == "cpu":  # AMX kernels need the tile state; Linux grants it per process, on request
            from autosearch.tensor_units.amx import request_permission

            request_permission()

    @property
    def measured_on(self) -> str:
        """What times the kernels, named as the logs name CPUs: LLVM's name for this process's CPU (a GPU's own
        name on a GPU). A record says it beside its target, whose ``mcpu`` is what the kernel was built for: the
        two differ when a run builds for another CPU than the one it measures on."""
        if self._measured_on is None:
            import tvm

            self._measured_on = (str(tvm.target.codegen.llvm_get_system_cpu()) if self.device == "cpu"
                                 else str(self._dev().device_name or ""))
        return self._measured_on

    def _load(self, artifact: bytes):
        """(module, prepack plan or None) of a built artifact.

        The library is written to a file only to be loaded: once loaded it no longer needs the file, so
        the directory is gone before the kernel runs (nothing is left behind by a kernel that crashes)."""
        import tvm

        from autosearch.measure.prepack import unpack_artifact

        if self.device == "cpu" and not self._pool_bound:  # at the first kernel loaded: build workers never load one
            from autosearch.tvm_compat import bind_thread_pool

            self._threads = bind_thread_pool()  # TVM_NUM_THREADS threads, on the cores the parent gave this process
            self._pool_bound = True
        library, plan = unpack_artifact(artifact)
        with tempfile.TemporaryDirectory(prefix="autosearch-run-") as tmp:
            path = os.path.join(tmp, "kernel.so")
            with open(path, "wb") as fh:
                fh.write(library)
            return tvm.runtime.load_module(path), plan

    def _inputs(self, args, seed: int) -> list[np.ndarray]:
        """The task's deterministic inputs (:func:`make_inputs`), made once per task and seed: every candidate of a
        batch gets the same, and generating a layer's weights took a tenth of a second per trial."""
        key = (tuple((tuple(shape), dtype) for shape, dtype in args), seed)
        if key not in self._input_cache:
            if len(self._input_cache) >= INPUT_CACHE_TASKS:
                self._input_cache.pop(next(iter(self._input_cache)))
            self._input_cache[key] = make_inputs(args, seed)
        return self._input_cache[key]

    def _kernel_args(self, module, plan, inputs: list[np.ndarray]) -> list:
        """The kernel's arguments on the device: copies of the task's inputs (a kernel may write to its
        arguments), with prepacked weights where the plan says (``prepack`` runs here, once, untimed: TVM folds it
        into the constants of a compiled model). Prepacked weights stay on the device: Winograd's are 4x the
        layer's weights, and a round trip through the host cost more than the kernel's timing."""
        import tvm

        dev = self._dev()
        replaced = plan.replaced if plan is not None else set()
        arrays = [None if i in replaced else tvm.runtime.tensor(a, dev) for i, a in enumerate(inputs)]
        if plan is not None:
            sources = [arrays[i] if arrays[i] is not None else tvm.runtime.tensor(inputs[i], dev) for i in plan.inputs]
            packed = [tvm.runtime.empty(shape, dtype, dev) for _, shape, dtype in plan.outputs]
            module["prepack"](*sources, *packed)
            dev.sync()
            for (pos, _, _), array in zip(plan.outputs, packed, strict=True):
                arrays[pos] = array
        return arrays

    def _dev(self):
        import tvm

        return tvm.device(self.device, 0)

    def _call_once(self, func, host_args: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        """The arguments after one call of ``func`` on copies of ``host_args``, and the call's seconds (the kernel
        alone: no host<->device copies)."""
        import tvm

        dev = self._dev()
        arrays = [tvm.runtime.tensor(a, dev) for a in host_args]
        start = time.perf_counter()
        func(*arrays)
        dev.sync()
        secs = time.perf_counter() - start
        return [a.numpy() for a in arrays], secs

    def set_reference(self, task_key: str, reference: bytes) -> None:
        """Install a reference computed elsewhere (the npz bytes :meth:`reference` returned)."""
        with np.load(io.BytesIO(reference)) as data:
            self._references[task_key] = [data[f"a{i}"] for i in range(len(data.files))]

    def reference(self, task_key: str, artifact: bytes, args, seed: int, evaluator: dict) -> dict[str, Any]:
        """Run the unscheduled kernel: its outputs become the task's reference; also time it."""
        import tvm

        module, _ = self._load(artifact)
        inputs = self._inputs(args, seed)
        called, first = self._call_once(module["main"], inputs)
        outputs = [_host_array(a) for a in called]
        self._references[task_key] = outputs
        buf = io.BytesIO()
        np.savez(buf, **{f"a{i}": a for i, a in enumerate(outputs)})
        slow_after = evaluator.get("slow_after")
        if slow_after and first > slow_after:
            # timed by the call that computed the reference: on a kernel this slow, loading and thread-pool start-up
            # are lost in the call-to-call noise (experiments/results/baseline-build-*.md), and a second call of
            # seconds was most of a run's task set-up
            return {"reference": buf.getvalue(), "latencies": [first], "median": first,
                    "measured_on": self.measured_on, "note": "timed once: slow untuned kernel"}
        dev = self._dev()
        arrays = [tvm.runtime.tensor(a, dev) for a in inputs]
        timing = self._time(module, arrays, evaluator)
        return {"reference": buf.getvalue(), **timing}

    def run(self, task_key: str, artifact: bytes, args, seed: int, evaluator: dict) -> dict[str, Any]:
        """Check one kernel against the reference, then time it. Raises only for loader/runtime errors."""
        start = time.perf_counter()
        module, plan = self._load(artifact)
        reference = self._references.get(task_key)
        if reference is None:
            raise RuntimeError(f"no reference for task {task_key}")
        arrays = self._kernel_args(module, plan, self._inputs(args, seed))  # copied once, outside every timed call
        func = module["main"]
        once, delay = self._call_counted(func, arrays)  # the kernel alone: no host<->device copies
        skip = plan.replaced if plan is not None else set()  # prepacked weights: inputs in another layout
        rtol, atol_share = check_tolerance(args, evaluator.get("check_rtol", 1e-3), bf16=int(evaluator.get("bf16", 0)))
        mismatch = compare([a.numpy() for i, a in enumerate(arrays) if i not in skip],
                           [r for i, r in enumerate(reference) if i not in skip], rtol, atol_share)
        if mismatch:
            return {"wrong_result": mismatch, "run_secs": time.perf_counter() - start}
        slow_after = evaluator.get("slow_after")
        if slow_after and once > slow_after:
            # the first call of a fresh process also pays for thread-pool start-up: confirm with a second
            once, delay = min((once, delay), self._call_counted(func, arrays), key=lambda call: call[0])
        if slow_after and once > slow_after:
            # Far slower than the task's best: one run is enough to know it will not win, and
            # repeating a kernel of seconds would dominate the tuning time. Its threads' wait for a core through
            # the faster call goes with it: a call the machine slowed so is taken again by the run.
            timed = {"latencies": [once], "median": once, "measured_on": self.measured_on,
                     "note": "timed once: far slower than the best so far", "run_secs": time.perf_counter() - start}
            waited = waited_share(0.0, delay, once, self._threads)
            return {**timed, "waited": waited} if waited is not None else timed
        timing = self._time(module, arrays, fitted(evaluator, once, self._flush_secs(task_key, arrays, evaluator)))
        timing["run_secs"] = time.perf_counter() - start
        return timing

    def _flush_secs(self, task_key: str, arrays: list, evaluator: dict) -> float:
        """Seconds one cache flush of ``arrays`` takes (0 without one): the flush the time evaluator calls before
        each repeat (every argument but the first, :mod:`autosearch.measure.flush`). Timed on a task's first
        candidate only: every candidate of a task flushes the same arguments (prepacked layouts differ in padding)."""
        if not evaluator.get("cache_flush", True) or evaluator.get("min_repeat_ms", 0):
            return 0.0
        if task_key not in self._flush:
            import tvm

            flush = tvm.get_global_func(self._flush_function(evaluator.get("cache_state", "flushed")))
            start = time.perf_counter()
            flush(*arrays)
            self._flush[task_key] = time.perf_counter() - start
        return self._flush[task_key]

    def _flush_function(self, state: str = "flushed") -> str:
        """The preprocessing before each cold repeat (:func:`~autosearch.measure.flush.cache_function`), chosen and
        built on the process's first timing, not per trial (it reads ``/proc/cpuinfo``, or compiles a kernel)."""
        if state not in self._flush_names:
            self._flush_names[state] = cache_function(state, self._threads)
        return self._flush_names[state]

    def _time(self, module, arrays: list, evaluator: dict) -> dict[str, Any]:
        """Time ``main`` on device arrays with TVM's time evaluator (all repeats, their median, and on a CPU the share
        of the timing its threads waited for a core: :mod:`autosearch.measure.queueing`)."""
        dev = self._dev()
        timer = module.time_evaluator(
            "main", dev,
            number=int(evaluator.get("number", 1)),
            repeat=int(evaluator.get("repeat", 5)),
            min_repeat_ms=int(evaluator.get("min_repeat_ms", 0)),
            f_preproc=(self._flush_function(evaluator.get("cache_state", "flushed"))
                       if evaluator.get("cache_flush", True) else ""),
        )
        before, start = self._run_delay(), time.perf_counter()
        results = [float(x) for x in timer(*arrays).results]
        out = {"latencies": results, "median": statistics.median(results), "measured_on": self.measured_on}
        return self._with_waited(out, before, start)

    def _call_counted(self, func, arrays: list) -> tuple[float, float | None]:
        """One call of ``func``: its seconds, and the seconds its threads waited for a core meanwhile (None where
        not counted)."""
        before, start = self._run_delay(), time.perf_counter()
        func(*arrays)
        self._dev().sync()
        secs = time.perf_counter() - start
        after = self._run_delay()
        return secs, (after - before if before is not None and after is not None else None)

    def _run_delay(self) -> float | None:
        """This process's threads' run delay so far (:func:`~autosearch.measure.queueing.run_delay_seconds`), where
        it says what a timing waited: a CPU's kernels, each thread with a core of its own (more threads than cores
        wait for each other by design)."""
        counted = self.device == "cpu" and self._threads <= self._cores
        return run_delay_seconds() if counted else None

    def _with_waited(self, timing: dict[str, Any], before: float | None, start: float) -> dict[str, Any]:
        """``timing`` with the share of the window since ``start`` its threads waited for a core, where counted."""
        waited = waited_share(before, self._run_delay(), time.perf_counter() - start, self._threads)
        return {**timing, "waited": waited} if waited is not None else timing
