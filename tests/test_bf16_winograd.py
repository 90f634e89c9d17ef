"""bf16 Winograd F(2x2, 3x3) on the AVX512-BF16 dot product (:mod:`autosearch.tensor_units.winograd`): the transforms
against a direct convolution, every sketch of a task against NumPy, the third precision alternative of ``auto`` on
such a CPU (and on no other), and a run whose export picks it, compiled and checked against ONNX Runtime."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosearch.tensor_units import cpu
from autosearch.tensor_units import winograd as wb
from tests.conftest import small_conv_onnx, tune_and_export
from tests.test_dpbf16 import CORES, ZEN4_FEATURES, _dot_target, _needs_avx512_bf16
from tests.test_tensor_units import _to_bf16, compiled_matches_onnxruntime


def _direct(x: np.ndarray, w: np.ndarray, padding=(1, 1, 1, 1)) -> np.ndarray:
    """conv(x, w), NHWC / OHWI, 3x3, stride 1, in float64."""
    pt, pl, pb, pr = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    out_h, out_w = xp.shape[1] - 2, xp.shape[2] - 2
    cols = np.stack([xp[:, i:i + out_h, j:j + out_w, :] for i in range(3) for j in range(3)], axis=3)
    return np.einsum("nhwtc,otc->nhwo", cols, w.astype(np.float64).reshape(w.shape[0], 9, w.shape[3]))


def _reference(data: np.ndarray, weight: np.ndarray, padding=(1, 1, 1, 1), *, rounding=None) -> np.ndarray:
    """F(2x2, 3x3) in float64 NumPy (NHWC data, OHWI weights): the transforms as the task computes them, the
    transformed input and kernel passed through ``rounding`` where the task rounds them to bf16."""
    rounding = rounding or (lambda x: x)
    tile, alpha = wb.TILE, wb.ALPHA
    batch, h, w, _ = data.shape
    pt, pl, pb, pr = padding
    out_h, out_w = h + pt + pb - 2, w + pl + pr - 2
    n_h, n_w = -(-out_h // tile), -(-out_w // tile)
    pad = np.zeros((batch, n_h * tile + 2, n_w * tile + 2, data.shape[3]))
    pad[:, pt:pt + h, pl:pl + w] = data
    u = rounding(np.einsum("ak,okls,bl->abos", wb.G, weight, wb.G))  # (alpha, alpha, out, in)
    out = np.zeros((batch, n_h * tile, n_w * tile, weight.shape[0]))
    for i in range(n_h):
        for j in range(n_w):
            d = pad[:, i * tile:i * tile + alpha, j * tile:j * tile + alpha]  # (batch, alpha, alpha, in)
            v = rounding(np.einsum("ak,nkls,bl->nabs", wb.B_T, d, wb.B_T))
            m = np.einsum("nabs,abos->nabo", v, u)
            out[:, i * tile:(i + 1) * tile, j * tile:(j + 1) * tile] = np.einsum("ya,nabo,xb->nyxo", wb.A_T, m, wb.A_T)
    return out[:, :out_h, :out_w]


@pytest.mark.parametrize(("hw", "padding"), [(13, (1, 1, 1, 1)), (8, (1, 1, 1, 1)), (7, (0, 0, 0, 0)),
                                             (6, (1, 0, 0, 1))])
def test_f2x2_transforms_compute_the_convolution(hw, padding) -> None:
    """Y = A^T [(G g G^T) * (B^T d B)] A is the 3x3 convolution, odd sizes (the last tiles half outside) and
    asymmetric padding included."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, hw, hw + 1, 5)), rng.standard_normal((4, 3, 3, 5))
    np.testing.assert_allclose(_reference(x, w, padding), _direct(x, w, padding), rtol=1e-10, atol=1e-10)


def _geometry(cin: int, cout: int, hw: int, unit: str = "dpbf16") -> wb.WinogradConv:
    return wb.WinogradConv(batch=1, height=hw, width=hw, in_channels=cin, out_channels=cout, padding=(1, 1, 1, 1),
                           unit=unit)


def test_only_wide_3x3_layers_whose_gemm_is_small_enough_are_offered() -> None:
    """tiny-YOLOv2's layers from 128 -> 256 channels on qualify (their GEMM 0.44-0.52 of the direct multiplies); a
    narrower one's transforms cost more than they save, and a layer whose tiles are mostly padding too."""
    wide = _geometry(1024, 1024, 13)
    assert wide.tiles == 49 and wide.rows == 49  # 7 x 7 tiles, in blocks of 7 on the dot product
    assert wide.gemm_flops / wide.direct_flops == pytest.approx(16 * 49 / (9 * 169))
    assert wide.gemm_flops <= wb.MAX_GEMM_RATIO * wide.direct_flops
    tiny = _geometry(128, 256, 3)  # 2 x 2 tiles of which a 3 x 3 output keeps 9 of 16 pixels, padded to 4 tiles
    assert tiny.gemm_flops > wb.MAX_GEMM_RATIO * tiny.direct_flops


def _packed(w: np.ndarray, shape) -> np.ndarray:
    """OHWI weights as :func:`.winograd.pack_weight` packs them: ``G g G^T`` per transform position, output channels
    in blocks of ``N``, pairs of input channels innermost."""
    o_, _, _, cin = w.shape
    n = shape[-2]
    u = np.einsum("ak,okls,bl->abos", wb.G, w.astype(np.float64), wb.G).reshape(16, o_, cin)
    out = np.zeros(shape, dtype=np.float64)
    for o in range(o_):
        for c in range(cin):
            out[:, o // n, 0, 0, c // 2, o % n, c % 2] = u[:, o, c]
    return _to_bf16(out)


@pytest.mark.parametrize(("hw", "cin", "cout"), [(13, 128, 256), (10, 144, 272), (8, 128, 256)])
def test_bf16_winograd_task_on_avx512_bf16_matches_numpy(tmp_path, hw, cin, cout) -> None:
    """Every sketch of a bf16 Winograd task at a random config of its own, as the tuner would build it: against the
    transforms in NumPy on the same rounded operands (tight), and against the direct convolution (within bf16's
    rounding of the transformed operands). 13: odd, its last tiles half outside; 272 channels out: no multiple of
    32, one packed block of 17 vectors, and 144 in, 9 vectors; 8 x 8: 16 tiles, a row of one whole 16-pixel block."""
    import ml_dtypes
    import tvm

    from autosearch.frontend.importer import import_model
    from autosearch.search.space import DecisionSpace
    from autosearch.types import Config

    _needs_avx512_bf16()
    path = str(tmp_path / "conv.onnx")
    small_conv_onnx(path, cin=cin, cout=cout, hw=hw)
    model = import_model(path, _dot_target(), layout="NHWC", precision="auto")
    task = next(t for t in model.tasks if wb.TASK_NAME in t.name)
    assert task.lowering["algorithm"] == "bf16-winograd"
    space = DecisionSpace(task.mod, task.target)
    assert space.sketches and all("dpbf16_conv_" in str(s.trace) for s in space.sketches)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, hw, hw, cin)).astype("float32")
    w = rng.uniform(-1, 1, (cout, 3, 3, cin)).astype("float32") * 0.1
    data = _to_bf16(x) if task.args[0][1] == "bfloat16" else x
    exact = np.maximum(_direct(data.astype(np.float64), w), 0.0)

    def round_bf16(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float64)

    want = np.maximum(_reference(data.astype(np.float64), w, rounding=round_bf16), 0.0)
    packed = _packed(w, task.args[1][0])
    dev = tvm.cpu()
    for sketch in space.sketches:
        config = Config(sketch.index, tuple(d.choices[int(rng.integers(len(d.choices)))] for d in sketch.decisions))
        applied = space.apply(config)
        assert applied.ok, applied.error
        lib = tvm.compile(applied.mod, target=task.target)
        out = tvm.runtime.tensor(np.full(exact.shape, np.nan, "float32"), dev)
        lib(tvm.runtime.tensor(data, dev), tvm.runtime.tensor(packed, dev), out)
        got = out.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=f"config {config}")
        np.testing.assert_allclose(got, exact, rtol=0, atol=2e-2 * np.abs(exact).max(), err_msg=f"config {config}")


def test_auto_precision_offers_bf16_winograd_on_the_dot_product_only() -> None:
    """On a target with the dot product and no AMX, a wide 3x3 layer has three alternatives (fp32, bf16 direct, bf16
    Winograd), a narrow one two; with AMX tiles (unmeasured there: not offered) and with fp32, none is Winograd in
    bf16."""
    import tvm

    from autosearch.frontend.importer import import_model

    def algorithms(make, target, **kw):
        path = make()
        tasks = import_model(path, target, layout="NHWC", precision="auto", **kw).tasks
        return {t.lowering.get("algorithm") for t in tasks if "layer" in t.lowering}

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        def wide():
            return small_conv_onnx(f"{tmp}/wide.onnx", cin=128, cout=256, hw=8) and f"{tmp}/wide.onnx"

        def narrow():  # YOLOv8n's widest 3x3 layers: bf16 Winograd lost on every one of them
            return small_conv_onnx(f"{tmp}/narrow.onnx", cin=128, cout=128, hw=8) and f"{tmp}/narrow.onnx"

        assert algorithms(wide, _dot_target()) == {"fp32", "bf16", "bf16-winograd"}
        assert algorithms(narrow, _dot_target()) == {"fp32", "bf16"}
        amx = tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids",
                                 "mattr": ["+amx-tile", "+amx-bf16", "+avx512bf16"], "num-cores": 2})
        assert cpu.bf16_unit(amx) == "AMX-BF16"
        assert algorithms(wide, amx) == {"fp32", "bf16"}


def test_a_layer_chosen_as_bf16_winograd_compiles_as_it() -> None:
    """The policy of an export that chose bf16 Winograd for a layer: that layer's Winograd task is the model's, its
    direct tasks in either precision are not; other layers keep their own choices."""
    from autosearch.frontend.winograd import WinogradPolicy

    key, other = "1x8x8x128->1x8x8x256@3x3", "1x16x16x128->1x16x16x256@3x3"
    policy = WinogradPolicy.of("auto", {key: "bf16-winograd", other: "bf16"}, precision="auto")
    assert policy.bf16(key) and policy.bf16_winograd(key)
    assert policy.bf16(other) and not policy.bf16_winograd(other)
    uses = {a: policy.uses({"layer": key, "algorithm": a}) for a in ("fp32", "bf16", "bf16-winograd")}
    assert uses == {"fp32": False, "bf16": False, "bf16-winograd": True}
    assert policy.uses({"layer": other, "algorithm": "bf16"}) and not policy.uses({"layer": other,
                                                                                     "algorithm": "bf16-winograd"})
    extraction = WinogradPolicy.of("off", precision="winograd")
    assert extraction.bf16(other) and extraction.bf16_winograd(other)


def test_bf16_winograd_tuned_exported_and_compiled_on_avx512_bf16(tmp_path) -> None:
    """A real run of the Winograd task alone (random) on a target with the dot product: export keeps it for its layer
    (the only one of the three measured), records the choice, and compile follows it: the model's output is within
    bf16's tolerance of ONNX Runtime's."""
    from autosearch.deploy.database import database_lowering
    from autosearch.frontend.database_files import RECORD_FILE

    _needs_avx512_bf16()
    target = json.dumps({"kind": "llvm", "mattr": ZEN4_FEATURES, "num-cores": CORES})
    run = tune_and_export(tmp_path, lambda p: small_conv_onnx(p, cin=128, cout=256, hw=8), trials=4, batch=2,
                          options=("--layout", "NHWC", "--precision", "auto", "--target", target,
                                   "--tasks", wb.TASK_NAME))
    trials = [json.loads(line) for line in open(run["log"]) if '"kind":"trial"' in line]
    assert trials and all(wb.TASK_NAME in t["task"]["name"] and t["result"]["status"] == "ok" for t in trials)
    assert set(database_lowering(run["db"])["choices"].values()) == {"bf16-winograd"}
    with open(f"{run['db']}/{RECORD_FILE}") as fh:
        assert "dpbf16_conv_" in fh.read()
    compiled_matches_onnxruntime(tmp_path, run["model"], run["db"], "--target", target, shape=(1, 128, 8, 8))
