"""The blocked-copy sketch of data-movement tasks: added only where nothing is computed, correct for every
tile size, and replayable by TVM from its trace (as a database record is)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.conftest import _model


def head_like_onnx(path: str | None = None):
    """YOLOv8's head in miniature: two NCHW maps concatenated on channels, flattened, then split again."""
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
        [helper.make_tensor_value_info("box", TensorProto.FLOAT, [1, 576, 16]),
         helper.make_tensor_value_info("cls", TensorProto.FLOAT, [1, 576, 24])],
        [helper.make_tensor("shape", TensorProto.INT64, [3], [1, 40, 576]),
         helper.make_tensor("sizes", TensorProto.INT64, [2], [16, 24])],
    )
    return _model(graph, path)


@pytest.fixture(scope="module")
def head_task(tmp_path_factory, target):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path_factory.mktemp("head") / "head.onnx")
    head_like_onnx(path)
    [task] = import_model(path, target).tasks
    return task


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
    assert [{int(np.prod(c)) for c in d.choices} for d in tiles] == [{16}, {24}]


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
