"""Helpers of the bf16 lowering tests: an ONNX model as Relax, and a target with AMX-BF16 whatever the host."""

from __future__ import annotations

from autosearch.tensor_units import cpu


def relax_of(proto):
    """``proto`` (ONNX) imported as the importer does, its input shapes static."""
    from autosearch.frontend.importer import make_static, resolve_input_shapes, to_relax

    shapes = resolve_input_shapes(proto, {})
    return to_relax(make_static(proto, shapes), shapes)


def amx_target():
    """A target with AMX-BF16 whatever the host (lowering only: nothing may run on it)."""
    import tvm

    features = cpu.features_for(["avx512f", "avx512_bf16", "amx_tile", "amx_bf16"])
    return tvm.target.Target({"kind": "llvm", "mcpu": "sapphirerapids", "mattr": features, "num-cores": 2})
