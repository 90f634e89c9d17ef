"""The kernels one layout per convolution adds between layers, timed at the end of a ``--layout auto`` fp32 run.

Where two neighbouring convolutions take different layouts, the build puts a layout transform between them (a
transpose, or a concatenation or residual add fused with one). No task of either layout's model is such a kernel: it
runs as TVM's default code, and an NHWC -> NCHW transpose of a large map can cost more than its layers gain (a
160 x 160 x 64 map read with a 256-byte stride misses the cache on every load). Export's choice of one layout per
convolution compares the layers' tuned costs; without these kernels' own cost it would keep a model slower than the
whole model in one layout. So the run, once the finalists are re-timed, lowers the model export would keep, takes
the kernels no tuned task accounts for, and times each as it will run (its untuned code, on the run's runner), once
per choice; the log keeps the figures (:meth:`autosearch.records.TuningLog.write_transitions`) and export counts
them (:func:`autosearch.deploy.database.lowering_of`).
"""

from __future__ import annotations

import logging
from typing import Any

from autosearch.frontend.task import TuningTask

log = logging.getLogger(__name__)


def transition_tasks(relax_mod, target, lowering: dict[str, Any], tuned_keys) -> list[TuningTask] | None:
    """The kernels of the model ``lowering`` (export's :func:`~autosearch.deploy.database.lowering_of`, with
    ``layer_layouts``) builds that none of ``tuned_keys`` (workload keys) is, as tasks weighted by their calls; None
    when a convolution is among them (the tasks are not the whole model's: compile builds one layout then)."""
    import tvm

    from autosearch.deploy.build import model_kernels
    from autosearch.frontend.fold import ConstantFolder
    from autosearch.frontend.lowering import lower
    from autosearch.frontend.task import task_from_module
    from autosearch.frontend.winograd import WinogradPolicy

    policy = WinogradPolicy.of(str(lowering.get("winograd", "auto")), lowering.get("choices"),
                               precision=str(lowering.get("precision", "fp32")))
    lowered = lower(relax_mod, target, winograd=policy, layout=str(lowering["layout"]),
                    fast_math=str(lowering.get("fast_math", "on")), folder=ConstantFolder(),
                    layer_layouts=dict(lowering["layer_layouts"]))
    known = set(tuned_keys)
    funcs = {gv.name_hint: func for gv, func in lowered.functions_items() if isinstance(func, tvm.tirx.PrimFunc)}
    out = []
    for kernel in model_kernels(lowered):
        if kernel.workload_key in known or kernel.name not in funcs:
            continue
        if "conv2d" in kernel.name:  # as compile_model decides (autosearch.deploy.build)
            return None
        mod = tvm.IRModule({"main": funcs[kernel.name].with_attr("global_symbol", "main")})
        out.append(task_from_module(mod, target, index=len(out), name=kernel.name, weight=kernel.calls,
                                    lowering={"transition": True}))
    return out


def time_transitions(tasks: list[TuningTask], runner, layer_layouts: dict[str, str]) -> dict[str, Any]:
    """Each task's untuned kernel timed by ``runner`` (as :meth:`prepare` times a task's baseline): the log's
    ``transitions`` record. ``seconds``: calls x latency summed, None when a kernel failed (then no estimate of the
    model can be made, and export keeps one layout)."""
    results = runner.prepare_many(tasks) if tasks else []
    kernels = []
    for task, result in zip(tasks, results, strict=True):
        kernels.append({"name": task.name, "workload_key": task.workload_key, "calls": task.weight,
                        "seconds": result.median if result.ok else None,
                        **({} if result.ok else {"error": f"{result.status}: {result.error}"[:300]})})
    failed = [k["name"] for k in kernels if k["seconds"] is None]
    if failed:
        log.warning("the layout transforms of one layout per convolution could not all be timed (%s): export keeps "
                    "one layout", ", ".join(failed))
    seconds = None if failed else sum(k["calls"] * k["seconds"] for k in kernels)
    return {"layer_layouts": dict(sorted(layer_layouts.items())), "seconds": seconds, "kernels": kernels}


def timed_for(transitions: list[dict[str, Any]], layer_layouts: dict[str, str]) -> dict[str, Any] | None:
    """The last record of ``transitions`` (a log's) timed for exactly this choice of layouts, or None."""
    wanted = dict(sorted(layer_layouts.items()))
    for record in reversed(transitions):
        if dict(sorted((record.get("layer_layouts") or {}).items())) == wanted:
            return record
    return None


__all__ = ["time_transitions", "timed_for", "transition_tasks"]
