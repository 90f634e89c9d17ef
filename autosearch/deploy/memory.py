"""What a compiled model will hold in memory, computed from the Relax module before it is built.

Three parts, each read from the module TVM is about to build (legalised, the database applied, weight
prepacking and Winograd kernel transforms folded into the constants):

- **weights**: the bytes of the constants bound into the module (the build moves them into a file beside the
  library, :mod:`autosearch.deploy.artifact`), i.e. after prepacking (same size, another
  layout) and after the Winograd kernel transform (36 values per 3x3 filter where the direct one holds 9);
- **activations**: what Relax's static memory planning (``StaticPlanBlockMemory``) allocates for the
  intermediate tensors and the output, and what they would take without planning, both from TVM's own
  ``relax.analysis.estimate_memory_usage``;
- **kernel scratch**: the largest intermediate buffer set one kernel allocates inside itself (a Winograd
  kernel's transformed input and product tiles, a prepacked weight a kernel rewrites on every call when
  prepacking is off), from ``s_tir.analysis.calculate_allocated_bytes`` on its lowered loops, after the
  build's storage reuse (``StorageRewrite``). TVM takes it
  from a workspace pool at run time, one kernel at a time; buffers allocated inside a parallel loop are
  counted once, not once per thread.

The **predicted peak** is what the inference process adds to its resident memory over loading the model and
running it (what ``report`` measures: peak resident set minus a process that imported the runtime and loaded
no model): the weights, held once (the library holds none: they are read from the weights file beside it,
each tensor straight into its own buffer, :mod:`autosearch.deploy.artifact`), the activations and one kernel's
scratch. Code pages and the VM's own structures are left out (small beside the weights of a YOLO).

Libraries built before the weights moved out of them held the weights up to four times while TVM loaded them
and twice afterwards (:mod:`autosearch.deploy.artifact`; ``tests/test_memory.py`` measures both on one model).
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass

from autosearch.errors import last_line

log = logging.getLogger(__name__)

MIB = 2**20


@dataclass(frozen=True)
class MemoryEstimate:
    """The computed memory of one compiled model (bytes)."""

    weight_bytes: int  # the model's weights as the kernels read them (after prepacking and Winograd transforms)
    planned_bytes: int  # activations with Relax's static memory planning
    unplanned_bytes: int  # activations without it (one allocation per tensor)
    scratch_bytes: int = 0  # the largest scratch one kernel allocates (0: not computed)

    def peak_bytes(self, *, planned: bool = True) -> int:
        """Predicted peak resident memory over loading and running the model (see the module docstring)."""
        activations = self.planned_bytes if planned else self.unplanned_bytes
        return self.weight_bytes + activations + self.scratch_bytes

    def to_json(self) -> dict:
        return {**asdict(self), "peak_bytes": self.peak_bytes()}


def constant_bytes(mod) -> int:
    """Bytes of the tensor constants the module's Relax functions bind (each constant once)."""
    import numpy as np
    import tvm
    from tvm import relax

    constants = {}  # by the node's address: a constant bound twice is stored once

    def visit(expr) -> None:
        if isinstance(expr, tvm.ir.GenericConst) and hasattr(expr.value, "shape"):
            constants[expr.__chandle__()] = expr.value

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return sum(int(np.prod([int(d) for d in c.shape])) * ((tvm.DataType(str(c.dtype)).bits + 7) // 8)
               for c in constants.values())


_ESTIMATE = re.compile(r"Without memory planning, there are \d+ constant-size memory allocation\(s\) with total size "
                       r"([0-9.e+-]+) GB.*?With memory planning, there are \d+ constant-size memory allocation\(s\) "
                       r"with total size ([0-9.e+-]+) GB", re.S)


def activation_bytes(mod, target, *, function: str = "main") -> tuple[int, int]:
    """(unplanned, planned) bytes of ``function``'s intermediate tensors and outputs: the build's passes up to
    static memory planning, then TVM's ``estimate_memory_usage``. It reports text, in GB to four significant
    digits (~0.05% of the figure), which is read back here."""
    import tvm
    from tvm import relax

    from autosearch.frontend.lowering import planning_passes

    with target, tvm.transform.PassContext(opt_level=3):
        planned = tvm.transform.Sequential(planning_passes(target))(mod)
    text = relax.analysis.estimate_memory_usage(tvm.IRModule({"main": planned[function]}))
    found = _ESTIMATE.search(text)
    if found is None:
        raise RuntimeError(f"unexpected output of relax.analysis.estimate_memory_usage: {text!r}")
    unplanned, with_planning = (round(float(g) * 2**30) for g in found.groups())
    return unplanned, with_planning


def scratch_bytes(mod) -> int:
    """The most global-scope bytes one kernel (TIR function) of the module allocates inside itself, after the
    build's passes that size its buffers: ``CompactBufferAllocation`` (to what each loop nest touches) and
    ``StorageRewrite`` (buffers whose lives do not overlap share storage: an untuned kernel keeps each stage of
    its fused epilogue in a buffer of its own, and the build reuses one for the next)."""
    import tvm
    from tvm import s_tir, tirx

    passes = [s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
              s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(), tirx.transform.VectorizeLoop(True),
              tirx.transform.StorageRewrite()]  # as the build orders them (StorageRewrite wants vectorised loops)
    largest = 0
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        kernel = tvm.IRModule({gv: func})
        # Outside the build's full pipeline a tuned kernel can fail a pass (TVM 0.27 folded a loop of one
        # kernel to a zero divisor while flattening it); then its buffers are counted with fewer passes applied,
        # before storage reuse: an upper bound.
        for upto in (len(passes), 5, 0):
            try:
                sizes = s_tir.analysis.calculate_allocated_bytes(tvm.transform.Sequential(passes[:upto])(kernel))
                break
            except RuntimeError as exc:  # tvm.error.InternalError and the like
                log.debug("kernel %s: scratch not computable after %d passes (%s)", gv.name_hint, upto,
                          last_line(exc))
        else:
            continue
        largest = max([largest, *(int(by_scope.get("global", 0)) for by_scope in sizes.values())])
    return largest


def estimate_memory(mod, target) -> MemoryEstimate:
    """The memory of the model ``mod`` builds into: a legalised Relax module with its constants folded
    (:func:`autosearch.frontend.lowering.tuned_module` or :func:`autosearch.frontend.lowering.untuned_module`)."""
    unplanned, planned = activation_bytes(mod, target)
    return MemoryEstimate(weight_bytes=constant_bytes(mod), planned_bytes=planned, unplanned_bytes=unplanned,
                          scratch_bytes=scratch_bytes(mod))


def mib(n_bytes: float | None) -> str:
    """Bytes as MiB for a table ("-" when unknown)."""
    return "-" if n_bytes is None else f"{n_bytes / MIB:.1f}"


__all__ = ["MIB", "MemoryEstimate", "activation_bytes", "constant_bytes", "estimate_memory", "mib", "scratch_bytes"]
