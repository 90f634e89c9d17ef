"""TuningTask: one distinct fused layer of a model, the unit a search strategy tunes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, eq=False)
class TuningTask:
    """A fused TIR kernel extracted from a model.

    ``workload_key`` is the structural hash TVM's MetaSchedule database uses for this module, so
    records exported under it are found again when TVM compiles the whole model.
    """

    index: int
    name: str
    weight: int
    flops: float  # floating-point operations per call
    mod: Any = field(repr=False)  # tvm.IRModule with one PrimFunc "main"
    target: Any = field(repr=False)  # tvm.target.Target
    args: tuple[tuple[tuple[int, ...], str], ...]
    workload_key: str
    # how the model was lowered to get this task (autosearch.frontend.lowering), e.g. {"winograd": "auto"}
    lowering: dict[str, Any] = field(default_factory=dict)

    @property
    def gflop(self) -> float:
        return self.flops / 1e9

    def to_json(self) -> dict[str, Any]:
        """Header written to the tuning log: enough to rebuild the task without the model."""
        from tvm.s_tir.meta_schedule.database import Workload

        from autosearch.frontend.target import target_to_json

        return {
            "index": self.index,
            "name": self.name,
            "weight": self.weight,
            "flops": self.flops,
            "workload_key": self.workload_key,
            "args": [[list(shape), dtype] for shape, dtype in self.args],
            "target": target_to_json(self.target),
            "workload": Workload(self.mod).as_json()[1],
            "lowering": dict(self.lowering),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TuningTask:
        """Rebuild a task from a log header (the inverse of :meth:`to_json`)."""
        import tvm
        from tvm.s_tir.meta_schedule.database import Workload

        workload = Workload.from_json([obj["workload_key"], obj["workload"]])
        return cls(
            index=int(obj["index"]),
            name=obj["name"],
            weight=int(obj["weight"]),
            flops=float(obj["flops"]),
            mod=workload.mod,
            target=tvm.target.Target(obj["target"]),
            args=tuple((tuple(shape), dtype) for shape, dtype in obj["args"]),
            workload_key=obj["workload_key"],
            lowering=dict(obj.get("lowering") or {}),
        )


def workload_key(mod) -> str:
    """The structural hash MetaSchedule's database keys this module by."""
    from tvm.s_tir.meta_schedule.database import Workload

    return str(Workload(mod).as_json()[0])


APPROXIMATION_PREFIX = "T_fast_"  # blocks of fast-math approximations (TOPI's fast_exp, lowering.fast_sigmoid)


def has_root_block(func) -> bool:
    """Whether a PrimFunc's body is a root block, as every function TVM schedules has (and some of its passes
    require)."""
    from tvm import s_tir

    body = func.body
    return isinstance(body, s_tir.SBlockRealize) and body.block.name_hint == "root"


def schedulable(mod) -> bool:
    """Whether a PrimFunc module has a schedule to tune: every function's body a root block of loops and blocks.

    An operator TVM lowers to a call into its runtime (``topk`` calls ``tvm.contrib.sort.topk``: the top-k of an
    NMS-free head, Ultralytics' ``nms=False``) is one opaque block with no loops and no root block around it, and
    MetaSchedule's task extraction lists it all the same; there is nothing to search, and it is compiled as TVM lowers
    it."""
    from tvm import tirx

    return all(has_root_block(f) for _, f in mod.functions_items() if isinstance(f, tirx.PrimFunc))


def model_flops(mod) -> float:
    """TVM's FLOP estimate of a PrimFunc module, without the arithmetic inside fast-math approximations.

    TVM counts an exact ``exp`` or ``sigmoid`` as no FLOPs, but the range reduction and polynomial of
    ``fast_exp`` as ~88 per element; counted, they would add 15% to YOLOv8n's FLOPs and make GFLOPS of
    the same layer differ between ``--fast-math on`` and ``off``. So blocks named ``T_fast_*`` count as
    their exact counterparts do: nothing."""
    import math

    from tvm.s_tir import Schedule
    from tvm.s_tir.analysis import estimate_tir_flops

    total = float(estimate_tir_flops(mod))
    sch = Schedule(mod)
    for gv, func in mod.functions_items():
        if not hasattr(func, "body"):
            continue
        sch.work_on(gv.name_hint)
        for rv in sch.get_child_blocks(sch.get_sblock("root")):
            block = sch.get(rv)
            if block.name_hint.startswith(APPROXIMATION_PREFIX):
                elements = math.prod(int(iv.dom.extent) for iv in block.iter_vars)
                total -= float(estimate_tir_flops(block.body)) * elements
    return max(total, 0.0)


def task_from_module(mod, target, *, index: int = 0, name: str = "main", weight: int = 1,
                     lowering: dict[str, Any] | None = None) -> TuningTask:
    """A TuningTask for one PrimFunc module (FLOPs from TVM's own estimator, see :func:`model_flops`)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    args = tuple(
        (tuple(int(s) for s in a.shape), str(a.dtype)) for a in ArgInfo.from_entry_func(mod, remove_preproc=True)
    )
    return TuningTask(
        index=index,
        name=name,
        weight=int(weight),
        flops=model_flops(mod),
        mod=mod,
        target=target,
        args=args,
        workload_key=workload_key(mod),
        lowering=dict(lowering or {}),
    )
