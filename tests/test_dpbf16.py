"""bf16 convolutions on the AVX512-BF16 dot product (:mod:`autosearch.tensor_units.dpbf16`), for CPUs with it and
no AMX (AMD Zen 4): the micro-kernel on a matmul against NumPy. A target with ``+avx512bf16`` and without AMX
features is what such a CPU's host target is, so the tests run on any CPU with the dot product; those that run code
skip without it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autosearch.tensor_units import cpu
from tests.test_tensor_units import _to_bf16

ZEN4_FEATURES = ["+avx512f", "+avx512bw", "+avx512vl", "+avx512bf16", "+avx512vnni"]


def _dot_target():
    """The host CPU with AVX512-BF16 and without AMX, as a Zen 4's target reads."""
    from autosearch.frontend.target import parse_target

    return parse_target(json.dumps({"kind": "llvm", "mattr": ZEN4_FEATURES, "num-cores": 2}))


def _needs_avx512_bf16() -> None:
    if "avx512_bf16" not in cpu.host_flags():
        pytest.skip("this CPU has no AVX512-BF16 (avx512_bf16 in /proc/cpuinfo)")


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
