"""Divisions by a kernel's weights built as multiplications by their reciprocals (autosearch.frontend.reciprocal)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

from autosearch.frontend.reciprocal import reciprocal_divisors, rewrite_func


@T.prim_func(s_tir=True)
def batch_norm_like(x: T.Buffer((8, 16), "float32"), scale: T.Buffer((16,), "float32"),
                    y: T.Buffer((8, 16), "float32")):
    """Divides by a weight (rewritten), by a constant (left to LLVM) and by its own output (never rewritten)."""
    for i, c in T.grid(8, 16):
        with T.sblock("norm"):
            vi, vc = T.axis.remap("SS", [i, c])
            y[vi, vc] = x[vi, vc] / scale[vc] + x[vi, vc] / T.float32(3.0)
    for i, c in T.grid(8, 16):
        with T.sblock("again"):
            vi, vc = T.axis.remap("SS", [i, c])
            y[vi, vc] = x[vi, vc] / y[vi, vc]


@T.prim_func(s_tir=True)
def in_place(x: T.Buffer((16,), "float32"), scale: T.Buffer((16,), "float32")):
    """The divisor is an input the kernel also writes: its value changes under the loop."""
    for c in range(16):
        with T.sblock("scale"):
            vc = T.axis.spatial(16, c)
            scale[vc] = scale[vc] + T.float32(1.0)
            x[vc] = x[vc] / scale[vc]


@T.prim_func(s_tir=True)
def through_a_pointer(x: T.Buffer((16,), "float32"), scale: T.Buffer((16,), "float32"),
                      y: T.Buffer((16,), "float32")):
    """The divisor's address goes to an extern function, which may write it; a read inside a call is only a read."""
    T.evaluate(T.call_extern("int32", "refresh", T.address_of(scale[0])))
    for c in range(16):
        with T.sblock("scaled"):
            vc = T.axis.spatial(16, c)
            y[vc] = T.if_then_else(x[vc] > T.float32(0.0), x[vc] / scale[vc], x[vc])


@T.prim_func(s_tir=True)
def read_in_a_call(x: T.Buffer((16,), "float32"), scale: T.Buffer((16,), "float32"), y: T.Buffer((16,), "float32")):
    for c in range(16):
        with T.sblock("scaled"):
            vc = T.axis.spatial(16, c)
            y[vc] = T.if_then_else(scale[vc] > T.float32(0.0), x[vc] / scale[vc], x[vc])


@T.prim_func(s_tir=True)
def half(x: T.Buffer((16,), "bfloat16"), scale: T.Buffer((16,), "bfloat16"), y: T.Buffer((16,), "bfloat16")):
    for c in range(16):
        with T.sblock("half"):
            vc = T.axis.spatial(16, c)
            y[vc] = x[vc] / scale[vc]


def test_only_divisions_by_a_weight_become_multiplications():
    text = rewrite_func(batch_norm_like).script()
    assert "x[vi, vc] * (T.float32(1.0) / scale[vc])" in text
    assert "x[vi, vc] / T.float32(3.0)" in text  # a constant: LLVM's to fold, not ours
    assert "x[vi, vc] / y[vi, vc]" in text  # an output, written by the kernel
    assert rewrite_func(in_place).same_as(in_place)  # the divisor is written in the loop
    assert rewrite_func(half).same_as(half)  # a bf16 reciprocal would round too coarsely
    assert rewrite_func(through_a_pointer).same_as(through_a_pointer)  # its address handed to a call
    assert "x[vc] * (T.float32(1.0) / scale[vc])" in rewrite_func(read_in_a_call).script()


def test_the_module_is_copied_not_changed_and_a_module_without_one_is_returned_as_is():
    mod = tvm.IRModule({"main": batch_norm_like})
    new = reciprocal_divisors(mod)
    assert not new.same_as(mod) and mod["main"].same_as(batch_norm_like)
    untouched = tvm.IRModule({"main": in_place})
    assert reciprocal_divisors(untouched).same_as(untouched)


def test_the_built_kernel_is_within_a_few_ulps_of_the_division():
    rng = np.random.default_rng(0)
    x = rng.uniform(-100, 100, (8, 16)).astype("float32")
    scale = rng.uniform(0.01, 30, 16).astype("float32")
    outputs = []
    for mod in (tvm.IRModule({"main": batch_norm_like}), reciprocal_divisors(tvm.IRModule({"main": batch_norm_like}))):
        lib = tvm.compile(mod, target="llvm")
        y = tvm.runtime.tensor(np.zeros((8, 16), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(scale), y)
        outputs.append(y.numpy())
    expected = x / (x / scale + x / np.float32(3.0))
    divided, rewritten = outputs
    np.testing.assert_array_max_ulp(divided, expected, maxulp=2)
    np.testing.assert_array_max_ulp(rewritten, expected, maxulp=4)  # one more rounding, through the second division
