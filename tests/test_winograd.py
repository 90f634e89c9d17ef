"""Winograd lowering: which layers convert, that the compute is right, and the tuned model end to end."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from autosearch.frontend.winograd import ConvShape
from tests.conftest import run_cli_here, small_conv_onnx


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
    from tvm import te

    from autosearch.frontend.winograd import TILE, kernel_transform, winograd_conv

    cin, cout = 8, 16
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, cin, hw, hw)).astype("float32")
    w = rng.uniform(-1, 1, (cout, cin, 3, 3)).astype("float32")
    data = te.placeholder(x.shape, name="data")
    weight = te.placeholder(w.shape, name="weight")
    packed = kernel_transform(weight, TILE)
    kernel = te.placeholder(tuple(int(s) for s in packed.shape), name="kernel")
    y = _transform_and_convolve(target, (weight, packed, w), (data, kernel, x),
                                winograd_conv(data, kernel, [1, 1, 1, 1], TILE))
    ref = _direct_conv(x, w, 1)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def _transform_and_convolve(target, kernel_side, data_side, out) -> np.ndarray:
    """Build the kernel transform ``(weight, packed, weight values)`` and the convolution ``(data, kernel, data
    values)`` -> ``out``, run both, and return the output; it starts as NaN, so every element must be written."""
    import tvm
    from tvm import te

    (weight, packed, w), (data, kernel, x) = kernel_side, data_side
    dev = tvm.cpu()
    f_pack = tvm.compile(tvm.IRModule({"main": te.create_prim_func([weight, packed])}), target=target)
    f_conv = tvm.compile(tvm.IRModule({"main": te.create_prim_func([data, kernel, out])}), target=target)
    k = tvm.runtime.empty(tuple(int(s) for s in packed.shape), "float32", dev)
    f_pack(tvm.runtime.tensor(w, dev), k)
    y = tvm.runtime.tensor(np.full(tuple(int(s) for s in out.shape), np.nan, "float32"), dev)
    f_conv(tvm.runtime.tensor(x, dev), k, y)
    return y.numpy()


@pytest.mark.parametrize("hw", [13, 16])
def test_nhwc_winograd_compute_equals_direct_convolution(target, hw):
    """The NHWC form (OHWI weights, transformed to (alpha, alpha, out, in)) against the same reference."""
    from tvm import te

    from autosearch.frontend.winograd import TILE, kernel_transform, winograd_conv_nhwc

    cin, cout = 8, 16
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, cin, hw, hw)).astype("float32")
    w = rng.uniform(-1, 1, (cout, cin, 3, 3)).astype("float32")
    x_nhwc, w_ohwi = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    data = te.placeholder(x_nhwc.shape, name="data")
    weight = te.placeholder(w_ohwi.shape, name="weight")
    packed = kernel_transform(weight, TILE, "NHWC")
    assert tuple(int(s) for s in packed.shape) == (TILE + 2, TILE + 2, cout, cin)
    kernel = te.placeholder(tuple(int(s) for s in packed.shape), name="kernel")
    y = _transform_and_convolve(target, (weight, packed, w_ohwi), (data, kernel, x_nhwc),
                                winograd_conv_nhwc(data, kernel, [1, 1, 1, 1], TILE))
    ref = _direct_conv(x, w, 1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_nhwc_offers_the_same_layers_both_ways_in_fp32_only(imported):
    """NHWC: the same six candidate layers as NCHW get a winograd alternative, keyed by their NHWC shapes; every
    direct task is the one NHWC had before (the tasks of databases tuned then keep their keys); none beside bf16."""
    from autosearch.frontend.winograd import TILE, WinogradPolicy, task_layer

    auto = imported("tiny-yolov2", winograd="auto", layout="NHWC", precision="fp32")
    off = imported("tiny-yolov2", winograd="off", layout="NHWC", precision="fp32")
    wino = [t for t in auto.tasks if "winograd" in t.name]
    assert sorted(t.args[0][0][3] for t in wino) == [32, 64, 128, 256, 512, 1024]
    assert all(t.args[1][0][:2] == (TILE + 2, TILE + 2) for t in wino)
    assert {t.workload_key for t in off.tasks} <= {t.workload_key for t in auto.tasks}
    layers = {}
    for t in auto.tasks:
        if "layer" in t.lowering:
            layers.setdefault(t.lowering["layer"], set()).add(t.lowering["algorithm"])
            assert task_layer(t.name, t.args) == (t.lowering["layer"], t.lowering["algorithm"])
    assert len(layers) == 6 and all(algs == {"direct", "winograd"} for algs in layers.values())
    wide = "1x13x13x1024->1x13x13x1024"
    assert wide in layers
    assert ConvShape.from_key(wide, "NHWC") == ConvShape(batch=1, in_channels=1024, out_channels=1024, height=13,
                                                         width=13, kernel=(3, 3))
    # without a measured choice an NHWC layer stays direct (no FLOP rule: older NHWC databases hold direct tasks)
    shape = ConvShape.from_key(wide, "NHWC")
    assert not WinogradPolicy.of("auto").converts(shape, wide, "NHWC")
    assert WinogradPolicy.of("auto", {wide: "winograd"}).converts(shape, wide, "NHWC")
    assert not WinogradPolicy.of("auto", {wide: "winograd"}, "auto").converts(shape, wide, "NHWC")  # bf16 there
    assert WinogradPolicy.of("auto").uses({"layer": wide, "algorithm": "direct", "layout": "NHWC"})
    assert not WinogradPolicy.of("auto").uses({"layer": wide, "algorithm": "winograd", "layout": "NHWC"})


def test_flop_formula_is_tvms_own_count(target):
    """The conversion rule compares FLOPs; its winograd count must be what TVM's estimator says."""
    import tvm
    from tvm import te
    from tvm.s_tir.analysis import estimate_tir_flops

    from autosearch.frontend.winograd import TILE, winograd_conv

    shape = ConvShape(batch=1, in_channels=64, out_channels=128, height=26, width=26, kernel=(3, 3))
    data = te.placeholder((1, 64, 26, 26), name="data")
    kernel = te.placeholder((TILE + 2, TILE + 2, 64, 128), name="kernel")
    out = winograd_conv(data, kernel, [1, 1, 1, 1], TILE)
    counted = estimate_tir_flops(tvm.IRModule({"main": te.create_prim_func([data, kernel, out])}))
    assert counted == pytest.approx(shape.winograd_flops(), rel=0.01)
    assert shape.winograd_flops() < 0.55 * shape.direct_flops


def test_auto_offers_the_wide_layers_both_ways_and_off_none(imported):
    auto = imported("tiny-yolov2", winograd="auto")
    off = imported("tiny-yolov2", winograd="off", layout="NCHW")
    wino = [t for t in auto.tasks if "winograd" in t.name]
    assert not any("winograd" in t.name for t in off.tasks)
    # the 3x3 convs from 32 input channels up are candidates; the stem (3->16, 16->32) and the 1x1 head are not
    assert sorted(t.args[0][0][1] for t in wino) == [32, 64, 128, 256, 512, 1024]
    assert all(t.args[1][0][:2] == (6, 6) for t in wino)  # the transformed kernel, folded from the weights
    # every direct conv task of off is still there, and each candidate layer has both alternatives
    assert {t.workload_key for t in off.tasks} <= {t.workload_key for t in auto.tasks}
    layers = {}
    for t in auto.tasks:
        if "layer" in t.lowering:
            layers.setdefault(t.lowering["layer"], set()).add(t.lowering["algorithm"])
    assert len(layers) == 6 and all(algs == {"direct", "winograd"} for algs in layers.values())
    assert auto.alternatives == 6 and auto.flops == pytest.approx(off.flops)


def test_policy_follows_measured_choices_before_the_flop_rule():
    from autosearch.frontend.winograd import MAX_FLOP_RATIO, WinogradPolicy, choose_algorithms, layer_key

    wide = ConvShape(batch=1, in_channels=256, out_channels=256, height=13, width=13, kernel=(3, 3))
    narrow = ConvShape(batch=1, in_channels=32, out_channels=64, height=104, width=104, kernel=(3, 3))
    wide_key, narrow_key = layer_key((1, 256, 13, 13), (1, 256, 13, 13)), layer_key((1, 32, 104, 104),
                                                                                      (1, 64, 104, 104))
    assert wide.winograd_flops() / wide.direct_flops <= MAX_FLOP_RATIO < narrow.winograd_flops() / narrow.direct_flops
    rule = WinogradPolicy.of("auto")
    assert rule.converts(wide, wide_key) and not rule.converts(narrow, narrow_key)
    measured = WinogradPolicy.of("auto", {wide_key: "direct", narrow_key: "winograd"})
    assert not measured.converts(wide, wide_key) and measured.converts(narrow, narrow_key)
    assert not WinogradPolicy.of("off").converts(wide, wide_key)
    assert WinogradPolicy.of("candidates").converts(narrow, narrow_key)
    assert measured.uses({"layer": narrow_key, "algorithm": "winograd"})
    assert not measured.uses({"layer": narrow_key, "algorithm": "direct"})
    assert measured.uses({"winograd": "auto"})  # not an alternative: always part of the model
    assert ConvShape.from_key(wide_key) == wide
    assert choose_algorithms({"a": {"direct": 2.0, "winograd": 1.0}, "b": {"direct": 1.0, "winograd": float("inf")},
                              "c": {"direct": float("inf")}}) == {"a": "winograd", "b": "direct"}


def test_bad_winograd_mode_is_refused(capfd):
    proc = run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--winograd", "always")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def tuned_wide(tuned_two_wide, tmp_path_factory):
    """The shared short real run on two convs that auto lowers to winograd (each layer tuned both ways),
    exported; this module writes into a directory of its own."""
    return {**tuned_two_wide, "work": tmp_path_factory.mktemp("winograd")}


def _layers(contents) -> dict[str, dict[str, str]]:
    """layer key -> {algorithm: task key} of a log's conv layers tuned both ways."""
    layers: dict[str, dict[str, str]] = {}
    for key, header in contents.tasks.items():
        if "layer" in header["lowering"]:
            layers.setdefault(header["lowering"]["layer"], {})[header["lowering"]["algorithm"]] = key
    return layers


def test_winograd_model_tunes_both_ways_exports_the_faster_and_matches_onnxruntime(tuned_wide, capfd):
    from autosearch.records import read_log

    contents = read_log(tuned_wide["log"])
    layers = _layers(contents)
    assert len(layers) == 2 and all(set(by) == {"direct", "winograd"} for by in layers.values())  # both ways
    faster = {layer: min(by, key=lambda a: contents.best(by[a]).latency) for layer, by in layers.items()}
    with open(os.path.join(tuned_wide["db"], "autosearch_lowering.json")) as fh:
        lowering = json.load(fh)
    assert lowering["winograd"] == "auto" and lowering["choices"] == faster
    # compile/report take the lowering and the choice from the database: the faster alternative is built
    md = os.path.join(str(tuned_wide["work"]), "report.md")
    proc = run_cli_here(capfd, "report", "--model", tuned_wide["model"], "--db", tuned_wide["db"], "--runs", "2",
                        "--rounds", "1", "--untuned-runs", "1", "--markdown", md,
                        "--plot", os.path.join(str(tuned_wide["work"]), "r.png"))
    assert proc.returncode == 0, proc.stderr
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "matches" in proc.stdout
    report = open(md).read()
    assert "2/2 tasks tuned" in report
    per_task = {row.split("|")[2].strip() for row in report.split("\n\n")[-1].splitlines()[2:]}  # the last table
    for layer, by in layers.items():
        assert contents.tasks[by[faster[layer]]]["name"] in per_task
        assert not any(contents.tasks[key]["name"] in per_task for a, key in by.items() if a != faster[layer])


def test_compile_with_either_lowering_finds_its_tuned_tasks(tuned_wide, capfd):
    for mode in ("off", "auto"):  # off: both layers direct; auto: each layer as the database chose
        out = os.path.join(str(tuned_wide["work"]), f"{mode}.so")
        proc = run_cli_here(capfd, "compile", "--model", tuned_wide["model"], "--db", tuned_wide["db"], "--out", out,
                            "--winograd", mode)
        assert proc.returncode == 0, proc.stderr
        assert "with 2/2 tuned tasks" in proc.stdout, proc.stdout


def test_small_stem_conv_stays_direct(target, tmp_path):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path / "small.onnx")
    small_conv_onnx(path)
    assert not any("winograd" in t.name for t in import_model(path, target).tasks)


@pytest.fixture(scope="module")
def tuned_wide_nhwc(tmp_path_factory):
    """The two wide convs tuned NHWC: each layer direct and as NHWC winograd, a trial or two a task at first."""
    from tests.conftest import exported_tasks, tune_and_export, two_wide_convs_onnx

    def winograd_tuned(contents) -> bool:  # the test compiles the model with both layers as Winograd
        winograd = {h["name"] for h in contents.tasks.values() if "winograd" in h["name"]}
        both_ways = all(contents.best(key) is not None for key, h in contents.tasks.items() if "conv2d" in h["name"])
        return winograd <= exported_tasks(contents) and both_ways  # and every form of each layer measured

    return tune_and_export(tmp_path_factory.mktemp("winograd-nhwc"), two_wide_convs_onnx, trials=8, batch=4,
                           options=("--layout", "NHWC", "--finalist-rounds", "0"), until=winograd_tuned)


def test_nhwc_winograd_is_tuned_exported_and_compiled_as_chosen(tuned_wide_nhwc, capfd):
    """Both NHWC layers tuned both ways and the faster recorded; then the database's choice set to winograd for
    both, as a run where it wins would: compile builds the winograd tasks from the database and the model still
    matches ONNX Runtime."""
    from autosearch.records import read_log

    contents = read_log(tuned_wide_nhwc["log"])
    layers = _layers(contents)
    assert len(layers) == 2 and all(set(by) == {"direct", "winograd"} for by in layers.values())
    assert all("x16x16x" in layer for layer in layers)  # keyed by the NHWC shapes
    faster = {layer: min(by, key=lambda a: contents.best(by[a]).latency) for layer, by in layers.items()}
    lowering_file = os.path.join(tuned_wide_nhwc["db"], "autosearch_lowering.json")
    with open(lowering_file) as fh:
        lowering = json.load(fh)
    assert lowering["layout"] == "NHWC" and lowering["choices"] == faster
    with open(lowering_file, "w") as fh:
        json.dump({**lowering, "choices": dict.fromkeys(layers, "winograd")}, fh)
    out = os.path.join(str(tuned_wide_nhwc["work"]), "nhwc.so")
    proc = run_cli_here(capfd, "compile", "--model", tuned_wide_nhwc["model"], "--db", tuned_wide_nhwc["db"],
                        "--out", out)
    assert proc.returncode == 0, proc.stderr
    winograd_tasks = {contents.tasks[by["winograd"]]["name"] for by in layers.values()}
    md = os.path.join(str(tuned_wide_nhwc["work"]), "report.md")
    proc = run_cli_here(capfd, "report", "--model", tuned_wide_nhwc["model"], "--db", tuned_wide_nhwc["db"],
                        "--runs", "2", "--rounds", "1", "--untuned-runs", "1", "--markdown", md,
                        "--plot", os.path.join(str(tuned_wide_nhwc["work"]), "r.png"))
    assert proc.returncode == 0, proc.stderr
    assert "TVM tuned output vs ONNX Runtime" in proc.stdout and "DIFFERS" not in proc.stdout
    per_task = {row.split("|")[2].strip() for row in open(md).read().split("\n\n")[-1].splitlines()[2:]}
    assert winograd_tasks <= per_task  # the compiled model runs the NHWC winograd kernels the database holds
