"""The lowering's constant folding (autosearch.frontend.fold): the very module Relax's ``FoldConstant`` gives, with each
weight transform compiled once for all the lowerings of a model. Lowering only: runs on any CPU."""

from __future__ import annotations

import pytest

from tests.bf16_models import amx_target, relax_of
from tests.conftest import small_conv_onnx, two_wide_convs_onnx
from tests.test_dpbf16 import _dot_target


def _wide_conv():  # a layer the dot product runs as bf16 Winograd (tests/test_bf16_winograd.py)
    return small_conv_onnx(cin=128, cout=256, hw=8)


def _host():
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})


LOWERINGS = [  # (model, target, options): fp32 transposes and reshapes, Winograd and the bf16 packings
    (two_wide_convs_onnx, _host, {"winograd": "candidates", "layout": "NCHW", "precision": "fp32"}),
    (two_wide_convs_onnx, _host, {"winograd": "candidates", "layout": "NHWC", "precision": "fp32"}),
    (two_wide_convs_onnx, amx_target, {"winograd": "off", "layout": "NHWC", "precision": "bf16"}),
    (_wide_conv, _dot_target, {"winograd": "off", "layout": "NHWC", "precision": "winograd"}),
]


def _lower_with_relax_alone(relax_mod, target, **options):
    import tvm

    from autosearch.frontend.fold import PASS_NAME
    from autosearch.frontend.lowering import lowering_passes

    with target, tvm.transform.PassContext(opt_level=3):
        passes = [p for p in lowering_passes(target, **options) if p.info.name != PASS_NAME]
        return tvm.transform.Sequential(passes)(relax_mod)


def test_the_folded_model_is_relaxs_own_and_each_transform_is_compiled_once() -> None:
    import tvm_ffi

    from autosearch.frontend.fold import ConstantFolder
    from autosearch.frontend.lowering import lower

    folder = ConstantFolder()
    lowered = []
    for make_model, make_target, options in LOWERINGS:
        relax_mod, target = relax_of(make_model()), make_target()
        before = folder.compiled
        ours = lower(relax_mod, target, folder=folder, **options)
        assert folder.compiled > before, f"{options}: a new lowering has weight transforms of its own to fold"
        assert tvm_ffi.structural_equal(ours, _lower_with_relax_alone(relax_mod, target, **options)), options
        lowered.append((relax_mod, target, options, ours))
    compiled = folder.compiled
    for relax_mod, target, options, ours in lowered:  # the same lowerings again: every function compiled already
        assert tvm_ffi.structural_equal(lower(relax_mod, target, folder=folder, **options), ours)
    assert folder.compiled == compiled


@pytest.mark.parametrize("winograd", ["off", "candidates"])
def test_a_tuned_module_prepacks_its_weights_as_relax_does(target, tmp_path, winograd) -> None:
    """The tuned build's second fold, the kernels' weight prepacking (a schedule whose ``RewriteLayout`` tiles its
    weights), after the first: the module Relax's passes alone give, prepack functions folded away."""
    import tvm_ffi

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.lowering import apply_database, tuned_module, winograd_policy
    from tests.test_artifact import _called, _random_prepacked_database

    path = str(tmp_path / "wide.onnx")
    two_wide_convs_onnx(path)
    model = import_model(path, target, winograd="off" if winograd == "off" else "auto", layout="NCHW")
    tasks = [t for t in model.tasks if winograd_policy(winograd).uses(t.lowering) and "conv" in t.name]
    database = _random_prepacked_database(tasks, target)
    theirs = apply_database(_lower_with_relax_alone(model.relax_mod, target, winograd=winograd, layout="NCHW"),
                            target, database)
    ours = tuned_module(model.relax_mod, target, database, winograd=winograd, layout="NCHW")
    assert tvm_ffi.structural_equal(ours, theirs)
    called = _called(ours)
    assert sum(n.endswith("_prepacked") for n in called) == 2 and not any(n.endswith("_weight_prepack") for n in called)
