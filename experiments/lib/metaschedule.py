"""TVM's own tuner (``ms.tune_tir``: evolutionary search + XGBoost) with our measurement settings, optionally
followed by its Droplet Search post-optimisation, and when each of its trials finished.

Shared by every experiment that compares autosearch with MetaSchedule, so both are measured alike: same design
space (PostOrderApply, default rules), same evaluator (number / repeat / min_repeat_ms, CPU cache flush), same
threads, and a builder that does not import TVM's CUDA intrinsics in every worker (TVM's default one can outlast
its own timeout on a small machine; README, "Measurement pipeline").

**Droplet** (``post_optimization=True``, TVM 0.27): after the evolutionary search, ``PostOpt`` walks the best
record's tile sizes and annotations one knob at a time (``tvm.s_tir.meta_schedule.post_optimization``). As TVM
ships it, it measures with a builder and runner of its own: TVM's default builder with a 10 s timeout and
``number=2, repeat=3, min_repeat_ms=0`` without cache flush, for up to 100 trials per task, and keeps no record of
its trials (it appends only its best to the database and deletes its log). :func:`tune_tir` runs it unchanged
except for those settings, while it runs: its builder is ours (fast build, ``builder_timeout``), its runner uses
our evaluator, its trial cap is ``droplet_trials``, and every batch it measures is noted (trials, the records
it kept, when it finished), so its best after any number of trials is known as MetaSchedule's is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from autosearch.measure.base import EvaluatorConfig

RECORD_FILE = "database_tuning_record.json"


@dataclass
class DropletBatch:
    """One batch Droplet measured: how many configs it sent, the (trace JSON, run seconds) it kept (the ones that
    built and ran), and when the batch finished (seconds since the tuning started)."""

    size: int
    kept: list[tuple[Any, list[float]]]
    finished: float


@dataclass
class MetaScheduleRun:
    work_dir: str
    trials: int  # the evolutionary search's budget (records in the database before Droplet)
    wall_secs: float
    best_secs: float  # best latency by MetaSchedule's own timer, Droplet's trials included
    record_times: list[float] = field(default_factory=list)  # seconds since start when each database record appeared
    droplet: list[DropletBatch] = field(default_factory=list)
    search_records: int = 0  # database records written by the evolutionary search (Droplet appends its best after)


def builder_and_runner(target, *, evaluator: EvaluatorConfig | None = None, fast_builder: bool = True,
                       builder_timeout: float = 30.0):
    """MetaSchedule's LocalBuilder and LocalRunner with our evaluator settings and the target's threads."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.frontend.target import target_num_cores
    from autosearch.tvm_compat import fast_build, import_tensor_intrinsics

    evaluator = evaluator or EvaluatorConfig()
    if fast_builder:
        import_tensor_intrinsics(str(target.kind.name), str(dict(target.export()).get("mtriple", "")))
    # MetaSchedule's runner worker inherits the environment: without TVM_NUM_THREADS, TVM uses one thread on
    # these VMs and MetaSchedule would search with single-threaded timings. LocalRunner starts its worker in its
    # constructor (a sanity check), so the variable must be set before it; Droplet's own runner, made later,
    # inherits it too.
    os.environ["TVM_NUM_THREADS"] = str(target_num_cores(target))
    builder = ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=builder_timeout) if fast_builder \
        else ms.builder.LocalBuilder(timeout_sec=builder_timeout)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
        number=evaluator.number, repeat=evaluator.repeat, min_repeat_ms=evaluator.min_repeat_ms,
        enable_cpu_cache_flush=evaluator.cache_flush))
    return builder, runner


def _count_lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.endswith(b"\n"))


class RecordClock:
    """Notes, every ``poll`` seconds, when new lines appear in the database's record file (a daemon thread):
    ``times[i]`` is when record i was first seen, in seconds since ``start`` (a ``perf_counter`` reading). Works
    on a database another process writes too."""

    def __init__(self, path: str, start: float, poll: float) -> None:
        self.path, self.start, self.poll = path, start, poll
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ms-record-clock", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self.poll)

    def check(self) -> None:
        n = _count_lines(self.path)
        now = time.perf_counter() - self.start
        self.times += [now] * (n - len(self.times))

    def timeline(self) -> list[list[float]]:
        """``[[seconds, records so far], ...]``, one entry per time new records were seen."""
        counts: dict[float, int] = {}
        for i, t in enumerate(self.times):
            counts[t] = i + 1
        return [[t, n] for t, n in counts.items()]

    def __enter__(self) -> RecordClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.check()


@contextlib.contextmanager
def _droplet_settings(out: MetaScheduleRun, *, evaluator: EvaluatorConfig, builder_timeout: float,
                      trials: int, start: float, clock: RecordClock) -> Iterator[None]:
    """While tuning: Droplet builds with our fast builder, times with our evaluator, stops after ``trials`` and
    reports every batch to ``out.droplet`` (see the module docstring). Restored afterwards."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import tune as ms_tune
    from tvm.s_tir.meta_schedule.post_optimization import space as droplet_space

    from autosearch.tvm_compat import fast_build, to_plain_json

    space_cls = droplet_space.Space
    saved = (space_cls.run, space_cls.save_log, ms.builder.LocalBuilder, ms_tune.PostOpt)
    original_run, original_save, original_builder, original_post_opt = saved
    kept: list[tuple[Any, list[float]]] = []

    def measure_batch(self, json_file_list, final_log, **_ignored):
        kept.clear()
        results = original_run(self, json_file_list, final_log, timeout=builder_timeout, number=evaluator.number,
                               repeat=evaluator.repeat, min_repeat_ms=evaluator.min_repeat_ms,
                               cpu_cache=evaluator.cache_flush)
        out.droplet.append(DropletBatch(len(json_file_list), list(kept), time.perf_counter() - start))
        return results

    def keep(self, path, record, results):
        kept.append((to_plain_json(record.trace.as_json(remove_postproc=False)), [float(s) for s in results]))
        return original_save(self, path, record, results)

    def fast_builder(*args, **kwargs):
        kwargs.setdefault("f_build", fast_build)
        return original_builder(*args, **kwargs)

    def post_opt(*args, **kwargs):
        clock.check()
        out.search_records = len(clock.times)  # what the evolutionary search wrote; Droplet's best comes after
        # Droplet counts from 1 and stops when its count reaches ``trials``: trials + 1 measures ``trials`` configs
        return original_post_opt(*args, **{**kwargs, "trials": trials + 1})

    space_cls.run, space_cls.save_log, ms.builder.LocalBuilder, ms_tune.PostOpt = (measure_batch, keep,
                                                                                    fast_builder, post_opt)
    try:
        yield
    finally:
        space_cls.run, space_cls.save_log, ms.builder.LocalBuilder, ms_tune.PostOpt = saved


def tune_tir(mod, target, work_dir: str, trials: int, *, per_iter: int = 16, fast_builder: bool = True,
             evaluator: EvaluatorConfig | None = None, seed: int = 1, builder_timeout: float = 30.0,
             post_optimization: bool = False, droplet_trials: int = 100, poll_secs: float = 0.5) -> MetaScheduleRun:
    """``ms.tune_tir`` for ``trials`` trials of the evolutionary search, then (``post_optimization``) up to
    ``droplet_trials`` of Droplet, in this process. Run it in a process of its own when timing matters: TVM's
    pools and the Droplet settings stay confined to it."""
    from tvm.s_tir import meta_schedule as ms

    evaluator = evaluator or EvaluatorConfig()
    builder, runner = builder_and_runner(target, evaluator=evaluator, fast_builder=fast_builder,
                                         builder_timeout=builder_timeout)
    os.makedirs(work_dir, exist_ok=True)
    start = time.perf_counter()
    out = MetaScheduleRun(work_dir=work_dir, trials=trials, wall_secs=0.0, best_secs=float("inf"))
    with RecordClock(os.path.join(work_dir, RECORD_FILE), start, poll_secs) as clock:
        settings = _droplet_settings(out, evaluator=evaluator, builder_timeout=builder_timeout,
                                     trials=droplet_trials, start=start, clock=clock) \
            if post_optimization else contextlib.nullcontext()
        with settings:
            tune = functools.partial(ms.tune_tir, mod, target, work_dir, max_trials_global=trials,
                                     num_trials_per_iter=per_iter, builder=builder, runner=runner, seed=seed)
            db = tune(post_optimization=True) if post_optimization else tune()
    out.wall_secs = time.perf_counter() - start
    out.record_times = clock.times
    if not post_optimization:
        out.search_records = len(clock.times)
    out.best_secs = min((min(float(s) for s in r.run_secs) for r in db.get_all_tuning_records() if r.run_secs),
                        default=float("inf"))
    return out
