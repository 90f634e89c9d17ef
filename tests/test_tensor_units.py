"""The CPU's tensor units: host features in the target, the AMX tile multiply on a matmul and a conv against
NumPy, bf16 tasks tuned by two strategies, precision recorded in the database and followed by ``compile``, and the
one-line errors. Tests that need a unit the CPU lacks skip, naming it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from autosearch.tensor_units import cpu
from tests.conftest import run_cli, run_cli_here, small_conv_onnx, tune_and_export


def _needs_amx(target) -> None:
    if not cpu.has_amx_bf16(target):
        pytest.skip("this CPU has no AMX (amx_tile and amx_bf16 in /proc/cpuinfo)")


def _to_bf16(x: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16)


def test_kernel_flags_become_llvm_features(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile amx_bf16 avx512_vnni\n")
    flags = cpu.host_flags(str(info))
    assert {"amx_tile", "amx_bf16", "avx512_bf16"} <= flags
    assert cpu.features_for(flags) == ["+avx512bf16", "+avx512vnni", "+amx-tile", "+amx-bf16"]
    assert cpu.features_for({"avx2", "fma"}) == []
    assert cpu.host_flags(str(tmp_path / "missing")) == frozenset()


def test_units_a_cpus_name_implies_and_the_kernel_hides_are_switched_off() -> None:
    """An Emerald Rapids VM whose kernel hides AMX and AVX512-BF16: LLVM's name implies them, the target says no."""
    implied = {"avx512f", "avx512vnni", "avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "amx-bf16", "amx-int8"}
    assert cpu.hidden_features(implied, {"avx512f", "avx512_vnni"}) == [
        "-avx512bf16", "-avx512fp16", "-avxvnni", "-amx-tile", "-amx-bf16", "-amx-int8"]
    assert cpu.hidden_features({"avx512bf16", "avx512vnni"}, {"avx512_bf16", "avx512_vnni"}) == []  # Zen 4: all there
    assert cpu.hidden_features(set(), {"avx2"}) == []


def test_units_are_read_from_a_targets_features() -> None:
    import tvm

    amx = tvm.target.Target({"kind": "llvm", "mcpu": "rocketlake", "mattr": ["+amx-tile", "+amx-bf16", "+avx512bf16"]})
    zen4 = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "mattr": ["+avx512bf16"]})
    plain = tvm.target.Target({"kind": "llvm", "mcpu": "rocketlake"})
    assert cpu.has_amx_bf16(amx) and cpu.units(amx) == ["AMX-BF16", "AVX512-BF16"]
    assert not cpu.has_amx_bf16(zen4) and cpu.units(zen4) == ["AVX512-BF16"]
    assert not cpu.has_amx_bf16(plain) and cpu.units(plain) == []


def test_host_target_has_every_unit_the_kernel_reports(target) -> None:
    """Under KVM, LLVM may name the host after a CPU without these units (a Xeon with AMX as ``rocketlake``), or
    with units the guest lacks (``emeraldrapids`` with AMX hidden): the target carries what the kernel reports,
    whatever LLVM calls the CPU."""
    import tvm

    wanted = set(cpu.features_for(cpu.host_flags()))
    assert wanted <= cpu.target_features(target)
    if "amx_tile" in cpu.host_flags() and "amx_bf16" in cpu.host_flags():
        assert cpu.has_amx_bf16(target)
    # and LLVM is told of no unit the kernel does not report, whatever the name implies
    llvm = {str(f) for f in tvm.target.codegen.llvm_get_cpu_features(target)}
    if cpu.host_flags():
        assert not {f[1:] for f in cpu.FLAG_FEATURES.values()} & llvm - {f[1:] for f in wanted}


def test_amx_permission_is_granted_on_a_cpu_with_amx(target) -> None:
    from autosearch.tensor_units.amx import request_permission

    _needs_amx(target)
    assert request_permission() and request_permission()  # asking twice is harmless


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 2, 4), (2, 1, 2)])
def test_amx_intrinsic_on_a_matmul_matches_numpy(target, shape) -> None:
    import tvm
    from tvm import s_tir, te

    from autosearch.tensor_units.amx import TILE_K, TILE_ROWS, register, request_permission

    _needs_amx(target)
    request_permission()
    mt, nt, kt = shape
    m, n, k = 2 * TILE_ROWS * mt, 2 * TILE_ROWS * nt, 2 * TILE_K * kt  # two calls along each axis
    a = te.placeholder((m, k), "bfloat16", name="A")
    b = te.placeholder((k // 2, n, 2), "bfloat16", name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype("float32") * b[r // 2, j, r % 2].astype("float32"),
                                               axis=r), name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, TILE_ROWS * mt])
    j0, j1 = sch.split(j, [None, TILE_ROWS * nt])
    k0, k1 = sch.split(kk, [None, TILE_K * kt])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.decompose_reduction(sch.get_sblock("C"), k0)
    sch.tensorize(i1, register(mt, nt, kt))
    lib = tvm.compile(sch.mod, target=target)
    rng = np.random.default_rng(0)
    a_np, b_np = _to_bf16(rng.uniform(-1, 1, (m, k))), _to_bf16(rng.uniform(-1, 1, (k, n)))
    packed = b_np.reshape(k // 2, 2, n).transpose(0, 2, 1).copy()
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.full((m, n), np.nan, "float32"), dev)
    lib(tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(packed, dev), out)
    want = a_np.astype(np.float64) @ b_np.astype(np.float64)  # the same rounded operands, exact products
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _conv_nhwc_relu(x: np.ndarray, w_ohwi: np.ndarray) -> np.ndarray:
    """relu(conv(x, w)), NHWC / OHWI, same padding, stride 1, in float64."""
    _, h, wd, c = x.shape
    o, kh, kw, _ = w_ohwi.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    cols = np.stack([xp[0, i:i + h, j:j + wd, :] for i in range(kh) for j in range(kw)], axis=2)  # h, w, taps, c
    out = cols.reshape(h * wd, kh * kw * c) @ w_ohwi.astype(np.float64).reshape(o, kh * kw * c).T
    return np.maximum(out.reshape(1, h, wd, o), 0.0)


def _packed(w: np.ndarray, shape) -> np.ndarray:
    """OHWI weights in the layout the AMX task reads, ``(O / N, KH, tap groups, depth / 2, N, 2)`` (``N`` = 32, or on
    the dot product all the channels where they are no multiple of 32): reduction value ``k`` of tap group ``g`` is
    channel ``k`` of tap ``g`` (32 channels or more), else channel ``k % c`` of tap ``g * (32 / c) + k // c``, with
    ``c`` the channels rounded up to a power of two."""
    o_, kh, kw, cin = w.shape
    n = shape[-2]
    c = cin if cin > 16 else 1 << (cin - 1).bit_length()
    out = np.zeros(shape, dtype=w.dtype)
    for g in range(shape[2]):
        for k in range(2 * shape[3]):
            tap, ch = (g, k) if cin > 16 else (g * (32 // c) + k // c, k % c)
            if tap < kw and ch < cin:
                for o in range(o_):
                    out[o // n, :, g, k // 2, o % n, k % 2] = w[o, :, tap, ch]
    return out


# 13: the last pixel tile of a row runs past the image's right edge (dropped), and the rows are odd (a junk row);
# 32: two pixel tiles side by side in a row; 1x1: a reduction of the channels alone, no tap loop;
# stride 2: the tile's input rows two apart; 16 and 3 channels: 2 and 8 taps per tile row (a 3x3 filter row is
# then two tile multiplies, or one); 16 output channels: the GEMM one 16-column tile wide (a stem's); 80
# channels: padded to 96, flattened in chunks of 32 (sketch._vectorize)
@pytest.mark.parametrize(("hw", "kernel", "stride", "cin", "cout"), [
    (13, 3, 1, 32, 48), (16, 3, 1, 32, 48), (32, 3, 1, 32, 48), (13, 1, 1, 32, 48), (26, 3, 2, 32, 48),
    (16, 3, 1, 16, 48), (26, 3, 2, 3, 48), (32, 3, 1, 3, 16), (13, 3, 1, 80, 48)])
def test_bf16_conv_task_on_amx_matches_numpy(tmp_path, target, hw, kernel, stride, cin, cout) -> None:
    """Every sketch of a bf16 conv task, as the tuner would build it, against NumPy on the same rounded operands."""
    from autosearch.tensor_units.amx import request_permission

    _needs_amx(target)
    request_permission()
    space = check_bf16_conv_task(tmp_path, target, lambda space, sketch, rng: (
        space.default(sketch.index), space.sample(rng)), hw=hw, kernel=kernel, stride=stride, cin=cin, cout=cout)
    # tile shapes (rows x 16-pixel tiles x channel tiles) x 2 loop orders, whatever the filter (16 output channels
    # are one tile wide: half the tile shapes)
    expected = {(13, 3): 8, (16, 3): 8, (32, 3): 12, (13, 1): 8, (26, 3): 8}[(hw, kernel)]
    assert len(space.sketches) == (expected // 2 if cout <= 16 else expected)


def test_wide_channel_loops_are_vectorised_in_chunks(tmp_path) -> None:
    """The flattening copy of 80 channels (padded to 96, no power of two) and of 384 is vectorised at most 64 lanes
    at a time in every sketch, where a single 96- or 384-lane vector runs several times slower; 64 channels stay
    one vector. A target with the AMX units, whatever this CPU has: only the schedules are looked at."""
    import re

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target
    from autosearch.search.space import DecisionSpace

    target = parse_target('{"kind": "llvm", "mattr": ["+amx-tile", "+amx-bf16", "+avx512bf16"], "num-cores": 2}')
    for cin, kernel, padded in ((80, 3, 96), (384, 1, 384), (64, 3, 64)):
        path = str(tmp_path / f"conv{cin}.onnx")
        small_conv_onnx(path, cin=cin, cout=48, hw=16, kernel=kernel)
        task = next(t for t in import_model(path, target, layout="NHWC", precision="bf16").tasks
                    if "conv2d_bf16" in t.name)
        space = DecisionSpace(task.mod, task.target)
        for sketch in space.sketches:
            applied = space.apply(space.default(sketch.index))
            assert applied.ok, applied.error
            lanes = [int(n) for n in re.findall(r"T\.vectorized\((?:T\.int64\()?(\d+)", applied.mod.script())]
            assert max(lanes) <= 64 and (padded in lanes) == (padded <= 64), (cin, sketch.index, lanes)


def check_bf16_conv_task(tmp_path, target, configs, *, hw: int, kernel: int, stride: int, cin: int, cout: int):
    """A small conv (:func:`small_conv_onnx`) imported in bf16 for ``target``; ``configs(space, sketch, rng)`` of
    every sketch of its bf16 task built and run against NumPy on the same rounded operands. Returns the task's
    design space."""
    import tvm

    from autosearch.frontend.importer import import_model
    from autosearch.search.space import DecisionSpace

    path = str(tmp_path / "conv.onnx")
    small_conv_onnx(path, cin=cin, cout=cout, hw=hw, kernel=kernel, stride=stride)
    model = import_model(path, target, layout="NHWC", precision="bf16")
    task = next(t for t in model.tasks if "conv2d_bf16" in t.name)
    space = DecisionSpace(task.mod, task.target)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, hw, hw, cin)).astype("float32")
    w = _to_bf16(rng.uniform(-1, 1, (cout, kernel, kernel, cin)))  # OHWI, rounded as the packing rounds it
    packed = _packed(w, task.args[1][0])
    want = _conv_nhwc_relu(_to_bf16(x), w)[:, ::stride, ::stride]
    # the model's input is rounded to bf16 where it is transposed to NHWC (tensor_units.activations)
    data = _to_bf16(x) if task.args[0][1] == "bfloat16" else x
    dev = tvm.cpu()
    for sketch in space.sketches:
        for config in configs(space, sketch, rng):
            applied = space.apply(config)
            assert applied.ok, applied.error
            lib = tvm.compile(applied.mod, target=target)
            out = tvm.runtime.tensor(np.full(want.shape, np.nan, "float32"), dev)
            lib(tvm.runtime.tensor(data, dev), tvm.runtime.tensor(packed, dev), out)
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                       err_msg=f"config {config}")
    return space


def test_bf16_tasks_tuned_by_two_strategies_then_exported_and_compiled(tmp_path, target, capfd) -> None:
    """A real run in fp32 and bf16 (random), more trials on the bf16 task (optuna, resumed), export: the database
    records the precision and the layer's choice; compile follows it and the model's output is within bf16's
    tolerance of ONNX Runtime's."""
    _needs_amx(target)
    from autosearch.cli import main
    from autosearch.deploy.database import database_lowering

    run = tune_and_export(tmp_path, lambda p: small_conv_onnx(p, cin=32, cout=64, hw=16), trials=6, batch=3,
                          options=("--layout", "NHWC", "--precision", "auto"))
    headers = [json.loads(line)["task"] for line in open(run["log"]) if '"kind":"task"' in line]
    assert {h["lowering"]["precision"] for h in headers} == {"auto"}
    assert {h["lowering"].get("algorithm") for h in headers if "layer" in h["lowering"]} == {"fp32", "bf16"}
    proc = run_cli_here(capfd, "run", "--strategy", "optuna", "--model", run["model"], "--layout", "NHWC",
                        "--trials", "4", "--batch", "2", "--tasks", "bf16", "--log", run["log"], "--resume",
                        "--finalist-rounds", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    bf16_keys = {h["workload_key"] for h in headers if h["lowering"].get("algorithm") == "bf16"}
    trials = [r for r in map(json.loads, open(run["log"])) if r["kind"] == "trial" and r["task"]["key"] in bf16_keys]
    assert {r.get("strategy") for r in trials} >= {"random", "optuna"}
    assert len(trials) >= 4 and all(r["result"]["status"] == "ok" for r in trials), [r["result"] for r in trials]
    db = str(tmp_path / "db2")
    assert main(["export", "--log", run["log"], "--out", db]) == 0
    lowering = database_lowering(db)
    assert lowering["precision"] == "auto" and set(lowering["choices"].values()) <= {"fp32", "bf16"}
    compiled_matches_onnxruntime(tmp_path, run["model"], db)


def compiled_matches_onnxruntime(tmp_path, model: str, db: str, *options: str, shape=(1, 32, 16, 16)) -> None:
    """``compile`` (with ``options``) of ``model`` (input ``x`` of ``shape``: :func:`small_conv_onnx` with 32 input
    channels at 16x16) and ``db`` works, and the library's output is within bf16's tolerance of ONNX Runtime's."""
    library = str(tmp_path / "model.so")
    # a fresh process: the database's tensor intrinsics registered by compile itself, not by an earlier test
    proc = run_cli("compile", "--model", model, "--db", db, "--out", library, *options)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tuned tasks" in proc.stdout and os.path.exists(library)
    import onnxruntime as ort

    from autosearch.deploy.artifact import load_model

    x = np.random.default_rng(2).uniform(-1, 1, shape).astype("float32")
    import tvm

    got = load_model(library)(tvm.runtime.tensor(x, tvm.cpu())).numpy()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=2e-2 * np.abs(want).max())


def test_bf16_on_a_cpu_without_amx_is_a_one_line_error(capfd) -> None:
    proc = run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--precision", "bf16", "--target",
                        '{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--precision bf16" in proc.stderr and "AMX" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_auto_precision_without_a_bf16_unit_is_fp32_and_says_why(capfd) -> None:
    from tests.conftest import run_cli_here

    proc = run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--layout", "NHWC", "--target",
                        '{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}')
    assert proc.returncode == 0
    assert "precision: fp32 (this CPU has no bf16 unit (AMX-BF16 or AVX512-BF16)" in proc.stdout.replace("\n", " ")
    assert "_bf16" not in proc.stdout


def test_unknown_precision_is_a_usage_error(capfd) -> None:
    proc = run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--precision", "fp16")
    assert proc.returncode == 2 and "invalid choice: 'fp16'" in proc.stderr


def _database_with_lowering(tmp_path, **lowering) -> str:
    """An empty database directory whose lowering file says how it was tuned (NHWC, fast math, and ``lowering``)."""
    from autosearch.deploy.database import LOWERING_FILE

    db = tmp_path / "db"
    db.mkdir()
    for name in ("database_workload.json", "database_tuning_record.json"):
        (db / name).write_text("")
    (db / LOWERING_FILE).write_text(json.dumps({"winograd": "auto", "layout": "NHWC", "fast_math": "on", **lowering}))
    return str(db)


def test_a_database_of_another_precision_is_a_one_line_error(tmp_path) -> None:
    db = _database_with_lowering(tmp_path, precision="fp32")
    # a real process (on any CPU): exit code 2, one line, no traceback
    proc = run_cli("compile", "--model", "tiny-yolov2", "--db", db, "--out", str(tmp_path / "m.so"),
                   "--precision", "bf16")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tuned with --precision fp32, not bf16" in proc.stderr


def test_a_bf16_run_that_kept_the_nchw_model_compiles_it_in_fp32(tmp_path) -> None:
    """``run --precision bf16`` with ``--layout auto`` tunes the NCHW model in fp32 beside the NHWC one in bf16;
    where NCHW was the faster, export records layout NCHW with precision bf16, and compile must build the fp32
    NCHW model it holds (not refuse NCHW under bf16, nor ask for a bf16 unit no schedule uses)."""
    import tvm

    from autosearch.api import _database_lowering

    db = _database_with_lowering(tmp_path, precision="bf16", layout="NCHW")
    no_unit = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    policy, layout, _, _ = _database_lowering(db, no_unit, winograd=None, layout=None, fast_math=None, precision=None)
    assert (policy.precision, layout) == ("fp32", "NCHW")
    policy, layout, _, _ = _database_lowering(db, no_unit, winograd=None, layout="auto", fast_math=None,
                                           precision="bf16")  # report passes what the run was given
    assert (policy.precision, layout) == ("fp32", "NCHW")


def test_a_bf16_database_on_a_target_without_a_bf16_unit_is_a_one_line_error(tmp_path, capfd) -> None:
    db = _database_with_lowering(tmp_path, precision="auto", choices={"1x13x13x64->1x13x13x64": "bf16"})
    proc = run_cli_here(capfd, "compile", "--model", "tiny-yolov2", "--db", db, "--out", str(tmp_path / "m.so"),
                        "--target", '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tuned in bf16; this target has no bf16 unit (AMX-BF16 or AVX512-BF16)" in proc.stderr


def test_a_database_tuned_on_amx_tiles_needs_them(tmp_path, capfd) -> None:
    """A target with the AVX512-BF16 dot product but no AMX (Zen 4) cannot run schedules tensorised onto tiles."""
    db = _database_with_lowering(tmp_path, precision="bf16")
    (tmp_path / "db" / "database_tuning_record.json").write_text('[0, [["amx_conv_bf16_1x1x1_k3x3_g1_r15_c64_s1"]]]\n')
    proc = run_cli_here(capfd, "compile", "--model", "tiny-yolov2", "--db", db, "--out", str(tmp_path / "m.so"),
                        "--target", '{"kind": "llvm", "mcpu": "znver4", "mattr": ["+avx512bf16"], "num-cores": 2}')
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "tuned in bf16 on AMX tiles; this target has no AMX-BF16" in proc.stderr


def _same_shapes_convs_onnx(path: str) -> None:
    """A 3x3 then a 1x1 convolution, both 32 -> 32 channels at 16 x 16 (+ ReLU): two layers with one input and
    output shape, as YOLOv8n's head has at 80 x 80 x 80."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    w3 = numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.05).astype("float32"), "W3")
    w1 = numpy_helper.from_array((rng.standard_normal((32, 32, 1, 1)) * 0.05).astype("float32"), "W1")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W3"], ["c0"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c0"], ["r0"]),
         helper.make_node("Conv", ["r0", "W1"], ["c1"]), helper.make_node("Relu", ["c1"], ["y"])],
        "same_shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])], [w3, w1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_1x1_and_a_3x3_layer_of_the_same_shapes_keep_their_own_precision(tmp_path) -> None:
    """Each layer is tuned in both precisions under its own key (the filter in it), so export can keep bf16 for one
    and fp32 for the other, and the lowering follows each choice; a database exported when the key was the shapes
    alone still finds its choice. Extraction only: the target names AMX, this CPU need not have it."""
    import tvm

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.lowering import lower
    from autosearch.frontend.winograd import WinogradPolicy
    from autosearch.tensor_units.conv import TASK_NAME

    path = str(tmp_path / "same_shapes.onnx")
    _same_shapes_convs_onnx(path)
    amx = tvm.target.Target({"kind": "llvm", "mcpu": "rocketlake", "num-cores": 2,
                             "mattr": ["+amx-tile", "+amx-bf16", "+avx512bf16"]})
    model = import_model(path, amx, layout="NHWC", precision="auto")
    layers: dict[str, set[str]] = {}
    for t in model.tasks:
        if "layer" in t.lowering:
            layers.setdefault(t.lowering["layer"], set()).add(t.lowering["algorithm"])
    k3, k1 = "1x16x16x32->1x16x16x32@3x3", "1x16x16x32->1x16x16x32@1x1"
    assert layers == {k3: {"fp32", "bf16"}, k1: {"fp32", "bf16"}}
    # ``run --tasks bf16`` picks the bf16 alternatives by name, whatever the unit (the AMX-only run test resumes so)
    from autosearch.api import select_tasks

    assert {t.workload_key for t in select_tasks(model.tasks, "bf16")} == {
        t.workload_key for t in model.tasks if t.lowering.get("algorithm") == "bf16"}

    policy = WinogradPolicy.of("auto", {k3: "bf16", k1: "fp32"}, precision="auto")
    used = {(t.lowering["layer"], t.lowering["algorithm"]) for t in model.tasks
            if "layer" in t.lowering and policy.uses(t.lowering)}
    assert used == {(k3, "bf16"), (k1, "fp32")}
    lowered = lower(model.relax_mod, amx, winograd=policy, layout="NHWC", precision="auto")
    bf16_funcs = [gv.name_hint for gv in lowered.get_global_vars() if TASK_NAME in gv.name_hint]
    assert len(bf16_funcs) == 1, bf16_funcs

    before = WinogradPolicy.of("auto", {"1x16x16x32->1x16x16x32": "bf16"}, precision="auto")
    assert before.bf16(k3) and before.bf16(k1)
    assert not WinogradPolicy.of("auto", {k3: "bf16"}, precision="auto").bf16(k1)


def test_a_memory_budget_keeps_each_layers_faster_precision(tmp_path, target, capfd) -> None:
    """``export --memory-budget`` on a log tuned with ``--precision auto``: the precision of each layer is not traded
    for memory (bf16 weights take less), so the budget's database keeps export's per-layer choice (no Winograd
    layer to trade: a layer tuned in two precisions is not one) and compile follows it."""
    _needs_amx(target)
    from autosearch.deploy.budget import budget_choice, import_tuned_model, model_options
    from autosearch.deploy.database import lowering_of, memory_database
    from autosearch.records import read_log

    run = tune_and_export(tmp_path, lambda p: small_conv_onnx(p, cin=32, cout=64, hw=16), trials=4, batch=4,
                          options=("--layout", "NHWC", "--precision", "auto", "--finalist-rounds", "0"))
    contents = read_log(run["log"])
    speed = lowering_of(contents)
    assert set(speed["choices"].values()) <= {"fp32", "bf16"} and len(speed["choices"]) == 1
    model = import_tuned_model(contents, run["model"], target)
    [option] = model_options(contents, model.relax_mod, target, memory_database(contents), fast_math="on",
                             precision="auto")
    assert dict(option.precisions) == speed["choices"] and not option.layers  # no Winograd layer to trade
    _, lowering = budget_choice(contents, model.relax_mod, target, 1000.0)
    assert lowering["choices"] == speed["choices"] and lowering["precision"] == "auto"
    proc = run_cli_here(capfd, "export", "--log", run["log"], "--out", str(tmp_path / "budget-db"), "--memory-budget",
                        "1000", "--model", run["model"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    compiled = {}
    for db in (run["db"], str(tmp_path / "budget-db")):  # export's own database, then the budget's
        proc = run_cli_here(capfd, "compile", "--model", run["model"], "--db", db, "--out", str(tmp_path / "m.so"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        compiled[db] = [line for line in proc.stdout.splitlines() if "tuned tasks" in line or "not in the" in line]
    # the same kernels: the budget's database lowers each layer in the precision export's speed rule chose
    assert compiled[run["db"]] == compiled[str(tmp_path / "budget-db")] and compiled[run["db"]]


def test_the_accumulator_inits_a_trace_names_are_registered_and_name_their_unit() -> None:
    """A trace on either unit names the init its block's call starts from (the accumulators zeroed in registers):
    registered from the trace's text, as the tile calls are, and counted for the unit whose call it precedes."""
    from tvm.s_tir import TensorIntrin

    from autosearch.tensor_units.intrinsics import register_for, units_named

    register_for('["amx_acc_zero_2x16x32", "dpbf16_acc_zero_1x8x32"]')
    for name in ("amx_acc_zero_2x16x32", "dpbf16_acc_zero_1x8x32"):
        assert TensorIntrin.get(name) is not None
    assert units_named("dpbf16_conv_1x8x2_k3x3_g1_r18_c32_s1 dpbf16_acc_zero_1x8x32") == {"AVX512-BF16"}
    assert units_named("amx_acc_zero_2x16x32") == {"AMX-BF16"}
