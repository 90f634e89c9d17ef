"""The end-to-end report: the tuned model against untuned TVM, ONNX Runtime and OpenVINO, timed alike.

:func:`end_to_end_report` compiles the model untuned and with a tuning database, times every runtime in fresh
processes taking turns (so a slow spell of a shared machine hits them alike), checks their outputs against ONNX
Runtime's, measures their peak memory, and returns a :class:`Report`; it writes the PNG and, when asked, the
Markdown tables. It prints nothing: the CLI prints the report (:func:`autosearch.console.print_report`), and
:func:`autosearch.report` is the same in Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autosearch.deploy.memory import MIB, mib
from autosearch.plots import Bars, plot_bars


def format_ms(seconds: float | None) -> str:
    """Seconds as milliseconds in a table cell; "-" for none, zero or infinity."""
    return f"{seconds * 1e3:.3f}" if seconds and math.isfinite(seconds) else "-"


RUNTIME_COLUMNS = ("runtime", "mean", "median", "max", "min", "std", "speedup vs untuned", "runs", "peak MiB")


def _stats_row(name: str, t, speedup_vs: float | None) -> list[str]:
    if not t.ok:
        return [name, "-", "-", "-", "-", "-", "-", t.error[:60], "-"]
    st = t.stats()
    return [name, f"{st['mean']:.2f}", f"{st['median']:.2f}", f"{st['max']:.2f}", f"{st['min']:.2f}",
            f"{st['std']:.2f}", f"{speedup_vs / st['median']:.1f}x" if speedup_vs else "1.0x", str(len(t.runs)),
            mib(t.model_peak_bytes)]


PEAK_NOTE = ("peak MiB: the process's peak resident memory over loading the model and the runs, above a process "
             "that imported the same runtime and loaded no model")
MEMORY_COLUMNS = ("TVM", "weights", "activations planned", "unplanned", "kernel scratch", "predicted peak",
                  "measured peak", "measured: loading", "measured: runs")


def _memory_rows(timings, compiled: dict) -> list[list[str]]:
    """Per TVM build: its computed memory (:mod:`autosearch.deploy.memory`) beside the measured peaks, all in MiB above
    the baseline."""
    rows = []
    for t in timings:
        estimate = getattr(compiled.get(t.name), "memory", None)
        if estimate is None:
            continue
        load, run = (n - t.baseline_bytes if n and t.baseline_bytes else None
                     for n in (t.load_peak_bytes, t.run_peak_bytes))
        rows.append([t.name, mib(estimate.weight_bytes), mib(estimate.planned_bytes), mib(estimate.unplanned_bytes),
                     mib(estimate.scratch_bytes), mib(estimate.peak_bytes()), mib(t.model_peak_bytes), mib(load),
                     mib(run)])
    return rows


def _budget_line(lowering: dict, tuned) -> str:
    """What ``export --memory-budget`` chose and what it cost, predicted and measured ("" without a budget)."""
    budget = lowering.get("memory_budget")
    if not budget:
        return ""
    wino = sorted(k for k, a in (lowering.get("choices") or {}).items() if a == "winograd")
    measured = f"measured {mib(tuned.model_peak_bytes)} MiB" if tuned.model_peak_bytes else "not measured"
    latency = f", measured median {tuned.stats()['median']:.2f} ms" if tuned.ok else ""
    return (f"memory budget {mib(budget['budget_bytes'])} MiB: layout {lowering.get('layout')}, "
            f"{len(wino)} of {len(lowering.get('choices') or {})} layers as winograd"
            + (f" ({', '.join(wino)})" if wino else "")
            + f"; predicted peak {mib(budget['predicted_bytes'])} MiB, {measured}; predicted latency "
              f"{budget['predicted_secs'] * 1e3:.2f} ms (sum of the tuned tasks){latency}")


TOLERANCE = 1e-3  # max relative error vs ONNX Runtime of an fp32 runtime
LOW_PRECISION_TOLERANCE = 5e-2  # bf16 keeps 8 bits of mantissa (f16: 11): OpenVINO in its default precision
OPENVINO_MISSING = ("OpenVINO is not installed: no OpenVINO rows (pip install openvino, or the project's "
                    "[openvino] extra)")


@dataclass
class Check:
    """A runtime's outputs against ONNX Runtime's: max relative error and the tolerance it is held to."""

    error: float
    tolerance: float
    note: str = ""  # why the tolerance is looser than fp32's

    @property
    def matches(self) -> bool:
        return self.error <= self.tolerance

    def line(self, name: str, *, markup: bool) -> str:
        verdict = "matches" if self.matches else "DIFFERS"
        if markup:
            verdict = f"[green]{verdict}[/green]" if self.matches else f"[red]{verdict}[/red]"
        return (f"{name} output vs ONNX Runtime: max relative error {self.error:.2e} {verdict}"
                + (f" ({self.note})" if self.note else ""))


def _check(timing, ort, precision: str) -> Check:
    """fp32's check judges each slice down to a millionth of the output's largest value; a lower precision's
    down to its tolerance of it (:func:`~autosearch.deploy.timing.relative_error`)."""
    from autosearch.deploy.timing import FLOOR, max_relative_error

    floor = FLOOR if precision == "f32" else LOW_PRECISION_TOLERANCE
    return _check_from(max_relative_error(timing.output_path, ort.output_path, floor=floor), precision)


def _check_from(error: float, precision: str) -> Check:
    if precision == "f32":
        return Check(error, TOLERANCE)
    return Check(error, LOW_PRECISION_TOLERANCE, f"{precision} inference: tolerance {LOW_PRECISION_TOLERANCE:.0e}")


SELECTION_NOTE = ("the model selects its output rows with TopK (an NMS-free head): where scores tie, as a random-weight"
                  " model's saturated ones do, runtimes a rounding apart select or order other rows, so a difference"
                  " here cannot tell a wrong kernel from a tie; every tuned kernel's output was checked against the"
                  " unscheduled kernel's when it was measured")


def selection_note(onnx_model) -> str:
    """:data:`SELECTION_NOTE` for a graph that selects with TopK, else "": the output check then compares rows that
    ties may have put in another order or swapped, for the fp32 runtimes as for the others."""
    return SELECTION_NOTE if any(node.op_type == "TopK" for node in onnx_model.graph.node) else ""


def _beside_peer(checks: dict[str, Check], precision: dict[str, str], peer: str) -> None:
    """Each other row in ``peer``'s precision (OpenVINO at its default, when that is not fp32) also gives ``peer``'s
    deviation: how far that precision moves this model's outputs on these inputs (on a deep net with random weights
    it can exceed the tolerance for OpenVINO itself), so a reader can tell a model's sensitivity from a wrong
    kernel. The verdicts stay as they are."""
    if peer not in checks or precision[peer] == "f32":
        return
    for name, check in checks.items():
        if name != peer and precision[name] == precision[peer]:
            check.note += f"; {peer}: {checks[peer].error:.2e}"


def tuned_row(model, policy) -> tuple[str, str]:
    """(the tuned model's row name, the precision its output is checked in) for ``model`` (an
    :class:`~autosearch.frontend.importer.ImportedModel`) compiled with ``policy``. A model tuned with ``--precision
    auto`` rounds the activations its eligible convolutions read to bf16 whichever layers export kept in bf16
    (:mod:`autosearch.tensor_units.activations`: the tasks must be the tuned ones), so with every layer kept in fp32
    it still computes on bf16 activations: checked as bf16, and named so, not passed off as fp32."""
    from autosearch.frontend.winograd import BF16_WINOGRAD
    from autosearch.tensor_units.intrinsics import rounds_to_bf16

    used = [t for t in model.tasks if policy.uses(t.lowering)]
    bf16 = sum(1 for t in used if t.lowering.get("algorithm") in ("bf16", BF16_WINOGRAD))
    if policy.precision == "bf16":  # every eligible layer, no alternative to count
        bf16 = model.bf16_tasks
    if bf16:
        return f"TVM tuned (bf16 on {bf16} layer{'s' if bf16 > 1 else ''})", "bf16"
    if any(rounds_to_bf16(t.name, t.args) for t in used):  # a kernel that reads or writes bf16
        return "TVM tuned (fp32 layers, bf16 activations)", "bf16"
    return "TVM tuned", "f32"


@dataclass
class _Timed:
    timings: list  # Timing: TVM untuned, TVM tuned, ONNX Runtime, then OpenVINO's rows
    checks: dict[str, Check]
    tuned: Any  # CompiledModel
    untuned: Any  # CompiledModel


def _time_runtimes(model, target, db, policy, *, threads: int, ov_precision: str | None, runs: int, rounds: int,
                   untuned_runs: int, say: Callable[[str], None],
                   layer_layouts: dict[str, str] | None = None) -> _Timed:
    """Compile untuned and tuned TVM (with ``layer_layouts``: one layout per convolution) into a temporary
    directory, time every runtime in fresh processes and check their outputs against ONNX Runtime's; the directory
    is removed before returning."""
    import os
    import tempfile

    import onnx

    from autosearch.deploy.build import compile_model
    from autosearch.deploy.timing import (
        Runtime,
        add_baselines,
        save_inputs,
        time_in_subprocess,
        time_taking_turns,
    )
    with tempfile.TemporaryDirectory(prefix="autosearch-report-") as work:
        onnx_path = os.path.join(work, "model.onnx")
        onnx.save(model.onnx_model, onnx_path)
        inputs = os.path.join(work, "inputs.npz")
        save_inputs(model.input_shapes, inputs)
        say(f"compiling {model.name} untuned and tuned ...")
        untuned = compile_model(model.relax_mod, target, model.tasks, None, os.path.join(work, "untuned.so"))
        tuned = compile_model(model.relax_mod, target, model.tasks, db, os.path.join(work, "tuned.so"),
                              winograd=policy, layout=model.layout, fast_math=model.fast_math,
                              layer_layouts=layer_layouts)
        if tuned.mismatch:
            say(f"warning: {tuned.mismatch}")
        name, precision = tuned_row(model, policy)
        turns = [Runtime("ONNX Runtime", "ort", onnx_path), Runtime(name, "tvm", tuned.path, precision=precision)]
        if ov_precision is not None:
            turns.append(Runtime("OpenVINO (fp32)", "ov", onnx_path))
            if ov_precision != "f32":  # not comparable with the others: shown beside the fp32 row
                turns.append(Runtime(f"OpenVINO (default precision: {ov_precision})", "ov-default", onnx_path,
                                     precision=ov_precision))
        say(f"timing in fresh processes, {threads} threads each ...")
        t_ort, t_tuned, *t_openvino = time_taking_turns(turns, rounds=rounds, runs=runs, inputs_path=inputs,
                                                        threads=threads, out_dir=work)
        untuned_runtime = Runtime("TVM untuned", "tvm", untuned.path)
        t_untuned = time_in_subprocess(untuned_runtime, inputs_path=inputs, runs=untuned_runs, threads=threads,
                                       out_dir=work)
        timings = [t_untuned, t_tuned, t_ort, *t_openvino]
        say("measuring each runtime's baseline memory (imported, no model) ...")
        add_baselines(timings, [untuned_runtime, turns[1], turns[0], *turns[2:]], inputs_path=inputs, threads=threads)
        precision = {r.name: r.precision for r in (untuned_runtime, *turns)}
        checks = {t.name: _check(t, t_ort, precision[t.name]) for t in timings if t is not t_ort and t.ok and t_ort.ok}
        peers = [r.name for r in turns if r.kind == "ov-default"]
        if peers:
            _beside_peer(checks, precision, peers[0])
    return _Timed(timings=timings, checks=checks, tuned=tuned, untuned=untuned)


@dataclass(frozen=True)
class TaskLatency:
    """One task of the compiled model: its untuned latency (from the tuning log's baselines, when a log is given)
    and its tuned one (the database's best), in seconds; None where unknown."""

    index: int
    name: str
    weight: int
    untuned_secs: float | None
    tuned_secs: float | None

    @property
    def speedup(self) -> float | None:
        return self.untuned_secs / self.tuned_secs if self.untuned_secs and self.tuned_secs else None


@dataclass
class Report:
    """What :func:`end_to_end_report` measured: the tables as the CLI prints them and the figures behind them."""

    model: str
    threads: int
    tuned_tasks: int  # tasks of the compiled model the database has a record for
    task_count: int
    missing_tasks: list[str]  # tasks without a tuned record (TVM's default code)
    timings: list  # autosearch.deploy.timing.Timing per runtime: TVM untuned, TVM tuned, ONNX Runtime, OpenVINO's
    rows: list[list[str]]  # the latency table (RUNTIME_COLUMNS), one row per runtime, as printed
    checks: dict[str, Check]  # runtime name -> its outputs against ONNX Runtime's
    memory_rows: list[list[str]]  # TVM's computed and measured memory (MEMORY_COLUMNS), MiB
    budget: str  # what export --memory-budget chose and what it cost ("" without a budget)
    per_task: list[TaskLatency]
    openvino_precision: str | None  # OpenVINO's default inference precision; None: not installed
    plot: str  # the PNG written
    markdown: str | None = None  # the Markdown file written, if asked for
    pace: str = ""  # a warning when a runtime's processes ran at paces far apart (timing.pace_note), else ""
    outputs_note: str = ""  # what the output checks cannot tell on this model (selection_note), else ""
    figures: dict[str, Any] = field(default_factory=dict)  # the measurements as JSON (median ms, bytes, errors)

    @property
    def median_ms(self) -> dict[str, float]:
        """Median end-to-end latency per runtime that ran (ms)."""
        return {t.name: t.stats()["median"] for t in self.timings if t.ok}


def end_to_end_report(model: str, db: str, *, target, policy, layout: str, fast_math: str,
                      layer_layouts: dict[str, str] | None = None, input_shape: str | None = None,
                      log: str | None = None, runs: int, rounds: int,
                      untuned_runs: int = 3, threads: int | None = None, plot: str = "report.png",
                      markdown: str | None = None, on_message: Callable[[str], None] | None = None) -> Report:
    """Untuned TVM, tuned TVM, ONNX Runtime and OpenVINO (when installed) on the same threads, each timed
    in its own process; outputs checked against ONNX Runtime; per-task latencies; the PNG at ``plot`` and the
    tables as Markdown at ``markdown``. ``policy``, ``layout``, ``fast_math``, ``layer_layouts``: the lowering the
    database was tuned with (:func:`autosearch.api.report` reads it from the database). ``on_message``: a line at
    each step (minutes of compiling and timing), and when OpenVINO is missing."""
    from autosearch.deploy.build import import_to_run_here
    from autosearch.deploy.database import database_lowering
    from autosearch.deploy.timing import openvino_default_precision, pace_note
    from autosearch.frontend.database_files import read_database
    from autosearch.records import read_log

    say = on_message or (lambda line: None)
    database, imported, threads = import_to_run_here("report", model, db, target=target, policy=policy,
                                                     layout=layout, fast_math=fast_math, input_shape=input_shape,
                                                     threads=threads)
    ov_precision = openvino_default_precision()
    if ov_precision is None:
        say(OPENVINO_MISSING)
    timed = _time_runtimes(imported, target, database, policy, threads=threads, ov_precision=ov_precision, runs=runs,
                           rounds=rounds, untuned_runs=untuned_runs, say=say, layer_layouts=layer_layouts)
    timings, checks, tuned = timed.timings, timed.checks, timed.tuned
    t_untuned, t_tuned = timings[0], timings[1]
    base = t_untuned.stats()["median"] if t_untuned.ok else None
    rows = [_stats_row(t.name, t, base) for t in timings]
    memory_rows = _memory_rows(timings, {t_untuned.name: timed.untuned, t_tuned.name: tuned})
    budget = _budget_line(database_lowering(db), t_tuned)

    # per task: tuned latency from the database, untuned from the log's baselines when given
    db_contents = read_database(db)
    baselines = {}
    if log:
        contents = read_log(log)
        baselines = {r.task_key: r.result.median for r in contents.records if r.kind == "baseline" and r.ok}
    if tuned.layer_layouts:  # one layout per convolution: its kernels, of both layouts' tasks and the transposes
        indices = {key: int(h.get("index", i)) for i, (key, h) in enumerate(contents.tasks.items())} if log else {}
        kernels = [(indices.get(k.workload_key, i), k.name, k.calls, k.workload_key)
                   for i, k in enumerate(tuned.kernels)]
    else:  # the compiled model's tasks
        kernels = [(t.index, t.name, t.weight, t.workload_key) for t in imported.tasks if policy.uses(t.lowering)]
    per_task = []
    for index, name, weight, key in kernels:
        best = db_contents.best(key)
        per_task.append(TaskLatency(index, name, weight, baselines.get(key), best.latency if best else None))

    ok = [t for t in timings if t.ok]
    peaks = [t.model_peak_bytes / MIB if t.model_peak_bytes is not None else math.nan for t in ok]
    plot_bars([_plot_label(t.name) for t in ok],
              [Bars([t.stats()["median"] for t in ok], "median latency (ms, log scale)", log_scale=True,
                    errors=[t.stats()["std"] for t in ok]),
               Bars(peaks, "peak memory (MiB above the runtime imported)")],
              plot, title=f"{imported.name}, {threads} threads")
    figures = {"model": imported.name, "threads": threads,
               "runtimes": {t.name: t.stats() if t.ok else {"error": t.error} for t in timings},
               "memory": {t.name: _memory_figures(t) for t in timings},
               "tvm_memory": {name: c.memory.to_json() for name, c in ((t_untuned.name, timed.untuned),
                                                                        (t_tuned.name, tuned)) if c.memory},
               "max_rel_error_vs_ort": {name: c.error for name, c in checks.items()},
               "openvino_default_precision": ov_precision,
               "tuned_tasks": len(tuned.tuned_tasks), "tasks": tuned.task_count,
               "process_medians": {t.name: t.process_medians for t in timings if t.process_medians}}
    report = Report(model=imported.name, threads=threads, tuned_tasks=len(tuned.tuned_tasks),
                    task_count=tuned.task_count, missing_tasks=list(tuned.missing_tasks), timings=timings, rows=rows,
                    checks=checks, memory_rows=memory_rows, budget=budget, per_task=per_task,
                    openvino_precision=ov_precision, plot=plot, markdown=markdown, figures=figures,
                    pace=pace_note(timings), outputs_note=selection_note(imported.onnx_model))
    if markdown:
        with open(markdown, "w") as fh:
            fh.write(report_markdown(report))
    return report


def report_markdown(report: Report) -> str:
    """The report's tables and lines as Markdown (``report --markdown``)."""
    parts = [_markdown_table(list(RUNTIME_COLUMNS), report.rows), f"\n{PEAK_NOTE}\n"]
    if report.pace:
        parts.append(f"\n{report.pace}\n")
    parts += [f"\n{check.line(name, markup=False)}\n" for name, check in report.checks.items()]
    if report.outputs_note:
        parts.append(f"\nNote: {report.outputs_note}\n")
    parts += ["\nTVM memory (MiB): computed from the module before the build, and measured\n\n",
              _markdown_table(list(MEMORY_COLUMNS), report.memory_rows)]
    if report.budget:
        parts.append(f"\n{report.budget}\n")
    if report.openvino_precision is None:
        parts.append(f"\n{OPENVINO_MISSING}\n")
    parts.append(f"\n{report.tuned_tasks}/{report.task_count} tasks tuned, {report.threads} threads\n\n")
    parts.append(_markdown_table(["#", "task", "w", "untuned ms", "tuned ms", "speedup"],
                                 [[str(t.index), t.name, str(t.weight), format_ms(t.untuned_secs or 0),
                                   format_ms(t.tuned_secs or 0), f"{t.speedup:.1f}x" if t.speedup else "-"]
                                  for t in report.per_task if t.untuned_secs is not None or t.tuned_secs is not None]))
    return "".join(parts)


def _memory_figures(t) -> dict:
    """A runtime's measured peaks (bytes): of its processes, of its baseline, and the model's (the difference)."""
    return {"peak_bytes": t.peak_bytes, "baseline_bytes": t.baseline_bytes, "model_peak_bytes": t.model_peak_bytes,
            "load_peak_bytes": t.load_peak_bytes, "run_peak_bytes": t.run_peak_bytes}


def _plot_label(name: str) -> str:
    """A runtime's name on two short lines, so that five bars' labels do not overlap."""
    return name.replace(" (default precision: ", " (default: ").replace(" (", "\n(")


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    from autosearch.tables import markdown_table

    return markdown_table(header, rows) + "\n"
