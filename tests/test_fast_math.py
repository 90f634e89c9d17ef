"""``--fast-math``: sigmoid / exp / softmax lowered to TVM's vectorisable approximations, recorded with the
tasks, followed by export, compile and report."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import _model, exported_tasks, run_cli_here, tune_and_export


def silu_conv_onnx(path: str | None = None, *, cin: int = 16, cout: int = 32, hw: int = 32):
    """Conv 3x3 + SiLU (x * sigmoid(x), YOLOv8's activation) + Softmax over the channels."""
    rng = np.random.default_rng(2)
    weight = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype("float32"), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Sigmoid", ["c"], ["s"]),
            helper.make_node("Mul", ["c", "s"], ["a"]),
            helper.make_node("Softmax", ["a"], ["y"], axis=1),
        ],
        "silu_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw, hw])],
        [weight],
    )
    return _model(graph, path)


@pytest.fixture(scope="module")
def tuned_fast(tmp_path_factory):
    """Two tasks (conv + SiLU, softmax), tuned until export writes at least one (the tests read "N/M tasks tuned")."""
    return tune_and_export(tmp_path_factory.mktemp("fast"), silu_conv_onnx, trials=8, batch=4,
                           until=lambda contents: bool(exported_tasks(contents)),
                           options=("--finalist-rounds", "0"))


def test_fast_sigmoid_is_accurate_over_the_whole_float_range():
    import tvm
    from tvm import te

    from autosearch.frontend.lowering import fast_sigmoid

    x = te.placeholder((4096,), name="x")
    f = tvm.compile(te.create_prim_func([x, fast_sigmoid(x)]), target="llvm")
    data = np.concatenate([np.linspace(-120, 120, 2048), np.random.default_rng(0).standard_normal(2048) * 6])
    data = data.astype("float32")
    out = tvm.runtime.tensor(np.zeros(4096, "float32"))
    f(tvm.runtime.tensor(data), out)
    exact = 1.0 / (1.0 + np.exp(-data.astype("float64")))
    got = out.numpy().astype("float64")
    assert np.abs(got - exact).max() < 2e-7
    normal = exact > 1e-30  # below that both are denormal-small; the approximation clamps exp at +-88
    assert (np.abs(got - exact)[normal] / exact[normal]).max() < 1e-5


def _expf_calls(mod) -> int:
    import tvm

    lib = tvm.compile(mod, target="llvm")
    return len(re.findall(r"call\w*\s+\*?expf", lib.mod.inspect_source("asm") if hasattr(lib, "mod")
                          else lib.inspect_source("asm")))


def test_fast_math_tasks_call_no_libm_exp(tmp_path):
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target

    path = str(tmp_path / "silu.onnx")
    silu_conv_onnx(path)
    target = parse_target(None)
    fast, exact = import_model(path, target), import_model(path, target, fast_math="off")
    assert fast.fast_math == "on" and all(t.lowering["fast_math"] == "on" for t in fast.tasks)
    assert all(t.lowering["fast_math"] == "off" for t in exact.tasks)
    conv = next(t for t in fast.tasks if "conv2d" in t.name)
    assert "fast_sigmoid" in conv.name
    assert {t.workload_key for t in fast.tasks}.isdisjoint(t.workload_key for t in exact.tasks)
    # the approximation's polynomial is not the model's arithmetic: same FLOPs (so same GFLOPS) both ways
    assert conv.flops == next(t for t in exact.tasks if "conv2d" in t.name).flops > 0
    assert fast.flops == pytest.approx(exact.flops)
    exact_conv = next(t for t in exact.tasks if "conv2d" in t.name)
    assert _expf_calls(exact_conv.mod) > 0  # TVM's sigmoid: one libm call per element
    assert sum(_expf_calls(t.mod) for t in fast.tasks) == 0  # sigmoid and softmax: inline, vectorisable


def test_fast_math_round_trip_matches_onnxruntime(tuned_fast, capfd):
    with open(os.path.join(tuned_fast["db"], "autosearch_lowering.json")) as fh:
        assert json.load(fh)["fast_math"] == "on"
    md, png = (os.path.join(str(tuned_fast["work"]), name) for name in ("report.md", "report.png"))
    proc = run_cli_here(capfd, "report", "--model", tuned_fast["model"], "--db", tuned_fast["db"], "--runs", "2",
                        "--rounds", "1", "--untuned-runs", "1", "--plot", png, "--markdown", md)
    assert proc.returncode == 0, proc.stderr
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "DIFFERS" not in proc.stdout
    assert re.search(r"\b[1-9]\d*/\d+ tasks tuned", open(md).read())


def test_compile_follows_the_database_and_reads_old_databases_as_exact(tuned_fast, capfd):
    out = os.path.join(str(tuned_fast["work"]), "model.so")
    lowering_file = os.path.join(tuned_fast["db"], "autosearch_lowering.json")
    with open(lowering_file) as fh:
        lowering = json.load(fh)

    def tuned(*options: str) -> tuple[int, int]:
        proc = run_cli_here(capfd, "compile", "--model", tuned_fast["model"], "--db", tuned_fast["db"], "--out", out,
                            *options)
        assert proc.returncode == 0, proc.stderr
        found, total = re.search(r"with (\d+)/(\d+) tuned tasks", proc.stdout).groups()
        return int(found), int(total)

    found, total = tuned()
    assert found >= 1
    try:  # a database exported before the option: tuned with libm's exp, so compiled that way
        with open(lowering_file, "w") as fh:
            json.dump({k: v for k, v in lowering.items() if k != "fast_math"}, fh)
        assert tuned() == (0, total)  # other workload keys: nothing of the database applies
        assert tuned("--fast-math", "on") == (found, total)
    finally:
        with open(lowering_file, "w") as fh:
            json.dump(lowering, fh)


def test_resume_refuses_another_fast_math(tuned_fast, capfd):
    proc = run_cli_here(capfd, "run", "--strategy", "random", "--model", tuned_fast["model"], "--trials", "20",
                        "--log", tuned_fast["log"], "--resume", "--fast-math", "off")
    assert proc.returncode == 2 and "tuned with --fast-math on" in proc.stderr
    assert "Traceback" not in proc.stderr
