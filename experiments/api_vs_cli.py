"""The same user path through the CLI and through the Python API: do both give the same figures, within noise?

The CLI is a thin parse-and-print over :mod:`autosearch.api`; this checks it end to end. Two results directories
of :mod:`experiments.user_path`, one made with the CLI and one with ``--api`` (the same model, trials and seed),
are set side by side: what each run and report wrote, then both tuned models, compiled from their databases,
timed again taking turns in fresh processes with ONNX Runtime beside them, outputs checked against ONNX Runtime's::

    python -m experiments.user_path --tag quickstart-cli-zen5
    python -m experiments.user_path --api --tag quickstart-api-zen5
    python -m experiments.api_vs_cli --cli experiments/results/user-tiny-yolov2-quickstart-cli-zen5 \\
        --api experiments/results/user-tiny-yolov2-quickstart-api-zen5 --out api-vs-cli-zen5

Two searches are two samples of the measurement noise (the trials the search is shown differ with the timings it
meets), so "the same" means within the spread of runs of one path, not bit for bit. Writes
``experiments/results/OUT.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from autosearch.tables import markdown_table
from experiments.lib.io import publish, read_json, results_path
from experiments.lib.machine import host_label
from experiments.lib.turns import libraries_in_turns
from experiments.user_path import tuned_median


def _path(directory: str) -> dict:
    """What one user_path directory recorded: its summary, the model, the database, the log's trial count."""
    from autosearch.records import read_log

    summary = read_json(os.path.join(directory, "summary.json"))
    if "report" not in summary:
        raise SystemExit(f"{directory}: the user path is not finished (no report in summary.json)")
    run = summary["run"]
    model = run[1] if run[0] == "autosearch.tune" else next(
        (run[i + 1] for i, a in enumerate(run) if a == "--model"), "tiny-yolov2")
    log = next(p for p in (os.path.join(directory, "log.jsonl"), os.path.join(directory, "log.jsonl.gz"))
               if os.path.exists(p))
    trials = sum(1 for _ in read_log(log).trials())
    return {"dir": directory, "model": model, "db": os.path.join(directory, "db"), "summary": summary,
            "trials": trials, "via": "API" if run[0] == "autosearch.tune" else "CLI"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", required=True, help="a user_path results directory made with the CLI")
    parser.add_argument("--api", required=True, help="one made with --api (same model, trials, seed)")
    parser.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and .json")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    paths = [_path(args.cli), _path(args.api)]
    if [p["via"] for p in paths] != ["CLI", "API"]:
        parser.error("--cli must be a CLI run and --api an API run (user_path --api)")
    if paths[0]["model"] != paths[1]["model"]:
        parser.error(f"the two runs tuned different models: {paths[0]['model']} and {paths[1]['model']}")

    import autosearch

    model = paths[0]["model"]
    names = [f"TVM tuned via the {p['via']}" for p in paths]
    with tempfile.TemporaryDirectory() as tmp:
        libraries = {name: os.path.join(tmp, f"{p['via']}.so") for name, p in zip(names, paths)}
        for name, p in zip(names, paths):
            autosearch.compile(model, p["db"], libraries[name])
        result = libraries_in_turns(model, libraries, peers=("ort",), rounds=args.rounds, runs=args.runs,
                                    threads=args.threads, work=tmp)
    turns, errors = result.ms, result.error

    ort = turns["ONNX Runtime"]
    rows = []
    for p, name in zip(paths, names):
        s = p["summary"]
        rep = s["report"]
        tuned = tuned_median(rep)
        rows.append([p["via"], f"`{os.path.basename(p['dir'])}`", f"{s['run_secs'] / 60:.1f}", str(p["trials"]),
                     f"{tuned:.2f}", f"{rep['ONNX Runtime']:.2f}", f"{rep['ONNX Runtime'] / tuned:.2f}x",
                     f"{turns[name]:.2f}", f"{ort / turns[name]:.2f}x", f"{errors[name]:.2e}"])
    text = (f"**{model}: the user path through the CLI and through the Python API** ({host_label()}; each path's "
            f"own `run` / `export` / `report` in fresh processes; then both tuned models compiled again and timed "
            f"with ONNX Runtime, {args.threads} threads, each runtime in {args.rounds} fresh processes taking turns, "
            f"{args.runs} runs in all, medians)\n\n"
            + markdown_table(["path", "results", "run min", "trials", "its report: TVM tuned ms", "ONNX Runtime ms",
                              "ONNX Runtime / tuned", "in turns: tuned ms", "ONNX Runtime / tuned",
                              "output vs ONNX Runtime"], rows)
            + f"\n\nIn turns: ONNX Runtime {ort:.2f} ms; the API's tuned model over the CLI's "
              f"{turns[names[1]] / turns[names[0]]:.3f}.\n")
    publish(results_path(args.out), data={"paths": paths, "turns_ms": turns, "errors": errors}, text=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
