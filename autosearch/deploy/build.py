"""Whole-model builds with a tuning database applied: the shared library and its weights file beside it.

The build goes through the same lowering as the tasks (:mod:`autosearch.frontend.lowering`), so the database's
workload keys match; the weights leave the library (:mod:`autosearch.deploy.artifact`), and on CPU targets the
model's memory is computed before the build (:mod:`autosearch.deploy.memory`). Timing the result is
:mod:`autosearch.deploy.timing`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from autosearch.deploy.memory import MemoryEstimate
from autosearch.errors import UserError, last_line
from autosearch.frontend.lowering import DEFAULT_FAST_MATH


@dataclass(frozen=True)
class Kernel:
    """One kernel of a compiled model: the tuning task it runs (its workload key, as a log or database records
    it) and how many times one forward pass calls it. A profile of the model (``LoadedModel.profile``) names
    kernels; this is how its figures meet the tuning log's, which are per call."""

    name: str
    workload_key: str
    calls: int


@dataclass
class CompiledModel:
    """A model built by :func:`compile_model`: the library, its weights, and which of its tasks were tuned."""

    path: str  # the shared library
    weights_path: str = ""  # its weights, beside it (autosearch.deploy.artifact)
    tuned_tasks: list[str] = field(default_factory=list)
    missing_tasks: list[str] = field(default_factory=list)  # tasks the database has no record for
    memory: MemoryEstimate | None = None  # computed from the module before the build (CPU targets)
    model: str = ""  # the model's name (set by autosearch.api.compile)
    kernels: list[Kernel] = field(default_factory=list)  # every PrimFunc of the lowered model (tuned builds)
    layer_layouts: dict[str, str] = field(default_factory=dict)  # one layout per convolution, where it was built so

    @property
    def task_count(self) -> int:
        """Tasks of the compiled model (a layer tuned both ways counts once: the alternative compiled)."""
        return len(self.tuned_tasks) + len(self.missing_tasks)

    @property
    def mismatch(self) -> str | None:
        """Why a build with a database is the untuned model, for a warning: the database holds none of its tasks
        (TVM applies what matches and builds the rest with its default code, silently); None otherwise."""
        if self.tuned_tasks or not self.missing_tasks:
            return None
        return (f"the database holds none of the model's {len(self.missing_tasks)} tasks, so the model is built "
                "untuned: was it exported from a log of another model, input shape or lowering?")


def import_to_run_here(command: str, model: str, db: str, *, target, policy, layout: str, fast_math: str,
                       input_shape: str | None, threads: int | None):
    """(the database, the imported model, the threads) for a command that builds ``model`` with the database ``db``
    and runs it on this machine beside other runtimes (``report``, ``profile``): the target must be a CPU, the
    database readable, and the model imported as the database was tuned (``policy``, ``layout``, ``fast_math``);
    ``threads`` defaults to the target's cores."""
    from autosearch.frontend.database_files import load_database
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import target_num_cores

    if target.kind.name != "llvm":
        raise UserError(f"{command} runs the model on this machine's CPU: --target must be a CPU (llvm) target, not "
                        f"{target.kind.name}")
    database = load_database(db)
    imported = import_model(model, target, input_shape=input_shape, winograd=policy.mode, layout=layout,
                            fast_math=fast_math, precision=policy.precision)
    return database, imported, threads or target_num_cores(target)


def compile_model(relax_mod, target, tasks, db, out_path: str, *, winograd="auto",
                  layout="NCHW", fast_math=DEFAULT_FAST_MATH, plan_memory: bool = True,
                  prepack: bool = True, layer_layouts: dict[str, str] | None = None) -> CompiledModel:
    """Build the whole model with the database applied (MetaSchedule's apply-database pass, weights
    prepacked as the schedules want them, lowered with ``layout`` and ``fast_math``); tasks missing from
    the database keep TVM's default code. Without a database: TVM's default build (the untuned baseline).
    ``layer_layouts``: one layout per convolution (:mod:`autosearch.frontend.layer_layouts`), built so only where the
    database holds every convolution of that model (else in ``layout``: the result's ``layer_layouts`` says which).
    ``plan_memory=False`` builds without Relax's static memory planning, ``prepack=False`` leaves the weight
    layout rewrites inside the kernels (:mod:`autosearch.frontend.lowering`). The library at ``out_path`` holds the
    code; the weights, transformed as the kernels read them, go to a file beside it
    (:mod:`autosearch.deploy.artifact`). On CPU targets the result carries the model's computed memory
    (:mod:`autosearch.deploy.memory`)."""
    from autosearch.deploy.artifact import lift_weights, save_weights, weights_path
    from autosearch.deploy.memory import estimate_memory
    from autosearch.frontend.fold import ConstantFolder
    from autosearch.frontend.lowering import apply_database, build_module, lower, untuned_module, winograd_policy
    from autosearch.tvm_compat import import_tensor_intrinsics

    import_tensor_intrinsics(str(target.kind.name), str(dict(target.export()).get("mtriple", "")))
    policy = winograd_policy(winograd)
    out = CompiledModel(path=out_path, weights_path=weights_path(out_path))
    for task in (t for t in tasks if policy.uses(t.lowering)):  # a layer's unused alternative is no task
        (out.tuned_tasks if db is not None and db.has_workload(task.mod) else out.missing_tasks).append(task.name)
    try:
        if db is None:
            mod = untuned_module(relax_mod, target)  # what tvm.compile's default pipeline builds
        else:
            folder = ConstantFolder()  # the lowering's weight transforms and the prepacking, compiled together
            lowered = lower(relax_mod, target, winograd=winograd, layout=layout, fast_math=fast_math, folder=folder,
                            layer_layouts=layer_layouts)
            if layer_layouts:
                tuned, missing = tuned_kernels(lowered, db)
                if any("conv2d" in name for name in missing):  # a model these tasks do not make: one layout
                    lowered = lower(relax_mod, target, winograd=winograd, layout=layout, fast_math=fast_math,
                                    folder=folder)
                else:  # the kernels of the model built, not the whole layout's tasks
                    out.layer_layouts = dict(layer_layouts)
                    out.tuned_tasks, out.missing_tasks = tuned, missing
            out.kernels = model_kernels(lowered)
            mod = apply_database(lowered, target, db, prepack=prepack, folder=folder)
        if target.kind.name == "llvm":
            out.memory = estimate_memory(mod, target)
        mod, weights = lift_weights(mod)
        ex = build_module(mod, target, plan_memory=plan_memory)
    except Exception as exc:
        raise UserError(f"TVM could not compile the model: {last_line(exc)[:300]}") from exc
    directory = os.path.dirname(os.path.abspath(out_path))
    try:
        os.makedirs(directory, exist_ok=True)
        ex.export_library(out_path)
        save_weights(weights, out_path)
    except OSError as exc:
        raise UserError(f"cannot write {out_path}: {exc.strerror}") from exc
    return out


def tuned_kernels(lowered, db) -> tuple[list[str], list[str]]:
    """The kernels of a lowered model the database has a workload for, and the others (TVM's default code)."""
    import tvm

    tuned, missing = [], []
    for gv, func in lowered.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            has = db.has_workload(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
            (tuned if has else missing).append(gv.name_hint)
    return tuned, missing


def model_kernels(lowered) -> list[Kernel]:
    """The kernels of a lowered model (:func:`autosearch.frontend.lowering.lower`) with their workload keys and
    call counts, in the module's order."""
    from collections import Counter

    import tvm
    from tvm import relax

    from autosearch.frontend.task import workload_key

    calls: Counter[str] = Counter()

    def count(expr) -> None:
        if isinstance(expr, relax.Call):
            calls.update(a.name_hint for a in expr.args if isinstance(a, tvm.ir.GlobalVar))

    for _, func in lowered.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, count)
    out = []
    for gv, func in lowered.functions_items():
        if isinstance(func, relax.Function) or not hasattr(func, "body"):
            continue
        key = workload_key(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
        out.append(Kernel(name=gv.name_hint, workload_key=key, calls=calls[gv.name_hint]))
    return out
