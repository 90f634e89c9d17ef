"""Model -> tasks: task lists, FLOPs, the workload key TVM matches, the CLI and its bad inputs."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import run_cli, run_cli_here, small_conv_onnx


@pytest.fixture(scope="module")
def models(imported):
    # direct convolutions: the graph as ONNX states it (winograd lowering has its own tests)
    return {name: imported(name, winograd="off", layout="NCHW")
            for name in ("tiny-yolov2", "yolov3-tiny", "yolov8n", "yolo11n")}


def test_tiny_yolov2_has_its_nine_conv_tasks(models):
    tasks = models["tiny-yolov2"].tasks
    convs = [t for t in tasks if "conv2d" in t.name]
    assert len(convs) == 9
    assert sum(t.weight for t in convs) == 9
    # heaviest first: the 1024->1024 3x3 conv at 13x13
    assert tasks[0].args[1][0] == (1024, 1024, 3, 3)


@pytest.mark.parametrize("name", ["tiny-yolov2", "yolov3-tiny", "yolov8n", "yolo11n"])
def test_task_flops_match_an_independent_count_of_the_onnx_graph(models, name):
    from autosearch.workloads.onnx_flops import count_flops

    model = models[name]
    conv_flops = sum(t.flops * t.weight for t in model.tasks if "conv2d" in t.name or "matmul" in t.name)
    independent = count_flops(model.onnx_model)
    # TVM counts the fused epilogues (BN, activation) too: within 2% of 2 x MACs
    assert abs(conv_flops - independent) / independent < 0.02


def test_yolov8n_conv_task_count(models):
    tasks = models["yolov8n"].tasks
    assert sum(t.weight for t in tasks if "conv2d" in t.name) == 64
    assert 8.6e9 < models["yolov8n"].flops < 8.9e9


def test_yolo11n_conv_and_attention_tasks(models):
    """88 conv layers in 62 distinct tasks; C2PSA's attention gives two batch matmuls and a softmax over the 400
    tokens of the 20x20 map, and each has a MetaSchedule design space with open decisions, like a conv."""
    from autosearch.search.space import DecisionSpace

    tasks = models["yolo11n"].tasks
    assert sum(t.weight for t in tasks if "conv2d" in t.name) == 88
    assert 6.5e9 < models["yolo11n"].flops < 6.7e9
    attention = {
        "matmul": [((1, 2, 400, 32), "float32"), ((1, 2, 32, 400), "float32"), ((1, 2, 400, 400), "float32")],
        # v @ attn^T as (attn @ v^T)^T: the scores are never transposed (test_attention.py)
        "matmul_v": [((1, 2, 400, 400), "float32"), ((1, 2, 400, 64), "float32"), ((1, 2, 400, 64), "float32")],
        "softmax": [((1, 2, 400, 400), "float32")] * 2,
    }
    for kind, args in attention.items():
        task = next(t for t in tasks if kind.split("_")[0] in t.name and list(t.args) == args)
        assert task.flops > 0
        space = DecisionSpace(task.mod, task.target)
        assert space.sketches and all(len(s.decisions) > 0 for s in space.sketches)
        assert space.log10_size() > 3
        applied = space.apply(space.sample(np.random.default_rng(0)))
        assert applied.ok, applied.error


def test_task_records_carry_args_and_workload_key(models):
    task = models["tiny-yolov2"].tasks[0]
    assert task.args[0] == ((1, 1024, 13, 13), "float32")
    assert task.workload_key.isdigit()
    # round trip through the log header
    from autosearch.frontend.task import TuningTask

    again = TuningTask.from_json(json.loads(json.dumps(task.to_json())))
    assert again.workload_key == task.workload_key and again.args == task.args and again.flops == task.flops


def test_exported_record_matches_when_tvm_applies_the_database(tmp_path, small_model, conv_task, conv_space):
    """A one-record database keyed by our workload key is found by TVM's own apply-database pass."""
    import tvm
    from tvm import relax

    from autosearch.deploy.database import export_database
    from autosearch.frontend.importer import legalize
    from autosearch.records import LogContents
    from autosearch.types import MeasureResult, Record, Status

    applied = conv_space.apply(conv_space.default(0))
    assert applied.ok
    contents = LogContents(path="mem")
    contents.tasks[conv_task.workload_key] = conv_task.to_json()
    contents.records.append(Record(kind="trial", task_key=conv_task.workload_key, task_name=conv_task.name,
                                   target={}, config=applied.config, result=MeasureResult(Status.OK, (1e-3,)),
                                   flops=conv_task.flops, trace=applied.trace_json()))
    summary = export_database(contents, str(tmp_path / "db"))
    assert summary.records == 1
    from autosearch.frontend.database_files import load_database

    db = load_database(str(tmp_path / "db"))
    lowered = legalize(small_model.relax_mod, conv_task.target)
    with conv_task.target, db, tvm.transform.PassContext(opt_level=3):
        applied_mod = relax.transform.MetaScheduleApplyDatabase()(lowered)
    scheduled = [gv.name_hint for gv, f in applied_mod.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "tirx.is_scheduled" in f.attrs]
    unscheduled_names = [gv.name_hint for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(scheduled) == 1 and scheduled[0] in unscheduled_names
    assert "conv2d" in scheduled[0]


def test_untuned_tvm_matches_onnxruntime_on_tiny_yolov2(models, target):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    model = models["tiny-yolov2"]
    x = np.random.default_rng(1).uniform(0, 255, size=(1, 3, 416, 416)).astype("float32")
    sess_opts = ort.SessionOptions()
    sess_opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.onnx_model.SerializeToString(), sess_opts, providers=["CPUExecutionProvider"])
    expected = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    ex = tvm.compile(model.relax_mod, target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x, tvm.cpu()))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    assert got.shape == expected.shape == (1, 125, 13, 13)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_cli_tasks_json_lists_fields(capfd):
    proc = run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--json", "--winograd", "off", "--layout", "NCHW")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 16
    assert set(rows[0]) == {"index", "name", "weight", "flops", "workload_key", "args", "lowering"}
    assert rows[0]["args"][0] == [[1, 1024, 13, 13], "float32"]
    # --winograd auto and --layout auto (the defaults) also list the winograd alternative of the six candidate
    # layers and the NHWC model's tasks, each marked with the layouts whose model runs it; NHWC's six layers have
    # theirs where its convolutions are fp32 (in bf16 the NHWC model alone may be tuned: tests/test_layout_choice.py)
    rows = json.loads(run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--json", "--precision", "fp32").stdout)
    winograd = [r for r in rows if r["lowering"].get("algorithm") == "winograd"]
    assert sum("NCHW" in r["lowering"]["layouts"] for r in winograd) == 6
    assert sum("NHWC" in r["lowering"]["layouts"] for r in winograd) == 6
    assert all(r["lowering"]["layout"] == "auto" for r in rows)
    nchw = [r for r in rows if "NCHW" in r["lowering"]["layouts"]]
    assert len(nchw) == 22 and any("NCHW" not in r["lowering"]["layouts"] for r in rows)


def test_cli_tasks_table_for_a_user_onnx_file(tmp_path, capfd):
    path = tmp_path / "user.onnx"
    small_conv_onnx(str(path))
    proc = run_cli_here(capfd, "tasks", "--model", str(path), "--precision", "fp32")
    assert proc.returncode == 0, proc.stderr
    assert "total:" in proc.stdout and "conv2d" in proc.stdout
    # --layout auto lists two models' tasks: the line below the total says how many each model runs
    rows = json.loads(run_cli_here(capfd, "tasks", "--model", str(path), "--json", "--precision", "fp32").stdout)
    per_layout = {layout: sum(layout in r["lowering"]["layouts"] for r in rows) for layout in ("NCHW", "NHWC")}
    assert f"NCHW model {per_layout['NCHW']} tasks, NHWC model {per_layout['NHWC']} tasks" in " ".join(
        proc.stdout.split())
    # where bf16 runs the model at twice the fp32 rate (here the dot product of a Zen 4, whatever the host), one model
    # is tuned, and the listing says which and why instead
    zen4 = json.dumps({"kind": "llvm", "mcpu": "znver4", "mattr": ["+avx512bf16"], "num-cores": 2})
    proc = run_cli_here(capfd, "tasks", "--model", str(path), "--target", zen4)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "layout: auto (the NHWC model alone: layers that can run in bf16 carry" in said and "per layout" not in said


def test_input_shape_override_for_dynamic_input(tmp_path, target, capfd):
    import onnx

    from autosearch.frontend.importer import import_model

    model = small_conv_onnx()
    dim = model.graph.input[0].type.tensor_type.shape.dim
    dim[2].dim_param, dim[3].dim_param = "H", "W"
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "h"
    model.graph.output[0].type.tensor_type.shape.dim[3].dim_param = "w"
    path = str(tmp_path / "dyn.onnx")
    onnx.save(model, path)
    imported = import_model(path, target, input_shape="x:1,16,32,32")
    assert imported.input_shapes == {"x": (1, 16, 32, 32)}
    proc = run_cli_here(capfd, "tasks", "--model", path)
    assert proc.returncode == 2 and "--input-shape" in proc.stderr


def _bad_input_cases(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    not_onnx = tmp_path / "notes.onnx"
    not_onnx.write_text("this is not a model")
    unsupported = tmp_path / "unsupported.onnx"
    g = helper.make_graph([helper.make_node("MyCustomOp", ["x"], ["y"], domain="")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(unsupported))
    static = tmp_path / "static.onnx"
    small_conv_onnx(str(static))
    return [
        (["--model", str(tmp_path / "missing.onnx")], "not found"),
        (["--model", str(not_onnx)], "cannot read"),
        (["--model", str(unsupported)], "MyCustomOp"),
        (["--model", "yolov99"], "tiny-yolov2, yolo11n, yolov3-tiny, yolov8n"),
        (["--target", "{not json"], "malformed --target"),
        (["--target", '{"kind": "nosuchkind"}'], "malformed --target"),
        (["--model", str(static), "--input-shape", "x:1,3,64,64"], "does not fit"),
        (["--model", str(static), "--input-shape", "x:1,2,3"], "rank"),
        (["--model", str(static), "--input-shape", "images:1,3,64,64"], "unknown input"),
    ]


def test_bad_inputs_give_one_line_and_exit_code_2(tmp_path, capfd):
    for i, (args, needle) in enumerate(_bad_input_cases(tmp_path)):
        # the first in a real process (the exit code, no traceback), the others in this one: their messages
        proc = run_cli("tasks", *args) if i == 0 else run_cli_here(capfd, "tasks", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, (args, proc.stderr)
        assert needle in lines[0], (args, lines[0])
        assert "Traceback" not in proc.stderr


def test_legacy_target_string_is_translated():
    from autosearch.frontend.target import parse_target

    t = parse_target("llvm -mcpu=skylake-avx512 -num-cores 2")
    exported = dict(t.export())
    assert exported["mcpu"] == "skylake-avx512" and exported["num-cores"] == 2


def test_default_target_is_the_host_with_all_cores():
    from autosearch.frontend.target import host_cores, parse_target

    exported = dict(parse_target(None).export())
    assert exported["kind"] == "llvm" and exported["num-cores"] == host_cores()
    assert exported.get("mcpu")
    assert os.cpu_count() >= host_cores()
