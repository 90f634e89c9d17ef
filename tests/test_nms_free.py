"""An NMS-free head (Ultralytics' ``nms=False`` export of YOLOv10 and YOLO26) selects its detections with TopK in the
graph: TVM lowers that to a call into its runtime, which is no tuning task, and the model still tunes, compiles and
computes what ONNX Runtime does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import autosearch
from autosearch.api import MeasureOptions

NO, KEEP, HW = 8, 6, 32  # 4 box + 4 class channels; the top 6 of the 16 x 16 cells


def nms_free_onnx(path: str) -> str:
    """Two convolutions, then the one-to-one head's selection as Ultralytics exports it: each cell's best class
    score, TopK over the cells, and the rows of the kept cells gathered (GatherElements)."""
    rng = np.random.default_rng(0)
    inits = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "w2": (rng.standard_normal((NO, 8, 3, 3)) * 0.2).astype(np.float32),
        "view": np.asarray([1, NO, -1], np.int64),
        "split": np.asarray([4, NO - 4], np.int64),
        "k": np.asarray([KEEP], np.int64),
        "axis0": np.asarray([1], np.int64),
        "rows": np.asarray([1, NO, KEEP], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["c1"], pads=[1] * 4, strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2"], ["y"], pads=[1] * 4),
        helper.make_node("Reshape", ["y", "view"], ["flat"]),
        helper.make_node("Split", ["flat", "split"], ["box", "cls"], axis=1),
        helper.make_node("Sigmoid", ["cls"], ["scores"]),
        helper.make_node("Concat", ["box", "scores"], ["decoded"], axis=1),
        helper.make_node("ReduceMax", ["scores"], ["best"], axes=[1], keepdims=0),
        helper.make_node("TopK", ["best", "k"], ["kept", "index"], axis=-1),
        helper.make_node("Unsqueeze", ["index", "axis0"], ["index1"]),
        helper.make_node("Expand", ["index1", "rows"], ["gather"]),
        helper.make_node("GatherElements", ["decoded", "gather"], ["out"], axis=2),
    ]
    graph = helper.make_graph(
        nodes, "nms_free", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, HW, HW])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, NO, KEEP])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return nms_free_onnx(str(tmp_path_factory.mktemp("nms-free") / "head.onnx"))


def test_topk_is_no_task_and_the_rest_are_tasks(model_path):
    from tvm.s_tir import Schedule

    from autosearch.frontend.task import schedulable

    model = autosearch.load_tasks(model_path, layout="NCHW", precision="fp32")
    names = [t.name for t in model.tasks]
    assert not any("topk" in n for n in names), names
    assert sum("conv2d" in n for n in names) == 2 and any("gather" in n for n in names), names
    for task in model.tasks:  # what is listed has a schedule to search: its root block
        assert schedulable(task.mod)
        Schedule(task.mod).get_sblock("root")
    assert "topk" in model.relax_mod.script()  # the selection is still in the model, compiled as TVM lowers it


def test_the_runtimes_topk_is_no_task_and_builds_beside_tuned_kernels(target):
    """TVM's top-k is one opaque block calling its runtime's sort: nothing to schedule, and without a root block
    around it, the pass that splits a tuned kernel's weight prepacking from it stops the build."""
    import tvm
    from tvm import relax

    from autosearch.frontend.lowering import with_root_blocks
    from autosearch.frontend.task import schedulable

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.topk(x, k=4, axis=-1, ret_type="both"))
        bb.emit_func_output(out)
    with target:
        mod = relax.backend.DispatchSortScan()(bb.get())
    [(gv, topk)] = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert "tvm.contrib.sort.topk" in topk.script()
    assert not schedulable(tvm.IRModule({"main": topk}))
    with pytest.raises(Exception, match="compute block"):
        relax.transform.SplitLayoutRewritePreproc()(mod)
    rooted = with_root_blocks(mod)
    split = relax.transform.SplitLayoutRewritePreproc()(rooted)
    assert [g.name_hint for g, _ in split.functions_items()] == [g.name_hint for g, _ in mod.functions_items()]
    vm = relax.VirtualMachine(tvm.compile(split, target=target), tvm.cpu())
    data = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    values, index = (v.numpy() for v in vm["main"](tvm.runtime.tensor(data)))
    np.testing.assert_array_equal(index[0], np.argsort(-data[0])[:4])
    np.testing.assert_array_equal(values[0], np.sort(data[0])[::-1][:4])


def test_the_model_tunes_compiles_and_matches_onnx_runtime(model_path, tmp_path):
    import onnxruntime as ort
    import tvm

    from autosearch.deploy.artifact import load_model

    run = autosearch.tune(model_path, strategy="random", tasks="conv", trials=4, batch=4, finalist_rounds=1,
                          log=str(tmp_path / "r.jsonl"), measure=MeasureOptions(repeat=3, min_repeat_ms=5),
                          layout="NCHW", precision="fp32")
    assert run.trials == 4 and all(t.best_secs for t in run.tasks)
    autosearch.export(run.log, str(tmp_path / "db"))
    compiled = autosearch.compile(model_path, str(tmp_path / "db"), str(tmp_path / "head.so"))
    assert compiled.tuned_tasks and not any("topk" in name for name in compiled.tuned_tasks)
    assert any(k.name.startswith("topk") for k in compiled.kernels)  # a kernel the pass calls, as TVM lowers it
    x = np.random.default_rng(1).random((1, 3, HW, HW), dtype=np.float32)
    got = load_model(compiled.path, threads=1)(tvm.runtime.tensor(x)).numpy()
    expected = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    assert got.shape == expected.shape == (1, NO, KEEP)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_the_report_says_what_its_output_check_cannot_tell_on_a_selection(model_path, tmp_path):
    from autosearch.deploy.report import selection_note
    from tests.conftest import small_conv_onnx

    assert "TopK" in selection_note(onnx.load(model_path))
    assert selection_note(small_conv_onnx(str(tmp_path / "small.onnx"))) == ""
