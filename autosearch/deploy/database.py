"""MetaSchedule JSONDatabase out: the best schedules for TVM to compile with, and how the model was lowered for them.

The database written here is TVM's own format: ``database_workload.json`` (one
``[structural_hash, base64 IRModule]`` per line) and ``database_tuning_record.json``. It is written
through TVM's ``JSONDatabase`` itself, so TVM loads it back and finds our records by the same
structural hash it computes when it compiles the model. Reading one (a warm start, known schedules, report) is
:mod:`autosearch.frontend.database_files`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from autosearch.errors import UserError, make_writable_dir
from autosearch.frontend.database_files import RECORD_FILE, WORKLOAD_FILE, json_database
from autosearch.frontend.task import TuningTask
from autosearch.records import LogContents
from autosearch.types import Record

log = logging.getLogger(__name__)

LOWERING_FILE = "autosearch_lowering.json"  # how the model was lowered for these tasks (TVM ignores it)


@dataclass
class ExportSummary:
    """What :func:`export_database` (and :func:`autosearch.export`) wrote, and what it left out and why."""

    out_dir: str
    tasks: int = 0
    records: int = 0
    skipped_tasks: list[str] = field(default_factory=list)  # tasks with no valid record
    slower_than_untuned: list[str] = field(default_factory=list)  # best record no faster than untuned
    choices: dict[str, str] = field(default_factory=dict)  # layer -> algorithm measured faster
    layout: str = ""  # the conv2d layout compile will use
    layout_totals: dict[str, float] = field(default_factory=dict)  # --layout auto: model seconds per layout
    other_layout: int = 0  # --layout auto: tasks only the slower layout's model runs, not exported
    layer_layouts: dict[str, str] = field(default_factory=dict)  # one layout per convolution (geometry -> layout)
    layer_layouts_secs: float | None = None  # its estimate (its tasks, and the transforms between layouts if timed)
    transitions_secs: float | None = None  # those transforms, as the run timed them (None: not timed)
    log: str = ""  # the tuning log exported (autosearch.export)
    corrupt: list[str] = field(default_factory=list)  # its lines skipped as corrupt (file:line ...)
    memory_budget: Any = None  # autosearch.deploy.budget.BudgetChoice: what --memory-budget chose (None: no budget)


def _args_info_json(task: TuningTask) -> list:
    return [["TENSOR", dtype, list(shape)] for shape, dtype in task.args]


def tuning_record(task: TuningTask, rec: Record, workload):
    """A MetaSchedule TuningRecord for one of our valid log records."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from autosearch.frontend.target import target_to_json
    from autosearch.tensor_units.intrinsics import register_for

    register_for(str(rec.trace))  # a trace tensorised onto a bf16 unit names its intrinsic
    return TuningRecord.from_json(
        [rec.trace, list(rec.result.latencies), target_to_json(task.target), _args_info_json(task)], workload,
    )


SLOWER = "slower than untuned"


def exported_records(contents: LogContents, key: str) -> tuple[list[Record], str]:
    """The records of a task that export may write, best first, and why there are none ("" if there are).

    Only ``ok`` records (checked against the reference, with a latency) are exported: a failed,
    crashed or wrong-result kernel can never become the schedule TVM compiles. A task whose best
    record is not faster than its untuned baseline is left out (:data:`SLOWER`), so TVM keeps its default
    code there. The best is read as the choice of layout and precision reads it
    (:meth:`~autosearch.records.LogContents.best_seconds`: its re-timed score where its finalists were re-timed):
    a winner whose in-run timing a slow spell of the machine inflated is not dropped for it, which would leave the
    layer to TVM's untuned code in a model chosen for the winner's speed.
    """
    valid = [r for r in contents.ranked(key) if r.trace is not None]
    baseline = contents.baseline(key)
    if valid and baseline is not None and baseline.ok and contents.best_seconds(key) >= baseline.latency:
        return [], SLOWER
    return valid, "" if valid else "no valid record"


def _commit(db, contents: LogContents, key: str, records: list[Record]) -> int:
    """Commit a task's workload and ``records`` to a MetaSchedule database; returns how many."""
    task = TuningTask.from_json(contents.tasks[key])
    workload = db.commit_workload(task.mod)
    if str(workload.as_json()[0]) != key:
        log.warning("task %s: TVM's hash %s differs from the logged key %s (other TVM version?)",
                    task.name, workload.as_json()[0], key)
    for rec in records:
        db.commit_tuning_record(tuning_record(task, rec, workload))
    return len(records)


def memory_database(contents: LogContents):
    """Every task's best exportable record, both layouts and both algorithms of every layer, in a MetaSchedule
    database held in memory: what each of the models the log can compile would be built with."""
    from tvm.s_tir.meta_schedule.database import MemoryDatabase

    db = MemoryDatabase()
    for key in contents.tasks:
        valid, _ = exported_records(contents, key)
        if valid:
            _commit(db, contents, key, valid[:1])
    return db


def check_out_dir(out_dir: str, *, force: bool, create: bool = False) -> list[str]:
    """The database files already in ``out_dir`` (a one-line error unless ``force``), after checking it can be
    written: called before any long work (``export --memory-budget`` compiles), so a wrong ``--out`` fails first.
    The directory is left created only with ``create``: an export that fails later leaves nothing behind."""
    # the lowering file too: left from an earlier export, it would tell compile how another log was tuned
    existing = [f for f in (WORKLOAD_FILE, RECORD_FILE, LOWERING_FILE) if os.path.exists(os.path.join(out_dir, f))]
    if existing and not force:
        raise UserError(f"{out_dir} already holds a database ({', '.join(existing)}); choose another --out or "
                        "replace it with --force")
    new_top, parent = None, os.path.abspath(out_dir)  # the outermost directory the probe creates
    while not os.path.exists(parent):
        new_top, parent = parent, os.path.dirname(parent)
    try:
        make_writable_dir(out_dir)
    finally:
        if new_top is not None and not create:
            shutil.rmtree(new_top, ignore_errors=True)
    return existing


def export_database(contents: LogContents, out_dir: str, *, top_k: int = 1, force: bool = False,
                    lowering: dict | None = None) -> ExportSummary:
    """Write the best ``top_k`` valid records of every task of the model compiled (:func:`exported_records`) as a
    TVM JSONDatabase, with how it is lowered: ``lowering``, when given (``export --memory-budget`` chooses it:
    :mod:`autosearch.deploy.budget`), else :func:`lowering_of` the log (the faster layout and algorithms)."""
    if top_k <= 0:
        raise UserError(f"--top-k must be positive, not {top_k}")
    existing = check_out_dir(out_dir, force=force, create=True)
    if force:
        for f in existing:
            os.unlink(os.path.join(out_dir, f))
    db = json_database(out_dir, create=True)
    summary = ExportSummary(out_dir=out_dir)
    lowering = lowering_of(contents) if lowering is None else lowering
    for key, header in contents.tasks.items():
        if not _in_model(header, lowering):  # the other layout of a --layout auto log: not compiled
            summary.other_layout += 1
            continue
        valid, why = exported_records(contents, key)
        if why == SLOWER:  # tiny element-wise / pooling kernels: parallelising can only lose; TVM's default stays
            summary.slower_than_untuned.append(header["name"])
            continue
        if not valid:
            summary.skipped_tasks.append(header["name"])
            continue
        summary.records += _commit(db, contents, key, valid[:top_k])
        summary.tasks += 1
    if lowering:
        with open(os.path.join(out_dir, LOWERING_FILE), "w") as fh:
            json.dump(lowering, fh, indent=1, sort_keys=True)
            fh.write("\n")
    summary.choices = dict(lowering.get("choices", {}))
    summary.layout = str(lowering.get("layout", ""))
    summary.layout_totals = dict(lowering.get("layout_totals", {}))
    summary.layer_layouts = dict(lowering.get("layer_layouts", {}))
    summary.layer_layouts_secs = lowering.get("layer_layouts_secs")
    summary.transitions_secs = lowering.get("transitions_secs")
    return summary


def _in_model(header: dict, lowering: dict) -> bool:
    """Whether the model ``lowering`` compiles runs this task (a --layout auto log holds two models; one layout per
    convolution runs tasks of both)."""
    from autosearch.frontend.alternatives import task_layouts

    task_lowering = header.get("lowering") or {}
    return ("layouts" not in task_lowering or "layer_layouts" in lowering
            or lowering.get("layout") in task_layouts(task_lowering))


def lowering_of(contents: LogContents) -> dict:
    """How the log's tasks were lowered ({"winograd": mode, "layout": conv2d layout, "fast_math": on/off,
    "precision": fp32/bf16/auto}: logs from before an option have no value for it, and were tuned as its old
    default) and, for layers tuned both ways, the faster algorithm (``choices``: layer key -> "direct" |
    "winograd" | "fp32" | "bf16", by weight x
    best latency of their tasks). A ``--layout auto`` log gets the layout whose model is faster
    (:mod:`autosearch.frontend.alternatives`; ``layout_totals``: each layout's estimated model seconds). A best's
    latency is its re-timed score where its finalists were re-timed (``LogContents.best_seconds``), as the run
    chose."""
    from autosearch.frontend.alternatives import AUTO, choose_layout, layout_totals, model_latency, task_layouts
    from autosearch.frontend.lowering import OLD_LOWERING
    from autosearch.frontend.winograd import choose_algorithms, layer_totals

    def logged(option: str, missing: str) -> set[str]:
        return {str((h.get("lowering") or {}).get(option, missing)) for h in contents.tasks.values()}

    modes = logged("winograd", "") - {""}
    layouts, fast = logged("layout", OLD_LOWERING["layout"]), logged("fast_math", OLD_LOWERING["fast_math"])
    precisions = logged("precision", OLD_LOWERING["precision"])
    if len(modes) != 1 or len(layouts) != 1 or len(fast) != 1 or len(precisions) != 1:
        return {}
    out: dict = {"winograd": modes.pop(), "layout": layouts.pop(), "fast_math": fast.pop(),
                 "precision": precisions.pop()}
    bests = {key: contents.best_seconds(key) for key in contents.tasks}  # re-timed where the finalists were
    headers = dict(contents.tasks)
    if out["layout"] == AUTO:  # tuned in both layouts: the faster model is the one compiled
        baselines = {key: contents.baseline(key) for key in headers}
        layout_totals_ = layout_totals(
            (h.get("lowering") or {}, int(h.get("weight", 1)),
             model_latency(bests[key],
                           baselines[key].latency if baselines[key] is not None and baselines[key].ok else None))
            for key, h in headers.items())
        chosen = choose_layout(layout_totals_)
        if chosen is None:
            raise UserError(f"{contents.path}: no layout's model is measured yet (every --layout auto task needs an "
                            "untuned or tuned latency): continue the run with --resume")
        out.update(layout=chosen, layout_totals=layout_totals_)
        mixed, mixed_secs, transitions = _layer_layouts(headers, bests, chosen, layout_totals_[chosen],
                                                        contents.transitions)
        if mixed:  # one layout per convolution: both layouts' tasks are compiled
            out.update(layer_layouts=mixed, layer_layouts_secs=mixed_secs)
            if transitions is not None:
                out["transitions_secs"] = transitions
        else:
            headers = {k: h for k, h in headers.items() if chosen in task_layouts(h.get("lowering") or {})}
    totals = layer_totals((h.get("lowering") or {}, int(h.get("weight", 1)), bests[key])
                          for key, h in headers.items())
    if totals:
        out["choices"] = choose_algorithms(totals)
    return out


def compiled_tasks(contents: LogContents, lowering: dict) -> list[str]:
    """The keys of the tasks the model ``compile`` builds from this log runs (``lowering``: :func:`lowering_of`'s):
    the faster layout's model, or with one layout per convolution each convolution in its layer's layout and the
    other tasks in the faster model's (which pool or copy follows a convolution's layout is ``ConvertLayout``'s
    choice in the build), and a layer tuned in two forms by the form chosen. Before any model is measured
    (``lowering`` without a layout), every task."""
    from autosearch.deploy.transitions import is_transition, timed_for
    from autosearch.frontend.alternatives import task_layouts
    from autosearch.frontend.layer_layouts import header_layer
    from autosearch.frontend.lowering import LAYOUTS

    leader, choices = lowering.get("layout"), lowering.get("choices") or {}
    layer_layouts = lowering.get("layer_layouts") or {}
    timed = timed_for(contents.transitions, layer_layouts) if layer_layouts else None
    between = {k["workload_key"] for k in (timed or {}).get("kernels", ())}  # the kept model's layout transforms
    out = []
    for key, header in contents.tasks.items():
        task = header.get("lowering") or {}
        if is_transition(header):
            if key in between:
                out.append(key)
            continue
        if "layer" in task and choices.get(task["layer"], task.get("algorithm")) != task.get("algorithm"):
            continue  # the layer's other form
        if "layouts" in task and leader in LAYOUTS:
            geometry, layout = header_layer(header) or (None, None)
            kept = layer_layouts[geometry] == layout if geometry in layer_layouts else leader in task_layouts(task)
            if not kept:
                continue
        out.append(key)
    return out


def _layer_layouts(headers: dict[str, dict], bests: dict[str, float | None], layout: str, model_seconds: float,
                   transitions: list[dict] = ()) -> tuple[dict[str, str], float, float | None]:
    """Each convolution's faster layout (:mod:`autosearch.frontend.layer_layouts`) when that beats the whole model
    in ``layout``, that model's estimate (seconds) and the seconds of the layout transforms between its layers where
    the run timed them for this choice (``transitions``: the log's records, :mod:`autosearch.deploy.transitions`;
    counted in the estimate and the comparison); else ({}, ``model_seconds``, None). fp32 models only: a layer with
    bf16 alternatives is NHWC."""
    from autosearch.deploy.transitions import timed_for
    from autosearch.frontend.layer_layouts import applies, choose, header_entries, mixed_seconds, worth_mixing

    if not applies(h.get("lowering") or {} for h in headers.values()):
        return {}, model_seconds, None
    chosen, costs = choose(header_entries(headers, bests))
    if not worth_mixing(chosen, costs, layout, model_seconds):
        return {}, model_seconds, None
    chosen = dict(sorted(chosen.items()))
    mixed = mixed_seconds(chosen, costs, layout, model_seconds)
    timed = timed_for(list(transitions), chosen)
    if timed is None:  # not timed (a run from before, or stopped before its end): the layers' costs alone
        return chosen, mixed, None
    if timed.get("seconds") is None or not worth_mixing(chosen, costs, layout, model_seconds,
                                                        extra=float(timed["seconds"])):
        return {}, model_seconds, None
    return chosen, mixed + float(timed["seconds"]), float(timed["seconds"])


def database_lowering(path: str) -> dict:
    """The lowering options a database written by :func:`export_database` was tuned with ({} when the
    directory has no lowering file, e.g. a database written by ``ms.tune_tir``). A lowering file that cannot
    be read is an error: compiling with the default lowering instead would leave every task untuned without
    a word (another lowering gives other workload keys)."""
    file = os.path.join(path, LOWERING_FILE)
    if not os.path.exists(file):
        return {}
    try:
        with open(file) as fh:
            value = json.load(fh)
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror}") from exc
    except ValueError as exc:
        raise UserError(f"{file} is corrupt ({exc}): export the database again") from exc
    problem = _lowering_problem(value)
    if problem:
        raise UserError(f"{file} is corrupt ({problem}): export the database again")
    return value


def _lowering_problem(value) -> str:
    """What is wrong with a lowering file's contents ("" when nothing is)."""
    from autosearch.frontend.lowering import FAST_MATH_MODES, LAYOUTS, PRECISION_MODES
    from autosearch.frontend.winograd import ALGORITHMS, MODES, PRECISIONS

    if not isinstance(value, dict):
        return "not a JSON object"
    for option, valid in (("winograd", MODES), ("layout", LAYOUTS), ("fast_math", FAST_MATH_MODES),
                          ("precision", PRECISION_MODES)):
        if option in value and value[option] not in valid:
            return f"{option} {value[option]!r} is none of {', '.join(valid)}"
    choices = value.get("choices", {})
    algorithms = (*ALGORITHMS, *PRECISIONS)
    if not isinstance(choices, dict) or not all(isinstance(k, str) and a in algorithms for k, a in choices.items()):
        return f"choices must map layers to {' or '.join(algorithms)}"
    return ""


