"""YOLO11's attention kernels go the whole way: tuned in MetaSchedule's space, exported, compiled, correct.

The model is C2PSA's attention block of the built-in yolo11n alone (128 channels, 2 heads, 20x20 map), so
its tasks are yolo11n's own (same workload keys) and a tune takes seconds, not a whole-model set-up.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from tests.conftest import run_cli_here, tune_and_export

CHANNELS, HEADS = 128, 2


def attention_onnx(path: str) -> onnx.ModelProto:
    from autosearch.workloads.builder import GraphBuilder
    from autosearch.workloads.yolo11n import P5, attention

    b = GraphBuilder(seed=0)
    shape = (1, CHANNELS, P5, P5)
    b.output(attention(b, b.input("x", shape), CHANNELS, HEADS), "y", shape)
    model = b.build(name="yolo11n_attention", doc="the attention of yolo11n's C2PSA block")
    onnx.save(model, path)
    return model


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    # task 0, the heaviest: v @ attn^T computed as (attn @ v^T)^T, (1, 2, 400, 400) x (1, 2, 400, 64); naive, it
    # takes ~10x a random schedule
    return tune_and_export(tmp_path_factory.mktemp("attention"), attention_onnx, trials=2, batch=2,
                           options=("--tasks", "0", "--winograd", "off", "--finalist-rounds", "0"))


def test_an_attention_matmul_is_tuned_exported_and_compiled(tuned, target, capfd):
    import onnxruntime as ort
    import tvm

    from autosearch.deploy.artifact import load_model
    from autosearch.frontend.database_files import load_database
    from autosearch.frontend.importer import import_model
    from autosearch.records import read_log

    contents = read_log(tuned["log"])
    (key,) = contents.tasks
    task = contents.tasks[key]
    assert "matmul" in task["name"] and task["args"][0][0] == [1, HEADS, 400, 400]
    best = contents.best(key)
    assert best is not None and best.latency < contents.baseline(key).latency
    model = import_model(tuned["model"], target, winograd="off", layout="NCHW")
    matmul = next(t for t in model.tasks if t.workload_key == key)
    assert load_database(tuned["db"]).has_workload(matmul.mod)

    out = os.path.join(str(tuned["work"]), "attention.so")
    proc = run_cli_here(capfd, "compile", "--model", tuned["model"], "--db", tuned["db"], "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert f"1/{len(model.tasks)} tuned" in proc.stdout
    x = np.random.default_rng(5).standard_normal((1, CHANNELS, 20, 20)).astype(np.float32)
    got = load_model(out)(tvm.runtime.tensor(x, tvm.cpu()))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    session = ort.InferenceSession(model.onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_the_attention_tasks_are_yolo11ns_own(tmp_path, target, imported):
    """The block's matmul and softmax tasks have the workload keys of the built-in yolo11n's: a database tuned
    on one applies to the other."""
    from autosearch.frontend.importer import import_model

    path = str(tmp_path / "attention.onnx")
    attention_onnx(path)
    block = import_model(path, target, winograd="off", layout="NCHW")
    yolo11n = {t.workload_key for t in imported("yolo11n", winograd="off", layout="NCHW").tasks}
    kernels = [t for t in block.tasks if "matmul" in t.name or "softmax" in t.name]
    assert len(kernels) == 3 and all(t.workload_key in yolo11n for t in kernels)


def test_the_score_matrix_is_never_transposed(tmp_path, target):
    """``v @ attn^T`` is computed as ``(attn @ v^T)^T``: the only transposes move ``v`` and the output (64 x 400 a
    head), none the 400 x 400 scores; the other matmul, ``q^T @ k``, whose transposed operand is the small one, is
    left as it is."""
    from autosearch.frontend.importer import import_model

    path = str(tmp_path / "attention.onnx")
    attention_onnx(path)
    tasks = import_model(path, target, winograd="off", layout="NCHW").tasks
    scores = [1, HEADS, 400, 400]
    matmuls = sorted(([list(a[0]) for a in t.args] for t in tasks if "matmul" in t.name), key=lambda a: a[0])
    head = CHANNELS // HEADS
    assert matmuls == [[[1, HEADS, 400, head // 2], [1, HEADS, head // 2, 400], scores],  # q^T @ k
                       [scores, [1, HEADS, 400, head], [1, HEADS, 400, head]]]  # attn @ v^T
    moved = [list(a[0]) for t in tasks if "transpose" in t.name and "matmul" not in t.name for a in t.args[:1]]
    assert moved and scores not in moved
