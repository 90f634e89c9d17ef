"""Exports that compute shapes at run time import once their shape arithmetic is folded.

The graphs are built here with ``onnx.helper`` the way ``torch.onnx.export`` writes a YOLO Detect head
without ``simplify``: ``x.view(x.shape[0], no, -1)`` as Shape -> Gather -> Unsqueeze -> Concat ->
Reshape, ``distance.chunk(2, 1)`` as Shape -> Gather -> Add -> Div -> Mul -> Slice (the chain TVM's
legalisation stops on), an anchor grid broadcast to the batch with Expand; once with a static input,
once with ``dynamic=True``'s symbolic batch, height and width.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosearch.errors import UserError
from tests.conftest import run_cli, run_cli_here

CLASSES, BOX = 4, 4  # Detect-like head: 4 box distances (chunked into lt and rb), 4 class channels
HW = 32


def detect_head_onnx(kind: str, *, hw: int = HW, extra_op: str | None = None) -> onnx.ModelProto:
    """A two-conv net with a Detect-like head. ``kind``: ``"static"`` (every shape a constant, as a
    simplified export), ``"runtime"`` (static input, shapes computed at run time) or ``"dynamic"`` (the
    same with symbolic batch / height / width). ``extra_op``: an op type applied to the output."""
    rng = np.random.default_rng(0)
    no, cells = BOX + CLASSES, (hw // 2) ** 2
    inits = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "w2": (rng.standard_normal((no, 8, 3, 3)) * 0.2).astype(np.float32),
        "b2": (rng.standard_normal(no) * 0.1).astype(np.float32),
        "anchor": rng.random((1, 2, 1)).astype(np.float32),
        "split": np.asarray([BOX, CLASSES], np.int64),
        "axis1": np.asarray([1], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["images", "w1"], ["c1"], pads=[1] * 4, strides=[2, 2], name="conv1"),
        helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig1"),
        helper.make_node("Mul", ["c1", "s1"], ["a1"], name="silu1"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["y"], pads=[1] * 4, name="conv2"),
    ]

    def shape_of(tensor: str, axis: int, out: str, *, keepdim: bool = False) -> list[onnx.NodeProto]:
        """``tensor.shape[axis]``: a scalar, or with ``keepdim`` a 1-element tensor (torch's ``chunk``)."""
        inits[f"{out}_i"] = np.asarray([axis] if keepdim else axis, np.int64)
        return [helper.make_node("Shape", [tensor], [f"{out}_shape"], name=f"{out}_Shape"),
                helper.make_node("Gather", [f"{out}_shape", f"{out}_i"], [out], axis=0, name=f"{out}_Gather")]

    if kind == "static":
        inits |= {"view": np.asarray([1, no, -1], np.int64), "zero": np.asarray([0], np.int64),
                  "half": np.asarray([BOX // 2], np.int64), "full": np.asarray([BOX], np.int64),
                  "grid": np.asarray([1, 2, cells], np.int64)}
        nodes += [helper.make_node("Reshape", ["y", "view"], ["flat"], name="view"),
                  helper.make_node("Split", ["flat", "split"], ["box", "cls"], axis=1, name="split"),
                  helper.make_node("Slice", ["box", "zero", "half", "axis1"], ["lt"], name="chunk0"),
                  helper.make_node("Slice", ["box", "half", "full", "axis1"], ["rb"], name="chunk1"),
                  helper.make_node("Expand", ["anchor", "grid"], ["anchors"], name="expand")]
    else:
        inits |= {"zero": np.asarray([0], np.int64), "no": np.asarray([no], np.int64),
                  "minus1": np.asarray([-1], np.int64), "one1": np.asarray([1], np.int64),
                  "two1": np.asarray([2], np.int64)}
        nodes += shape_of("y", 0, "batch")
        nodes += [helper.make_node("Unsqueeze", ["batch", "zero"], ["batch1"], name="batch_Unsqueeze"),
                  helper.make_node("Concat", ["batch1", "no", "minus1"], ["view"], axis=0, name="view_Concat"),
                  helper.make_node("Reshape", ["y", "view"], ["flat"], name="view"),
                  helper.make_node("Split", ["flat", "split"], ["box", "cls"], axis=1, name="split")]
        nodes += shape_of("box", 1, "boxch", keepdim=True)  # chunk(2, 1): (size + 1) // 2 each, as torch traces it
        nodes += [helper.make_node("Add", ["boxch", "one1"], ["boxch1"], name="chunk_Add"),
                  helper.make_node("Div", ["boxch1", "two1"], ["size"], name="chunk_Div"),
                  helper.make_node("Mul", ["size", "one1"], ["end0"], name="chunk_Mul"),
                  helper.make_node("Mul", ["size", "two1"], ["end1"], name="chunk_Mul_1"),
                  helper.make_node("Slice", ["box", "zero", "end0", "axis1"], ["lt"], name="chunk0"),
                  helper.make_node("Slice", ["box", "end0", "end1", "axis1"], ["rb"], name="chunk1")]
        nodes += shape_of("box", 2, "cells")
        nodes += [helper.make_node("Unsqueeze", ["cells", "zero"], ["cells1"], name="cells_Unsqueeze"),
                  helper.make_node("Concat", ["batch1", "two1", "cells1"], ["grid"], axis=0, name="grid_Concat"),
                  helper.make_node("Expand", ["anchor", "grid"], ["anchors"], name="expand")]
    nodes += [helper.make_node("Sub", ["anchors", "lt"], ["x1y1"], name="x1y1"),
              helper.make_node("Add", ["anchors", "rb"], ["x2y2"], name="x2y2"),
              helper.make_node("Sigmoid", ["cls"], ["scores"], name="scores"),
              helper.make_node("Concat", ["x1y1", "x2y2", "scores"], ["out"], axis=1, name="output_Concat")]
    output = "out"
    if extra_op:
        nodes.append(helper.make_node(extra_op, ["out"], ["out2"], name="user_op"))
        output = "out2"
    dynamic = kind == "dynamic"
    graph = helper.make_graph(
        nodes, f"detect_{kind}",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                       ["batch", 3, "height", "width"] if dynamic else [1, 3, hw, hw])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT,
                                       ["batch", 4 + CLASSES, "anchors"] if dynamic else [1, 4 + CLASSES, cells])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=not extra_op)
    return model


def _save(tmp_path, model: onnx.ModelProto, name: str) -> str:
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path)
    return path


def _imported(tmp_path, kind: str, target, **options):
    from autosearch.frontend.importer import import_model

    return import_model(_save(tmp_path, detect_head_onnx(kind), kind), target, winograd="off", layout="NCHW",
                        **options)


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": x})[0]


def test_the_runtime_shape_graph_is_what_tvm_cannot_legalise(target):
    """Without folding, the chunk chain stops TVM's legalisation: the graph tests what it claims to."""
    from autosearch.frontend.importer import extract_tasks, to_relax

    mod = to_relax(detect_head_onnx("runtime"), {"images": (1, 3, HW, HW)})
    with pytest.raises(AssertionError, match="ShapeExpr"):
        extract_tasks(mod, target, winograd="off")


@pytest.mark.parametrize("kind", ["runtime", "dynamic"])
def test_runtime_shapes_import_to_the_static_graphs_workloads(tmp_path, target, kind):
    options = {"input_shape": f"images:1,3,{HW},{HW}"} if kind == "dynamic" else {}
    static = _imported(tmp_path, "static", target)
    folded = _imported(tmp_path, kind, target, **options)
    assert folded.input_shapes == {"images": (1, 3, HW, HW)}
    convs = [t for t in static.tasks if "conv2d" in t.name]
    assert len(convs) == 2
    assert {t.workload_key for t in folded.tasks if "conv2d" in t.name} == {t.workload_key for t in convs}
    assert sorted(t.workload_key for t in folded.tasks) == sorted(t.workload_key for t in static.tasks)
    assert not any(n.op_type == "Shape" for n in folded.onnx_model.graph.node)
    # the folded graph computes what the exported one does
    x = np.random.default_rng(3).random((1, 3, HW, HW), dtype=np.float32)
    np.testing.assert_allclose(_ort(folded.onnx_model, x), _ort(detect_head_onnx(kind), x), rtol=1e-6)


def test_dynamic_axes_take_the_given_batch_and_size(tmp_path, target):
    folded = _imported(tmp_path, "dynamic", target, input_shape="images:2,3,48,64")
    assert folded.input_shapes == {"images": (2, 3, 48, 64)}
    conv1 = next(t for t in folded.tasks if "conv2d" in t.name and t.args[1][0] == (8, 3, 3, 3))
    assert conv1.args[0][0] == (2, 3, 48, 64)
    dims = [d.dim_value for d in folded.onnx_model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 4 + CLASSES, 24 * 32]


def test_a_static_graph_is_passed_through_untouched():
    from autosearch.frontend.static_graph import has_runtime_shapes, make_static

    model = detect_head_onnx("static")
    assert not has_runtime_shapes(model)
    assert make_static(model, {"images": (1, 3, HW, HW)}) is model
    assert has_runtime_shapes(detect_head_onnx("runtime")) and has_runtime_shapes(detect_head_onnx("dynamic"))


def test_cli_dynamic_export_needs_its_shape_in_one_line(tmp_path, capfd):
    path = _save(tmp_path, detect_head_onnx("dynamic"), "dynamic")
    proc = run_cli("tasks", "--model", path, "--winograd", "off", "--layout", "NCHW")  # a real process: exit code 2
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--input-shape images:" in proc.stderr
    proc = run_cli_here(capfd, "tasks", "--model", path, "--input-shape", f"images:1,3,{HW},{HW}", "--winograd", "off",
                        "--layout", "NCHW")
    assert proc.returncode == 0, proc.stderr
    assert "conv2d" in proc.stdout and not proc.stderr.strip()  # onnxsim's notes stay in the debug log


@pytest.mark.parametrize("kind", ["static", "runtime"])
def test_an_op_tvm_cannot_import_is_named_with_its_node(tmp_path, target, kind, capfd):
    from autosearch.frontend.importer import import_model

    path = _save(tmp_path, detect_head_onnx(kind, extra_op="Celu"), kind)
    with pytest.raises(UserError, match=r"^ONNX op not supported by TVM's Relax importer: Celu \(node 'user_op'\)$"):
        import_model(path, target)
    proc = run_cli_here(capfd, "tasks", "--model", path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: ONNX op not supported by TVM's Relax importer: Celu (node 'user_op')"


def test_a_shape_that_depends_on_data_is_named_in_one_line(tmp_path, capfd):
    """NonZero's output size depends on the values: nothing folds it, and TVM cannot tune it."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w"], ["c"], pads=[1] * 4, name="conv"),
         helper.make_node("NonZero", ["c"], ["nz"], name="where_positive"),
         helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT, name="cast")],
        "nonzero", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, None])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    proc = run_cli_here(capfd, "tasks", "--model", _save(tmp_path, model, "nonzero"), "--winograd", "off", "--layout",
                        "NCHW")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "NonZero node 'where_positive' sizes its output from data" in proc.stderr


def _nms_export() -> onnx.ModelProto:
    """An export with NMS in the graph (Ultralytics' ``nms=True``): the kept detections padded by an amount that
    depends on what NonMaxSuppression kept, a Pad TVM's importer cannot take."""
    consts = {"max_out": np.asarray([4], np.int64), "iou": np.asarray([0.5], np.float32),
              "thr": np.asarray([0.1], np.float32), "total": np.asarray([12], np.int64),
              "zero": np.asarray([0], np.int64), "flat": np.asarray([-1], np.int64)}
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["kept"], name="nms"),
        helper.make_node("Reshape", ["kept", "flat"], ["kept_flat"]),
        helper.make_node("ReduceMax", ["kept_flat"], ["last"], keepdims=1),  # a value NMS computed
        helper.make_node("Sub", ["total", "last"], ["missing"]),
        helper.make_node("Concat", ["zero", "missing"], ["pads"], axis=0),
        helper.make_node("Pad", ["kept_flat", "pads"], ["out"], name="pad_to_max"),
    ]
    graph = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8, 4]),
                                             helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.INT64, [12])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_export_with_nms_in_its_graph_is_one_line_naming_the_operator_and_what_to_do(tmp_path, capfd):
    path = _save(tmp_path, _nms_export(), "nms")
    proc = run_cli_here(capfd, "tasks", "--model", path)
    assert proc.returncode == 2
    assert not proc.stdout.strip()  # TVM's importer prints the failing operator's inputs: not to the user
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "at its Pad operator" in errors[0] and "without it" in errors[0] and "NonMaxSuppression" in errors[0]
    assert "nms=False" in errors[0]  # the NMS-free export, where the model has one
    fresh = run_cli("tasks", "--model", path)  # the whole process: nothing after the line, TVM's C++ warnings at exit
    assert fresh.returncode == 2 and fresh.stderr.strip().count("\n") == 0, fresh.stderr
