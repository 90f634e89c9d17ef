"""The model's estimated latency read back from a log (the run's plot): layouts, per-layer alternatives, failures.

The log is written record by record here: what is under test is the estimate's arithmetic over records, not the
measurements (the real runs of tests/test_run.py draw the plot from real ones)."""

from __future__ import annotations

import math

import pytest

from autosearch.records import LogContents
from autosearch.search.estimates import estimate_curve, task_shares
from autosearch.types import Config, MeasureResult, Record, Status

MS = 1e-3


def _log(trials: list[tuple[str, float | None]]) -> LogContents:
    """Four tasks: one NCHW task (20 ms untuned), and in NHWC a plain task and one layer tuned in fp32 and in bf16
    (10 ms untuned each); then ``trials`` in order, one per second: (task, latency in ms, or None for a crash)."""
    run = {"winograd": "auto", "layout": "auto", "fast_math": "on", "precision": "auto"}  # as the run lowered them
    tasks = {
        "nchw": {"name": "conv_nchw", "weight": 1, "lowering": {**run, "layouts": ["NCHW"]}},
        "plain": {"name": "pool_nhwc", "weight": 2, "lowering": {**run, "layouts": ["NHWC"]}},
        **{form: {"name": f"conv_{form}", "weight": 1,
                  "lowering": {**run, "layouts": ["NHWC"], "layer": "L", "algorithm": form}}
           for form in ("fp32", "bf16")},
    }
    untuned = {"nchw": 20.0, "plain": 10.0, "fp32": 10.0, "bf16": 10.0}

    def record(kind: str, key: str, ms: float | None, at: float) -> Record:
        result = (MeasureResult(Status.OK, (ms * MS,)) if ms is not None
                  else MeasureResult(Status.RUN_ERROR, error="crashed"))
        return Record(kind=kind, task_key=key, task_name=tasks[key]["name"], target={}, config=Config(0, ()),
                      result=result, flops=1e9, started=at - 0.5, finished=at)

    records = [record("baseline", key, ms, 0.0) for key, ms in untuned.items()]
    records += [record("trial", key, ms, 100.0 + i) for i, (key, ms) in enumerate(trials, 1)]
    return LogContents(path="-", tasks=tasks, records=records, runs=[{"started": 100.0}])


def _shares(contents: LogContents):
    """The shares of the model export keeps, as the run's plot draws them."""
    from autosearch.deploy.database import compiled_tasks, lowering_of

    return task_shares(contents, compiled_tasks(contents, lowering_of(contents)))


def test_the_estimate_is_the_faster_layout_with_each_layer_by_its_faster_form() -> None:
    # NHWC starts at 2 x 10 + min(10, 10) = 30 ms against NCHW's 20: NCHW leads until NHWC's tasks improve
    curve = estimate_curve(_log([("plain", 4.0), ("bf16", 2.0), ("fp32", 5.0), ("nchw", 25.0), ("nchw", None)]))
    assert [p.trials for p in curve] == [1, 2, 5]  # trials 3 and 4 changed nothing: fp32 is slower than bf16,
    assert [round(p.latency / MS, 6) for p in curve] == [18.0, 10.0, 10.0]  # NCHW's 25 ms is not its best
    assert [p.seconds for p in curve] == [1.0, 2.0, 5.0]


def test_a_crashed_trial_never_lowers_the_estimate_and_the_shares_add_up_to_it() -> None:
    contents = _log([("plain", None), ("fp32", 3.0), ("bf16", 6.0), ("plain", 1.0)])
    curve = estimate_curve(contents)
    assert round(curve[-1].latency / MS, 6) == 2 * 1.0 + 3.0
    shares = _shares(contents)
    assert [s.name for s in shares] == ["conv_fp32", "pool_nhwc"]  # bf16 lost to fp32; NCHW is the other model
    assert sum(s.seconds for s in shares) == pytest.approx(curve[-1].latency)


def test_no_curve_before_a_task_has_a_latency() -> None:
    contents = _log([("plain", 4.0)])
    contents.records = [r for r in contents.records if not (r.kind == "baseline" and r.task_key == "nchw")]
    contents.tasks = {k: v for k, v in contents.tasks.items() if k != "nchw"}  # one layout, as --layout NHWC
    assert round(estimate_curve(contents)[-1].latency / MS, 6) == 2 * 4.0 + 10.0
    del contents.records[0]  # the plain task's untuned kernel: unknown until its trial
    curve = estimate_curve(contents)
    assert len(curve) == 1 and math.isfinite(curve[0].latency)


def test_in_fp32_the_estimate_takes_each_convolution_in_its_faster_layout_where_export_would() -> None:
    """Two layers tuned in both layouts, each faster in another: the estimate and the shares are of one layout per
    convolution (NHWC's model, 3.5 ms, with the first layer at its NCHW 1.0 ms), as export keeps it."""
    f32 = "float32"
    shapes = {"NCHW": lambda c, o: [[[1, c, 8, 8], f32], [[o, c, 3, 3], f32], [[1, o, 8, 8], f32]],
              "NHWC": lambda c, o: [[[1, 8, 8, c], f32], [[o, 3, 3, c], f32], [[1, 8, 8, o], f32]]}
    tasks, records = {}, []
    for i, ((layer, layout), ms) in enumerate({("a", "NCHW"): 1.0, ("a", "NHWC"): 1.5, ("b", "NCHW"): 3.0,
                                               ("b", "NHWC"): 2.0}.items()):
        key = f"{layer}-{layout}"
        tasks[key] = {"name": f"fused_conv2d_{key}", "weight": 1,
                      "lowering": {"winograd": "auto", "layout": "auto", "fast_math": "on", "precision": "fp32",
                                   "layouts": [layout]},
                      "args": shapes[layout](16, 32) if layer == "a" else shapes[layout](32, 48)}
        for kind, secs, at in (("baseline", 10.0, 0.0), ("trial", ms, 101.0 + i)):
            records.append(Record(kind=kind, task_key=key, task_name=key, target={}, config=Config(0, ()),
                                  result=MeasureResult(Status.OK, (secs * MS,)), flops=1e9, started=at - 0.5,
                                  finished=at))
    contents = LogContents(path="-", tasks=tasks, records=records, runs=[{"started": 100.0}])
    assert round(estimate_curve(contents)[-1].latency / MS, 6) == 1.0 + 2.0
    shares = _shares(contents)
    assert [s.name for s in shares] == ["fused_conv2d_b-NHWC", "fused_conv2d_a-NCHW"]
    assert sum(s.seconds for s in shares) == pytest.approx(3.0 * MS)
    tasks["b-NHWC"]["lowering"].update(layer="L", algorithm="fp32")  # a bf16 alternative: NHWC whole, no mixing
    assert round(estimate_curve(contents)[-1].latency / MS, 6) == 1.5 + 2.0


def test_a_share_is_the_task_as_export_reads_it_re_timed_not_at_a_trial_the_busy_machine_slowed() -> None:
    """bf16's only trial read 4 ms (every repeat waited for a core), fp32's 3 ms; re-timed in fresh processes bf16
    runs 0.1 ms, so export keeps it: the shares are of that model (0.1 ms + the pool), not of a 4-ms layer."""
    contents = _log([("plain", 1.0), ("fp32", 3.0), ("bf16", 4.0)])
    contents.records += [Record(kind="retime", task_key=key, task_name=contents.tasks[key]["name"], target={},
                                config=Config(0, ()), result=MeasureResult(Status.OK, (ms * MS,)), flops=1e9,
                                started=200.0 + r, finished=200.5 + r, round=r)
                         for r in (1, 2, 3) for key, ms in (("fp32", 3.0), ("bf16", 0.1))]
    shares = _shares(contents)
    assert [s.name for s in shares] == ["pool_nhwc", "conv_bf16"]
    assert [round(s.seconds / MS, 6) for s in shares] == [2.0, 0.1]
