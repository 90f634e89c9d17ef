"""Winograd lowering: which layers convert, that the compute is right, and the tuned model end to end."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from autosearch.winograd import ConvShape
from tests.conftest import run_cli, small_conv_onnx, tune_and_export, wide_conv_onnx


def _direct_conv(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Reference convolution (NCHW, OIHW, stride 1) by im2col in float64."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    cols = np.stack([xp[0, :, i:i + oh, j:j + ow] for i in range(kh) for j in range(kw)], axis=1)
    return (w.reshape(o, c * kh * kw).astype(np.float64) @ cols.reshape(c * kh * kw, oh * ow)).reshape(1, o, oh, ow)


@pytest.mark.parametrize("hw", [13, 16])  # 13: the last tiles reach past the input (TOPI's NCHW bug)
def test_winograd_compute_equals_direct_convolution(target, hw):
    import tvm
    from tvm import te

    from autosearch.winograd import TILE, kernel_transform, winograd_conv

    cin, cout = 8, 16
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, cin, hw, hw)).astype("float32")
    w = rng.uniform(-1, 1, (cout, cin, 3, 3)).astype("float32")
    data = te.placeholder(x.shape, name="data")
    weight = te.placeholder(w.shape, name="weight")
    packed = kernel_transform(weight, TILE)
    kernel = te.placeholder(tuple(int(s) for s in packed.shape), name="kernel")
    out = winograd_conv(data, kernel, [1, 1, 1, 1], TILE)
    dev = tvm.cpu()
    f_pack = tvm.compile(tvm.IRModule({"main": te.create_prim_func([weight, packed])}), target=target)
    f_conv = tvm.compile(tvm.IRModule({"main": te.create_prim_func([data, kernel, out])}), target=target)
    k = tvm.runtime.empty(tuple(int(s) for s in packed.shape), "float32", dev)
    f_pack(tvm.runtime.tensor(w, dev), k)
    # a poisoned output: every element must be written
    y = tvm.runtime.tensor(np.full((1, cout, hw, hw), np.nan, "float32"), dev)
    f_conv(tvm.runtime.tensor(x, dev), k, y)
    ref = _direct_conv(x, w, 1)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_flop_formula_is_tvms_own_count(target):
    """The conversion rule compares FLOPs; its winograd count must be what TVM's estimator says."""
    import tvm
    from tvm import te
    from tvm.s_tir.analysis import estimate_tir_flops

    from autosearch.winograd import TILE, winograd_conv

    shape = ConvShape(batch=1, in_channels=64, out_channels=128, height=26, width=26, kernel=(3, 3))
    data = te.placeholder((1, 64, 26, 26), name="data")
    kernel = te.placeholder((TILE + 2, TILE + 2, 64, 128), name="kernel")
    out = winograd_conv(data, kernel, [1, 1, 1, 1], TILE)
    counted = estimate_tir_flops(tvm.IRModule({"main": te.create_prim_func([data, kernel, out])}))
    assert counted == pytest.approx(shape.winograd_flops(), rel=0.01)
    assert shape.winograd_flops() < 0.55 * shape.direct_flops


def test_auto_converts_the_wide_layers_and_off_converts_none(target):
    from workloads.importer import import_model

    auto = import_model("tiny-yolov2", target, winograd="auto").tasks
    off = import_model("tiny-yolov2", target, winograd="off").tasks
    wino = [t for t in auto if "winograd" in t.name]
    assert not any("winograd" in t.name for t in off)
    # the five 3x3 convs from 64 input channels up; the stem (3->16, 16->32, 32->64) and the 1x1 head stay direct
    assert sorted(t.args[0][0][1] for t in wino) == [64, 128, 256, 512, 1024]
    assert all(t.args[1][0][:2] == (6, 6) for t in wino)  # the transformed kernel, folded from the weights
    assert all(t.lowering == {"winograd": "auto"} for t in auto)
    direct_flops = sum(t.flops for t in off if "conv2d" in t.name)
    assert sum(t.flops for t in auto if "conv2d" in t.name) < 0.6 * direct_flops


def test_bad_winograd_mode_is_refused():
    proc = run_cli("tasks", "--model", "tiny-yolov2", "--winograd", "always")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def tuned_wide(tmp_path_factory):
    """A short real run on a conv that auto lowers to winograd, exported."""
    return tune_and_export(tmp_path_factory.mktemp("winograd"), wide_conv_onnx, trials=12, batch=6)


def test_winograd_model_tunes_exports_and_matches_onnxruntime(tuned_wide):
    from autosearch.records import read_log

    contents = read_log(tuned_wide["log"])
    [key] = [k for k, h in contents.tasks.items() if "winograd" in h["name"]]
    assert contents.best(key).latency < contents.baseline(key).latency
    with open(os.path.join(tuned_wide["db"], "autosearch_lowering.json")) as fh:
        assert json.load(fh) == {"winograd": "auto"}
    # compile/report take the lowering from the database: the winograd task is found and tuned
    md = os.path.join(str(tuned_wide["work"]), "report.md")
    proc = run_cli("report", "--model", tuned_wide["model"], "--db", tuned_wide["db"], "--runs", "5",
                   "--markdown", md, "--plot", os.path.join(str(tuned_wide["work"]), "r.png"))
    assert proc.returncode == 0, proc.stderr
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "matches" in proc.stdout
    assert "1/1 tasks tuned" in proc.stdout.replace("\n", " ") or "1/1" in open(md).read()


def test_compile_with_the_other_lowering_finds_no_tuned_task(tuned_wide):
    out = os.path.join(str(tuned_wide["work"]), "direct.so")
    proc = run_cli("compile", "--model", tuned_wide["model"], "--db", tuned_wide["db"], "--out", out,
                   "--winograd", "off")
    assert proc.returncode == 0, proc.stderr
    assert "with 0/1 tuned tasks" in proc.stdout and "not in the database" in proc.stdout


def test_small_stem_conv_stays_direct(target, tmp_path):
    from workloads.importer import import_model

    path = str(tmp_path / "small.onnx")
    small_conv_onnx(path)
    assert not any("winograd" in t.name for t in import_model(path, target).tasks)
