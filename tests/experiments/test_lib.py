"""The experiment helpers: each metric once, with one tie rule; task specs; the interleaved re-timing order."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from autosearch.cost_models.evaluate import pairwise_accuracy
from autosearch.tables import fmt, markdown_table
from experiments.lib.retime import round_robin
from experiments.lib.stats import (
    NEVER,
    bootstrap_ci,
    close_share,
    median_trials,
    pairs_by_ratio,
    trials_to_reach,
)
from experiments.lib.tasks import TaskSpec, conv_signature, pick_task


def test_pairs_apart_count_ties_half_and_skip_close_pairs() -> None:
    truth = [1.0, 1.05, 2.0, 4.0]  # (1.05 vs 1.0) is within 10%: not judged
    assert pairwise_accuracy(truth, [1, 2, 3, 4], ratio=1.1) == 1.0
    assert pairwise_accuracy(truth, [4, 3, 2, 1], ratio=1.1) == 0.0
    # all tied: every judged pair counts half
    assert pairwise_accuracy(truth, [0, 0, 0, 0], ratio=1.1) == 0.5
    # one pair far apart reversed (2.0 vs 4.0), the rest right: 4 of the 5 judged pairs
    assert pairwise_accuracy(truth, [1, 2, 4, 3], ratio=1.1) == pytest.approx(4 / 5)
    assert close_share(truth) == pytest.approx(1 / 6)
    assert math.isnan(pairwise_accuracy([1.0, 1.01], [1, 2], ratio=1.1))
    buckets = pairs_by_ratio(truth, [1, 2, 4, 3], (1.0, 1.1, 2.0, np.inf))
    assert buckets[(1.0, 1.1)] == (1, 1.0)
    assert buckets[(1.1, 2.0)] == (3, 2.0)  # 2.0/1.05, 2.0/1.0 right; 4.0/2.0 reversed
    assert buckets[(2.0, np.inf)] == (2, 2.0)


def test_bootstrap_interval_brackets_the_median_and_stays_in_range() -> None:
    lo, hi = bootstrap_ci([10.0, 20.0, 30.0])
    assert 10.0 <= lo <= 20.0 <= hi <= 30.0
    assert bootstrap_ci([5.0]) == (5.0, 5.0)
    assert all(math.isnan(x) for x in bootstrap_ci([math.nan]))
    wide, narrow = bootstrap_ci(list(range(100))), bootstrap_ci([49.0, 50.0, 51.0] * 30)
    assert wide[1] - wide[0] > narrow[1] - narrow[0]


def test_trials_to_target_and_the_median_with_never() -> None:
    assert trials_to_reach([3.0, math.inf, 1.0, 0.5], target=1.0) == 3
    assert trials_to_reach([3.0, 2.0], target=1.0) == NEVER
    assert median_trials([5, NEVER, 3]) == 5
    assert median_trials([5, NEVER]) == NEVER  # the upper middle: half the runs did not get there
    assert median_trials([2, 4]) == 4


def test_round_robin_interleaves_methods_and_rotates_the_first() -> None:
    groups = {"a": ["a1", "a2", "a3"], "b": ["b1"], "c": ["c1", "c2"]}
    assert round_robin(groups, 0) == [("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"), ("c", "c2"), ("a", "a3")]
    assert [m for m, _ in round_robin(groups, 1)][:3] == ["b", "c", "a"]
    assert round_robin(groups, 3) == round_robin(groups, 0)


def test_markdown_table_and_formatting() -> None:
    text = markdown_table(["a", "b"], [[1, fmt(2.345, 2)], [fmt(None), fmt(math.inf)]], align="lr")
    assert text.splitlines() == ["| a | b |", "|:---|---:|", "| 1 | 2.35 |", "| - | inf |"]


def _task(name, data, weight, out, index=0, flops=1.0):
    return SimpleNamespace(name=name, args=((tuple(data), "float32"), (tuple(weight), "float32"),
                                            (tuple(out), "float32")), index=index, flops=flops, weight=1)


def test_task_specs_name_layers_by_nchw_shapes_kernel_and_algorithm() -> None:
    spec = TaskSpec.parse("yolov8n:nhwc:1x64x80x80->1x64x80x80@1x1")
    assert (spec.model, spec.layout, str(spec)) == ("yolov8n", "NHWC", "yolov8n:NHWC:1x64x80x80->1x64x80x80@1x1")
    assert TaskSpec.parse(str(spec)) == spec and "/" not in spec.slug and ":" not in spec.slug
    assert TaskSpec.parse("tiny-yolov2:1x32x104x104->1x64x104x104/winograd").layout == "NCHW"
    with pytest.raises(ValueError):
        TaskSpec.parse("just-a-model")
    nhwc = [_task("fused_conv2d_a", (1, 80, 80, 64), (64, 3, 3, 64), (1, 80, 80, 64), 0, 4.0),
            _task("fused_conv2d_b", (1, 80, 80, 64), (64, 1, 1, 64), (1, 80, 80, 64), 1, 1.0)]
    assert conv_signature(nhwc[1], "NHWC") == ("1x64x80x80->1x64x80x80", "1x1", "direct")
    assert pick_task(nhwc, "1x64x80x80->1x64x80x80@1x1", layout="NHWC").index == 1
    assert pick_task(nhwc, "1x64x80x80->1x64x80x80", layout="NHWC").index == 0  # no kernel: the heaviest
    wino = _task("fused_conv2d_winograd_x", (1, 64, 40, 40), (6, 6, 64, 64), (1, 64, 40, 40), 2)
    assert conv_signature(wino) == ("1x64x40x40->1x64x40x40", "3x3", "winograd")
    with pytest.raises(ValueError, match="no NCHW task"):
        pick_task([wino], "1x64x40x40->1x64x40x40/direct")


def test_record_clock_notes_when_another_writer_adds_records(tmp_path) -> None:
    """MetaSchedule's record file, written by another process in time_to_quality: each batch of lines is seen
    once, at one time, and the timeline counts the records so far."""
    import time

    from experiments.lib.metaschedule import RecordClock

    def seen(clock, n: int) -> None:  # the clock's thread notices within a few polls
        deadline = time.monotonic() + 10
        while len(clock.times) < n and time.monotonic() < deadline:
            time.sleep(0.01)

    path = tmp_path / "database_tuning_record.json"
    with RecordClock(str(path), time.perf_counter(), 0.01) as clock:
        time.sleep(0.05)  # no file yet: nothing seen
        assert clock.times == []
        path.write_text("a\nb\nc\n")
        seen(clock, 3)
        time.sleep(0.05)
        with path.open("a") as fh:
            fh.write("d\ne\nf")  # the last line is still being written
        seen(clock, 5)
    assert len(clock.times) == 5 and clock.times == sorted(clock.times)
    timeline = clock.timeline()
    assert [n for _, n in timeline] == [3, 5] and timeline[1][0] - timeline[0][0] >= 0.05


def test_metaschedule_runner_worker_times_with_the_targets_threads(monkeypatch) -> None:
    """LocalRunner starts its worker in its constructor: the thread count must be in the environment before it,
    or MetaSchedule searches with single-threaded timings while every other method uses the target's cores."""
    from autosearch.frontend.target import host_target
    from experiments.lib.metaschedule import builder_and_runner

    def worker_threads() -> tuple[str | None, int]:  # nested: the worker gets it by value, not by module name
        import os

        import tvm

        return os.environ.get("TVM_NUM_THREADS"), int(tvm.get_global_func("runtime.NumThreads")())

    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    _, runner = builder_and_runner(host_target(2), fast_builder=False)
    try:
        assert runner.pool.submit(worker_threads).result() == ("2", 2)
    finally:
        runner.pool.shutdown()


def test_the_host_label_names_the_llvm_cpu_and_each_unit_flag_present_or_absent(monkeypatch) -> None:
    from autosearch.frontend.target import cpu_model, host_target
    from autosearch.tensor_units import cpu
    from autosearch.tensor_units.cpu import target_mcpu
    from experiments.lib import machine

    label = machine.host_label()
    assert label.startswith(cpu_model()) and f"LLVM {target_mcpu(host_target())}" in label
    monkeypatch.setattr(cpu, "host_flags", lambda: frozenset({"avx512f", "avx512_bf16", "sse2"}))
    label = machine.host_label()
    assert "avx512f, avx512_bf16; no avx512_vnni, amx_tile)" in label
