"""Command line: argument parsing and printing only, over the Python API (:mod:`autosearch.api`: each command
calls one of its functions and prints the result, :mod:`autosearch.console`); the one place that names plug-ins.

Every bad input ends as one line on stderr and exit code 2 (``UserError``), never a traceback (with ``-v``,
the traceback of the internal error behind it, if any, comes first). Internal errors keep their traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import time
import traceback

from autosearch import __version__
from autosearch.api import (
    DEFAULT_BATCH,
    DEFAULT_MINUTES,
    DEFAULT_MODEL,
    DEFAULT_PROFILE_ROUNDS,
    DEFAULT_PROFILE_RUNS,
    DEFAULT_ROUNDS,
    DEFAULT_RUNS,
    DEFAULT_TRIALS,
)
from autosearch.errors import UserError
from autosearch.frontend.layer_layouts import layout_counts
from autosearch.frontend.lowering import (
    DEFAULT_FAST_MATH,
    DEFAULT_LAYOUT,
    DEFAULT_PRECISION,
    FAST_MATH_MODES,
    LAYOUT_MODES,
    PRECISION_MODES,
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _console(stderr: bool = False):
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:  # logs and CI: wide enough that tables are not squashed
        console = Console(stderr=stderr, highlight=False, width=max(console.width, 140))
    return console


@contextlib.contextmanager
def _progress_bars(console):
    """Transient progress bars, one per label: yields ``update(label, done, total)``.

    Rich draws nothing when the output is not a terminal (nohup, CI, a pipe), where a comparison can run for an
    hour: there each label gets a line on stderr at every tenth of its total instead, with the elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if not console.is_terminal:
        start, shown, err = time.monotonic(), {}, _console(stderr=True)

        def line(label: str, done: int, total: int) -> None:
            step = max(1, total // 10)
            if done >= shown.get(label, 0) + step or (done == total and shown.get(label) != total):
                shown[label] = done
                err.print(f"{label}: {done}/{total} ({time.monotonic() - start:.0f} s)")

        yield line
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        ids: dict[str, int] = {}

        def update(label: str, done: int, total: int) -> None:
            if label not in ids:
                ids[label] = bar.add_task(label, total=total)
            bar.update(ids[label], completed=done)

        yield update


def _target_summary(target) -> str:
    cfg = dict(target.export())
    return f"{cfg.get('mcpu') or cfg.get('kind')}, {cfg.get('num-cores', '?')} cores"



# ---------------------------------------------------------------------------------------------- tasks
def cmd_tasks(args: argparse.Namespace) -> int:
    from autosearch.api import load_tasks

    start = time.perf_counter()
    model = load_tasks(args.model, target=args.target, input_shape=args.input_shape, winograd=args.winograd,
                       layout=args.layout, fast_math=args.fast_math, precision=args.precision)
    elapsed = time.perf_counter() - start
    if args.json:
        rows = [
            {"index": t.index, "name": t.name, "weight": t.weight, "flops": t.flops,
             "workload_key": t.workload_key, "args": [[list(s), d] for s, d in t.args], "lowering": t.lowering}
            for t in model.tasks
        ]
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return 0
    from rich.table import Table

    target = model.target
    total = model.flops
    table = Table(title=f"{model.name}: {len(model.tasks)} tuning tasks for {target.kind.name} "
                        f"({_target_summary(target)}, conv2d {model.layout}, fast math {model.fast_math})")
    auto = len(model.layouts) > 1  # two models listed: each task says whose it is; shares are of one model
    for col in ("#", "task", "weight", "GFLOP", "input", "weight/2nd arg", "share") + (("layouts",) if auto else ()):
        table.add_column(col, justify="right" if col in ("#", "weight", "GFLOP", "share") else "left")
    for t in model.tasks:
        shapes = ["x".join(map(str, s)) for s, _ in t.args]
        table.add_row(str(t.index), t.name, str(t.weight), f"{t.gflop:.4f}", shapes[0] if shapes else "",
                      shapes[1] if len(shapes) > 2 else "", f"{100 * t.flops * t.weight / total:.1f}%",
                      *(("+".join(t.lowering.get("layouts", ())),) if auto else ()))
    console = _console()
    console.print(table)
    alternatives = (f", {model.alternatives} of them the winograd alternative of a layer (--winograd auto tunes "
                    "both and export keeps the faster)" if model.alternatives else "")
    if model.bf16_alternatives:
        alternatives += (f", {model.bf16_alternatives} the bf16 alternative of an NHWC layer, matmul or attention "
                         "(--precision auto tunes both and export keeps the faster)")
    if model.bf16_winograd_alternatives:
        alternatives += f", {model.bf16_winograd_alternatives} the bf16 Winograd alternative of a wide 3x3 layer"
    console.print(f"precision: {model.precision} ({model.precision_note})")
    if model.layout_note:
        console.print(f"layout: auto ({model.layout_note})")
    console.print(f"total: {total / 1e9:.3f} GFLOP per forward pass (as TVM counts them, direct convolutions), "
                  f"{len(model.tasks)} tasks ({sum(1 for t in model.tasks if 'conv' in t.name)} conv{alternatives}) "
                  f"— extracted in {elapsed:.1f} s")
    if auto:  # two models: how many tasks each runs (a task both lowerings share counts in both)
        from autosearch.frontend.alternatives import task_layouts

        per_layout = {}
        for t in model.tasks:
            for layout in task_layouts(t.lowering):
                per_layout[layout] = per_layout.get(layout, 0) + 1
        console.print("per layout (--layout auto tunes both models and export keeps the faster): "
                      + ", ".join(f"{layout} model {n} tasks" for layout, n in sorted(per_layout.items())))
    return 0


# ---------------------------------------------------------------------------------------------- run
def _parse_kv(pairs: list[str], flag: str = "--option") -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UserError(f"{flag} {pair!r}: use KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def _install_signal_handlers() -> None:
    """SIGTERM behaves like Ctrl-C: the loop stops, the log keeps every finished batch."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _budget_text(trials: int | None, minutes: float | None) -> str:
    parts = ([f"{trials} trials"] if trials is not None else []) + ([f"{minutes:g} min"] if minutes is not None else [])
    return " or ".join(parts) + (", whichever comes first" if len(parts) == 2 else "")


def _run_options(args: argparse.Namespace) -> dict[str, str]:
    """The strategy options of ``--option KEY=VALUE``, ``--sampler`` and ``--optuna-storage`` (flags for two of
    optuna's options)."""
    options = _parse_kv(args.option)
    if args.sampler:
        options["sampler"] = args.sampler
    if args.optuna_storage:
        options["storage"] = args.optuna_storage
    if (args.sampler or args.optuna_storage) and args.strategy != "optuna":
        raise UserError("--sampler / --optuna-storage apply to --strategy optuna only")
    return options


def cmd_run(args: argparse.Namespace) -> int:
    from autosearch.api import MeasureOptions, TunePlanned, TuneStarted, tune
    from autosearch.console import print_run_summary

    console = _console()
    defaults = {}  # flag not given -> the default used
    if args.model is None:
        defaults["--model"] = DEFAULT_MODEL
    if args.trials is None and args.minutes is None:
        defaults["--trials/--minutes"] = (f"{DEFAULT_TRIALS} trials or {DEFAULT_MINUTES:g} minutes of search, "
                                          "whichever comes first")
    progress = contextlib.ExitStack()  # the progress bar, from the run's start to its end
    bar = []

    def on_event(event) -> None:
        if isinstance(event, TunePlanned):
            if defaults:
                console.print(f"[bold]autosearch[/bold]: no {'/'.join(defaults)} given: tuning "
                              f"{', '.join(defaults.values())} (all tasks, batch {event.batch})"
                              + ("; the finalists' re-timing follows." if "--trials/--minutes" in defaults else "."))
        elif isinstance(event, TuneStarted):
            from autosearch.progress import TuningProgress

            _print_run_header(console, event)
            _install_signal_handlers()
            seconds = event.minutes * 60 if event.minutes is not None else None
            bar.append(progress.enter_context(TuningProgress(console, budget=event.trials, seconds=seconds)))
        else:
            bar[0].update(event)

    measure = MeasureOptions(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, build_workers=args.build_workers,
                             build_timeout=args.build_timeout, run_timeout=args.run_timeout,
                             ray_address=args.ray_address, device_key=args.device_key, gpu_name=args.gpu_name,
                             allow_mixed=args.allow_mixed, cache_state=args.cache_state)
    with progress:
        result = tune(args.model or DEFAULT_MODEL, strategy=args.strategy, trials=args.trials, minutes=args.minutes,
                      tasks=args.tasks, log=args.log, resume=args.resume, target=args.target,
                      input_shape=args.input_shape, winograd=args.winograd, layout=args.layout,
                      fast_math=args.fast_math, precision=args.precision, cost_model=args.cost_model,
                      warm_start=args.warm_start, known_schedules=args.known_schedules,
                      siblings=args.siblings == "on", options=_run_options(args),
                      batch=args.batch, seed=args.seed,
                      early_stop=args.early_stop, finalist_rounds=args.finalist_rounds, runner=args.runner,
                      runner_options=_parse_kv(args.runner_option, "--runner-option"),
                      measure=measure, plot=args.plot, on_event=on_event)
    print_run_summary(console, result)
    if result.interrupted:
        console.print(f"[yellow]interrupted[/yellow]: resume with --resume --log {result.log}")
        return 130
    return 0


def _print_run_header(console, started) -> None:
    """What a run tunes and how, before its first measurement."""
    from autosearch.tensor_units.cpu import bf16_unit

    if started.corrupt:
        console.print(f"[yellow]warning[/yellow]: skipped {len(started.corrupt)} corrupt line(s): {started.corrupt[0]}")
    model, target = started.model, dict(started.target.export())
    console.print(f"model {model.name}: {len(started.tasks)} of {len(model.tasks)} tasks, strategy [bold]"
                  f"{started.strategy}[/bold], conv2d {model.layout}, budget "
                  f"{_budget_text(started.trials, started.minutes)}, runner {started.runner}, target "
                  f"{target.get('mcpu', started.target.kind.name)} x{target.get('num-cores', '?')} — log "
                  f"{started.log}\ncost model: {started.guidance}\nknown schedules: {started.known}\n"
                  + (f"layout: auto ({model.layout_note})\n" if model.layout_note else "")
                  + f"precision: {model.precision} "
                  f"({model.precision_note})"
                  + (f"; the bf16 tasks run unguided: the pre-trained model has no records of "
                       f"{bf16_unit(started.target)} schedules"
                     if started.bf16_unguided else ""))


# ---------------------------------------------------------------------------------------------- export
def cmd_export(args: argparse.Namespace) -> int:
    from autosearch.api import export

    summary = export(args.log, args.out, top_k=args.top_k, force=args.force, memory_budget=args.memory_budget,
                     model=args.model, input_shape=args.input_shape, target=args.target,
                     on_warning=lambda line: _console(stderr=True).print(f"warning: {line}"))
    budget = summary.memory_budget
    console = _console()
    console.print(f"wrote {summary.records} record(s) for {summary.tasks} task(s) to {args.out} "
                  f"(MetaSchedule JSONDatabase)")
    if summary.skipped_tasks:
        console.print(f"no valid record, not exported: {', '.join(summary.skipped_tasks)}")
    if summary.slower_than_untuned:
        console.print(f"not faster than untuned, left to TVM's default code: {', '.join(summary.slower_than_untuned)}")
    if len(summary.layout_totals) == 1 and budget is None:  # --layout auto tuned one model (its run header said why)
        [(layout, secs)] = summary.layout_totals.items()
        console.print(f"layout: {layout}, the one model the run tuned ({secs * 1e3:.1f} ms as the sum of the tasks' "
                      "best latencies, re-timed where the run re-timed them)")
    elif summary.layer_layouts and budget is None:
        totals = ", ".join(f"{layout} {secs * 1e3:.1f} ms" for layout, secs in sorted(summary.layout_totals.items()))
        between = (f"with the layout transforms between layers, timed by the run at "
                   f"{summary.transitions_secs * 1e3:.2f} ms" if summary.transitions_secs is not None
                   else "without the layout transforms between layers")
        mixed = (f"{summary.layer_layouts_secs * 1e3:.1f} ms {between}; "
                 if summary.layer_layouts_secs is not None else "")
        console.print(f"layout: one per convolution, each layer's faster as tuned "
                      f"({layout_counts(summary.layer_layouts)}; {mixed}the whole models "
                      f"{totals}); other convolutions {summary.layout}. compile builds it where the database holds "
                      f"every convolution of it, else the {summary.layout} model")
    elif summary.layout_totals and budget is None:
        totals = ", ".join(f"{layout} {secs * 1e3:.1f} ms" for layout, secs in sorted(summary.layout_totals.items()))
        console.print(f"layout: {summary.layout}, the faster model as tuned ({totals}; sums of the tasks' best "
                      f"latencies, re-timed where the run re-timed them); {summary.other_layout} task(s) of the other "
                      "layout not exported")
    if summary.choices and budget is None:
        # the two kinds of per-layer alternative; in bf16, direct or (the wide 3x3 layers on the dot product) Winograd
        from autosearch.frontend.winograd import BF16_WINOGRAD

        for faster, rival in ((("winograd",), "direct"), (("bf16", BF16_WINOGRAD), "fp32")):
            layers = [a for a in summary.choices.values() if a in (*faster, rival)]
            if layers:
                won = sorted(k for k, a in summary.choices.items() if a in faster)
                named = sorted(k for k, a in summary.choices.items() if a in ("winograd", BF16_WINOGRAD))
                console.print(f"layers tuned {rival} and {faster[0]}: {len(won)} of {len(layers)} faster as {faster[0]}"
                              + (f" ({'as bf16 Winograd: ' if rival == 'fp32' else ''}{', '.join(named)})"
                                 if named else "") + "; compile uses the faster"
                              + ("; activations that only convolutions read are rounded to bf16 whichever is kept "
                                 "(an fp32 model: run --precision fp32)" if rival == "fp32" else ""))
    if budget is not None:
        from autosearch.deploy.memory import mib

        wino = sorted(k for k, a in budget.choices.items() if a == "winograd")
        console.print(f"memory budget {mib(budget.budget_bytes)} MiB: layout {budget.layout}, {len(wino)} of "
                      f"{len(budget.choices)} layers as winograd" + (f" ({', '.join(wino)})" if wino else "")
                      + f"; predicted peak {mib(budget.predicted.peak_bytes())} MiB, predicted latency "
                        f"{budget.predicted_secs * 1e3:.2f} ms (sum of the tuned tasks)", markup=False)
    return 0


# ---------------------------------------------------------------------------------------------- compile
def cmd_compile(args: argparse.Namespace) -> int:
    from autosearch.api import compile

    compiled = compile(args.model, args.db, args.out, target=args.target, input_shape=args.input_shape,
                       winograd=args.winograd, layout=args.layout, fast_math=args.fast_math, precision=args.precision)
    console = _console()
    console.print(f"compiled {compiled.model} with {len(compiled.tuned_tasks)}/{compiled.task_count} tuned tasks -> "
                  f"{compiled.path} (weights: {compiled.weights_path})")
    if compiled.layer_layouts:
        console.print(f"layout: one per convolution, as export chose ({layout_counts(compiled.layer_layouts)})")
    if compiled.missing_tasks:
        console.print(f"not in the database (TVM default code): {', '.join(compiled.missing_tasks)}")
    if compiled.mismatch:
        _console(stderr=True).print(f"[yellow]warning[/yellow]: {compiled.mismatch}")
    if compiled.memory is not None:
        from autosearch.deploy.memory import mib

        m = compiled.memory
        console.print(f"predicted peak memory {mib(m.peak_bytes())} MiB (weights {mib(m.weight_bytes)}, activations "
                      f"{mib(m.planned_bytes)} planned, kernel scratch {mib(m.scratch_bytes)}; "
                      "autosearch.deploy.memory)")
    return 0


# ---------------------------------------------------------------------------------------------- report
def cmd_report(args: argparse.Namespace) -> int:
    from autosearch.api import report
    from autosearch.console import print_report

    console = _console()
    result = report(args.model, args.db, log=args.log, target=args.target, input_shape=args.input_shape,
                    winograd=args.winograd, layout=args.layout, fast_math=args.fast_math, precision=args.precision,
                    runs=args.runs, rounds=args.rounds, untuned_runs=args.untuned_runs, threads=args.threads,
                    plot=args.plot or "report.png", markdown=args.markdown,
                    on_message=lambda line: console.print(line, markup=False))
    print_report(console, result)
    medians, tuned = result.median_ms, result.timings[1].name
    ahead = [name for name, ms in medians.items() if not name.startswith("TVM") and ms < medians.get(tuned, 0.0)]
    if ahead:  # where to look next: the kernels and layers the time goes to
        log = f" --log {args.log}" if args.log else ""
        console.print(f"{' and '.join(ahead)} ran faster than {tuned}: python -m autosearch profile --model "
                      f"{args.model} --db {args.db}{log} shows where its time goes, kernel by kernel", markup=False)
    return 0


# ---------------------------------------------------------------------------------------------- profile
def cmd_profile(args: argparse.Namespace) -> int:
    from autosearch.api import profile
    from autosearch.console import print_profile

    console = _console()
    result = profile(args.model, args.db, log=args.log, target=args.target, input_shape=args.input_shape,
                     winograd=args.winograd, layout=args.layout, fast_math=args.fast_math, precision=args.precision,
                     runs=args.runs, rounds=args.rounds, threads=args.threads, top=args.top,
                     plot=args.plot or "profile.png", markdown=args.markdown,
                     on_message=lambda line: console.print(line, markup=False))
    print_profile(console, result, top=args.top)
    console.print(f"plot: {args.plot or 'profile.png'}" + (f"; tables: {args.markdown}" if args.markdown else ""),
                  markup=False)
    return 0


# ---------------------------------------------------------------------------------------------- compare-models
def cmd_compare_models(args: argparse.Namespace) -> int:
    from autosearch.api import compare_models

    png = args.plot or "compare-models.png"
    console = _console()
    with _progress_bars(console) as update:
        report = compare_models(args.log, models=None if args.models is None else args.models.split(","),
                                split=args.split, seed=args.seed, min_records=args.min_records, plot=png,
                                markdown=args.markdown, on_progress=update)
    console.print(report.table)
    console.print(f"plot: {png}")
    return 0


# ---------------------------------------------------------------------------------------------- train-model
def cmd_train_model(args: argparse.Namespace) -> int:
    from autosearch.api import train_model
    from autosearch.cost_models.pretrained import describe

    console = _console()
    with contextlib.ExitStack() as phase:
        shown: dict = {}

        def update(label: str, done: int, total: int) -> None:
            if shown.get("label") != label:  # measuring, then featurising: each phase its own bars
                phase.close()
                shown.update(label=label, bars=phase.enter_context(_progress_bars(console)))
            shown["bars"](label, done, total)

        report = train_model(args.out, logs=args.log, measure=args.measure, minutes=args.minutes,
                             model=args.model, tasks_per_layout=args.tasks_per_layout, per_task=args.per_task,
                             family=args.family, folds=args.folds, exclude_tasks=args.exclude_task or (),
                             seed=args.seed, force=args.force, target=args.target, precision=args.precision,
                             runner=args.runner,
                             runner_options=_parse_kv(args.runner_option, "--runner-option"),
                             on_progress=update, on_message=console.print)
    from rich.table import Table

    table = Table(title=f"held-out accuracy ({len(report.folds)} folds by task)")
    for col in ("fold", "tasks", "pairwise", "top-1"):
        table.add_column(col, justify="right")
    for i, fold in enumerate(report.folds):
        table.add_row(str(i), str(fold["tasks"]), f"{fold['pairwise']:.3f}", f"{fold['top1']:.3f}")
    console.print(table)
    console.print(f"wrote {args.out}: {describe(report.manifest)}, in {report.secs:.0f} s\n"
                  f"use it: python -m autosearch run --cost-model {args.out} ...")
    return 0


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m autosearch",
                     description="Autotune YOLO kernels on Apache TVM: pluggable strategies and cost models, "
                                 "Ray measurement, MetaSchedule tuning logs.")
    parser.add_argument("--version", action="version", version=f"autosearch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log details to stderr, and the traceback behind an error that wraps one (e.g. TVM's)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def model_args(p, default=None):
        p.add_argument("--model", default=default,
                       help="built-in model (tiny-yolov2, yolov3-tiny, yolov8n, yolo11n) or a path to an .onnx file")
        p.add_argument("--input-shape", help="input shapes, e.g. images:1,3,640,640: fixes dynamic axes (batch, "
                                             "height, width); the model's shape arithmetic is folded for it")
        p.add_argument("--target", help="llvm (host CPU, all cores; default), cuda, a TVM tag, or a JSON target dict")
        p.add_argument("--winograd", choices=["auto", "off"],
                       help="auto (default): wide 3x3 stride-1 convolutions are tuned both direct and as Winograd "
                            "F(4x4,3x3), and the faster is compiled; off: TVM's direct conv2d everywhere. "
                            "compile/report default to what the database was tuned with")
        p.add_argument("--layout", choices=LAYOUT_MODES,
                       help=f"conv2d data layout of the lowering (CPU targets; default {DEFAULT_LAYOUT}): auto tunes "
                            "the model both NCHW and NHWC (each with its winograd layers) and compiles the "
                            "faster; NCHW as the ONNX model has it; NHWC (output channels innermost: the layout CPU "
                            "schedules vectorise best; its winograd layers in fp32 only). compile/report follow what "
                            "the database was tuned with")
        p.add_argument("--fast-math", choices=FAST_MATH_MODES,
                       help=f"sigmoid, exp and softmax as TVM's vectorisable approximations (default "
                            f"{DEFAULT_FAST_MATH}; off: libm's exact expf, called once per element). "
                            "compile/report default to what the database was tuned with")
        p.add_argument("--precision", choices=PRECISION_MODES,
                       help=f"convolution and matmul arithmetic (default {DEFAULT_PRECISION}): auto tunes each "
                            "eligible NHWC convolution, matmul (of two activations, or a linear layer's) and attention "
                            "(fused) in "
                            "fp32 and in bf16 (operands bf16, accumulation fp32, on AMX tiles, or AVX512-BF16's dot "
                            "product on CPUs without AMX) where the CPU has either, and compiles the "
                            "faster, else fp32; bf16: every eligible one in bf16; fp32: exact fp32 everywhere. "
                            "compile/report follow the database")

    p = sub.add_parser("tasks", help="list a model's tuning tasks")
    model_args(p, DEFAULT_MODEL)
    p.add_argument("--json", action="store_true", help="print a JSON list for scripts")
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("run", help="tune a model's tasks with a search strategy")
    p.add_argument("--strategy", required=True,
                   help="a registered search strategy: random, annealing, optuna, coordinate_descent or a plug-in's")
    model_args(p)
    p.add_argument("--tasks", help="task indices (0,3 or 0-4) or name fragments (conv); default all")
    p.add_argument("--trials", type=int, help=f"total measurement budget over all tasks (default: {DEFAULT_TRIALS}, "
                                              f"or {DEFAULT_MINUTES:g} minutes if they come first; with "
                                              "--minutes alone, no trial budget)")
    p.add_argument("--minutes", type=float,
                   help="stop searching after this many minutes (with --trials: whichever comes first); the "
                        "finalists' re-timing follows. With --resume: minutes more")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="configs measured per round")
    p.add_argument("--cost-model", default="auto",
                   help="auto (default): the pre-trained model autosearch ships, refit on this run's measurements, "
                        "where it fits the target (x86-64 CPUs), else none; none: unguided; a directory written by "
                        "train-model; or a model trained online: xgb, xgb-rank, rf, gbr, mlp, tvm-xgb, "
                        "sklearn:<Regressor>, with its features as model@features (xgb@pooled: TVM's per-store "
                        "features; default loop features)")
    p.add_argument("--warm-start", help="pre-train the cost model on a tuning log or a TVM database directory")
    p.add_argument("--known-schedules", default="shipped",
                   help="shipped (default): measure first, per task, the configs other machines measured fastest "
                        "for it (autosearch ships them for the tasks it was tuned on); none: the strategy starts "
                        "from scratch; or a tuning log or TVM database directory to take them from")
    p.add_argument("--siblings", choices=("on", "off"), default="off",
                   help="on: tasks of one layer fused with different epilogues lend each other their best config, "
                        "measured as a trial; off (default): each task searches alone")
    p.add_argument("--runner", default="local",
                   help="a registered runner: local (default), ray, or a plug-in's (group autosearch.runners)")
    p.add_argument("--runner-option", action="append", metavar="KEY=VALUE",
                   help="option of a plug-in runner, from its OPTIONS table (repeatable)")
    p.add_argument("--ray-address", help="join an existing Ray cluster (auto or HOST:PORT); default: embedded")
    p.add_argument("--device-key", help="Ray device key to measure on (default: cpu-<mcpu>-<cores> of the target)")
    p.add_argument("--gpu-name", help="GPU name for the cuda-<name> device key")
    p.add_argument("--allow-mixed", action="store_true", help="accept devices of one key that differ")
    p.add_argument("--log", help="tuning log (JSON Lines); default runs/<model>-<strategy>-<time>.jsonl")
    p.add_argument("--resume", action="store_true", help="continue the run recorded in --log")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--early-stop", type=int, help="stop a task after this many trials without improvement")
    p.add_argument("--finalist-rounds", type=int, default=3, help="fresh processes re-timing the finalists (0: none)")
    p.add_argument("--no-plot", dest="plot", action="store_false",
                   help="draw no PNG of the run (default: the model's estimated latency against minutes and "
                        "trials, and the tasks' shares, beside the log; a script of many runs draws what it needs "
                        "from the logs)")
    p.add_argument("--sampler", help="Optuna sampler: tpe (default), random, cmaes, gp, nsga2, qmc")
    p.add_argument("--optuna-storage", help="Optuna storage URL, e.g. sqlite:///study.db (one study per task)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="strategy option (repeatable)")
    p.add_argument("--repeat", type=int, default=30, help="timed repeats per kernel, at most (median is used; "
                   "one call each, caches flushed: as many as fit in 0.2 s, at least 5)")
    p.add_argument("--min-repeat-ms", type=int, default=0, help="minimum duration of one repeat (default 0: one "
                   "call, cold as in the model; > 0: the kernel is called until the repeat lasts this long, warm)")
    p.add_argument("--cache-state", choices=("flushed", "dirty"), default="flushed",
                   help="the caches before each cold repeat: the kernel's weights and output flushed (default), or "
                        "every core's caches full of other data's modified lines, as the layers before it leave them "
                        "in a forward pass")
    p.add_argument("--build-workers", type=int, help="parallel build processes (default: cores)")
    p.add_argument("--build-timeout", type=float, default=60.0, help="seconds per build")
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds per measurement (at least)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("export", help="write the best schedules of a log as a MetaSchedule JSONDatabase")
    p.add_argument("--log", required=True, help="tuning log written by run")
    p.add_argument("--out", required=True, help="directory for database_workload.json / database_tuning_record.json")
    p.add_argument("--top-k", type=int, default=1, help="records kept per task (best first)")
    p.add_argument("--force", action="store_true", help="replace a database already in --out")
    p.add_argument("--memory-budget", type=float, metavar="MIB",
                   help="the fastest choice (per layer Winograd or direct; the layout, if tuned both ways) whose "
                        "predicted peak memory fits MIB MiB (2^20 bytes; weights, activations, kernel scratch, as "
                        "TVM loads and runs the model); needs --model")
    p.add_argument("--model", help="with --memory-budget: the model the log was tuned on (built-in name or .onnx)")
    p.add_argument("--input-shape", help="with --memory-budget: the input shapes it was tuned with")
    p.add_argument("--target", help="with --memory-budget: the target it was tuned for (default: this CPU)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("compile", help="build the whole model with a tuning database applied")
    model_args(p, DEFAULT_MODEL)
    p.add_argument("--db", required=True, help="MetaSchedule JSONDatabase directory (from export or ms.tune_tir)")
    p.add_argument("--out", required=True,
                   help="shared library to write, e.g. model.so; its weights go beside it (model.params)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("report", help="end-to-end latency, peak memory and output deviation: TVM untuned vs tuned "
                                      "vs ONNX Runtime vs OpenVINO (fp32 and its default precision), per-task table")
    model_args(p, DEFAULT_MODEL)
    p.add_argument("--db", required=True, help="MetaSchedule JSONDatabase directory")
    p.add_argument("--log", help="tuning log, for per-task untuned latencies")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed forward passes per runtime, over all rounds")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help="tuned TVM, ONNX Runtime and OpenVINO take turns in this many fresh processes each (--runs "
                        "in all), so a slow spell of a shared machine hits them alike and no one process's luck "
                        "decides a median")
    p.add_argument("--untuned-runs", type=int, default=3, help="runs of untuned TVM (seconds each)")
    p.add_argument("--threads", type=int, help="threads for every runtime (default: target cores)")
    p.add_argument("--markdown", help="also write the tables as Markdown")
    p.add_argument("--plot", help="bar chart PNG (default: report.png)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("profile", help="where the tuned model's time goes: each kernel timed in the model beside "
                                       "OpenVINO's per-node profile (fp32 and its default precision), per category "
                                       "and per convolution layer")
    model_args(p, DEFAULT_MODEL)
    p.add_argument("--db", required=True, help="MetaSchedule JSONDatabase directory")
    p.add_argument("--log", help="the run's tuning log: each kernel's time in the model beside its task's as tuned")
    p.add_argument("--runs", type=int, default=DEFAULT_PROFILE_RUNS, help="profiled forward passes per runtime")
    p.add_argument("--rounds", type=int, default=DEFAULT_PROFILE_ROUNDS,
                   help="the runtimes take turns in this many rounds of passes, so a slow spell of a shared machine "
                        "hits them alike")
    p.add_argument("--threads", type=int, help="threads for every runtime (default: target cores)")
    p.add_argument("--top", type=int, default=15, help="slowest kernels / nodes listed per runtime")
    p.add_argument("--markdown", help="also write the tables as Markdown")
    p.add_argument("--plot", help="PNG: each runtime's categories, each layer's ratio (default: profile.png)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("compare-models", help="leave-one-task-out (or -model-out) accuracy of cost models on "
                                              "measured records")
    p.add_argument("--log", action="append", required=True, help="tuning log or TVM database dir (repeatable)")
    p.add_argument("--models",
                   help="comma-separated cost models (default: every tree and learned one, "
                        "autosearch.cost_models.evaluate.DEFAULT_MODELS); model@features picks the "
                        "features of a tabular one (loop, pooled, pooled+loop, asm, loop+asm, encoding) or of seq "
                        "(sequence, sequence+loop, sequence+loop+asm)")
    p.add_argument("--split", choices=("task", "model"), default="task",
                   help="hold out one task at a time, or one model's tasks (trained on the other models' tasks; "
                        "needs logs whose task headers name their models, as experiments/make_dataset.py writes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", help="also write the table as Markdown")
    p.add_argument("--plot", help="predicted-vs-measured PNG (default: compare-models.png)")
    p.add_argument("--min-records", type=int, default=10,
                   help="hold out only tasks with at least this many valid records (all tasks train)")
    p.set_defaults(func=cmd_compare_models)

    from autosearch.cost_models import PRETRAINED_FAMILIES

    p = sub.add_parser("train-model", help="pre-train a cost model on measured records, for run --cost-model DIR")
    p.add_argument("--log", action="append", default=[], help="tuning log or TVM database dir (repeatable)")
    p.add_argument("--measure", action="store_true",
                   help="measure a dataset on this machine first (DIR/dataset.jsonl; the same command again goes "
                        "on from it): random configs and mutations of the best, of conv tasks spread over --model's "
                        "FLOPs in the layouts a run tunes (and in bf16 where this CPU has a bf16 unit: the model then "
                        "guides those tasks too), round-robin for --minutes; then train on it (and on any --log)")
    p.add_argument("--minutes", type=float, help="--measure: the measuring budget (required)")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"--measure: whose tasks (default {DEFAULT_MODEL})")
    p.add_argument("--tasks-per-layout", type=int, default=6,
                   help="--measure: tasks per lowering (fp32 convolutions per layout; bf16 convolutions, matmuls and "
                   "attentions) measured from the start (default 6); the model's other such tasks join one by one "
                   "once those are done, while the minutes last")
    p.add_argument("--per-task", type=int, default=64, help="--measure: at most this many configs per task")
    p.add_argument("--target", help="--measure: the target to measure for (default: this CPU, all its cores), e.g. "
                                    "a JSON dict of a subset of its features, to measure the AVX512-BF16 dot "
                                    "product's schedules on a CPU that also has AMX")
    p.add_argument("--precision", default="auto",
                   help="--measure: the lowerings whose tasks it measures: auto (default: those a default run tunes, "
                        "fp32 in both layouts, NHWC alone where the unit doubles the fp32 rate, and bf16 on this CPU's "
                        "unit), fp32 (both layouts), or bf16 (the unit's tasks alone)")
    p.add_argument("--runner", default="local",
                   help="--measure: the registered runner that measures: local (default), ray, or a plug-in's")
    p.add_argument("--runner-option", action="append", metavar="KEY=VALUE",
                   help="--measure: option of a plug-in runner, from its OPTIONS table (repeatable)")
    p.add_argument("--out", required=True, help="directory to write (model.ubj + manifest.json)")
    p.add_argument("--family", choices=PRETRAINED_FAMILIES, default="xgb-rank",
                   help="xgb-rank (default): XGBoost ranking; blend: it plus the mlp-rank network (needs PyTorch: "
                        "pip install -e '.[learned]')")
    p.add_argument("--folds", type=int, default=5, help="folds by task for the held-out accuracy")
    p.add_argument("--exclude-task", action="append", metavar="WORKLOAD_KEY",
                   help="leave this task's records out (repeatable), e.g. to test the model on it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="replace a model already in --out")
    p.set_defaults(func=cmd_train_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from autosearch.tvm_compat import lighten_tvm_import

    lighten_tvm_import()
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        if args.verbose and exc.__cause__ is not None:  # e.g. TVM failing to compile: where it failed
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
