"""The row-softmax sketch: added only to a softmax over its last axis, correct for every vector width, computing
the row's reductions as vectors, and replayable by TVM from its trace (as a database record is); and the column
sketch of a softmax over another axis, alike and measured first."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.conftest import _model

SHAPE = [1, 3, 40, 80]  # an attention's scores in miniature: (batch, heads, queries, keys)


def softmax_onnx(path: str, axis: int) -> None:
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
    )
    _model(graph, path)


def _task(tmp_path_factory, target, *, axis: int = -1, fast_math: str = "on"):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path_factory.mktemp("softmax") / f"softmax{axis}.onnx")
    softmax_onnx(path, axis)
    [task] = import_model(path, target, fast_math=fast_math).tasks
    return task


@pytest.fixture(scope="module", params=["on", "off"], ids=["fast-math", "exact"])
def softmax_task(request, tmp_path_factory, target):
    """TOPI's fast_softmax (``--fast-math on``, the default) and its exact softmax: the same sketch for both."""
    return _task(tmp_path_factory, target, fast_math=request.param)


def test_only_a_softmax_over_its_last_axis_gets_the_sketch(softmax_task, tmp_path_factory, conv_task, target):
    from tvm.s_tir import meta_schedule as ms

    from autosearch.search.space import DecisionSpace
    from autosearch.tensor_units.softmax import partial_lanes, row_softmax_sketch

    assert row_softmax_sketch(conv_task.mod, target, seed=0) is None
    across = _task(tmp_path_factory, target, axis=1)  # its rows are not the inner loop
    assert "softmax" in across.name and row_softmax_sketch(across.mod, target, seed=0) is None
    assert "softmax" in softmax_task.name
    space = DecisionSpace(softmax_task.mod, target)
    ctx = ms.TuneContext(mod=softmax_task.mod, target=target, space_generator=ms.space_generator.PostOrderApply(),
                         num_threads=1)
    assert len(space.sketches) == len(ctx.generate_design_space()) + 1  # appended: TVM's keep their indices
    tiles = [d for d in space.sketches[-1].decisions if d.kind == "SamplePerfectTile"]
    # the exponentials' and the quotients' vectors, each a split of the row; the reductions' partials are not a
    # decision: the widest that divides the row, and none for a row that only 1 divides
    assert len(tiles) == 2 and all({int(np.prod(c)) for c in d.choices} == {SHAPE[-1]} for d in tiles)
    assert all(max(c[-1] for c in d.choices) == 16 for d in tiles)
    assert [partial_lanes(n) for n in (80, 400, 8400, 13, 18, 17)] == [16, 16, 16, 13, 9, 1]


def test_every_vector_width_is_correct_vectorised_and_replays_from_its_trace(softmax_task, target):
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.measure.local import LocalRunner
    from autosearch.search.space import DecisionSpace
    from autosearch.types import Config

    space = DecisionSpace(softmax_task.mod, target)
    sketch = space.sketches[-1]
    widths = max(len(d.choices) for d in sketch.decisions)  # every choice of every decision, the widest last
    configs = [Config(sketch.index, tuple(d.choices[i % len(d.choices)] for d in sketch.decisions))
               for i in range(widths)]
    configs.append(Config(sketch.index, tuple(max(d.choices, key=lambda c: c[-1]) for d in sketch.decisions)))
    applied = [space.apply(c) for c in configs]
    assert all(a.ok for a in applied), [a.error for a in applied]
    widest = applied[-1]  # 16 lanes everywhere
    for a in applied:  # what a database record holds: TVM replays it and gets the same kernel
        sch = Schedule(softmax_task.mod)
        Trace.apply_json_to_schedule(a.trace_json(), sch)
        tvm.ir.assert_structural_equal(sch.mod, a.mod)
    script = widest.mod.script()
    assert "T_softmax_maxelem_rf" in script and "T_softmax_expsum_rf" in script  # the partial reductions
    assert script.count("T.vectorized(T.int64(16))") >= 4 and "T.parallel" in script
    with LocalRunner(target=target) as runner:
        assert runner.prepare(softmax_task).ok
        results = runner.measure(softmax_task, [a.mod for a in applied])
    assert [r.status.value for r in results] == ["ok"] * len(results)  # outputs checked against the reference


@pytest.fixture(scope="module", params=["on", "off"], ids=["fast-math", "exact"])
def column_task(request, tmp_path_factory, target):
    """A softmax over an axis other than the last (YOLOv8's box decoding takes one over 16 bins on axis 1)."""
    return _task(tmp_path_factory, target, axis=1, fast_math=request.param)


def test_a_softmax_over_another_axis_gets_the_column_sketch_measured_first(column_task, softmax_task, conv_task,
                                                                          target):
    from tvm.s_tir import meta_schedule as ms

    from autosearch.search.space import DecisionSpace
    from autosearch.tensor_units.softmax import column_block, column_softmax_sketch
    from autosearch.types import Config

    assert column_softmax_sketch(conv_task.mod, target, seed=0) is None
    assert column_softmax_sketch(softmax_task.mod, target, seed=0) is None  # over its last axis: the row sketch's
    assert DecisionSpace(softmax_task.mod, target).measure_first == ()
    space = DecisionSpace(column_task.mod, target)
    ctx = ms.TuneContext(mod=column_task.mod, target=target, space_generator=ms.space_generator.PostOrderApply(),
                         num_threads=1)
    assert len(space.sketches) == len(ctx.generate_design_space()) + 1  # appended: TVM's keep their indices
    last = space.sketches[-1]
    assert last.decisions == () and space.measure_first == (Config(last.index, ()),)
    # the block of columns: the widest multiple of 16 up to 64 dividing the last axis, else its widest divisor
    assert [column_block(n) for n in (8400, 80, 400, 40, 7, 67)] == [48, 16, 16, 40, 7, 1]


def test_the_column_sketch_is_correct_vectorised_and_replays_from_its_trace(column_task, target):
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from autosearch.measure.local import LocalRunner
    from autosearch.search.space import DecisionSpace

    space = DecisionSpace(column_task.mod, target)
    applied = space.apply(space.measure_first[0])
    assert applied.ok, applied.error
    sch = Schedule(column_task.mod)  # what a database record holds: TVM replays it and gets the same kernel
    Trace.apply_json_to_schedule(applied.trace_json(), sch)
    tvm.ir.assert_structural_equal(sch.mod, applied.mod)
    script = applied.mod.script()
    # the maximum, the exponentials, the sum and the quotients, and the two reductions' initial values: each a vector
    # of the block's 16 columns
    assert script.count("T.vectorized(T.int64(16))") == 6 and script.count("T.parallel") == 1
    with LocalRunner(target=target) as runner:
        assert runner.prepare(column_task).ok
        [result] = runner.measure(column_task, [applied.mod])
    assert result.status.value == "ok", result.error  # the output checked against the unscheduled kernel's
