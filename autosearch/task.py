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
    # how the model was lowered to get this task (autosearch.lowering), e.g. {"winograd": "auto"}
    lowering: dict[str, Any] = field(default_factory=dict)

    @property
    def gflop(self) -> float:
        return self.flops / 1e9

    @property
    def anchor(self) -> str:
        """The compute op that dominates the task (conv2d, matmul, pool_max, ...), from its name."""
        for op in ("conv2d", "matmul", "dense", "pool", "softmax", "resize", "add", "multiply"):
            if op in self.name:
                return op
        return self.name.split("_")[0]

    def to_json(self) -> dict[str, Any]:
        """Header written to the tuning log: enough to rebuild the task without the model."""
        from tvm.s_tir.meta_schedule.database import Workload

        from autosearch.target import target_to_json

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


def task_from_module(mod, target, *, index: int = 0, name: str = "main", weight: int = 1,
                     lowering: dict[str, Any] | None = None) -> TuningTask:
    """A TuningTask for one PrimFunc module (FLOPs from TVM's own estimator)."""
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    args = tuple(
        (tuple(int(s) for s in a.shape), str(a.dtype)) for a in ArgInfo.from_entry_func(mod, remove_preproc=True)
    )
    return TuningTask(
        index=index,
        name=name,
        weight=int(weight),
        flops=float(estimate_tir_flops(mod)),
        mod=mod,
        target=target,
        args=args,
        workload_key=workload_key(mod),
        lowering=dict(lowering or {}),
    )
