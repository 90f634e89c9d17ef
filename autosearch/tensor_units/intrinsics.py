"""The tensor intrinsics a trace names, registered with TVM before it reads the trace: TVM looks a tensorising
trace's intrinsic up by name as it replays it, and registering every intrinsic there could be would take seconds
(each convolution's geometry has its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def register_once(name: str, make: Callable[[], tuple[Any, Any]]) -> str:
    """Register the intrinsic ``name`` with TVM unless this process has; ``make()`` gives its (description,
    implementation) PrimFuncs, built only when needed. Returns ``name``."""
    from tvm.s_tir import TensorIntrin

    try:
        TensorIntrin.get(name)
    except Exception:  # not registered yet: TVM raises when the name is unknown
        TensorIntrin.register(name, *make())
    return name


def register_for(text: str) -> None:
    """Register the AMX and AVX512-BF16 intrinsics ``text`` (a trace, a database file) names."""
    from autosearch.tensor_units import amx, dpbf16

    amx.register_for(text)
    dpbf16.register_for(text)


def units_named(text: str) -> set[str]:
    """The bf16 units (:func:`autosearch.tensor_units.cpu.units`' names) whose intrinsics ``text`` names."""
    from autosearch.tensor_units import amx, dpbf16

    found = set()
    if amx.names_any(text):
        found.add("AMX-BF16")
    if dpbf16.names_any(text):
        found.add("AVX512-BF16")
    return found


def rounds_to_bf16(name: str, args) -> int:
    """How many products in a chain a task (its name and ``(shape, dtype)`` arguments) computes on bf16 operands,
    so its kernels are checked with bf16's tolerance (:func:`autosearch.measure.kernels.check_tolerance`): 0 (none),
    1, or 2 for a fused attention, whose probabilities are rounded to bf16 after the first product. A bf16
    convolution's packed weights are bf16 arguments, but a bf16 matmul and a fused attention take their fp32
    operands and round them inside (:mod:`autosearch.tensor_units.matmul`, :mod:`.attention`)."""
    from autosearch.tensor_units import attention, conv, matmul

    if attention.TASK_NAME in name:
        return 2
    return int(conv.TASK_NAME in name or matmul.TASK_NAME in name
               or any(str(dtype) == "bfloat16" for _, dtype in args))


__all__ = ["register_for", "register_once", "rounds_to_bf16", "units_named"]
