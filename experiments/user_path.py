"""What a user gets: ``run`` as README's quick start runs it (or with a time limit), then ``export`` and ``report``.

README's figures for the user's path (the quick start's minutes and its model against ONNX Runtime and OpenVINO;
a time-limited ``run --minutes`` on a bigger model) come from here, not from commands typed by hand:

    python -m experiments.user_path                                  # README's first command, then report
    python -m experiments.user_path --model yolov8n --minutes 15 --seed 1

A CPU without one of this machine's units can be stood in for: ``--target`` (run and report) builds for fewer
features, e.g. AVX512-BF16 without AMX as on AMD Zen 4, and ``--onednn-max-isa`` caps OpenVINO's oneDNN kernels
alike (``ONEDNN_MAX_CPU_ISA``, e.g. ``AVX512_CORE_BF16``) for the report, so both sides run the same units.

Each step is the CLI in a fresh process, as a user would type it (``--log`` and ``--out`` point into the
results; the cache of features and sketches starts empty unless ``--keep-cache``: a new user has none); with
``--api``, each step is instead the Python API's function (``autosearch.tune``, ``export``, ``report``) called
with the same arguments in a fresh process, as a researcher's script would, so the two paths can be set side by
side (``python -m experiments.user_path --api --tag quickstart-api``). Writes
``experiments/results/user-MODEL-TAG/``: ``run.txt`` (run's output), ``log.jsonl``, ``db/``, ``report.md`` and
``report.png``, ``summary.json`` (the run's wall time and the report's medians). Resumable by step: a finished
step is not repeated; a run killed midway is started again from an empty log (its minutes would not add up).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

from experiments.lib.io import ROOT, read_json, results_path, write_json
from experiments.lib.machine import host_label


def _cli(args: list[str], out_path: str, env: dict[str, str]) -> tuple[int, float]:
    """``python -m autosearch ARGS`` with its output streamed to ``out_path``; (exit code, wall seconds)."""
    start = time.perf_counter()
    with open(out_path, "w") as out:
        out.write(f"$ python -m autosearch {' '.join(args)}\n")
        out.flush()
        proc = subprocess.run([sys.executable, "-m", "autosearch", *args], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, env=env)
    return proc.returncode, time.perf_counter() - start


# One API call in a fresh process: argv[1] is [function name, positional args, keyword args] as JSON.
_API_STEP = """
import json, sys
import autosearch
name, args, kwargs = json.loads(sys.argv[1])
result = getattr(autosearch, name)(*args, **kwargs)
if name == "tune":
    print(f"{result.trials} trials in {result.elapsed_secs / 60:.1f} min; layout {result.layout}; estimate "
          f"{result.model_secs}, re-timed {result.retimed_model_secs}; interrupted {result.interrupted}")
else:
    print(result)
"""


def _api(name: str, args: list, kwargs: dict, out_path: str, env: dict[str, str]) -> tuple[int, float]:
    """``autosearch.NAME(*args, **kwargs)`` in a fresh Python process, output to ``out_path``; (exit code, wall
    seconds)."""
    call = json.dumps([name, args, kwargs])
    start = time.perf_counter()
    with open(out_path, "w") as out:
        out.write(f"$ autosearch.{name}(*{args!r}, **{kwargs!r})\n")
        out.flush()
        proc = subprocess.run([sys.executable, "-c", _API_STEP, call], cwd=ROOT, stdout=out,
                              stderr=subprocess.STDOUT, env=env)
    return proc.returncode, time.perf_counter() - start


def _rel(path: str) -> str:
    """A path as the CLI is given it (from the repository root, where it runs): the kept outputs name no host."""
    return os.path.relpath(path, ROOT)


def report_medians(markdown: str) -> dict[str, float]:
    """Median ms per runtime from ``report``'s first Markdown table."""
    medians = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and re.fullmatch(r"[0-9.]+", cells[2] or ""):
            medians.setdefault(cells[0], float(cells[2]))
        elif medians:
            break
    return medians


def tuned_median(medians: dict[str, float]) -> float | None:
    """The tuned model's median among ``report_medians``' (its row is "TVM tuned", or "TVM tuned (bf16 on ...)")."""
    return next((v for k, v in medians.items() if k.startswith("TVM tuned")), None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="built-in model or .onnx (default: run's own default, as in the quick start)")
    p.add_argument("--minutes", type=float, help="run --minutes")
    p.add_argument("--trials", type=int, help="run --trials")
    p.add_argument("--seed", type=int, help="run --seed")
    p.add_argument("--tag", help="names the results directory (default: from the options)")
    p.add_argument("--rounds", type=int, default=10, help="report --rounds")
    p.add_argument("--runs", type=int, default=100, help="report --runs")
    p.add_argument("--keep-cache", action="store_true",
                   help="use the user's cache (features, sketches) instead of an empty one")
    p.add_argument("--target", help="run and report --target (a JSON dict: fewer features than the host's)")
    p.add_argument("--onednn-max-isa", help="report with ONEDNN_MAX_CPU_ISA set: OpenVINO's oneDNN kernels capped "
                   "at that ISA (e.g. AVX512_CORE_BF16: no AMX)")
    p.add_argument("--api", action="store_true", help="each step through the Python API (autosearch.tune, export, "
                   "report) in a fresh process instead of the CLI")
    p.add_argument("run_args", nargs="*", help="more arguments for run (after --; not with --api)")
    args = p.parse_args()
    if args.api and args.run_args:
        p.error("run arguments after -- are the CLI's: not with --api")

    # a user's .onnx: the CLI runs from the repository's root, and the results are named by the file's name
    model_arg = os.path.abspath(args.model) if args.model and os.path.exists(args.model) else args.model
    model = model_arg or "tiny-yolov2"
    tag = args.tag or "-".join(x for x in (
        "quickstart" if not (args.model or args.minutes or args.trials) else "",
        f"{args.minutes:g}min" if args.minutes else "", f"{args.trials}trials" if args.trials else "",
        f"seed{args.seed}" if args.seed is not None else "") if x)
    work = results_path(f"user-{os.path.basename(model)}-{tag}")
    os.makedirs(work, exist_ok=True)
    summary_path = os.path.join(work, "summary.json")
    summary = read_json(summary_path) if os.path.exists(summary_path) else {}
    summary.setdefault("cpu", host_label())
    if args.target or args.onednn_max_isa:
        summary.setdefault("stand_in", {"target": args.target, "onednn_max_cpu_isa": args.onednn_max_isa})
    env = dict(os.environ)
    if not args.keep_cache:
        env["AUTOSEARCH_CACHE"] = os.path.join(work, "cache")
    log, db = os.path.join(work, "log.jsonl"), os.path.join(work, "db")

    if "run_secs" not in summary:
        if os.path.exists(log):  # a run killed midway: start again (run --resume would not keep the minutes)
            os.remove(log)
        shutil.rmtree(os.path.join(work, "cache"), ignore_errors=True)
        run = ["run", "--strategy", "optuna", "--log", _rel(log)]
        for flag, value in (("--model", model_arg), ("--minutes", args.minutes), ("--trials", args.trials),
                            ("--seed", args.seed)):
            if value is not None:
                run += [flag, str(value)]
        run += ["--target", args.target] if args.target else []
        run += args.run_args
        if args.api:
            kwargs = {"strategy": "optuna", "log": _rel(log), "trials": args.trials, "minutes": args.minutes,
                      "seed": args.seed if args.seed is not None else 0, "target": args.target}
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            run = ["autosearch.tune", model, kwargs]
            print(f"[run] autosearch.tune({model!r}, **{kwargs})", flush=True)
            code, secs = _api("tune", [model], kwargs, os.path.join(work, "run.txt"), env)
        else:
            print(f"[run] python -m autosearch {' '.join(run)}", flush=True)
            code, secs = _cli(run, os.path.join(work, "run.txt"), env)
        if code != 0:
            raise SystemExit(f"run failed (exit code {code}): see {work}/run.txt")
        summary.update(run=run, run_secs=round(secs, 1))
        write_json(summary_path, summary)
        print(f"[run] {secs / 60:.1f} min", flush=True)
    if "export_secs" not in summary:
        if args.api:
            code, secs = _api("export", [_rel(log), _rel(db)], {"force": True}, os.path.join(work, "export.txt"),
                              env)
        else:
            export = ["export", "--log", _rel(log), "--out", _rel(db), "--force"]
            code, secs = _cli(export, os.path.join(work, "export.txt"), env)
        if code != 0:
            raise SystemExit(f"export failed (exit code {code}): see {work}/export.txt")
        summary.update(export_secs=round(secs, 1))
        write_json(summary_path, summary)
    if "report" not in summary:
        markdown = os.path.join(work, "report.md")
        report = ["report", "--model", model, "--db", _rel(db), "--log", _rel(log), "--rounds", str(args.rounds),
                  "--runs", str(args.runs), "--untuned-runs", "1", "--markdown", _rel(markdown),
                  "--plot", _rel(os.path.join(work, "report.png"))]
        report += ["--target", args.target] if args.target else []
        report_env = {**env, "ONEDNN_MAX_CPU_ISA": args.onednn_max_isa} if args.onednn_max_isa else env
        if args.api:
            kwargs = {"log": _rel(log), "rounds": args.rounds, "runs": args.runs, "untuned_runs": 1,
                      "markdown": _rel(markdown), "plot": _rel(os.path.join(work, "report.png")),
                      "target": args.target}
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            print(f"[report] autosearch.report({model!r}, {_rel(db)!r}, **{kwargs})", flush=True)
            code, secs = _api("report", [model, _rel(db)], kwargs, os.path.join(work, "report.txt"), report_env)
        else:
            print(f"[report] python -m autosearch {' '.join(report)}", flush=True)
            code, secs = _cli(report, os.path.join(work, "report.txt"), report_env)
        if code != 0:
            raise SystemExit(f"report failed (exit code {code}): see {work}/report.txt")
        with open(markdown) as fh:
            summary.update(report=report_medians(fh.read()), report_secs=round(secs, 1))
        write_json(summary_path, summary)
    medians = summary["report"]
    tuned = tuned_median(medians)
    ort = medians.get("ONNX Runtime")
    line = f"{model} ({tag}): run {summary['run_secs'] / 60:.1f} min; median ms " + ", ".join(
        f"{k} {v:g}" for k, v in medians.items())
    if tuned and ort:
        line += f"; tuned vs ONNX Runtime {ort / tuned:.2f}x" + (" faster" if ort > tuned else "")
    print(line + f"; {summary['cpu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
