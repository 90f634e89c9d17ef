"""Cost models on the tasks tensorised onto a bf16 unit: the loop features read the tensorised block (its body is a
call the loop analysis cannot see), a logged trace naming intrinsics a process never registered still replays, and a
pre-trained model guides only the units its records hold. Lowering only: nothing here runs a bf16 kernel, so every
CPU runs these tests (the targets name the units whatever the host has)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.bf16_models import amx_target
from tests.conftest import small_conv_onnx


def _dot_target():
    import tvm

    from autosearch.tensor_units import cpu

    return tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2,
                              "mattr": cpu.features_for(["avx512f", "avx512_bf16"])})


def _bf16_task(tmp_path, target, **shape):
    from autosearch.frontend.importer import import_model

    path = str(tmp_path / "conv.onnx")
    small_conv_onnx(path, **shape)
    model = import_model(path, target, layout="NHWC", precision="bf16")
    return model, next(t for t in model.tasks if "conv2d_bf16" in t.name)


@pytest.mark.parametrize("unit", ["AMX-BF16", "AVX512-BF16"])
def test_a_tensorised_block_is_read_as_its_unit_calls_and_gemm_shape(tmp_path, unit) -> None:
    from autosearch.cost_models.loop_features import TENSOR_UNITS, nests, schedule_features
    from autosearch.search.space import DecisionSpace

    target = amx_target() if unit == "AMX-BF16" else _dot_target()
    cin, cout, hw = 32, 64, 16
    _, task = _bf16_task(tmp_path, target, cin=cin, cout=cout, hw=hw, kernel=3)
    space = DecisionSpace(task.mod, task.target)
    macs = hw * hw * cout * cin * 9  # the convolution's, stride 1, same padding
    seen = set()
    for sketch in space.sketches:
        applied = space.apply(space.default(sketch.index))
        assert applied.ok, applied.error
        found = nests(applied.mod["main"])
        tensor = [n for n in found if n.unit]
        assert [n.unit for n in tensor] == ["amx" if unit == "AMX-BF16" else "dpbf16"]
        # the call's body (tile configuration, intrinsic calls) is not read as loop bodies of its own
        assert not any(n.name in ("cfg",) or n.name.endswith("_update_o") for n in found if not n.unit)
        f = schedule_features(applied.mod, task.flops)
        assert f["tensor_unit"] == TENSOR_UNITS[tensor[0].unit][3]
        m, n, k = (2 ** f[f"tensor_{d}"] for d in "MNK")
        calls = 2 ** f["tensor_calls"] * task.flops
        # every multiply-add of the convolution, in calls of M x N x K (the flattened rows carry some padding)
        assert 0.999 * macs <= calls * m * n * k <= 2 * macs, (calls, m, n, k)
        assert k == pytest.approx(9 * cin)  # the whole reduction in one call: 3x3 taps of every input channel
        seen.add((f["tensor_accumulators"], f["tensor_loads_per_op"]))
    assert len(seen) > 1  # the accumulator shapes the sketches choose between are told apart


def test_an_fp32_schedule_has_no_tensor_features(tmp_path) -> None:
    from autosearch.cost_models.loop_features import FEATURE_NAMES, loop_features
    from autosearch.frontend.importer import import_model
    from autosearch.search.space import DecisionSpace

    path = str(tmp_path / "conv.onnx")
    small_conv_onnx(path, cin=16, cout=32, hw=16)
    task = next(t for t in import_model(path, amx_target(), layout="NHWC", precision="fp32").tasks
                if "conv2d" in t.name)
    space = DecisionSpace(task.mod, task.target)
    x = loop_features(space.apply(space.default(0)).mod, task.flops)
    tensor = [i for i, name in enumerate(FEATURE_NAMES) if name.startswith("tensor_")]
    assert tensor and not np.any(x[tensor]) and np.any(x)


def test_a_trace_naming_intrinsics_this_process_never_registered_replays(tmp_path) -> None:
    """A tensorised trace names its unit's intrinsics, one per accumulator shape, registered by the process that
    built the schedule; a process that only reads the log (a cost model's featuriser) must still replay it."""
    from autosearch.search.space import DecisionSpace

    _, task = _bf16_task(tmp_path, amx_target(), cin=32, cout=64, hw=16, kernel=3)
    space = DecisionSpace(task.mod, task.target)
    traces = [space.apply(space.default(s.index)).trace_json() for s in space.sketches]
    (tmp_path / "traces.json").write_text(json.dumps(traces))
    script = f"""
import json
from autosearch.frontend.importer import import_model
from autosearch.search.space import replay
from tests.bf16_models import amx_target
model = import_model({str(tmp_path / 'conv.onnx')!r}, amx_target(), layout="NHWC", precision="bf16")
task = next(t for t in model.tasks if "conv2d_bf16" in t.name)
for trace in json.load(open({str(tmp_path / 'traces.json')!r})):
    replay(task.mod, trace)
print("replayed", len(json.load(open({str(tmp_path / 'traces.json')!r}))))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["replayed", str(len(traces))]
    assert any("acc_zero" in json.dumps(t) for t in traces)  # what a fresh process has not registered


def test_a_pretrained_model_guides_only_the_units_its_records_hold(tmp_path) -> None:
    from autosearch.cost_models.pretrained import MANIFEST, SHIPPED_DIR, read_manifest
    from autosearch.search.cost_model import PRETRAINED, guides_unit

    shipped = read_manifest(SHIPPED_DIR)
    for unit in ("AMX-BF16", "AVX512-BF16"):
        assert guides_unit(PRETRAINED, unit) == (unit in shipped["tensor_units"])
        assert guides_unit("xgb-rank", unit)  # trained online, on the run's own measurements
    assert guides_unit(PRETRAINED, None)
    fp32_only = tmp_path / "fp32-only"
    shutil.copytree(SHIPPED_DIR, fp32_only)
    manifest = json.loads((fp32_only / MANIFEST).read_text())
    del manifest["tensor_units"]  # a model trained before the tensor features: fp32 schedules only
    (fp32_only / MANIFEST).write_text(json.dumps(manifest))
    assert not guides_unit(str(fp32_only), "AMX-BF16") and guides_unit(str(fp32_only), None)
