"""One layout per convolution (autosearch.frontend.layer_layouts): its kernels are the tasks either layout tuned,
and the model it builds computes what ONNX Runtime computes."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def leaky_convs_onnx(path: str) -> onnx.ModelProto:
    """Conv 3x3 16 -> 32 at 16x16, then 32 -> 48, each with a batch norm's scale and shift and a leaky ReLU (as
    tiny-YOLOv2 has them): two layers of different geometry, the second a Winograd candidate."""
    rng = np.random.default_rng(5)
    inits = []
    nodes = []
    x = "x"
    for i, (cin, cout) in enumerate(((16, 32), (32, 48))):
        inits += [numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype("float32"), f"W{i}"),
                  numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, cout, 1, 1)).astype("float32"), f"S{i}"),
                  numpy_helper.from_array(rng.standard_normal((1, cout, 1, 1)).astype("float32"), f"B{i}")]
        nodes += [helper.make_node("Conv", [x, f"W{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Mul", [f"c{i}", f"S{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"B{i}"], [f"a{i}"]),
                  helper.make_node("LeakyRelu", [f"a{i}"], [f"y{i}"], alpha=0.1)]
        x = f"y{i}"
    graph = helper.make_graph(nodes, "leaky_convs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 48, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return model


FIRST, SECOND = "16x16x16->32x16x16/3x3", "32x16x16->48x16x16/3x3"


@pytest.fixture(scope="module")
def leaky_model(tmp_path_factory, target):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path_factory.mktemp("layer-layouts") / "leaky.onnx")
    proto = leaky_convs_onnx(path)
    return proto, import_model(path, target, layout="auto", precision="fp32")


def _conv_functions(lowered):
    import tvm

    return {gv.name_hint: f for gv, f in lowered.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint}


def test_every_convolution_task_is_named_by_its_geometry_in_both_layouts(leaky_model):
    from autosearch.frontend.alternatives import task_layouts
    from autosearch.frontend.layer_layouts import task_key

    _, model = leaky_model
    named = {}
    for task in model.tasks:
        layouts = task_layouts(task.lowering)
        key = task_key(task.name, task.args, layouts[0])
        if "conv2d" in task.name:
            named.setdefault(key, set()).update((layouts[0], task.lowering.get("algorithm", "direct")))
        else:
            assert key is None
    # each layer in both layouts; the wider one direct and as Winograd (its transformed kernel read as 3x3)
    assert named == {FIRST: {"NCHW", "NHWC", "direct"}, SECOND: {"NCHW", "NHWC", "direct", "winograd"}}


@pytest.mark.parametrize("first", ["NHWC", "NCHW"])
def test_one_layout_per_layer_runs_only_tuned_convolutions_and_matches_onnxruntime(leaky_model, target, tmp_path,
                                                                                     first):
    """The first layer in one layout and the second in the other: every convolution kernel of that model is a task
    the two layouts tuned (a leaky ReLU after an NHWC convolution written as NHWC writes it, after an NCHW one as
    NCHW keeps it), and the built model (untuned code) computes what ONNX Runtime computes."""
    import onnxruntime as ort
    import tvm
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    from autosearch.deploy.artifact import load_model
    from autosearch.deploy.build import compile_model
    from autosearch.frontend.alternatives import task_layouts
    from autosearch.frontend.layer_layouts import NCHW, NHWC
    from autosearch.frontend.lowering import lower
    from autosearch.frontend.winograd import WinogradPolicy

    proto, model = leaky_model
    layouts = {FIRST: first, SECOND: NCHW if first == NHWC else NHWC}
    dbs = {layout: MemoryDatabase() for layout in (NCHW, NHWC)}
    for task in model.tasks:
        for layout in task_layouts(task.lowering):
            dbs[layout].commit_workload(task.mod)
    policy = WinogradPolicy.of("off")
    lowered = lower(model.relax_mod, target, winograd=policy, layer_layouts=layouts)
    convs = _conv_functions(lowered)
    tuned_in = sorted(tuple(layout for layout, db in dbs.items()
                            if db.has_workload(tvm.IRModule({"main": f.with_attr("global_symbol", "main")})))
                      for f in convs.values())
    assert tuned_in == [(NCHW,), (NHWC,)]  # one convolution of each layout, each a task that layout tuned
    assert not tvm_ffi.structural_equal(lowered, lower(model.relax_mod, target, winograd=policy, layout="NCHW"))

    both = MemoryDatabase()
    for task in model.tasks:
        both.commit_workload(task.mod)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 16, 16, 16)).astype("float32")
    [expected] = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    # built so where the database holds both layouts' tasks; in NCHW where it holds NCHW's only (a model whose
    # convolutions no task tuned would be slower than either layout's)
    for db, built in ((both, layouts), (dbs[NCHW], {})):
        compiled = compile_model(model.relax_mod, target, model.tasks, db, str(tmp_path / f"mixed{len(built)}.so"),
                                 winograd=policy, layer_layouts=layouts)
        assert compiled.layer_layouts == built
        if built:  # its tuned and untuned kernels are those of the model built, not of the NCHW model's tasks
            assert sorted(n for n in compiled.tuned_tasks if "conv2d" in n) == sorted(convs)
            assert not any("conv2d" in n for n in compiled.missing_tasks)
            assert compiled.task_count == len(compiled.kernels)
        got = load_model(compiled.path, threads=1)(tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_each_layer_takes_its_faster_layout_by_its_faster_algorithm():
    from autosearch.frontend.layer_layouts import choose

    chosen, costs = choose([
        ("a", "NCHW", 3.0), ("a", "NCHW", 1.0), ("a", "NHWC", 2.0),  # NCHW's Winograd beats NHWC
        ("b", "NCHW", 2.0), ("b", "NHWC", 1.5),
        ("c", "NCHW", 1.0), ("c", "NHWC", 1.0),  # a tie stays as imported
        ("d", "NCHW", None), ("d", "NHWC", 1.0),  # not measured in NCHW: no choice
        ("e", "NHWC", 1.0),
    ])
    assert chosen == {"a": "NCHW", "b": "NHWC", "c": "NCHW"}
    assert costs["a"] == {"NCHW": 1.0, "NHWC": 2.0} and math.isinf(costs["d"]["NCHW"])


def test_bf16_with_one_layout_per_layer_is_refused(leaky_model, target):
    from autosearch.errors import UserError
    from autosearch.frontend.lowering import lowering_passes

    with pytest.raises(UserError, match="fp32 lowering"):
        lowering_passes(target, winograd="auto", precision="bf16", layer_layouts={FIRST: "NHWC"})


def test_mixing_is_kept_only_when_the_layers_gain_enough_of_the_model():
    from autosearch.frontend.layer_layouts import MIN_GAIN, choose, mixed_seconds, worth_mixing

    chosen, costs = choose([("a", "NCHW", 0.010), ("a", "NHWC", 0.012), ("b", "NCHW", 0.004), ("b", "NHWC", 0.002)])
    assert chosen == {"a": "NCHW", "b": "NHWC"}
    model = 0.020  # NCHW's model; b gains 2 ms of it in NHWC
    assert worth_mixing(chosen, costs, "NCHW", model)
    assert not worth_mixing(chosen, costs, "NCHW", 0.002 / MIN_GAIN * 1.01)  # a gain just under the share
    assert not worth_mixing({"a": "NCHW", "b": "NCHW"}, costs, "NCHW", model)  # one layout: nothing to mix
    assert not worth_mixing(chosen, costs, "NCHW", float("inf"))  # the model not measured yet
    assert mixed_seconds(chosen, costs, "NCHW", model) == pytest.approx(0.018)  # NCHW's model with b in NHWC
    assert mixed_seconds(chosen, costs, "NHWC", 0.014) == pytest.approx(0.012)  # NHWC's with a in NCHW


def test_a_logs_convolution_tasks_are_named_by_geometry_in_their_own_layout():
    from autosearch.frontend.layer_layouts import header_entries

    f32 = "float32"
    headers = {
        "k1": {"name": "fused_conv2d_add_relu", "weight": 2, "lowering": {"layouts": ["NCHW"]},
               "args": [[[1, 16, 8, 8], f32], [[32, 16, 3, 3], f32], [[1, 32, 1, 1], f32], [[1, 32, 8, 8], f32]]},
        "k2": {"name": "fused_conv2d_add_relu", "weight": 2, "lowering": {"layouts": ["NHWC"]},
               "args": [[[1, 8, 8, 16], f32], [[32, 3, 3, 16], f32], [[1, 1, 1, 32], f32], [[1, 8, 8, 32], f32]]},
        "k3": {"name": "fused_conv2d_winograd_add", "weight": 1, "lowering": {"layouts": ["NHWC"]},
               "args": [[[1, 8, 8, 16], f32], [[6, 6, 32, 16], f32], [[1, 8, 8, 32], f32]]},
        "k4": {"name": "max_pool2d", "weight": 1, "lowering": {"layouts": ["NCHW"]},
               "args": [[[1, 32, 8, 8], f32], [[1, 32, 4, 4], f32]]},
        "k5": {"name": "fused_conv2d1", "weight": 1, "lowering": {"layouts": ["NCHW", "NHWC"]},  # shared: not a layer
               "args": [[[1, 3, 8, 8], f32], [[16, 3, 1, 1], f32], [[1, 16, 8, 8], f32]]},
    }
    entries = header_entries(headers, {"k1": 0.001, "k2": 0.002, "k3": None, "k4": 0.001, "k5": 0.001})
    geometry = "16x8x8->32x8x8/3x3"
    assert sorted(entries, key=str) == sorted([(geometry, "NCHW", 0.002), (geometry, "NHWC", 0.004),
                                               (geometry, "NHWC", None)], key=str)


def test_export_records_one_layout_per_convolution_and_its_estimate_from_a_log(tmp_path):
    """Two layers tuned in both layouts, each faster in another: export's lowering keeps one layout per convolution
    with its estimate (the NHWC model with the first layer at its NCHW cost), and the tasks that model runs."""
    import json

    from autosearch.deploy.database import lowering_of
    from autosearch.records import read_log
    from autosearch.types import Config, MeasureResult, Record, Status

    f32 = "float32"
    shapes = {"NCHW": lambda c, o: [[[1, c, 8, 8], f32], [[o, c, 3, 3], f32], [[1, o, 8, 8], f32]],
              "NHWC": lambda c, o: [[[1, 8, 8, c], f32], [[o, 3, 3, c], f32], [[1, 8, 8, o], f32]]}
    ms = {("a", "NCHW"): 1.0, ("a", "NHWC"): 1.5, ("b", "NCHW"): 3.0, ("b", "NHWC"): 2.0}
    lines = []
    for (layer, layout), latency in ms.items():
        key = f"{layer}-{layout}"
        lowering = {"winograd": "auto", "layout": "auto", "fast_math": "on", "precision": "fp32", "layouts": [layout]}
        cin, cout = (16, 32) if layer == "a" else (32, 48)
        lines.append(json.dumps({"v": 1, "kind": "task", "task": {
            "name": f"fused_conv2d_{layer}", "weight": 1, "workload_key": key, "lowering": lowering,
            "args": shapes[layout](cin, cout)}}))
        for kind, extra, secs in (("baseline", {}, 10.0), ("trial", {"trial": 1}, latency)):
            rec = Record(kind=kind, task_key=key, task_name="conv", target={"kind": "llvm"},
                         config=Config(0, (1,)) if kind == "trial" else None,
                         result=MeasureResult(Status.OK, (secs * 1e-3,)), flops=1e6, **extra)
            lines.append(json.dumps(rec.to_json()))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    lowering = lowering_of(read_log(str(path)))
    assert lowering["layout_totals"] == pytest.approx({"NCHW": 4.0e-3, "NHWC": 3.5e-3}) and lowering["layout"] == "NHWC"
    assert lowering["layer_layouts"] == {"16x8x8->32x8x8/3x3": "NCHW", "32x8x8->48x8x8/3x3": "NHWC"}
    assert lowering["layer_layouts_secs"] == pytest.approx(3.0e-3)  # 1.0 NCHW + 2.0 NHWC

    from autosearch.deploy.database import compiled_tasks

    assert compiled_tasks(read_log(str(path)), lowering) == ["a-NCHW", "b-NHWC"]  # what the run's summary sums
    assert "transitions_secs" not in lowering  # no transforms timed: the layers' costs alone decide

    # the run tuned the layout transforms between that model's layers (a task of its own, "t", with the run's
    # options): counted in the estimate and the comparison (the NHWC model is 3.5 ms; one layout per convolution
    # 3.0 + the transforms, kept while it gains 2% of 3.5), and a task of that model only where it is kept
    lines.append(json.dumps({"v": 1, "kind": "task", "task": {
        "name": "transpose1", "weight": 1, "workload_key": "t", "args": [[[1, 8, 8, 32], f32], [[1, 32, 8, 8], f32]],
        "lowering": {"winograd": "auto", "layout": "auto", "fast_math": "on", "precision": "fp32",
                     "transition": True}}}))
    mixed = lowering["layer_layouts"]
    other = {**mixed, "32x8x8->48x8x8/3x3": "NCHW"}
    for timed, kept, estimate in (([(other, 1e-6)], True, 3.0e-3),  # timed for another choice: not this model's
                                  ([(mixed, 0.2e-3)], True, 3.2e-3),
                                  ([(mixed, 0.2e-3), (mixed, 0.6e-3)], False, None),  # the last record counts
                                  ([(mixed, None)], False, None)):  # a transform failed: no estimate, one layout
        text = "\n".join(lines + [json.dumps({"v": 1, "kind": "transitions", "transitions": {
            "layer_layouts": layouts, "seconds": secs,
            "kernels": [{"workload_key": "t", "calls": 1, "seconds": secs}]}}) for layouts, secs in timed])
        path.write_text(text + "\n")
        again = lowering_of(read_log(str(path)))
        assert bool(again.get("layer_layouts")) == kept, timed
        if kept:
            assert again["layer_layouts_secs"] == pytest.approx(estimate)
            counted = estimate > 3.0e-3
            assert again.get("transitions_secs") == (pytest.approx(0.2e-3) if counted else None)
            assert compiled_tasks(read_log(str(path)), again) == ["a-NCHW", "b-NHWC"] + (["t"] if counted else [])
        else:
            assert again["layout"] == "NHWC" and "layer_layouts_secs" not in again
            assert compiled_tasks(read_log(str(path)), again) == ["a-NHWC", "b-NHWC"]  # the whole NHWC model


def test_the_kernels_between_layouts_are_found_tuned_and_logged(leaky_model, target, tmp_path):
    """One layout per convolution adds kernels no task of either layout is (the transposes between the layers):
    found by lowering that model, tuned briefly as tasks of their own on a real runner (untuned code first), logged
    with the run's options and read back; with a convolution untuned (a run of some tasks only) there is nothing to
    tune, since compile builds one layout."""
    from autosearch.deploy.transitions import (
        TRIALS_PER_KERNEL,
        is_transition,
        timed_for,
        transition_tasks,
        tune_transitions,
    )
    from autosearch.measure.local import LocalRunner
    from autosearch.records import TuningLog, read_log

    _, model = leaky_model
    mixed = {FIRST: "NCHW", SECOND: "NHWC"}
    lowering = {"winograd": "auto", "layout": "NHWC", "fast_math": "on", "precision": "fp32", "layer_layouts": mixed}
    headers = {t.workload_key: t.to_json() for t in model.tasks}
    tasks = transition_tasks(model.relax_mod, target, lowering, headers)
    assert tasks and all("conv2d" not in t.name and "transpose" in t.name for t in tasks), [t.name for t in tasks]
    assert not set(headers) & {t.workload_key for t in tasks}
    assert all(t.lowering == {"winograd": "auto", "layout": "auto", "fast_math": "on", "precision": "fp32",
                              "transition": True} for t in tasks)
    nhwc = {k: h for k, h in headers.items() if "NHWC" in h["lowering"]["layouts"]}
    assert transition_tasks(model.relax_mod, target, lowering, nhwc) is None

    path = str(tmp_path / "run.jsonl")
    events = []
    with LocalRunner(target=target) as runner, TuningLog(path) as log:
        log.write_run({"strategy": "random"})
        record = tune_transitions(tasks, runner=runner, tuning_log=log, strategy="random", layer_layouts=mixed,
                                  on_event=events.append)
        log.write_transitions(record)
    assert {e.task.task.workload_key for e in events} == {t.workload_key for t in tasks}  # progress of each
    assert events[-1].trials_done == sum(k["trials"] for k in record["kernels"])
    contents = read_log(path)
    assert not contents.corrupt and timed_for(contents.transitions, dict(reversed(mixed.items()))) == record
    assert timed_for(contents.transitions, {FIRST: "NHWC", SECOND: "NHWC"}) is None
    assert sorted(k for k, h in contents.tasks.items() if is_transition(h)) == sorted(t.workload_key for t in tasks)
    for kernel in record["kernels"]:
        trials = [r for r in contents.trials(kernel["workload_key"]) if r.ok]
        assert 0 < len(trials) <= TRIALS_PER_KERNEL and contents.baseline(kernel["workload_key"]).ok
        assert kernel["seconds"] == min([r.latency for r in trials] + [kernel["untuned_seconds"]])
    assert record["seconds"] == pytest.approx(sum(k["calls"] * k["seconds"] for k in record["kernels"]))


def test_transforms_whose_tuning_is_interrupted_leave_no_record(leaky_model, target, tmp_path):
    """Ctrl-C while the transforms are tuned: no record (a resume tunes them on), not a record without an estimate,
    which would drop one layout per convolution for good."""
    from autosearch.deploy.transitions import transition_tasks, tune_transitions
    from autosearch.records import TuningLog, read_log

    class Interrupted:  # the runner is not under test: the user's Ctrl-C arrives while it builds
        name = "interrupted"

        def prepare_many(self, tasks, meanwhile=None):
            raise KeyboardInterrupt

    _, model = leaky_model
    mixed = {FIRST: "NCHW", SECOND: "NHWC"}
    lowering = {"winograd": "auto", "layout": "NHWC", "fast_math": "on", "precision": "fp32", "layer_layouts": mixed}
    tasks = transition_tasks(model.relax_mod, target, lowering, {t.workload_key: t.to_json() for t in model.tasks})
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        assert tune_transitions(tasks, runner=Interrupted(), tuning_log=log, strategy="random",
                                layer_layouts=mixed) is None
    assert not read_log(path).transitions


def test_the_runs_summary_gives_the_model_export_keeps_one_layout_per_convolution():
    """The run's closing lines name the model export keeps: one layout per convolution with the whole models beside
    it, and the estimate of that model (not of the faster whole one)."""
    from rich.console import Console

    from autosearch.api import TuneResult
    from autosearch.console import print_run_summary
    from autosearch.search.tuner import TuneSummary

    result = TuneResult(model="m", strategy="optuna", log="m.jsonl", plot=None, guidance="none", tasks=[], trials=8,
                        elapsed_secs=60.0, interrupted=False, untuned_secs=2.0, tuned_secs=0.0199, layout="NCHW",
                        layout_estimates={"NCHW": 0.0219, "NHWC": 0.0227}, model_secs=0.0190,
                        retimed_model_secs=0.0199, layer_layouts={FIRST: "NHWC", SECOND: "NCHW"},
                        summary=TuneSummary(states=[], trials=8, elapsed=60.0))
    console = Console(record=True, width=400)
    print_run_summary(console, result)
    text = console.export_text()
    assert ("tuned tasks of the model export keeps, one layout per convolution (1 NCHW, 1 NHWC, each layer's faster "
            "as tuned; the whole models NCHW 21.9 ms, NHWC 22.7 ms)") in text
    assert "2000.0 ms untuned -> 19.90 ms" in text
    assert "estimated model: 19.00 ms from the best trials, 19.90 ms with the finalists as re-timed" in text
    assert "(a best trial is the luckiest of many noisy timings; expect the model near the second)" in text
    assert "the layout transforms between layers not counted" in text

    result.model_secs = 0.0301  # the best trials timed in a slow spell, their re-timing faster: not called lucky
    console = Console(record=True, width=400)
    print_run_summary(console, result)
    text = console.export_text()
    assert "estimated model: 30.10 ms from the best trials, 19.90 ms with the finalists as re-timed" in text
    assert "luckiest" not in text and "(the finalists re-timed faster than their trials read: a slower spell" in text
    result.model_secs = 0.0190

    result.transitions_secs = 0.00042  # timed by the run: said, and (in api) counted in the estimated model
    console = Console(record=True, width=400)
    print_run_summary(console, result)
    text = console.export_text()
    assert "the layout transforms between layers timed at 0.42 ms, in the estimated model below" in text
