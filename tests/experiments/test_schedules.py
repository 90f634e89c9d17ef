"""A schedule in a line (experiments/lib/schedules.py) and the study's "where MetaSchedule wins" section: the loops
read from the scheduled module are the ones TVM's own schedule API reports, and the section sets the reference's
fastest schedule beside the best autosearch method's. Real schedules of a small conv task; nothing is timed."""

from __future__ import annotations

import json
import os

import numpy as np

from experiments.lib.schedules import BlockNest, Loop, ScheduleSummary, summarize
from tests.experiments.test_study import MACHINE, _config, _round


def _sampled(conv_space, n: int):
    return [a for a in conv_space.sample_applied(np.random.default_rng(4), 3 * n) if a.ok][:n]


def test_the_loops_are_the_ones_tvm_reports_around_each_block(conv_task, conv_space) -> None:
    from tvm.s_tir import Schedule

    from experiments.lib.retime import schedule

    kinds = {0: "serial", 1: "parallel", 2: "vector", 3: "unrolled"}
    for applied in _sampled(conv_space, 4):
        mod = schedule(conv_task, applied.trace_json())
        summary = summarize(mod)
        sch = Schedule(mod)
        for block in [summary.main, *summary.others]:
            loops = [sch.get(rv) for rv in sch.get_loops(sch.get_sblock(block.name))]
            assert [(loop.name, loop.extent, loop.kind) for loop in block.loops] == \
                [(str(f.loop_var.name), int(f.extent), kinds[int(f.kind)]) for f in loops], block.name
        assert "conv2d" in summary.main.name and not summary.main.name.endswith("_init")
        assert all(len(b.loops) <= len(summary.main.loops) for b in summary.others)
        assert summary.parallel == int(np.prod([lp.extent for lp in summary.main.loops if lp.kind == "parallel"]))


def test_the_line_names_parallel_vector_unroll_and_where_other_blocks_sit() -> None:
    main = BlockNest("conv2d_update", [Loop("i0_i1_fused", 8, "parallel"), Loop("i2_1", 1), Loop("rc_0", 4),
                                       Loop("i3_3", 16, "vector")], unroll=64)
    others = [BlockNest("pad_temp", [Loop("i0_i1_fused", 8, "parallel"), Loop("i2_1", 1), Loop("ax0", 3)]),
              BlockNest("T_add", [Loop("ax0_fused", 100, "parallel")]),
              BlockNest("conv2d_init", [Loop("i0_i1_fused", 8, "parallel")])]
    cells = ScheduleSummary(main, others).describe()
    assert cells == {"parallel": "8", "vector": "16", "unroll": "64",
                     "loop nest": "P fused 8 / rc_0 4 / V i3_3 16",
                     "other blocks": "pad_temp under i2_1; T_add at root"}


def test_the_study_shows_the_schedules_of_a_task_metaschedule_wins(tmp_path, conv_task, conv_space) -> None:
    from experiments.lib.study.report import aggregate
    from experiments.lib.study.store import RunKey, RunResult, Store

    config = _config(tmp_path, seeds=(0,), budgets=(2, 4), rounds=1)
    store = Store(str(tmp_path / "results"))
    spec = config.tasks[0]
    os.makedirs(os.path.dirname(store.task_file(spec)), exist_ok=True)
    with open(store.task_file(spec), "w") as fh:
        json.dump({"spec": str(spec), **conv_task.to_json()}, fh)
    applied = _sampled(conv_space, 3)
    speeds = {"a": 1.0, "b": 2.0, "ms": 4.0}  # seconds x 1e-3: ms the fastest, b the best of ours
    retimes = {}
    for method, choice in zip(("a", "b", "ms"), applied):
        trace = choice.trace_json()
        key = RunKey(spec, method, 0)
        best = {b: {"trial": 1, "latency": 1e-3, "trace": method} for b in (2, 4)}
        store.write_result(key, RunResult(task=str(spec), method=method, seed=0, fingerprint=MACHINE, started=0.0,
                                          wall_secs=1.0, latencies=[1e-3] * 4, finished=[1.0, 2.0, 3.0, 4.0],
                                          best=best, traces={method: trace}))
        retimes[(method, method)] = 1e-3 / speeds[method]
    store.write_round(spec, _round(1, retimes))

    stem = str(tmp_path / "out")
    aggregate(config, store, stem, with_plots=False)
    text = open(stem + ".md").read()
    assert "## Where ms wins: its fastest schedule beside ours" in text
    section = text.split("## Where ms wins")[1]
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines() if line.startswith("| ")}
    assert set(rows) == {"method", "ms", "b"}  # the reference and the best of ours, not a
    from experiments.lib.retime import schedule

    for method, choice in (("ms", applied[2]), ("b", applied[1])):
        expected = summarize(schedule(conv_task, choice.trace_json())).describe()
        assert f"| {expected['loop nest']} |" in rows[method]
        assert f"| {expected['parallel']} | {expected['vector']} | {expected['unroll']} |" in rows[method]
    assert "## Where" not in open(stem + "-readme.md").read()  # per-task detail stays out of README


def test_the_reference_wins_only_above_every_autosearch_method(tmp_path) -> None:
    from experiments.lib.study.report import MethodOnTask, TaskData, reference_wins

    config = _config(tmp_path, seeds=(0,), budgets=(2, 4), rounds=1)
    methods = {m: MethodOnTask(gflops={4: [g]}) for m, g in (("a", 1.0), ("b", 3.0), ("ms", 2.0))}
    task = TaskData(spec="s", name="n", gflop=1.0, key="k", target_secs=1.0, methods=methods)
    assert reference_wins(config, task) is None
    methods["ms"].gflops[4] = [3.5]
    assert reference_wins(config, task) == ("ms", "b")
