"""What the CLI prints: the per-task summary of a run and the end-to-end report, as rich tables.

The API (:mod:`autosearch.api`) computes and returns results; these functions only format them for a console.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from autosearch.api import TuneResult
from autosearch.deploy.profile import LayerProfile, as_tuned_table, layer_table
from autosearch.deploy.profile import Table as ProfileTable  # rich's Table is the printed one
from autosearch.deploy.report import MEMORY_COLUMNS, PEAK_NOTE, RUNTIME_COLUMNS, Report, format_ms


def print_run_summary(console: Console, result: TuneResult) -> None:
    """Per-task table (untuned vs best latency, GFLOPS, speedup, trials, failures), the model's estimate, where the
    time went, log path, PNG."""
    summary = result.summary
    title = f"{result.model} — {result.strategy}"
    table = Table(title=f"{title}: {summary.trials} trials in {summary.elapsed / 60:.1f} min")
    for col in ("#", "task", "w", "untuned ms", "best ms", "CV", "GFLOPS", "speedup", "trials", "failed", "note"):
        table.add_column(col, justify="left" if col in ("task", "note") else "right")
    for s in summary.states:
        if not s.trials and s.baseline is None:
            continue
        base = s.baseline.median if s.baseline is not None and s.baseline.ok else math.nan
        table.add_row(str(s.task.index), s.task.name[:48], str(s.task.weight), format_ms(base),
                      format_ms(s.best_latency), f"{100 * s.best.cv:.1f}%" if s.best else "-",
                      f"{s.best_gflops:.1f}" if s.best else "-", f"{s.speedup:.1f}x" if s.speedup else "-",
                      str(s.trials), str(s.failures), s.done)
    console.print(table)
    if any(s.finalist_results for s in summary.states):
        console.print("best = the finalist with the lowest median over its re-timings in fresh processes; "
                      "best ms and CV are from its tuning trial")
    if result.tuned_secs > 0:
        estimates = ", ".join(f"{layout} {secs * 1e3:.1f} ms"
                              for layout, secs in sorted(result.layout_estimates.items()))
        scope = ""
        if result.layer_layouts:
            from autosearch.frontend.layer_layouts import layout_counts

            scope = (f" of the model export keeps, one layout per convolution ({layout_counts(result.layer_layouts)}, "
                     f"each layer's faster as tuned; the whole models {estimates}), the layout transforms between "
                     + (f"layers timed at {result.transitions_secs * 1e3:.2f} ms, in the estimated model below and "
                        "not in this sum" if result.transitions_secs is not None else "layers not counted"))
        elif result.layout is not None:
            scope = (f" of the {result.layout} model, the faster as tuned (estimated models, re-timed where the "
                     f"finalists were: {estimates})")
        console.print(f"tuned tasks{scope}, weighted: {result.untuned_secs * 1e3:.1f} ms untuned -> "
                      f"{result.tuned_secs * 1e3:.2f} ms ({result.untuned_secs / result.tuned_secs:.1f}x; a layer "
                      "tuned in two forms by the one export keeps)")
    for layout, (trials, progress, behind) in sorted(summary.layouts_dropped.items()):
        console.print(f"the {layout} model stopped taking trials after trial {trials} ({100 * progress:.0f}% of the "
                      f"run), {behind:.2f}x behind the other: past the limit the task scheduler narrows as a run goes")
    if result.model_secs is not None and result.retimed_model_secs is not None:
        # Read from the best trials, the model is usually the faster figure (each task's luckiest timing); when it is
        # the slower one, the usual explanation would say the opposite of what happened: the finalists re-timed
        # faster than the trials had read, as when the tuning ran through a slower spell of the machine, or a
        # finalist other than a task's best trial re-timed fastest.
        why = ("a best trial is the luckiest of many noisy timings" if result.model_secs <= result.retimed_model_secs
               else "the finalists re-timed faster than their trials read: a slower spell of this machine while "
                    "tuning, or a finalist that beat its task's best trial")
        console.print(f"estimated model: {result.model_secs * 1e3:.2f} ms from the best trials, "
                      f"{result.retimed_model_secs * 1e3:.2f} ms with the finalists as re-timed in fresh processes "
                      f"({why}; expect the model near the second)")
    t = summary.timing
    if t:
        g = summary.guidance()
        guided = (f"; cost model {g['featurise_secs'] + g['fit_secs'] + g['predict_secs']:.0f} s of it "
                  f"(featurising {g['featurised']:.0f} configs {g['featurise_secs']:.0f} s, {g['fits']:.0f} fits "
                  f"{g['fit_secs']:.0f} s)") if g["featurised"] or g["fits"] else ""
        console.print(f"wall time {summary.elapsed:.0f} s: measuring {t.get('measure', 0):.0f} s, search "
                      f"{t.get('ask', 0) + t.get('tell', 0):.0f} s{guided}, applying schedules "
                      f"{t.get('apply', 0):.0f} s, task set-up {t.get('setup', 0):.0f} s{_setup_parts(summary)}, "
                      f"finalists {t.get('finalists', 0):.0f} s"
                      + (f", layout transforms {t['transitions']:.0f} s" if "transitions" in t else ""))
    if result.plot:
        console.print(f"log: {result.log}\nplot: {result.plot}")
    else:
        console.print(f"log: {result.log}")


def _setup_parts(summary) -> str:
    """Where the task set-up went, when the tuner split it: design spaces, untuned reference runs, strategies
    and their cost models (scorer, warm start)."""
    parts = getattr(summary, "setup_timing", None) or {}
    if not parts:
        return ""
    return (f" (design spaces {parts.get('space', 0):.0f} s, untuned kernels {parts.get('baseline', 0):.0f} s, "
            f"strategies and cost models {parts.get('strategy', 0):.0f} s)")


def print_report(console: Console, report: Report) -> None:
    """The end-to-end report (:func:`autosearch.report`) as ``python -m autosearch report`` prints it: latency,
    the output checks, TVM's memory, the memory budget, the per-task table and the plot's path."""
    table = Table(title=f"{report.model}: end-to-end latency (ms), {report.threads} threads, "
                        f"{report.tuned_tasks}/{report.task_count} tasks tuned")
    for col in RUNTIME_COLUMNS:
        table.add_column(col, justify="left" if col == "runtime" else "right")
    for row in report.rows:
        table.add_row(*row)
    console.print(table)
    console.print(PEAK_NOTE)
    if report.pace:
        console.print(f"[yellow]{report.pace}[/yellow]")
    for name, check in report.checks.items():
        console.print(check.line(name, markup=True))
    if report.outputs_note:
        console.print(f"note: {report.outputs_note}", markup=False)
    memory_table = Table(title="TVM memory (MiB): computed from the module before the build, and measured")
    for col in MEMORY_COLUMNS:
        memory_table.add_column(col, justify="left" if col == "TVM" else "right")
    for row in report.memory_rows:
        memory_table.add_row(*row)
    console.print(memory_table)
    if report.budget:
        console.print(report.budget, markup=False)
    if report.missing_tasks:
        console.print(f"tasks without a tuned record (TVM default code): {len(report.missing_tasks)}")
    task_table = Table(title="per task")
    for col in ("#", "task", "w", "untuned ms", "tuned ms", "speedup", "share of tuned time"):
        task_table.add_column(col, justify="left" if col == "task" else "right")
    total = sum((t.tuned_secs or 0) * t.weight for t in report.per_task) or 1.0
    for t in report.per_task:
        if t.untuned_secs is None and t.tuned_secs is None:
            continue
        task_table.add_row(str(t.index), t.name[:48], str(t.weight), format_ms(t.untuned_secs or 0),
                           format_ms(t.tuned_secs or 0), f"{t.speedup:.1f}x" if t.speedup else "-",
                           f"{100 * (t.tuned_secs or 0) * t.weight / total:.1f}%")
    console.print(task_table)
    console.print(f"plot: {report.plot}")


def _rich_table(title: str, table: ProfileTable) -> Table:
    out = Table(title=title)
    for i, col in enumerate(table.header):
        out.add_column(col, justify="left" if i < table.left else "right")
    for row in table.rows:
        out.add_row(*row)
    return out


def print_profile(console: Console, profile: LayerProfile, *, top: int = 15) -> None:
    """The profile (:func:`autosearch.profile`) as ``python -m autosearch profile`` prints it: per category, the
    convolutions layer by layer against the first OpenVINO profile (the slowest ratios first, so the layers to work
    on lead), each runtime's slowest ``top`` kernels or nodes and, with a tuning log, the ``top`` kernels that lose
    most in the model against their tasks as tuned: the tables of :meth:`LayerProfile.markdown`, in rich."""
    plain = str  # rich shows Markdown's ** as it is: summary rows are plain here
    console.print(_rich_table(f"{profile.model}: ms per forward pass, profiled ({profile.runs} passes each in "
                              f"{profile.rounds} rounds of turns, {profile.threads} threads, medians)",
                              profile.category_table(strong=plain)))
    for note in profile.notes:
        console.print(note, markup=False)
    peers = profile.runtimes[1:]
    if peers and any(r.ratio(peers[0]) for r in profile.layers):
        table = layer_table(profile.layers, peers, strong=plain, by_ratio=True)
        for row in table.rows[:-1]:  # each layer's ratio coloured: red where the tuned layers are slower
            style = "red" if float(row[-1].rstrip("x")) > 1 else "green"
            row[-1] = f"[{style}]{row[-1]}[/{style}]"
        console.print(_rich_table(f"convolutions by geometry, tuned / {peers[0]} (above 1: the tuned layers are "
                                  "slower)", table))
    for runtime in profile.runtimes:
        title, table = profile.kernel_table(runtime, top)
        console.print(_rich_table(f"{runtime}: {title}", table))
    if profile.as_tuned:
        console.print(_rich_table(f"{profile.runtimes[0]} in the model against as tuned ({profile.log}: each task's "
                                  f"best x its calls); the {min(top, len(profile.as_tuned))} kernels that lose most "
                                  "in the model", as_tuned_table(profile.as_tuned, top, strong=plain)))
