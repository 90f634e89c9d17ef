"""bf16 convolutions on the AVX512-BF16 dot product (:mod:`autosearch.tensor_units.dpbf16`), for CPUs with it and
no AMX (AMD Zen 4): the micro-kernel on a matmul and every sketch of a conv task against NumPy, the precision
choice and the design space on such a target. A target with ``+avx512bf16`` and without AMX features is what such
a CPU's host target is, so the tests run on any CPU with the dot product; those that run code skip without it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosearch.frontend.target import host_cores
from autosearch.tensor_units import cpu
from tests.conftest import small_conv_onnx, tune_and_export
from tests.test_tensor_units import _to_bf16, check_bf16_conv_task, compiled_matches_onnxruntime

ZEN4_FEATURES = ["+avx512f", "+avx512bw", "+avx512vl", "+avx512bf16", "+avx512vnni"]
# the cores this process may use: a test worker has one of its own (tests/conftest.py), and kernels timed on more
# threads than cores wait at every barrier
CORES = host_cores()


def _dot_target():
    """The host CPU with AVX512-BF16 and without AMX, as a Zen 4's target reads."""
    from autosearch.frontend.target import parse_target

    return parse_target(json.dumps({"kind": "llvm", "mattr": ZEN4_FEATURES, "num-cores": CORES}))


def _needs_avx512_bf16() -> None:
    if "avx512_bf16" not in cpu.host_flags():
        pytest.skip("this CPU has no AVX512-BF16 (avx512_bf16 in /proc/cpuinfo)")


def test_a_target_with_the_dot_product_and_no_amx_lowers_bf16_to_it() -> None:
    from autosearch.frontend.lowering import resolve_precision

    target = _dot_target()
    assert cpu.bf16_unit(target) == "AVX512-BF16" and not cpu.has_amx_bf16(target)
    mode, why = resolve_precision("auto", target, "NHWC")
    assert mode == "auto" and "AVX512-BF16" in why
    assert resolve_precision("bf16", target, "NHWC")[0] == "bf16"
    import tvm

    amx = tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids", "mattr": ["+amx-tile", "+amx-bf16",
                                                                                   "+avx512bf16"]})
    assert cpu.bf16_unit(amx) == "AMX-BF16"  # where both exist, the tiles
    assert "AMX-BF16" in resolve_precision("auto", amx, "NHWC")[1]


def test_auto_precision_on_a_cpu_with_the_dot_product_tunes_bf16_on_it(capfd) -> None:
    from tests.conftest import run_cli_here

    target = json.dumps({"kind": "llvm", "mcpu": "znver4", "mattr": ["+avx512bf16"], "num-cores": 2})
    proc = run_cli_here(capfd, "tasks", "--model", "tiny-yolov2", "--layout", "NHWC", "--target", target)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.replace("\n", " ")
    assert ("precision: auto (each eligible NHWC convolution, matmul and attention tuned in fp32 and in bf16 on "
            "AVX512-BF16") in text
    assert "conv2d_bf16" in proc.stdout and "amx" not in proc.stdout  # the bf16 tasks, named for no unit


def test_bf16_tasks_tuned_on_avx512_bf16_then_exported_and_compiled(tmp_path, capfd) -> None:
    """A real run on a target with AVX512-BF16 and no AMX (auto precision, random): its bf16 task is measured on
    the dot product, export keeps the faster precision (and says the activations are bf16 whichever it keeps),
    compile replays the schedule (the intrinsic registered from the database) and the model's output is within
    bf16's tolerance of ONNX Runtime's."""
    from autosearch.frontend.database_files import RECORD_FILE

    _needs_avx512_bf16()
    target = json.dumps({"kind": "llvm", "mattr": ZEN4_FEATURES, "num-cores": CORES})
    run = tune_and_export(tmp_path, lambda p: small_conv_onnx(p, cin=32, cout=64, hw=16), trials=6, batch=3,
                          options=("--layout", "NHWC", "--precision", "auto", "--target", target))
    said = " ".join(capfd.readouterr().out.split())  # export's lines, as wrapped for the terminal
    assert "layers tuned fp32 and bf16: " in said and "rounded to bf16 whichever is kept" in said, said
    trials = [json.loads(line) for line in open(run["log"]) if '"kind":"trial"' in line]
    bf16 = [t for t in trials if "conv2d_bf16" in t["task"]["name"]]
    assert bf16 and all(t["result"]["status"] == "ok" for t in bf16), [t["result"] for t in bf16]
    with open(f"{run['db']}/{RECORD_FILE}") as fh:
        records = fh.read()
    assert "dpbf16_conv_" in records and "amx_conv" not in records
    compiled_matches_onnxruntime(tmp_path, run["model"], run["db"], "--target", target)


@pytest.mark.parametrize(("pixels", "nv"), [(8, 2), (16, 1), (4, 2)])
def test_dpbf16_intrinsic_on_a_matmul_matches_numpy(pixels, nv) -> None:
    """A matmul written as the flattened convolution of a 1x1 filter: ``C[0, m, n] = sum_k A[m, k] * B[n // 32, 0,
    0, k // 2, n % 32, k % 2]``, blocks of ``pixels`` rows x ``16 nv`` columns, the whole K per call."""
    import tvm
    from tvm import s_tir, te

    from autosearch.tensor_units.block import Block
    from autosearch.tensor_units.dpbf16 import register

    _needs_avx512_bf16()
    m, n, k = 2 * pixels, 64, 96
    a = te.placeholder((m, k), "bfloat16", name="A")
    b = te.placeholder((n // 32, 1, 1, k // 2, 32, 2), "bfloat16", name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((1, m, n), lambda z, i, j: te.sum(
        a[i, r].astype("float32") * b[j // 32, 0, 0, r // 2, j % 32, r % 2].astype("float32"), axis=r), name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    z, i, j, kk = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, pixels])
    j0, j1 = sch.split(j, [None, 16 * nv])
    sch.reorder(z, i0, j0, i1, j1, kk)
    sch.decompose_reduction(sch.get_sblock("C"), i1)
    sch.tensorize(i1, register(Block(rows=1, pixels=pixels, cols=16 * nv, kh=1, kw=1, row=1, channels=k, stride=1)))
    lib = tvm.compile(sch.mod, target=_dot_target())
    rng = np.random.default_rng(0)
    a_np, b_np = _to_bf16(rng.uniform(-1, 1, (m, k))), _to_bf16(rng.uniform(-1, 1, (k, n)))
    packed = b_np.reshape(k // 2, 2, n // 32, 32).transpose(2, 0, 3, 1).reshape(n // 32, 1, 1, k // 2, 32, 2)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.full((1, m, n), np.nan, "float32"), dev)
    lib(tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(packed.copy(), dev), out)
    want = a_np.astype(np.float64) @ b_np.astype(np.float64)  # the same rounded operands, exact products
    np.testing.assert_allclose(out.numpy()[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# 13: rows of 13 pixels and an odd number of rows, computed as they are (AMX computes 16 x 14);
# 64 output channels: two packed weight blocks; 1x1: the whole reduction is one tap; stride 2: a pixel's
# input two flat pixels after the last; 16 and 3 channels: a filter row's taps in one reduction group; 16 output
# channels: one vector wide (a stem's); 80 and 48 channels: padded to 80 and 48 (AMX: 96 and 64), 48 and 80 output
# channels: 3 and 5 vectors (AMX: 64 and 96), in one packed weight block of 48 or 80, so a block of the GEMM can take
# all 3 or 5 vectors
@pytest.mark.parametrize(("hw", "kernel", "stride", "cin", "cout"), [
    (13, 3, 1, 32, 48), (16, 3, 1, 32, 64), (13, 1, 1, 64, 48), (26, 3, 2, 32, 48), (16, 3, 1, 16, 48),
    (26, 3, 2, 3, 48), (32, 3, 1, 3, 16), (13, 3, 1, 80, 48), (16, 1, 1, 48, 32), (16, 3, 1, 80, 80)])
def test_bf16_conv_task_on_avx512_bf16_matches_numpy(tmp_path, hw, kernel, stride, cin, cout) -> None:
    """Every sketch of a bf16 conv task on a target with AVX512-BF16 and no AMX, at a random config of its own
    (and the first sketch at its default), as the tuner would build it, against NumPy on the same rounded
    operands."""
    from tvm import s_tir

    from autosearch.tensor_units.conv import GEMM_BLOCK
    from autosearch.tensor_units.dpbf16 import SHAPES, gemm_width, shapes_for
    from autosearch.types import Config

    _needs_avx512_bf16()

    def configs(space, sketch, rng):
        drawn = Config(sketch.index, tuple(d.choices[int(rng.integers(len(d.choices)))] for d in sketch.decisions))
        return [drawn] + ([space.default(sketch.index)] if sketch.index == 0 else [])

    space = check_bf16_conv_task(tmp_path, _dot_target(), configs, hw=hw, kernel=kernel, stride=stride, cin=cin,
                                 cout=cout)
    padded = -(-cout // 16) * 16  # whole vectors (AMX: 32-channel blocks)
    out_w = (hw + 2 * (kernel // 2) - kernel) // stride + 1
    width = gemm_width(out_w)
    assert width == out_w  # rows of 13 computed as they are (AMX computes 16): no pixel computed and dropped
    sch = s_tir.Schedule(space.mod)
    _, h, w, co, *reduction = sch.get_loops(sch.get_sblock(GEMM_BLOCK))
    assert [int(sch.get(loop).extent) for loop in (h, w, co)] == [out_w, out_w, padded]  # odd rows as they are
    # a filter row's taps of a narrow input are one reduction group of its channels (AMX: a 32-value tile row)
    channels = cin + (kernel * cin) % 2 if cin <= 16 and kernel > 1 else -(-cin // 16) * 16  # AMX: 32
    assert np.prod([int(sch.get(loop).extent) for loop in reduction]) == kernel * kernel * channels
    block_n = 32 if padded % 32 == 0 else padded  # output channels per packed weight block (AMX: always 32)
    weights = [r.source.shape for r in sch.get(sch.get_sblock(GEMM_BLOCK)).reads if len(r.source.shape) == 6]
    assert [int(d) for d in weights[0][-2:]] == [block_n, 2]  # the packed weights' rows: block_n channels x a pair
    shapes = [s for s in shapes_for(width, padded, block_n) if out_w % 2 == 0 or s[0] == 1]  # odd rows: one a block
    vectors = padded // 16
    if width % 16 == 0:  # the design space as it was, then the blocks of all the vectors of 48 or 80 channels
        old = [s for s in SHAPES if padded % (16 * s[2]) == 0]
        assert shapes[:len(old)] == old and all(s[2] == vectors > 2 for s in shapes[len(old):])
    else:
        assert shapes and all(width % pixels == 0 and 12 <= rows * pixels * nv <= 28 for rows, pixels, nv in shapes)
    # 48 or 80 channels: blocks of all their vectors wherever such a block's pixels divide the row and its
    # accumulators, weights and broadcast fit the 32 zmm registers (rows of 13 pixels: 39 accumulators for 48)
    if padded % 32 and any(width % p == 0 and p * vectors + vectors + 1 <= 32 for p in range(4, 17)):
        assert any(nv == vectors for _, _, nv in shapes)
    if padded % 32:
        assert all(rows * pixels * nv + nv + 1 <= 32 for rows, pixels, nv in shapes)
    assert len(space.sketches) == 2 * len(shapes)  # two loop orders a shape
    assert all("dpbf16_conv_" in str(s.trace) and "amx_conv" not in str(s.trace) for s in space.sketches)
