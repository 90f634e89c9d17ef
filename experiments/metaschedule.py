"""TVM's own tuner (``ms.tune_tir``: evolutionary search + XGBoost) with our measurement settings.

Shared by the benchmarks that compare autosearch with MetaSchedule, so both are measured alike:
same design space (PostOrderApply, default rules), same evaluator (number/repeat/min_repeat_ms,
CPU cache flush), same threads.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from autosearch.measure.base import EvaluatorConfig


@dataclass
class MetaScheduleRun:
    work_dir: str
    trials: int
    wall_secs: float
    best_secs: float  # best latency by MetaSchedule's own timer


def builder_and_runner(target, *, evaluator: EvaluatorConfig | None = None, fast_builder: bool = True,
                       builder_timeout: float = 30.0):
    """MetaSchedule's LocalBuilder and LocalRunner with our evaluator settings and the target's threads."""
    from tvm.s_tir import meta_schedule as ms

    from autosearch.target import target_num_cores
    from autosearch.tvm_compat import fast_build, import_tensor_intrinsics

    evaluator = evaluator or EvaluatorConfig()
    if fast_builder:
        import_tensor_intrinsics(str(target.kind.name), str(dict(target.export()).get("mtriple", "")))
    builder = ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=builder_timeout) if fast_builder \
        else ms.builder.LocalBuilder(timeout_sec=builder_timeout)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
        number=evaluator.number, repeat=evaluator.repeat, min_repeat_ms=evaluator.min_repeat_ms,
        enable_cpu_cache_flush=evaluator.cache_flush))
    # MetaSchedule's runner workers inherit the environment: without TVM_NUM_THREADS, TVM used one
    # thread on this VM, and MetaSchedule would search with single-threaded timings.
    os.environ["TVM_NUM_THREADS"] = str(target_num_cores(target))
    return builder, runner


def tune_tir(mod, target, work_dir: str, trials: int, *, per_iter: int = 16, fast_builder: bool = True,
             evaluator: EvaluatorConfig | None = None, seed: int = 0, builder_timeout: float = 30.0) -> MetaScheduleRun:
    from tvm.s_tir import meta_schedule as ms

    builder, runner = builder_and_runner(target, evaluator=evaluator, fast_builder=fast_builder,
                                         builder_timeout=builder_timeout)
    os.makedirs(work_dir, exist_ok=True)
    start = time.perf_counter()
    db = ms.tune_tir(mod, target, work_dir, max_trials_global=trials, num_trials_per_iter=per_iter,
                     builder=builder, runner=runner, seed=seed or None)
    wall = time.perf_counter() - start
    best = min((min(float(s) for s in r.run_secs) for r in db.get_all_tuning_records() if r.run_secs),
               default=float("inf"))
    return MetaScheduleRun(work_dir=work_dir, trials=trials, wall_secs=wall, best_secs=best)
