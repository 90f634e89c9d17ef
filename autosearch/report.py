"""Printing results: the per-task summary of a run (table + PNG)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from autosearch.plots import plot_bars, plot_tuning_curves
from autosearch.tuner import TuneSummary


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds and math.isfinite(seconds) else "-"


def print_run_summary(console: Console, summary: TuneSummary, *, log_path: str, png_path: str, title: str) -> None:
    """Per-task table (untuned vs best latency, GFLOPS, speedup, trials, failures), log path, PNG."""
    table = Table(title=f"{title}: {summary.trials} trials in {summary.elapsed / 60:.1f} min")
    for col in ("#", "task", "w", "untuned ms", "best ms", "CV", "GFLOPS", "speedup", "trials", "failed", "note"):
        table.add_column(col, justify="left" if col in ("task", "note") else "right")
    total_base = total_best = 0.0
    for s in summary.states:
        if not s.trials and s.baseline is None:
            continue
        base = s.baseline.median if s.baseline is not None and s.baseline.ok else math.nan
        best = s.best_latency
        if math.isfinite(base) and math.isfinite(best):
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
        console.print(f"tuned tasks, weighted: {total_base * 1e3:.1f} ms untuned -> {total_best * 1e3:.2f} ms "
                      f"({total_base / total_best:.1f}x)")
    curves = {f"#{s.task.index} {s.task.name[:30]}": s.history for s in summary.states if s.history}
    if curves:
        plot_tuning_curves(curves, png_path, title=title)
        console.print(f"log: {log_path}\nplot: {png_path}")
    else:
        console.print(f"log: {log_path}")


def _stats_row(name: str, t, speedup_vs: float | None) -> list[str]:
    if not t.ok:
        return [name, "-", "-", "-", "-", "-", "-", t.error[:60]]
    st = t.stats()
    return [name, f"{st['mean']:.2f}", f"{st['median']:.2f}", f"{st['max']:.2f}", f"{st['min']:.2f}",
            f"{st['std']:.2f}", f"{speedup_vs / st['median']:.1f}x" if speedup_vs else "1.0x", str(len(t.runs))]


def end_to_end_report(args, console: Console) -> dict:
    """Untuned TVM, tuned TVM and ONNX Runtime on the same threads, each timed in its own process;
    outputs checked against ONNX Runtime; per-task table; Markdown and PNG. Returns the figures."""
    import os
    import tempfile

    import onnx

    from autosearch.deploy import compile_model, max_relative_error, save_inputs, time_in_subprocess, time_taking_turns
    from autosearch.export import load_database, read_database
    from autosearch.records import read_log
    from autosearch.target import parse_target, target_num_cores
    from workloads.importer import import_model

    target = parse_target(args.target)
    db = load_database(args.db)
    threads = args.threads or target_num_cores(target)
    policy = args.winograd_policy
    model = import_model(args.model, target, input_shape=args.input_shape, winograd=policy.mode,
                         layout=args.layout_of_db, fast_math=args.fast_math_of_db)
    work = tempfile.mkdtemp(prefix="autosearch-report-")
    onnx_path = os.path.join(work, "model.onnx")
    onnx.save(model.onnx_model, onnx_path)
    inputs = os.path.join(work, "inputs.npz")
    save_inputs(model.input_shapes, inputs)
    console.print(f"compiling {model.name} untuned and tuned ...")
    untuned = compile_model(model.relax_mod, target, model.tasks, None, os.path.join(work, "untuned.so"))
    tuned = compile_model(model.relax_mod, target, model.tasks, db, os.path.join(work, "tuned.so"),
                          winograd=policy, layout=model.layout, fast_math=model.fast_math)
    console.print(f"timing in fresh processes, {threads} threads each ...")
    t_ort, t_tuned = time_taking_turns([("ort", onnx_path), ("tvm", tuned.path)], rounds=args.rounds,
                                       runs=args.runs, inputs_path=inputs, threads=threads)
    t_untuned = time_in_subprocess("tvm", untuned.path, inputs_path=inputs, runs=args.untuned_runs, threads=threads)
    t_ort.name, t_tuned.name, t_untuned.name = "ONNX Runtime", "TVM tuned", "TVM untuned"
    base = t_untuned.stats()["median"] if t_untuned.ok else None

    table = Table(title=f"{model.name}: end-to-end latency (ms), {threads} threads, "
                        f"{len(tuned.tuned_tasks)}/{tuned.task_count} tasks tuned")
    for col in ("runtime", "mean", "median", "max", "min", "std", "speedup vs untuned", "runs"):
        table.add_column(col, justify="left" if col == "runtime" else "right")
    rows = [_stats_row(t.name, t, base) for t in (t_untuned, t_tuned, t_ort)]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    checks = {}
    if t_ort.ok:
        for t in (t_untuned, t_tuned):
            if t.ok:
                checks[t.name] = max_relative_error(t.output_path, t_ort.output_path)
    for name, err in checks.items():
        verdict = "[green]matches[/green]" if err <= 1e-3 else "[red]DIFFERS[/red]"
        console.print(f"{name} output vs ONNX Runtime: max relative error {err:.2e} {verdict}")
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
    labels = [t.name for t in (t_untuned, t_tuned, t_ort) if t.ok]
    values = [t.stats()["median"] for t in (t_untuned, t_tuned, t_ort) if t.ok]
    errors = [t.stats()["std"] for t in (t_untuned, t_tuned, t_ort) if t.ok]
    plot_bars(labels, values, plot, ylabel="median latency (ms, log scale)", log_scale=True, errors=errors,
              title=f"{model.name}, {threads} threads")
    console.print(f"plot: {plot}")
    figures = {"model": model.name, "threads": threads,
               "runtimes": {t.name: t.stats() if t.ok else {"error": t.error} for t in (t_untuned, t_tuned, t_ort)},
               "max_rel_error_vs_ort": checks, "tuned_tasks": len(tuned.tuned_tasks), "tasks": tuned.task_count}
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(_markdown_table(["runtime", "mean", "median", "max", "min", "std", "speedup vs untuned",
                                      "runs"], rows))
            for name, err in checks.items():
                fh.write(f"\n{name} output vs ONNX Runtime: max relative error {err:.2e}"
                         f" ({'matches' if err <= 1e-3 else 'DIFFERS'})\n")
            fh.write(f"\n{len(tuned.tuned_tasks)}/{tuned.task_count} tasks tuned, {threads} threads\n\n")
            fh.write(_markdown_table(["#", "task", "w", "untuned ms", "tuned ms", "speedup"],
                                     [[str(t.index), t.name, str(t.weight), _ms(u or 0), _ms(b or 0),
                                       f"{u / b:.1f}x" if u and b else "-"] for t, u, b in per_task
                                      if u is not None or b is not None]))
    return figures


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
