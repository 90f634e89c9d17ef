"""``--layout auto`` on a CPU whose bf16 unit doubles its fp32 rate: the NCHW model (all fp32: bf16 convolutions
are NHWC) is not tuned where the layers bf16 can run carry nearly all the FLOPs
(:data:`autosearch.frontend.alternatives.NHWC_ONLY_BF16_SHARE`); elsewhere, and on a resumed run that tuned both,
both models are tuned. ``--precision bf16`` (bf16 asked for) tunes the NHWC model alone on any bf16 CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autosearch.frontend.lowering import LAYOUTS
from autosearch.tensor_units import cpu
from tests.bf16_models import amx_target
from tests.conftest import small_conv_onnx


def _target(mcpu: str, flags: list[str]):
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "mattr": cpu.features_for(flags), "num-cores": 2})


def _dot_product_target():
    """A Zen 4 with the AVX512-BF16 dot product, whatever the host (lowering only)."""
    return _target("znver4", ["avx512f", "avx512_bf16"])


def _layouts(tasks) -> set[str]:
    from autosearch.frontend.alternatives import task_layouts

    return {layout for t in tasks for layout in task_layouts(t.lowering)}


def _import(tmp_path, target, **options):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path / "model.onnx")
    small_conv_onnx(path, **{k: options.pop(k) for k in ("cin", "cout") if k in options})
    return import_model(path, target, layout="auto", precision="auto", **options)


@pytest.mark.parametrize("make_target", [_dot_product_target, amx_target], ids=["avx512-bf16", "amx-bf16"])
def test_where_bf16_runs_the_convolutions_auto_tunes_the_nhwc_model_alone_and_says_why(tmp_path, make_target):
    from autosearch.frontend.alternatives import NHWC_ONLY_BF16_SHARE, bf16_share

    model = _import(tmp_path, make_target())
    assert model.precision == "auto" and model.layout == "auto"
    assert _layouts(model.tasks) == {"NHWC"}
    assert any(t.lowering.get("algorithm") == "bf16" for t in model.tasks)  # the conv both ways, in NHWC
    share = bf16_share(model.tasks)  # the conv's; the pool's few FLOPs are not
    assert NHWC_ONLY_BF16_SHARE <= share < 1
    assert "NHWC model alone" in model.layout_note and f"{100 * share:.1f}% of its FLOPs" in model.layout_note

    both = _import(tmp_path, make_target(), layouts=LAYOUTS)  # a resumed run that tuned both goes on with both
    assert _layouts(both.tasks) == {"NCHW", "NHWC"} and both.layout_note == ""
    nhwc = {t.workload_key for t in model.tasks}
    assert nhwc == {t.workload_key for t in both.tasks if "NHWC" in t.lowering["layouts"]}


def test_a_model_bf16_cannot_run_keeps_both_layouts_on_a_bf16_cpu(tmp_path):
    model = _import(tmp_path, _dot_product_target(), cout=8)  # too few output channels for the bf16 GEMM
    assert not any(t.lowering.get("algorithm") == "bf16" for t in model.tasks)
    assert _layouts(model.tasks) == {"NCHW", "NHWC"} and model.layout_note == ""


def test_on_intels_dot_product_auto_tunes_both_layouts(tmp_path):
    """An Intel core without AMX issues ``vdpbf16ps`` at half the FMA's rate: bf16 there is no faster than fp32, and
    the NCHW model in fp32 may win."""
    model = _import(tmp_path, _target("cooperlake", ["avx512f", "avx512_bf16"]))
    assert model.precision == "auto" and any(t.lowering.get("algorithm") == "bf16" for t in model.tasks)
    assert _layouts(model.tasks) == {"NCHW", "NHWC"} and model.layout_note == ""


def test_without_a_bf16_unit_auto_tunes_both_layouts(tmp_path):
    model = _import(tmp_path, _target("znver3", ["avx2", "fma"]))
    assert model.precision == "fp32"
    assert _layouts(model.tasks) == {"NCHW", "NHWC"} and model.layout_note == ""


def _task(gflop: float, weight: int = 1, **lowering):
    return SimpleNamespace(flops=gflop * 1e9, weight=weight, lowering=lowering)


def test_the_bf16_share_counts_each_layer_once_by_its_fp32_side():
    from autosearch.frontend.alternatives import NHWC_ONLY_BF16_SHARE, bf16_share

    tasks = [_task(3, 2, layer="a", algorithm="fp32"), _task(1, 2, layer="a", algorithm="bf16"),
             _task(2, 1, layer="a", algorithm="bf16-winograd"), _task(1, 1, layer="b", algorithm="fp32"),
             _task(1, 3)]  # weight x FLOPs: 6 + 1 with a bf16 side, 3 without
    assert bf16_share(tasks) == pytest.approx(0.7)
    assert bf16_share([]) == 0.0 and bf16_share([_task(1)]) == 0.0
    assert 0.5 < NHWC_ONLY_BF16_SHARE < 1


def test_a_resumed_run_goes_on_with_the_layouts_its_log_tuned():
    from autosearch.api import _resume_layouts

    def log(*lowerings):
        return SimpleNamespace(tasks={str(i): {"lowering": lw} for i, lw in enumerate(lowerings)})

    both = log({"layout": "auto", "layouts": ["NHWC"]}, {"layout": "auto", "layouts": ["NCHW", "NHWC"]})
    assert _resume_layouts(both) == ("NCHW", "NHWC")
    assert _resume_layouts(log({"layout": "auto", "layouts": ["NHWC"]})) == ("NHWC",)
    assert _resume_layouts(log({"layout": "NCHW"}, {})) is None  # one layout asked: import_model's usual path


def test_which_bf16_units_double_the_fp32_rate():
    from autosearch.tensor_units.cpu import bf16_doubles_fp32

    assert bf16_doubles_fp32(amx_target()) and bf16_doubles_fp32(_dot_product_target())
    assert not bf16_doubles_fp32(_target("cooperlake", ["avx512f", "avx512_bf16"]))  # Intel: half the FMA's rate
    assert not bf16_doubles_fp32(_target("znver3", ["avx2", "fma"]))  # no unit


@pytest.mark.parametrize("mcpu", ["znver4", "cooperlake"])
def test_forced_bf16_tunes_the_nhwc_model_alone_on_any_bf16_cpu_and_says_why(tmp_path, mcpu):
    """``--precision bf16`` asks for bf16 convolutions; the NCHW model would have none (``--layout NCHW`` with it is
    an error), whether or not the unit doubles the fp32 rate (Intel's dot product does not)."""
    from autosearch.frontend.importer import import_model

    path = str(tmp_path / "model.onnx")
    small_conv_onnx(path)
    model = import_model(path, _target(mcpu, ["avx512f", "avx512_bf16"]), layout="auto", precision="bf16")
    assert model.precision == "bf16" and _layouts(model.tasks) == {"NHWC"}
    assert "--precision bf16" in model.layout_note and "NHWC model alone" in model.layout_note
    both = import_model(path, _target(mcpu, ["avx512f", "avx512_bf16"]), layout="auto", precision="bf16",
                        layouts=LAYOUTS)  # a log that tuned both (an older version) goes on with both
    assert _layouts(both.tasks) == {"NCHW", "NHWC"} and both.layout_note == ""
