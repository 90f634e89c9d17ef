"""The kernels one layout per convolution adds between layers, timed at the end of a ``--layout auto`` fp32 run.

Where two neighbouring convolutions take different layouts, the build puts a layout transform between them (a
transpose, or a concatenation or residual add fused with one). No task of either layout's model is such a kernel: it
runs as TVM's default code, and an NHWC -> NCHW transpose of a large map can cost more than its layers gain (a
160 x 160 x 64 map read with a 256-byte stride misses the cache on every load). Export's choice of one layout per
convolution compares the layers' tuned costs; without these kernels' own cost it would keep a model slower than the
whole model in one layout. So the run, once the finalists are re-timed, lowers the model export would keep, takes
the kernels no tuned task accounts for and tunes them as tasks of their own, briefly (their spaces are small), once
per choice; the log keeps their trials (export puts their best in the database) and a record of what each costs
the model (:meth:`autosearch.records.TuningLog.write_transitions`), which export counts
(:func:`autosearch.deploy.database.lowering_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autosearch.frontend.task import TuningTask

if TYPE_CHECKING:
    from autosearch.search.tuner import TuneEvent

log = logging.getLogger(__name__)

# trials per transform kernel, as the scheduler spreads them (a transpose's space is small: a blocked copy sketch of
# the tile size, TVM's parallel-vectorise-unroll)
TRIALS_PER_KERNEL = 8


# the lowering options a task header carries (a log's tasks agree on them: export reads them from any)
RUN_OPTIONS = ("winograd", "layout", "fast_math", "precision")


def transition_tasks(relax_mod, target, lowering: dict[str, Any], headers: dict[str, dict]) -> list[TuningTask] | None:
    """The kernels of the model ``lowering`` (export's :func:`~autosearch.deploy.database.lowering_of`, with
    ``layer_layouts``) builds that none of the log's tasks (``headers``, by workload key) is, as tasks weighted by
    their calls, their lowering records the run's options and ``"transition": True``; None when a convolution is
    among them (the tasks are not the whole model's: compile builds one layout then)."""
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
    known = set(headers)
    options = next((h.get("lowering") or {} for h in headers.values()), {})
    task_lowering = {**{k: options[k] for k in RUN_OPTIONS if k in options}, "transition": True}
    funcs = {gv.name_hint: func for gv, func in lowered.functions_items() if isinstance(func, tvm.tirx.PrimFunc)}
    out = []
    for kernel in model_kernels(lowered):
        if kernel.workload_key in known or kernel.name not in funcs:
            continue
        if "conv2d" in kernel.name:  # as compile_model decides (autosearch.deploy.build)
            return None
        mod = tvm.IRModule({"main": funcs[kernel.name].with_attr("global_symbol", "main")})
        out.append(task_from_module(mod, target, index=len(out), name=kernel.name, weight=kernel.calls,
                                    lowering=task_lowering))
    return out


def tune_transitions(tasks: list[TuningTask], *, runner, tuning_log, strategy: str, layer_layouts: dict[str, str],
                     resume=None, batch: int = 8, seed: int = 0,
                     on_event: Callable[[TuneEvent], None] | None = None) -> dict[str, Any] | None:
    """Tune ``tasks`` (:func:`transition_tasks`) for :data:`TRIALS_PER_KERNEL` trials each (their untuned kernels
    first, their headers and trials logged as any task's: export puts their best in the database, and compile builds
    the model with them), and return the log's ``transitions`` record for ``layer_layouts``: each kernel at the
    faster of its untuned code and its best trial, times its calls; ``seconds`` None when one has neither (then no
    estimate of the model can be made, and export keeps one layout). None when Ctrl-C stopped it: nothing to record,
    a resumed run tunes them again from their logged trials. ``on_event`` gets this sub-run's progress, as the run's
    own (its trials counted from 0)."""
    from autosearch.search.sketch_store import SketchStore
    from autosearch.search.tuner import Tuner

    summary = Tuner(tasks=tasks, runner=runner, log=tuning_log, strategy=strategy,
                    budget=TRIALS_PER_KERNEL * len(tasks), batch=batch, seed=seed, finalists=0, finalist_rounds=0,
                    resume=resume, on_event=on_event, sketch_store=SketchStore()).run() if tasks else None
    if summary is not None and summary.interrupted:
        return None
    kernels = []
    for state in summary.states if summary is not None else []:
        timed = [r.median for r in (state.baseline, state.best) if r is not None and r.ok]
        untuned = state.baseline.median if state.baseline is not None and state.baseline.ok else None
        kernels.append({"name": state.task.name, "workload_key": state.task.workload_key, "calls": state.task.weight,
                        "seconds": min(timed) if timed else None, "untuned_seconds": untuned,
                        "trials": state.trials})
    failed = [k["name"] for k in kernels if k["seconds"] is None]
    if failed:
        log.warning("the layout transforms of one layout per convolution could not all be timed (%s): export "
                     "keeps one layout", ", ".join(failed))
    seconds = None if failed else sum(k["calls"] * k["seconds"] for k in kernels)
    return {"layer_layouts": dict(sorted(layer_layouts.items())), "seconds": seconds, "kernels": kernels}


def is_transition(header: dict) -> bool:
    """Whether a log's task header is such a kernel's (:func:`transition_tasks`)."""
    return bool((header.get("lowering") or {}).get("transition"))


def timed_for(transitions: list[dict[str, Any]], layer_layouts: dict[str, str]) -> dict[str, Any] | None:
    """The last record of ``transitions`` (a log's) timed for exactly this choice of layouts, or None."""
    wanted = dict(sorted(layer_layouts.items()))
    for record in reversed(transitions):
        if dict(sorted((record.get("layer_layouts") or {}).items())) == wanted:
            return record
    return None


__all__ = ["RUN_OPTIONS", "TRIALS_PER_KERNEL", "is_transition", "timed_for", "transition_tasks", "tune_transitions"]
