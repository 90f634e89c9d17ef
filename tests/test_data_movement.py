"""The sketches of data-movement tasks: the blocked copy, added only where nothing is computed, correct for every
tile size, and replayable by TVM from its trace (as a database record is); and the partitioned concatenation along
the channels, measured first."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.conftest import _model, channel_concat_onnx


def head_like_onnx(path: str | None = None):
    """YOLOv8's head in miniature: two NCHW maps concatenated on channels, flattened, then split again, at another
    boundary than the concatenation's (one at the same boundary is cancelled before fusion, frontend/splits.py, and
    leaves two one-output copies), so the task is one copy with two outputs."""
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
            helper.make_node("Reshape", ["c", "shape"], ["r"]),
            helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
            helper.make_node("Split", ["t", "sizes"], ["box", "cls"], axis=2),
        ],
        "head_like",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 16, 24, 24]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 24, 24, 24])],
        [helper.make_tensor_value_info("box", TensorProto.FLOAT, [1, 576, 20]),
         helper.make_tensor_value_info("cls", TensorProto.FLOAT, [1, 576, 20])],
        [helper.make_tensor("shape", TensorProto.INT64, [3], [1, 40, 576]),
         helper.make_tensor("sizes", TensorProto.INT64, [2], [20, 20])],
    )
    return _model(graph, path)


def _one_task(tmp_path_factory, target, make_onnx, name: str):
    """(the model's path, its one task) of a model written by ``make_onnx``."""
    from autosearch.frontend.importer import import_model

    path = str(tmp_path_factory.mktemp(name) / f"{name}.onnx")
    make_onnx(path)
    [task] = import_model(path, target).tasks
    return path, task


def _replays_and_runs(task, applied: list, target) -> list:
    """The first of ``applied`` replayed from its trace in TVM, as a database record is, to the same kernel; all of
    them built and measured, each output checked against the unscheduled kernel's; the results."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.measure.local import LocalRunner

    replayed = Schedule(task.mod)
    Trace.apply_json_to_schedule(applied[0].trace_json(), replayed)
    tvm.ir.assert_structural_equal(replayed.mod, applied[0].mod)
    with LocalRunner(target=target) as runner:
        assert runner.prepare(task).ok
        return runner.measure(task, [a.mod for a in applied])


@pytest.fixture(scope="module")
def head_task(tmp_path_factory, target):
    return _one_task(tmp_path_factory, target, head_like_onnx, "head")[1]


def test_only_tasks_that_compute_nothing_get_the_sketch(head_task, conv_task, target):
    from tvm.s_tir import meta_schedule as ms

    from autosearch.search.data_movement import blocked_copy_sketch
    from autosearch.search.space import DecisionSpace

    assert blocked_copy_sketch(conv_task.mod, target, seed=0) is None  # a reduction: TVM's space only
    space = DecisionSpace(head_task.mod, target)
    ctx = ms.TuneContext(mod=head_task.mod, target=target, space_generator=ms.space_generator.PostOrderApply(),
                         num_threads=1)
    tvm_sketches = len(ctx.generate_design_space())
    assert len(space.sketches) == tvm_sketches + 1  # appended: TVM's sketches keep their indices
    tiles = [d for d in space.sketches[-1].decisions if d.kind == "SamplePerfectTile"]
    assert len(tiles) == 2  # one per output (box, cls): factorisations of its last axis
    assert [{int(np.prod(c)) for c in d.choices} for d in tiles] == [{20}, {20}]


def test_every_tile_size_is_correct_and_replays_from_its_trace(head_task, target):
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.measure.local import LocalRunner
    from autosearch.search.space import DecisionSpace
    from autosearch.types import Config

    space = DecisionSpace(head_task.mod, target)
    sketch = space.sketches[-1]
    configs = [Config(sketch.index, tuple(d.choices[i % len(d.choices)] for d in sketch.decisions))
               for i in (0, 3, 7, -1)]
    applied = [space.apply(c) for c in configs]
    assert all(a.ok for a in applied), [a.error for a in applied]
    for a in applied:  # what a database record holds: TVM replays it and gets the same kernel
        sch = Schedule(head_task.mod)
        Trace.apply_json_to_schedule(a.trace_json(), sch)
        tvm.ir.assert_structural_equal(sch.mod, a.mod)
    with LocalRunner(target=target) as runner:
        assert runner.prepare(head_task).ok
        results = runner.measure(head_task, [a.mod for a in applied])
    assert [r.status.value for r in results] == ["ok"] * len(results)  # outputs checked against the reference


@pytest.fixture(scope="module")
def concat_model(tmp_path_factory, target):
    return _one_task(tmp_path_factory, target, channel_concat_onnx, "concat")


def test_a_channel_concatenation_gets_its_loop_partitioned_at_the_inputs_and_measured_first(concat_model, head_task,
                                                                                            conv_task, target):

    from autosearch.search.data_movement import concat_boundaries, partitioned_concat_sketch
    from autosearch.search.space import DecisionSpace
    from autosearch.types import Config

    _, task = concat_model
    assert concat_boundaries(task.mod) == [8, 24, 32]
    assert concat_boundaries(conv_task.mod) is None and concat_boundaries(head_task.mod) is None
    assert partitioned_concat_sketch(head_task.mod, target, seed=0) is None  # concatenated on another axis
    assert DecisionSpace(head_task.mod, target).measure_first == ()
    space = DecisionSpace(task.mod, target)
    last = space.sketches[-1]
    assert last.decisions == () and space.measure_first == (Config(last.index, ()),)
    assert len(space.sketches) >= 3  # after TVM's sketch and the blocked copy: their indices stay
    applied = space.apply(space.measure_first[0])
    assert applied.ok, applied.error
    loops = [s for s in applied.mod.script().splitlines() if "for " in s]
    bounds = ("range(T.int64(8))", "range(T.int64(8), T.int64(24))", "range(T.int64(24), T.int64(32))")
    assert [sum(b in s for s in loops) for b in bounds] == [1, 1, 1]  # a loop per input's channels
    [result] = _replays_and_runs(task, [applied], target)
    assert result.status.value == "ok", result.error  # the output checked against the unscheduled kernel's


def resize_concat_task(target, *, size: int = 12):
    """YOLO's neck in miniature, as the NHWC lowering fuses it: a 6 x 6 x 8 map upsampled (nearest) to ``size`` x
    ``size`` and concatenated on the channels with a ``size`` x ``size`` x 16 one, in bf16 (an activation kept in
    bf16 between convolutions)."""
    import tvm
    from tvm import te, topi

    from autosearch.frontend.task import task_from_module

    small = te.placeholder((1, 6, 6, 8), "bfloat16", name="small")
    big = te.placeholder((1, size, size, 16), "bfloat16", name="big")
    up = topi.image.resize2d(small, (0.0, 0.0, 0.0, 0.0), (size, size), layout="NHWC", method="nearest_neighbor",
                             coordinate_transformation_mode="asymmetric", rounding_method="floor")
    out = topi.concatenate([up, big], axis=3)
    return task_from_module(tvm.IRModule({"main": te.create_prim_func([small, big, out])}), target,
                            name="fused_resize2d_concatenate")


def test_a_resize_fused_into_a_channel_concatenation_is_partitioned_too(target):
    from autosearch.measure.local import LocalRunner
    from autosearch.search.data_movement import concat_boundaries
    from autosearch.search.space import DecisionSpace

    task = resize_concat_task(target)
    assert concat_boundaries(task.mod) == [8, 24]
    space = DecisionSpace(task.mod, target)
    assert space.measure_first == (space.default(len(space.sketches) - 1),)
    applied = space.apply(space.measure_first[0])
    assert applied.ok, applied.error
    loops = [s for s in applied.mod.script().splitlines() if "for " in s]
    bounds = ("range(8)", "range(8, 24)")  # the TE function's loops are int32
    assert [sum(b in s for s in loops) for b in bounds] == [1, 1], loops  # a loop per input's channels
    with LocalRunner(target=target) as runner:
        assert runner.prepare(task).ok
        [result] = runner.measure(task, [applied.mod])
    assert result.status.value == "ok", result.error  # the output checked against the unscheduled kernel's


def test_an_input_not_a_whole_factor_of_the_output_is_no_concatenation_of_it(target):
    from autosearch.search.data_movement import concat_boundaries

    # the channels add up (8 + 16 = 24) and the larger input matches the output, but 9 x 9 is no multiple of 6 x 6
    assert concat_boundaries(resize_concat_task(target, size=9).mod) is None
    assert concat_boundaries(resize_concat_task(target, size=18).mod) == [8, 24]  # three times 6 x 6


@pytest.mark.slow  # a run through the CLI: the slow tier (tests/conftest.py)
def test_a_run_measures_the_partitioned_concatenation_first(concat_model, tmp_path, capfd):
    from autosearch.records import read_log
    from autosearch.search.space import DecisionSpace
    from tests.conftest import run_cli_here

    path, task = concat_model
    log = str(tmp_path / "run.jsonl")
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", path, "--trials", "2", "--batch", "1",
                        "--log", log, "--known-schedules", "none", "--finalist-rounds", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    [key] = read_log(log).tasks
    trials = read_log(log).trials(key)
    assert len(trials) == 2 and trials[0].config == DecisionSpace(task.mod, task.target).measure_first[0]
    assert trials[0].ok and trials[1].config != trials[0].config


def decode_like_onnx(path: str | None = None):
    """An oriented-box decode head in miniature: boxes offset by constant anchors, class scores through a sigmoid and
    an angle through its cosine and sine, concatenated on the channels (axis 1) into one channel-major output, as
    YOLO's heads do. The anchors are a constant input of the task, one TVM's ``RewriteLayout`` would lay out."""
    anchors = np.arange(4 * 96, dtype=np.float32).reshape(1, 4, 96) / 96
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["box", "anchors"], ["scaled"]),
            helper.make_node("Sigmoid", ["cls"], ["scores"]),
            helper.make_node("Cos", ["angle"], ["cos"]),
            helper.make_node("Sin", ["angle"], ["sin"]),
            helper.make_node("Add", ["cos", "sin"], ["turned"]),
            helper.make_node("Concat", ["scaled", "scores", "turned"], ["y"], axis=1),
        ],
        "decode_like",
        [helper.make_tensor_value_info("box", TensorProto.FLOAT, [1, 4, 96]),
         helper.make_tensor_value_info("cls", TensorProto.FLOAT, [1, 8, 96]),
         helper.make_tensor_value_info("angle", TensorProto.FLOAT, [1, 1, 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 13, 96])],
        [helper.make_tensor("anchors", TensorProto.FLOAT, [1, 4, 96], anchors.ravel().tolist())],
    )
    return _model(graph, path)


def test_a_concatenation_on_an_outer_axis_is_partitioned_there_tiled_and_measured_first(tmp_path_factory, target,
                                                                                         head_task, conv_task):
    from tvm.s_tir import Schedule

    from autosearch.search.data_movement import (
        AXIS_CONCAT_TILE,
        block_concat,
        partitioned_axis_concat_sketch,
    )
    from autosearch.search.space import DecisionSpace

    _, task = _one_task(tmp_path_factory, target, decode_like_onnx, "decode")
    sch = Schedule(task.mod)
    output = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    assert block_concat(sch, output) == (1, [4, 8, 1])
    assert partitioned_axis_concat_sketch(conv_task.mod, target, seed=1) is None  # a reduction
    assert partitioned_axis_concat_sketch(head_task.mod, target, seed=1) is None  # two outputs
    space = DecisionSpace(task.mod, target)
    last = space.sketches[-1]
    assert [d.kind for d in last.decisions] == ["SamplePerfectTile"]
    [first] = space.measure_first
    assert first.sketch == last.index and first.values == ((96 // AXIS_CONCAT_TILE, AXIS_CONCAT_TILE),)
    configs = [first] + [first.replace(0, tile) for tile in ((1, 96), (12, 8))]
    applied = [space.apply(c) for c in configs]
    assert all(a.ok for a in applied), [a.error for a in applied]
    script = applied[0].mod.script()
    assert script.count('_partition"):') == 3  # a loop nest per piece along the channels
    assert "T.grid(T.int64(4), T.int64(16))" in script  # the boxes', with the tile of the last axis inside
    assert "range(T.int64(4), T.int64(12))" in script and "range(T.int64(12), T.int64(13))" in script
    results = _replays_and_runs(task, applied, target)
    assert [r.status.value for r in results] == ["ok"] * 3, [r.error for r in results]  # checked outputs


def nms_free_decode_onnx(path: str | None = None):
    """An NMS-free head's decode in miniature: two levels' boxes and class logits (8 x 8 and 4 x 4 anchors), each
    flattened and concatenated along the anchors, the logits through a sigmoid, boxes and scores concatenated on the
    channels, then transposed anchor-major and split into boxes (1, 80, 4) and scores (1, 80, 8), as YOLOv10's and
    YOLO26's ``nms=False`` exports feed their TopK. The split undoes the channels' concatenation and is cancelled
    before fusion (frontend/splits.py): the boxes and the scores are two tasks, each choosing its level by anchor."""
    nodes, shapes = [], {}
    for kind, channels in (("box", 4), ("cls", 8)):
        for level, side in enumerate((8, 4)):
            name = f"{kind}{level}"
            shapes[name] = [1, channels, side, side]
            nodes.append(helper.make_node("Reshape", [name, f"flat_{channels}_{side}"], [f"{name}_flat"]))
        nodes.append(helper.make_node("Concat", [f"{kind}0_flat", f"{kind}1_flat"], [f"{kind}_all"], axis=2))
    nodes += [helper.make_node("Sigmoid", ["cls_all"], ["scores"]),
              helper.make_node("Concat", ["box_all", "scores"], ["y"], axis=1),
              helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1]),
              helper.make_node("Split", ["t", "sizes"], ["boxes", "classes"], axis=2)]
    graph = helper.make_graph(
        nodes, "nms_free_decode",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 80, 4]),
         helper.make_tensor_value_info("classes", TensorProto.FLOAT, [1, 80, 8])],
        [helper.make_tensor(f"flat_{c}_{s}", TensorProto.INT64, [3], [1, c, s * s]) for c in (4, 8) for s in (8, 4)]
        + [helper.make_tensor("sizes", TensorProto.INT64, [2], [4, 8])],
    )
    return _model(graph, path)


def test_an_output_choosing_its_level_by_anchor_is_partitioned_there_and_measured_first(tmp_path_factory, target,
                                                                                         head_task, conv_task):

    from autosearch.frontend.importer import import_model
    from autosearch.search.data_movement import _inlined, choice_points
    from autosearch.search.data_movement import partitioned_choice_sketch as sketch
    from autosearch.search.space import DecisionSpace

    path = str(tmp_path_factory.mktemp("nms_free_decode") / "nms_free_decode.onnx")
    nms_free_decode_onnx(path)
    tasks = import_model(path, target).tasks
    assert len(tasks) == 2  # the boxes' copy and the scores' sigmoid
    [task] = [t for t in tasks if "sigmoid" in t.name]
    sch, outputs = _inlined(task.mod, target, 1)
    # inlined, the scores choose their level at anchor 64, and nothing else
    assert [choice_points(sch.get(o)) for o in outputs] == [{1: [64]}]
    assert sketch(conv_task.mod, target, seed=1) is None  # a reduction
    assert sketch(head_task.mod, target, seed=1) is None  # chooses along its last axis only
    space = DecisionSpace(task.mod, target)
    last = space.sketches[-1]
    assert not last.decisions and last.partitions_loops
    assert space.measure_first[-1].sketch == last.index
    applied = space.apply(space.measure_first[-1])
    assert applied.ok, applied.error
    script = applied.mod.script()
    assert script.count('_partition"):') == 2  # two loop nests, one per level
    assert script.count("T.parallel(T.int64(64))") == 1 and script.count("T.parallel(T.int64(64), T.int64(80))") == 1
    [result] = _replays_and_runs(task, [applied], target)
    assert result.status.value == "ok", result.error  # its outputs checked against the unscheduled kernel's


def levels_decode_onnx(path: str | None = None):
    """A decode head in miniature, as YOLOv8's to YOLO26's default exports compute it: two levels' boxes (4 channels)
    and class logits (8), 8 x 8 and 4 x 4 anchors, each level's concatenated on the channels and flattened, the levels
    concatenated along the anchors, split into boxes and logits (the split is cancelled before fusion:
    frontend/splits.py), the boxes offset by constant anchors, the logits through a sigmoid, and both concatenated on
    the channels again into one (1, 12, 80) output: one task whose output chooses its piece on the channels and its
    level on the anchors."""
    anchors = np.arange(4 * 80, dtype=np.float32).reshape(1, 4, 80) / 80
    nodes, inputs = [], []
    for level, side in enumerate((8, 4)):
        for kind, channels in (("box", 4), ("cls", 8)):
            inputs.append(helper.make_tensor_value_info(f"{kind}{level}", TensorProto.FLOAT, [1, channels, side, side]))
        nodes += [helper.make_node("Concat", [f"box{level}", f"cls{level}"], [f"y{level}"], axis=1),
                  helper.make_node("Reshape", [f"y{level}", f"flat{side}"], [f"flat{level}"])]
    nodes += [helper.make_node("Concat", ["flat0", "flat1"], ["y"], axis=2),
              helper.make_node("Split", ["y", "sizes"], ["box", "cls"], axis=1),
              helper.make_node("Add", ["box", "anchors"], ["boxes"]),
              helper.make_node("Sigmoid", ["cls"], ["scores"]),
              helper.make_node("Concat", ["boxes", "scores"], ["out"], axis=1)]
    graph = helper.make_graph(
        nodes, "levels_decode", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 12, 80])],
        [helper.make_tensor(f"flat{s}", TensorProto.INT64, [3], [1, 12, s * s]) for s in (8, 4)]
        + [helper.make_tensor("sizes", TensorProto.INT64, [2], [4, 8]),
           helper.make_tensor("anchors", TensorProto.FLOAT, [1, 4, 80], anchors.ravel().tolist())],
    )
    return _model(graph, path)


def test_a_decode_heads_levels_are_partitioned_along_the_anchors_and_measured_first(tmp_path_factory, target,
                                                                                     head_task, conv_task):
    import tvm

    from autosearch.search.data_movement import _inlined, choice_points, partitioned_levels_sketch
    from autosearch.search.space import DecisionSpace

    _, task = _one_task(tmp_path_factory, target, levels_decode_onnx, "levels")
    sch, [output] = _inlined(task.mod, target, 1)
    assert choice_points(sch.get(output)) == {1: [4], 2: [64]}  # boxes | scores; level 0 | level 1
    assert partitioned_levels_sketch(conv_task.mod, target, seed=1) is None  # a reduction
    assert partitioned_levels_sketch(head_task.mod, target, seed=1) is None  # no concatenation on an outer axis
    _, decode = _one_task(tmp_path_factory, target, decode_like_onnx, "decode_levels")
    assert partitioned_levels_sketch(decode.mod, target, seed=1) is None  # one level: nothing chosen by anchor
    space = DecisionSpace(task.mod, target)
    last = space.sketches[-1]
    assert not last.decisions and last.partitions_loops
    assert [c.sketch for c in space.measure_first] == [last.index - 1, last.index]  # after the axis sketch's tile
    applied = space.apply(space.measure_first[-1])
    assert applied.ok, applied.error
    script = applied.mod.script()
    # the anchors in tiles of 16 (the levels' common divisor), four of the first level's and one of the second's, each
    # level's channels partitioned at the boxes | scores boundary
    assert "T.parallel(T.int64(4))" in script and "T.parallel(T.int64(4), T.int64(5))" in script
    assert script.count('_partition"):') == 6
    # each piece copies from one level and computes one branch: no condition is left once simplified
    axis_sketch = space.apply(space.measure_first[0])
    def conditions(mod) -> int:  # as the build lowers it: blocks to plain loops over their bindings, simplified
        lowered = tvm.transform.Sequential([tvm.s_tir.transform.ConvertBlocksToOpaque(),
                                            tvm.s_tir.transform.LowerOpaqueBlock(),
                                            tvm.s_tir.transform.LoopPartition(),
                                            tvm.tirx.transform.StmtSimplify()])(mod)
        return lowered.script().count("if_then_else")

    assert conditions(applied.mod) == 0 < conditions(axis_sketch.mod)
    [result] = _replays_and_runs(task, [applied], target)
    assert result.status.value == "ok", result.error  # its output checked against the unscheduled kernel's
