"""Kernels are built for the CPU in one pass context, in tuning and in the model's build alike: TVM's default
pipeline less ``s_tir.RenormalizeSplitPattern`` (:func:`autosearch.tvm_compat.build_context`)."""

from __future__ import annotations

import numpy as np

SKIPPED = "s_tir.RenormalizeSplitPattern"


def _recording():
    """A pass context whose instrument records the name of every pass that runs."""
    import tvm

    names: list[str] = []

    @tvm.ir.instrument.pass_instrument
    class Recorder:
        def run_before_pass(self, mod, info):
            names.append(info.name)

    return tvm.transform.PassContext(instruments=[Recorder()]), names


def test_a_trial_and_the_model_build_without_the_pass_tvms_own_pipeline_with_it(small_model, conv_task, conv_space):
    import tvm

    from autosearch.frontend.lowering import build_module, untuned_module
    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import build
    from autosearch.measure.prepack import split_prepack

    mod, _ = split_prepack(conv_space.apply(conv_space.default(0)).mod)
    context, tvms = _recording()
    with context:
        tvm.compile(mod, target=conv_task.target)
    assert SKIPPED in tvms and "tirx.StmtSimplify" in tvms  # the name is still TVM's: disabling it is not a no-op

    context, trial = _recording()
    with context:
        artifact, secs = build(tvm.ir.save_json(conv_space.apply(conv_space.default(0)).mod),
                               target_to_json(conv_task.target))
    assert artifact and secs > 0
    assert SKIPPED not in trial and "tirx.StmtSimplify" in trial
    assert set(tvms) - {SKIPPED} <= set(trial)  # nothing else left out

    context, model = _recording()
    with context:
        build_module(untuned_module(small_model.relax_mod, small_model.target), small_model.target)
    assert SKIPPED not in model and "tirx.StmtSimplify" in model
    assert SKIPPED not in list(tvm.transform.PassContext.current().disabled_pass)  # the caller's context as it was


def test_a_winograd_kernel_it_changes_computes_the_same(target, tmp_path):
    """The pass rewrites integer index arithmetic only: a Winograd kernel on 13 x 13 tiles (tiny-YOLOv2's shape, which
    the tiles do not divide), whose assembly differs without it, writes the same bytes."""
    import hashlib

    import tvm

    from autosearch.frontend.importer import import_model
    from autosearch.measure.kernels import make_inputs
    from autosearch.search.space import DecisionSpace
    from autosearch.tvm_compat import build_context
    from tests.conftest import wide_conv_onnx

    path = str(tmp_path / "wide13.onnx")
    wide_conv_onnx(path, channels=128, hw=13)
    task = next(t for t in import_model(path, target, layout="NCHW").tasks if "winograd" in t.name)
    space = DecisionSpace(task.mod, task.target)
    dev = tvm.cpu()
    for applied in space.sample_applied(np.random.default_rng(0), 4):
        mod = space.apply_for_features(applied.config, rewrite="none").mod  # the weights as the arguments give them
        assembly, outputs = [], []
        for context in (tvm.transform.PassContext(), build_context()):
            with context:
                lib = tvm.compile(mod, target=task.target)
            host = lib.mod.imports[0] if lib.mod.imports else lib.mod
            assembly.append(hashlib.sha1(host.inspect_source("asm").encode()).hexdigest())
            arrays = [tvm.runtime.tensor(a, dev) for a in make_inputs(task.args, 0)]
            lib["main"](*arrays)
            outputs.append(b"".join(a.numpy().tobytes() for a in arrays))
        if assembly[0] != assembly[1]:
            break
    assert assembly[0] != assembly[1], "no sampled config compiles differently: is the pass still worth leaving out?"
    assert outputs[0] == outputs[1]
