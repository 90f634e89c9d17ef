"""The Relax passes that turn a model into tuning tasks, and the build that applies a tuning database.

Tasks and the tuned build must see the very same fused TIR functions, or the database's workload
keys (structural hashes) do not match. Both go through :func:`lowering_passes`:

1. with ``layout="NHWC"`` (CPU targets), Relax's ``ConvertLayout`` first turns every conv2d into NHWC data /
   OHWI weights; the layout transforms cancel between consecutive layers, one is left at the input and
   where the detection head reshapes. NHWC puts the output channels innermost, so a schedule vectorises
   over them with contiguous weight loads and broadcast inputs; NCHW vectorises over the output width,
   which for stride-2 convolutions means strided input loads (measured: ``experiments/layouts.py``);
2. TVM's library dispatch and legalisation for the target (LegalizeOps, AnnotateTIROpPattern,
   FoldConstant, FuseOps, FuseTIR), as ``ms.relax_integration`` does;
3. winograd for the wide 3x3 stride-1 convolutions (:mod:`autosearch.winograd`, ``winograd="auto"``; CPU
   targets only, NCHW convolutions only), legalised in place of TVM's direct conv2d;
4. ``AttachAttrLayoutFreeBuffers``: the model's weights are constants, so a schedule may choose their
   layout (MetaSchedule's ``RewriteLayout``). This is TVM's own CPU recipe (``cpu_weight_prepack`` of
   ``static_shape_tuning_pipeline``); since our weights are constants, not parameters, the prepacking is
   folded at compile time and the model's interface does not change.

:func:`build_tuned` is ``ms.relax_integration.compile_relax`` with the prepacking steps TVM's recipe
adds after applying the database (``SplitLayoutRewritePreproc``, ``FoldConstant``).
"""

from __future__ import annotations

from typing import Any

LAYOUTS = ("NCHW", "NHWC")
DEFAULT_LAYOUT = "NCHW"  # as the ONNX model has it; NHWC loses Winograd, which tiny-YOLOv2's wide layers need


def check_layout(layout: str) -> str:
    from autosearch.errors import UserError

    if layout not in LAYOUTS:
        raise UserError(f"unknown --layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    return layout


def converts_layout(target, layout: str) -> bool:
    """Whether the lowering rewrites the model's convolutions to ``layout`` (CPU targets only)."""
    return check_layout(layout) != "NCHW" and target.kind.name == "llvm"  # ONNX models come as NCHW


def check_winograd(mode: str) -> str:
    from autosearch.errors import UserError
    from autosearch.winograd import MODES

    if mode not in MODES:
        raise UserError(f"unknown --winograd mode {mode!r}; valid modes: {', '.join(MODES)}")
    return mode


def winograd_policy(winograd):
    """A WinogradPolicy from a policy or a mode name."""
    from autosearch.winograd import WinogradPolicy

    if isinstance(winograd, WinogradPolicy):
        return winograd
    if winograd != "candidates":
        check_winograd(winograd)
    return WinogradPolicy.of(winograd)


def lowering_passes(target, *, winograd="auto", layout=DEFAULT_LAYOUT) -> list[Any]:
    """``winograd``: a mode name or an :class:`autosearch.winograd.WinogradPolicy` (measured choices);
    ``layout``: the conv2d data layout, ``NCHW`` (as ONNX gives it) or ``NHWC``. Winograd applies to NCHW
    convolutions only."""
    from tvm import relax

    policy = winograd_policy(winograd)
    legalize = list(relax.pipeline.legalize_passes(target))
    if policy.mode != "off" and target.kind.name == "llvm":
        from autosearch.winograd import legalize_map

        legalize = [relax.transform.LegalizeOps(customize_legalize_map=legalize_map(policy))
                    if p.info.name == "LegalizeOps" else p for p in legalize]
    convert = [relax.transform.ConvertLayout({"relax.nn.conv2d": [layout, "OHWI"]})] if converts_layout(
        target, layout) else []
    return [*convert, *relax.pipeline.library_dispatch_passes(target), *legalize,
            relax.transform.AttachAttrLayoutFreeBuffers()]


def lower(relax_mod, target, *, winograd="auto", layout=DEFAULT_LAYOUT):
    """The model as fused TIR functions: what task extraction and the tuned build both start from."""
    import tvm

    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(lowering_passes(target, winograd=winograd, layout=layout))(relax_mod)


def _lower_and_finalize(target) -> list[Any]:
    """TVM's dataflow-lowering and finalisation passes for the target (0.27's CPU backend does not
    export its ``dataflow_lower_passes``: take them from its pipeline module, as ``compile_relax`` falls
    back to the same list)."""
    from tvm import relax

    try:
        return list(relax.pipeline.dataflow_lower_passes(target)) + list(relax.pipeline.finalize_passes(target))
    except (AttributeError, ValueError):
        from tvm.relax.backend.cpu_generic import pipeline as cpu

        return list(cpu.dataflow_lower_passes(target)) + list(cpu.finalize_passes(target))


def apply_database(lowered, target, database):
    """The lowered model with the database's schedules in place and their weight prepacking folded into
    the constants (no ``*_weight_prepack`` call is left to run at inference time)."""
    import tvm
    from tvm import relax

    with target, database, tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.MetaScheduleApplyDatabase()(lowered)
        mod = relax.transform.SplitLayoutRewritePreproc()(mod)
        return relax.transform.FoldConstant()(mod)


def build_tuned(relax_mod, target, database, *, winograd="auto", layout=DEFAULT_LAYOUT):
    """Compile a Relax model with a MetaSchedule database applied (tasks it lacks stay unscheduled)."""
    import tvm
    from tvm import relax

    tuned = apply_database(lower(relax_mod, target, winograd=winograd, layout=layout), target, database)

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod, _ctx):
        return tvm.transform.Sequential(_lower_and_finalize(target))(mod)

    with target, tvm.transform.PassContext(opt_level=3):
        return relax.build(tuned, target=target, relax_pipeline=pipeline)


__all__ = ["DEFAULT_LAYOUT", "LAYOUTS", "apply_database", "build_tuned", "check_layout", "lower", "lowering_passes"]
