"""experiments/winograd_in_kernel.py: its forms of a Winograd convolution compute the convolution (the in-kernel ones
given Winograd's G), and the configs it times apply to the layer it times by default."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest


def _direct(data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """NCHW 3x3 convolution, padding 1, in float64."""
    _, _, h, w = data.shape
    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, weight.shape[0], h, w))
    for r in range(3):
        for s in range(3):
            out += np.einsum("oc,nchw->nohw", weight[:, :, r, s], padded[:, :, r:r + h, s:s + w])
    return out


@pytest.mark.parametrize("variant", ["transformed", "in-kernel", "in-kernel, factored"])
def test_each_form_computes_the_convolution(variant) -> None:
    import tvm

    from experiments.winograd_in_kernel import build

    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 8, 7, 7)).astype("float32")
    weight = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    g = _g_matrix()
    if variant == "transformed":
        args = [data, np.einsum("ar,ocrs,bs->abco", g, weight.astype(np.float64), g).astype("float32")]
    else:
        args = [data, weight, g.astype("float32")]
    lib = tvm.compile(build(variant, 8, 16, 7), target="llvm")
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((1, 16, 7, 7), "float32"), dev)
    lib["main"](*[tvm.runtime.tensor(a, dev) for a in args], out)
    np.testing.assert_allclose(out.numpy(), _direct(data, weight), rtol=1e-3, atol=1e-3)


def _g_matrix() -> np.ndarray:
    """Winograd F(4x4, 3x3)'s G as TOPI computes it (its interpolation points), evaluated."""
    import tvm
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    _, _, g_te = winograd_transform_matrices(4, 3, "float32")
    mod = tvm.compile(tvm.IRModule({"main": tvm.te.create_prim_func([g_te])}), target="llvm")
    out = tvm.runtime.tensor(np.zeros((6, 3), "float32"), tvm.cpu())
    mod["main"](out)
    return out.numpy().astype(np.float64)


def test_the_configs_it_times_apply_to_the_default_layer() -> None:
    from autosearch.frontend.target import parse_target
    from autosearch.frontend.task import task_from_module
    from autosearch.search.space import Config, DecisionSpace
    from experiments.winograd_in_kernel import VARIANTS, build, configs, register_rule

    target = parse_target(None)
    register_rule(target)
    for variant in VARIANTS:
        task = dataclasses.replace(task_from_module(build(variant, 1024, 1024, 13), target, name=variant),
                                   target=target)
        space = DecisionSpace(task.mod, target)
        for sketch, values in configs(variant):
            applied = space.apply(Config(sketch=sketch, values=values))
            assert applied.ok, (variant, values, applied.error)
            if variant != "transformed":  # the kernel transform computed inside the GEMM's first reduction loop
                text = applied.mod.script()
                assert "kernel_pack" in text and "weight" in text
