"""Local runner: parallel builds in warm worker processes, then one measurement at a time.

Builds and measurements never overlap: on a small machine a compile on the other core would
spoil the timing. The measuring process has ``TVM_NUM_THREADS`` set to the target's cores before it
imports TVM (without it TVM 0.27 used one thread here).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from autosearch.cache import replace_atomically
from autosearch.frontend.target import host_cores, target_num_cores, target_to_json
from autosearch.frontend.task import TuningTask
from autosearch.measure.base import RunnerBase
from autosearch.measure.measuring import MeasuringProcess
from autosearch.measure.policy import REFERENCE_TIMEOUT, build_failure
from autosearch.measure.worker import STARTUP_TIMEOUT, Worker
from autosearch.types import MeasureResult

log = logging.getLogger(__name__)


@dataclass
class Built:
    """A compiled kernel, or the result that says why there is none."""

    artifact: bytes | None
    build_secs: float
    failure: MeasureResult | None = None


class BuildPool:
    """Warm build processes (TVM imported once), one build each at a time, with a per-build timeout.

    A kernel can be built ahead (:meth:`prefetch`): the build whose batch asks for it then takes that build's
    result, its seconds included, instead of building it again; :meth:`settle` waits for every build ahead (no
    kernel is timed while one runs).

    Built kernels are kept (least recently used first out, up to ``keep_bytes``) by the module they were
    built from: re-timing a run's finalists in fresh measuring processes then loads them instead of building
    them again, which made builds most of the re-timing. A failed build is not kept.

    With ``cache_dir``, built kernels are also kept on disk, across pools and processes, keyed by module,
    target and TVM version: a cost-model dataset re-times every one of its thousands of kernels hours after
    measuring it, long after the memory has let them go, and building was half of each re-time. A build is
    deterministic; what a re-time must repeat is the timing, in a fresh process, and that it still does.
    """

    def __init__(self, *, target, workers: int, timeout: float, keep_bytes: int = 256 << 20,
                 cache_dir: str | None = None) -> None:
        self.target = target_to_json(target)
        self.timeout = timeout
        self.keep_bytes = keep_bytes
        self.cache_dir = cache_dir
        self._salt = _cache_salt(self.target) if cache_dir else ""
        self.disk_hits = 0
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._ahead: dict[str, Future[Built]] = {}  # module key -> a build started by prefetch(), not yet asked for
        self._kept_bytes = 0
        self._lock = threading.Lock()
        self._idle: queue.Queue[Worker] = queue.Queue()
        # the workers' temporary files (each build exports its library to one): a build killed at its timeout
        # cannot remove its own, so they go with this directory when the pool closes
        self.scratch_dir = tempfile.mkdtemp(prefix="autosearch-builds-")
        env = {"TVM_NUM_THREADS": "1", "TMPDIR": self.scratch_dir}
        self._workers = [Worker(name=f"build{i}", env=env) for i in range(max(1, workers))]
        for w in self._workers:
            self._idle.put(w)
        self._pool = ThreadPoolExecutor(max_workers=len(self._workers), thread_name_prefix="autosearch-build")

    def warm_up(self) -> None:
        """Start every worker and wait until TVM is imported in each."""
        list(self._pool.map(lambda w: w.call("ping", timeout=STARTUP_TIMEOUT), self._workers))

    @property
    def size(self) -> int:
        """Builds at once (the worker processes)."""
        return len(self._workers)

    def _build_one(self, mod_json: str) -> Built:
        key = _module_key(mod_json)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return Built(self._kept[key], 0.0)
        stored = self._from_disk(key)
        if stored is not None:
            self._keep(key, stored)
            return Built(stored, 0.0)
        worker = self._idle.get()
        try:
            reply = worker.call("build", mod_json, self.target, timeout=self.timeout)
        finally:
            self._idle.put(worker)
        if reply.kind != "ok":
            return Built(None, reply.seconds, build_failure(reply, worker=worker.ident))
        artifact, secs = reply.value
        self._keep(key, artifact)
        self._to_disk(key, artifact)
        return Built(artifact, secs)

    def _disk_path(self, key: str) -> str:
        name = hashlib.sha256((self._salt + key).encode()).hexdigest()
        return os.path.join(str(self.cache_dir), name[:2], name + ".kernel")

    def _from_disk(self, key: str) -> bytes | None:
        if not self.cache_dir:
            return None
        try:
            with open(self._disk_path(key), "rb") as fh:
                artifact = fh.read()
        except FileNotFoundError:
            return None
        with self._lock:
            self.disk_hits += 1
        return artifact

    def _to_disk(self, key: str, artifact: bytes) -> None:
        """Written beside its name and renamed: a reader sees the whole kernel or none (several processes may
        share one directory)."""
        if not self.cache_dir:
            return
        replace_atomically(self._disk_path(key), lambda fh: fh.write(artifact))

    def _keep(self, key: str, artifact: bytes) -> None:
        with self._lock:
            if key not in self._kept:
                self._kept[key] = artifact
                self._kept_bytes += len(artifact)
            while self._kept_bytes > self.keep_bytes and self._kept:
                self._kept_bytes -= len(self._kept.popitem(last=False)[1])

    def build(self, mod_jsons: list[str]) -> list[Built]:
        return [f.result() for f in self.submit(mod_jsons)]

    def submit(self, mod_jsons: list[str]) -> list[Future[Built]]:
        """Start the builds and return at once; each future's result is a :class:`Built` (a module built ahead by
        :meth:`prefetch` gets that build's future)."""
        futures = []
        for m in mod_jsons:
            with self._lock:
                ahead = self._ahead.pop(_module_key(m), None)
            futures.append(ahead if ahead is not None else self._pool.submit(self._build_one, m))
        return futures

    def prefetch(self, mod_jsons: list[str]) -> None:
        """Start building modules a later :meth:`submit` is expected to ask for (not those kept or already ahead)."""
        for m in mod_jsons:
            key = _module_key(m)
            with self._lock:
                if key in self._kept or key in self._ahead:
                    continue
                self._ahead[key] = self._pool.submit(self._build_one, m)

    def settle(self) -> None:
        """Wait until every build started ahead has ended (their results stay for the batch that asks for them)."""
        with self._lock:
            ahead = list(self._ahead.values())
        wait(ahead)

    def close(self) -> None:
        """Stop the workers first (a build in flight is abandoned: its thread sees the worker die),
        then the threads; no build is left running after an interrupt."""
        for w in self._workers:
            w.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for w in self._workers:
            w.close()
        # a killed worker's linker (its child, killed with its process group) may end a moment after the worker
        # and finish a write here meanwhile: removed again until the directory is gone, for a few seconds
        deadline = time.monotonic() + 5.0
        while True:
            shutil.rmtree(self.scratch_dir, ignore_errors=True)
            if not os.path.exists(self.scratch_dir) or time.monotonic() > deadline:
                break
            time.sleep(0.05)


def _module_key(mod_json: str) -> str:
    return hashlib.sha256(mod_json.encode()).hexdigest()


def _cache_salt(target_json: dict[str, Any]) -> str:
    """What a built kernel depends on besides its module: the target, the compiler and the artifact's format
    (autosearch's, :func:`autosearch.measure.prepack.pack_artifact`)."""
    import tvm

    from autosearch import __version__

    return json.dumps({"target": target_json, "tvm": tvm.__version__, "autosearch": __version__}, sort_keys=True)


class LocalRunner(RunnerBase):
    """Builds in parallel, measures one kernel at a time on this machine's CPU.

    Every kernel's output is checked against the task's reference (the unscheduled module run on
    the same random inputs) before it is timed; a mismatch is ``wrong_result`` and has no latency.
    Keyword arguments: those of :class:`~autosearch.measure.base.RunnerBase`, and ``build_cache``: a
    directory where built kernels are kept for later runners (:class:`BuildPool`).
    """

    name = "local"

    def __init__(self, *, target, build_cache: str | None = None, **settings: Any) -> None:
        super().__init__(target=target, **settings)
        self.num_threads = self.num_threads or target_num_cores(target)
        self.builder = BuildPool(target=target, workers=self.build_workers or host_cores(),
                                 timeout=self.build_timeout, cache_dir=build_cache)
        self.device = MeasuringProcess(name="measure", env={"TVM_NUM_THREADS": str(self.num_threads)})
        self._references: dict[str, bytes] = {}

    def warm_up(self) -> None:
        self.builder.warm_up()
        self.device.warm_up()

    # ------------------------------------------------------------------ Runner API
    def prepare(self, task: TuningTask) -> MeasureResult:
        """Build the unscheduled module, keep its output as the reference and time it (the baseline)."""
        [result] = self.prepare_many([task])
        return result

    def prepare_many(self, tasks: Sequence[TuningTask], *,
                     meanwhile: Callable[[], None] | None = None) -> list[MeasureResult]:
        """:meth:`prepare` for several tasks: their untuned modules build on every build worker while
        ``meanwhile()`` runs here (a tuner builds the tasks' design spaces then: host work, no timing), and
        only when every build has ended is each reference computed and each baseline timed, one at a time."""
        import tvm

        futures = self.builder.submit([tvm.ir.save_json(t.mod) for t in tasks])
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            wait(futures)  # nothing is timed while a build runs, nor left building if meanwhile() raised
            self.builder.settle()
        return [self._baseline(t, f.result()) for t, f in zip(tasks, futures)]

    def _baseline(self, task: TuningTask, built: Built) -> MeasureResult:
        if built.failure is not None:
            return built.failure
        key = task.workload_key
        worker = self.device.ident
        reply = self.device.reference(key, built.artifact, task.args, self.seed,
                                      self.policy.reference_evaluator(), timeout=REFERENCE_TIMEOUT)
        result = self.policy.baseline_result(key, reply, build_secs=built.build_secs, worker=worker)
        if result.ok:
            self._references[key] = reply.value["reference"]
        return result

    def measure(self, task: TuningTask, mods: list[Any]) -> list[MeasureResult]:
        """Build all modules in parallel, then check and time each one in turn."""
        import tvm

        self.policy.require_baseline(task)
        start = time.perf_counter()
        builds = self.builder.build([tvm.ir.save_json(m) for m in mods])
        self.builder.settle()  # a kernel built ahead for a later batch: nothing is timed while it builds
        built = time.perf_counter()
        results = [self._run(task, b) for b in builds]
        self.count_phases(built - start, time.perf_counter() - built)
        return results

    def _run(self, task: TuningTask, built: Built) -> MeasureResult:
        if built.failure is not None:
            return built.failure
        key = task.workload_key
        worker = self.device.ident
        reply = self.device.run(key, lambda: self._references[key], built.artifact, task.args, self.seed,
                                self.policy.run_evaluator(task), timeout=self.policy.timeout(key))
        return self.policy.run_result(key, reply, build_secs=built.build_secs, worker=worker)

    def spare_builds(self, builds: int) -> int:
        return -builds % self.builder.size

    def prefetch(self, mods: list[Any]) -> None:
        import tvm

        self.builder.prefetch([tvm.ir.save_json(m) for m in mods])

    def refresh(self) -> None:
        """Replace the measuring process (for re-timing finalists in a fresh process); finalists are
        timed in full, so the best-so-far shortcut is reset too."""
        self.device.refresh()
        self.policy.forget_best()

    def close(self) -> None:
        self.builder.close()
        self.device.close()


def create(target, measure, *, seed: int = 0) -> LocalRunner:
    """The ``local`` runner of the registry (group ``autosearch.runners``): builds and times on this machine, with
    ``measure``'s (:class:`autosearch.api.MeasureOptions`) evaluator and limits."""
    return LocalRunner(target=target, seed=seed, **measure.runner_settings())
