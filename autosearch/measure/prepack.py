"""Weight prepacking: a scheduled kernel that rewrites the layout of its weights, split as TVM deploys it.

MetaSchedule's ``RewriteLayout`` postprocessor gives every layout-free input (model weights and
constants, marked by Relax's ``AttachAttrLayoutFreeBuffers``) the layout the schedule reads it in,
by a *preprocessing* block inside the kernel. When TVM compiles the model it splits that block off
(``SplitLayoutRewritePreproc``) and folds it into the constant weights, so the deployed kernel never
pays for it. Measuring the kernel as written would time a weight copy on every call.

:func:`split_prepack` does the same split on one kernel: a ``prepack`` function (run once per
measurement, untimed) and ``main``, the kernel on prepacked weights, which is checked and timed.
The :class:`PrepackPlan` says which arguments go through ``prepack`` and where they come out.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

PREPROC_ATTR = "meta_schedule.layout_rewrite_preproc"
_MAGIC = b"ASK1"


@dataclass(frozen=True)
class PrepackPlan:
    """How to call a split kernel.

    ``inputs``: indices of the original arguments ``prepack`` reads, in its parameter order.
    ``outputs``: for each ``prepack`` output, in order, the kernel argument it replaces with its
    shape and dtype (the prepacked layout).
    """

    inputs: tuple[int, ...]
    outputs: tuple[tuple[int, tuple[int, ...], str], ...]

    def to_json(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "outputs": [[i, list(s), d] for i, s, d in self.outputs]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PrepackPlan:
        return cls(tuple(obj["inputs"]), tuple((int(i), tuple(s), str(d)) for i, s, d in obj["outputs"]))

    @property
    def replaced(self) -> set[int]:
        return {i for i, _, _ in self.outputs}


def pack_artifact(library: bytes, plan: PrepackPlan | None) -> bytes:
    """A built kernel as one blob: the shared library and, when it was split, its plan."""
    header = json.dumps(plan.to_json() if plan is not None else None).encode()
    return _MAGIC + struct.pack("<I", len(header)) + header + library


def unpack_artifact(blob: bytes) -> tuple[bytes, PrepackPlan | None]:
    """The inverse of :func:`pack_artifact`; a bare shared library (no header) has no plan."""
    if not blob.startswith(_MAGIC):
        return blob, None
    (size,) = struct.unpack("<I", blob[4:8])
    header = json.loads(blob[8:8 + size].decode())
    return blob[8 + size:], PrepackPlan.from_json(header) if header is not None else None


def _blocks(func):
    """Every SBlock of a PrimFunc (TVM 0.27 has no Python statement visitor for TIR)."""
    from tvm import IRModule
    from tvm.s_tir import Schedule

    sch = Schedule(IRModule({"main": func}), debug_mask=0)
    stack = list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        rv = stack.pop()
        yield sch.get(rv)
        stack.extend(sch.get_child_blocks(rv))


def has_prepack(func) -> bool:
    """True if the kernel holds MetaSchedule layout-rewrite blocks (only kernels with layout-free
    buffers can; hand-written ones without a root block cannot)."""
    if func.attrs is None or "layout_free_buffers" not in func.attrs:
        return False
    return any(PREPROC_ATTR in block.annotations for block in _blocks(func))


def output_count(func) -> int:
    """How many trailing parameters the kernel writes (its outputs, as Relax's ``call_tir`` passes them)."""
    written = {region.source.name for block in _blocks(func) for region in block.writes}
    return sum(1 for p in func.params if p.name in written)


def split_prepack(mod) -> tuple[Any, PrepackPlan | None]:
    """Split a scheduled kernel module into ``prepack`` + ``main`` (on prepacked weights), as TVM deploys it.

    A module without layout-rewrite blocks is returned unchanged with no plan.
    """
    import tvm
    from tvm import relax
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    func = mod["main"]
    if not has_prepack(func):
        return mod, None
    args = ArgInfo.from_entry_func(mod, remove_preproc=False)
    n_out = output_count(func)
    types = [relax.TensorType([int(s) for s in a.shape], str(a.dtype)) for a in args]
    params = [relax.Var(f"arg{i}", t) for i, t in enumerate(types[: len(types) - n_out])]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        kernel = bb.add_func(func.with_attr("global_symbol", "kernel"), "kernel")
        out_types = types[len(params):]
        out = bb.emit(relax.call_tir(kernel, params, out_types if n_out > 1 else out_types[0]))
        bb.emit_func_output(out)
    split = relax.transform.SplitLayoutRewritePreproc()(bb.get())

    index = {p: i for i, p in enumerate(params)}  # relax Vars: names repeat, objects do not
    bound: dict[str, Any] = {}
    prepack_gv = main_gv = None
    prepack_in: list[int] = []
    for block in split["main"].body.blocks:
        for binding in block.bindings:
            bound[binding.var] = binding.value
    for value in bound.values():
        if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir":
            callee = value.args[0]
            if callee.name_hint.endswith("_weight_prepack"):
                prepack_gv = callee
                prepack_in = [index[a] for a in value.args[1].fields]
            else:
                main_gv = callee
                main_args = list(value.args[1].fields)
    if prepack_gv is None or main_gv is None:
        return mod, None
    prepacked = split[main_gv]
    shapes = ArgInfo.from_entry_func(tvm.IRModule({"main": prepacked}), remove_preproc=False)
    outputs: list[tuple[int, tuple[int, ...], str]] = [None] * len(prepack_in)  # type: ignore[list-item]
    for pos, arg in enumerate(main_args):
        if arg in index:
            continue
        source = bound.get(arg)  # a TupleGetItem of the prepack call (or the call itself)
        k = int(getattr(source, "index", 0))
        outputs[k] = (pos, tuple(int(s) for s in shapes[pos].shape), str(shapes[pos].dtype))
    if any(o is None for o in outputs):
        return mod, None
    out = tvm.IRModule({
        "main": prepacked.with_attr("global_symbol", "main"),
        "prepack": split[prepack_gv].with_attr("global_symbol", "prepack"),
    })
    return out, PrepackPlan(tuple(prepack_in), tuple(outputs))


__all__ = ["PrepackPlan", "has_prepack", "output_count", "pack_artifact", "split_prepack", "unpack_artifact"]
