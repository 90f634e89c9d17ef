"""Printing results: the per-task summary of a run (table + PNG)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from autosearch.memory import MIB, mib
from autosearch.plots import Bars, plot_bars, plot_tuning_curves
from autosearch.tuner import TuneSummary


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds and math.isfinite(seconds) else "-"


def print_run_summary(console: Console, summary: TuneSummary, *, log_path: str, png_path: str, title: str) -> None:
    """Per-task table (untuned vs best latency, GFLOPS, speedup, trials, failures), log path, PNG."""
    table = Table(title=f"{title}: {summary.trials} trials in {summary.elapsed / 60:.1f} min")
    for col in ("#", "task", "w", "untuned ms", "best ms", "CV", "GFLOPS", "speedup", "trials", "failed", "note"):
        table.add_column(col, justify="left" if col in ("task", "note") else "right")
    from autosearch.alternatives import choose_layout, layout_totals, task_layouts

    def untuned(s) -> float:
        return s.baseline.median if s.baseline is not None and s.baseline.ok else math.nan

    layouts = layout_totals((s.task.lowering, s.task.weight, s.model_seconds) for s in summary.states)
    leader = choose_layout(layouts)  # --layout auto: the summed tasks are the faster model's (what export keeps)
    total_base = total_best = 0.0
    for s in summary.states:
        if not s.trials and s.baseline is None:
            continue
        base, best = untuned(s), s.best_latency
        in_model = leader is None or "layouts" not in s.task.lowering or leader in task_layouts(s.task.lowering)
        if math.isfinite(base) and math.isfinite(best) and in_model:
            total_base += base * s.task.weight
            total_best += best * s.task.weight
        table.add_row(str(s.task.index), s.task.name[:48], str(s.task.weight), _ms(base), _ms(best),
                      f"{100 * s.best.cv:.1f}%" if s.best else "-", f"{s.best_gflops:.1f}" if s.best else "-",
                      f"{s.speedup:.1f}x" if s.speedup else "-",
                      str(s.trials), str(s.failures), s.done)
    console.print(table)
    if any(s.finalist_results for s in summary.states):
        console.print("best = the finalist with the lowest median over its re-timings in fresh processes; "
                      "best ms and CV are from its tuning trial")
    if total_best > 0:
        scope = ""
        if leader is not None:
            estimates = ", ".join(f"{layout} {secs * 1e3:.1f} ms" for layout, secs in sorted(layouts.items()))
            scope = f" of the {leader} model, the faster as tuned (estimated models: {estimates})"
        console.print(f"tuned tasks{scope}, weighted: {total_base * 1e3:.1f} ms untuned -> {total_best * 1e3:.2f} ms "
                      f"({total_base / total_best:.1f}x; a layer tuned both direct and as winograd counts both)")
    t = summary.timing
    if t:
        g = summary.guidance()
        guided = (f"; cost model {g['featurise_secs'] + g['fit_secs'] + g['predict_secs']:.0f} s of it "
                  f"(featurising {g['featurised']:.0f} configs {g['featurise_secs']:.0f} s, {g['fits']:.0f} fits "
                  f"{g['fit_secs']:.0f} s)") if g["featurised"] or g["fits"] else ""
        console.print(f"wall time {summary.elapsed:.0f} s: measuring {t.get('measure', 0):.0f} s, search "
                      f"{t.get('ask', 0) + t.get('tell', 0):.0f} s{guided}, applying schedules "
                      f"{t.get('apply', 0):.0f} s, task set-up {t.get('setup', 0):.0f} s{_setup_parts(summary)}, "
                      f"finalists {t.get('finalists', 0):.0f} s")
    curves = {f"#{s.task.index} {s.task.name[:30]}": s.history for s in summary.states if s.history}
    if curves:
        plot_tuning_curves(curves, png_path, title=title)
        console.print(f"log: {log_path}\nplot: {png_path}")
    else:
        console.print(f"log: {log_path}")


def _setup_parts(summary) -> str:
    """Where the task set-up went, when the tuner split it: design spaces, untuned reference runs, strategies
    and their cost models (scorer, warm start)."""
    parts = getattr(summary, "setup_timing", None) or {}
    if not parts:
        return ""
    return (f" (design spaces {parts.get('space', 0):.0f} s, untuned kernels {parts.get('baseline', 0):.0f} s, "
            f"strategies and cost models {parts.get('strategy', 0):.0f} s)")


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
    """Per TVM build: its computed memory (:mod:`autosearch.memory`) beside the measured peaks, all in MiB above
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
    from autosearch.deploy import max_relative_error

    error = max_relative_error(timing.output_path, ort.output_path)
    if precision == "f32":
        return Check(error, TOLERANCE)
    return Check(error, LOW_PRECISION_TOLERANCE, f"{precision} inference: tolerance {LOW_PRECISION_TOLERANCE:.0e}")


@dataclass
class _Timed:
    timings: list  # Timing: TVM untuned, TVM tuned, ONNX Runtime, then OpenVINO's rows
    checks: dict[str, Check]
    tuned: object  # CompiledModel
    untuned: object  # CompiledModel


def _time_runtimes(args, console: Console, model, target, db, threads: int, ov_precision: str | None) -> _Timed:
    """Compile untuned and tuned TVM into a temporary directory, time every runtime in fresh processes
    and check their outputs against ONNX Runtime's; the directory is removed before returning."""
    import os
    import tempfile

    import onnx

    from autosearch.deploy import (
        Runtime,
        add_baselines,
        compile_model,
        save_inputs,
        time_in_subprocess,
        time_taking_turns,
    )

    policy = args.winograd_policy
    with tempfile.TemporaryDirectory(prefix="autosearch-report-") as work:
        onnx_path = os.path.join(work, "model.onnx")
        onnx.save(model.onnx_model, onnx_path)
        inputs = os.path.join(work, "inputs.npz")
        save_inputs(model.input_shapes, inputs)
        console.print(f"compiling {model.name} untuned and tuned ...")
        untuned = compile_model(model.relax_mod, target, model.tasks, None, os.path.join(work, "untuned.so"))
        tuned = compile_model(model.relax_mod, target, model.tasks, db, os.path.join(work, "tuned.so"),
                              winograd=policy, layout=model.layout, fast_math=model.fast_math)
        bf16 = sum(1 for t in model.tasks if t.lowering.get("algorithm") == "bf16" and policy.uses(t.lowering))
        if policy.precision == "bf16":  # every eligible layer, no alternative to count
            bf16 = model.bf16_tasks
        turns = [Runtime("ONNX Runtime", "ort", onnx_path),
                 Runtime(f"TVM tuned (bf16 on {bf16} conv layers)", "tvm", tuned.path, precision="bf16") if bf16
                 else Runtime("TVM tuned", "tvm", tuned.path)]
        if ov_precision is not None:
            turns.append(Runtime("OpenVINO (fp32)", "ov", onnx_path))
            if ov_precision != "f32":  # not comparable with the others: shown beside the fp32 row
                turns.append(Runtime(f"OpenVINO (default precision: {ov_precision})", "ov-default", onnx_path,
                                     precision=ov_precision))
        console.print(f"timing in fresh processes, {threads} threads each ...")
        t_ort, t_tuned, *t_openvino = time_taking_turns(turns, rounds=args.rounds, runs=args.runs,
                                                        inputs_path=inputs, threads=threads, out_dir=work)
        untuned_runtime = Runtime("TVM untuned", "tvm", untuned.path)
        t_untuned = time_in_subprocess(untuned_runtime, inputs_path=inputs, runs=args.untuned_runs, threads=threads,
                                       out_dir=work)
        timings = [t_untuned, t_tuned, t_ort, *t_openvino]
        console.print("measuring each runtime's baseline memory (imported, no model) ...")
        add_baselines(timings, [untuned_runtime, turns[1], turns[0], *turns[2:]], inputs_path=inputs, threads=threads)
        precision = {r.name: r.precision for r in (untuned_runtime, *turns)}
        checks = {t.name: _check(t, t_ort, precision[t.name]) for t in timings if t is not t_ort and t.ok and t_ort.ok}
    return _Timed(timings=timings, checks=checks, tuned=tuned, untuned=untuned)


def end_to_end_report(args, console: Console) -> dict:
    """Untuned TVM, tuned TVM, ONNX Runtime and OpenVINO (when installed) on the same threads, each timed
    in its own process; outputs checked against ONNX Runtime; per-task table; Markdown and PNG. Returns
    the figures."""
    from autosearch.deploy import openvino_default_precision
    from autosearch.errors import UserError
    from autosearch.export import database_lowering, load_database, read_database
    from autosearch.importer import import_model
    from autosearch.records import read_log
    from autosearch.target import parse_target, target_num_cores

    target = parse_target(args.target)
    if target.kind.name != "llvm":
        raise UserError(f"report times every runtime on this machine's CPU: --target must be a CPU (llvm) "
                        f"target, not {target.kind.name}")
    db = load_database(args.db)
    threads = args.threads or target_num_cores(target)
    policy = args.winograd_policy
    model = import_model(args.model, target, input_shape=args.input_shape, winograd=policy.mode,
                         layout=args.layout_of_db, fast_math=args.fast_math_of_db, precision=policy.precision)
    ov_precision = openvino_default_precision()
    if ov_precision is None:
        console.print(OPENVINO_MISSING, markup=False)  # "[openvino]" is no style
    timed = _time_runtimes(args, console, model, target, db, threads, ov_precision)
    timings, checks, tuned = timed.timings, timed.checks, timed.tuned
    t_untuned, t_tuned = timings[0], timings[1]
    base = t_untuned.stats()["median"] if t_untuned.ok else None

    table = Table(title=f"{model.name}: end-to-end latency (ms), {threads} threads, "
                        f"{len(tuned.tuned_tasks)}/{tuned.task_count} tasks tuned")
    for col in RUNTIME_COLUMNS:
        table.add_column(col, justify="left" if col == "runtime" else "right")
    rows = [_stats_row(t.name, t, base) for t in timings]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(PEAK_NOTE)
    for name, check in checks.items():
        console.print(check.line(name, markup=True))
    memory_rows = _memory_rows(timings, {t_untuned.name: timed.untuned, t_tuned.name: tuned})
    memory_table = Table(title="TVM memory (MiB): computed from the module before the build, and measured")
    for col in MEMORY_COLUMNS:
        memory_table.add_column(col, justify="left" if col == "TVM" else "right")
    for row in memory_rows:
        memory_table.add_row(*row)
    console.print(memory_table)
    budget = _budget_line(database_lowering(args.db), t_tuned)
    if budget:
        console.print(budget, markup=False)
    if tuned.missing_tasks:
        console.print(f"tasks without a tuned record (TVM default code): {len(tuned.missing_tasks)}")

    # per-task: tuned latency from the database, untuned from the log's baselines when given
    db_contents = read_database(args.db)
    baselines = {}
    if args.log:
        contents = read_log(args.log)
        baselines = {r.task_key: r.result.median for r in contents.records if r.kind == "baseline" and r.ok}
    task_table = Table(title="per task")
    for col in ("#", "task", "w", "untuned ms", "tuned ms", "speedup", "share of tuned time"):
        task_table.add_column(col, justify="left" if col == "task" else "right")
    per_task = []
    for task in (t for t in model.tasks if policy.uses(t.lowering)):  # the compiled model's tasks
        best = db_contents.best(task.workload_key)
        per_task.append((task, baselines.get(task.workload_key), best.latency if best else None))
    total = sum((b or 0) * t.weight for t, _, b in per_task) or 1.0
    for task, untuned_s, tuned_s in per_task:
        if untuned_s is None and tuned_s is None:
            continue
        task_table.add_row(str(task.index), task.name[:48], str(task.weight), _ms(untuned_s or 0), _ms(tuned_s or 0),
                           f"{untuned_s / tuned_s:.1f}x" if untuned_s and tuned_s else "-",
                           f"{100 * (tuned_s or 0) * task.weight / total:.1f}%")
    console.print(task_table)

    plot = args.plot or "report.png"
    ok = [t for t in timings if t.ok]
    peaks = [t.model_peak_bytes / MIB if t.model_peak_bytes is not None else math.nan for t in ok]
    plot_bars([_plot_label(t.name) for t in ok],
              [Bars([t.stats()["median"] for t in ok], "median latency (ms, log scale)", log_scale=True,
                    errors=[t.stats()["std"] for t in ok]),
               Bars(peaks, "peak memory (MiB above the runtime imported)")],
              plot, title=f"{model.name}, {threads} threads")
    console.print(f"plot: {plot}")
    figures = {"model": model.name, "threads": threads,
               "runtimes": {t.name: t.stats() if t.ok else {"error": t.error} for t in timings},
               "memory": {t.name: _memory_figures(t) for t in timings},
               "tvm_memory": {name: c.memory.to_json() for name, c in ((t_untuned.name, timed.untuned),
                                                                        (t_tuned.name, tuned)) if c.memory},
               "max_rel_error_vs_ort": {name: c.error for name, c in checks.items()},
               "openvino_default_precision": ov_precision,
               "tuned_tasks": len(tuned.tuned_tasks), "tasks": tuned.task_count}
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(_markdown_table(list(RUNTIME_COLUMNS), rows))
            fh.write(f"\n{PEAK_NOTE}\n")
            for name, check in checks.items():
                fh.write(f"\n{check.line(name, markup=False)}\n")
            fh.write("\nTVM memory (MiB): computed from the module before the build, and measured\n\n")
            fh.write(_markdown_table(list(MEMORY_COLUMNS), memory_rows))
            if budget:
                fh.write(f"\n{budget}\n")
            if ov_precision is None:
                fh.write(f"\n{OPENVINO_MISSING}\n")
            fh.write(f"\n{len(tuned.tuned_tasks)}/{tuned.task_count} tasks tuned, {threads} threads\n\n")
            fh.write(_markdown_table(["#", "task", "w", "untuned ms", "tuned ms", "speedup"],
                                     [[str(t.index), t.name, str(t.weight), _ms(u or 0), _ms(b or 0),
                                       f"{u / b:.1f}x" if u and b else "-"] for t, u, b in per_task
                                      if u is not None or b is not None]))
    return figures


def _memory_figures(t) -> dict:
    """A runtime's measured peaks (bytes): of its processes, of its baseline, and the model's (the difference)."""
    return {"peak_bytes": t.peak_bytes, "baseline_bytes": t.baseline_bytes, "model_peak_bytes": t.model_peak_bytes,
            "load_peak_bytes": t.load_peak_bytes, "run_peak_bytes": t.run_peak_bytes}


def _plot_label(name: str) -> str:
    """A runtime's name on two short lines, so that five bars' labels do not overlap."""
    return name.replace(" (default precision: ", " (default: ").replace(" (", "\n(")


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
