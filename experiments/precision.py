"""fp32 against bf16, per layer and end to end.

Per layer, from a log tuned with ``--precision auto`` (each eligible NHWC convolution tuned in fp32 and in bf16 on
AMX tiles): the weight x best latency of each alternative's tasks, and the ratio; the same sums decide what
``export`` keeps. End to end, the medians of ``experiments/user_path.py`` runs (``summary.json``: tuned TVM, ONNX
Runtime, OpenVINO fp32 and at its default precision, all timed by ``report`` taking turns in one run)::

    python -m experiments.precision --log experiments/results/user-tiny-yolov2-quickstart/log.jsonl \\
        --summary experiments/results/user-tiny-yolov2-quickstart/summary.json --out precision-tiny-yolov2

Writes ``experiments/results/OUT.md`` (both tables, the CPU named) and ``OUT.png`` (per-layer bars). Reads logs
and summaries only: nothing is measured here, so it is resumable by construction (re-run it when they grow).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import read_json, results_path, write_text


def layer_rows(log_path: str) -> list[dict]:
    """Per layer tuned in both precisions: fp32 and bf16 milliseconds (weight x best latency summed over its tasks;
    ``inf`` when one of them has no valid measurement), heaviest layer first. A best reads as export reads it
    (``LogContents.best_seconds``: its re-timed score where the run re-timed its finalists), so "kept" is what
    ``export`` keeps."""
    from autosearch.frontend.winograd import layer_totals
    from autosearch.records import read_log

    contents = read_log(log_path)
    entries = []
    for key, header in contents.tasks.items():
        lowering = header.get("lowering") or {}
        if lowering.get("algorithm") not in ("fp32", "bf16"):
            continue
        entries.append((lowering, int(header.get("weight", 1)), contents.best_seconds(key)))
    rows = [{"layer": layer, "fp32_ms": by.get("fp32", math.inf) * 1e3, "bf16_ms": by.get("bf16", math.inf) * 1e3}
            for layer, by in layer_totals(entries).items()]
    return sorted(rows, key=lambda r: -min(r["fp32_ms"], r["bf16_ms"]))


def layer_table(rows: list[dict]) -> str:
    body = [[r["layer"], fmt(r["fp32_ms"], 3), fmt(r["bf16_ms"], 3),
             fmt(r["fp32_ms"] / r["bf16_ms"], 2) + "x" if math.isfinite(r["fp32_ms"] / r["bf16_ms"]) else "-",
             "bf16" if r["bf16_ms"] < r["fp32_ms"] else "fp32"] for r in rows]
    fp32, bf16 = sum(r["fp32_ms"] for r in rows), sum(min(r["fp32_ms"], r["bf16_ms"]) for r in rows)
    body.append(["**all layers tuned both ways**", fmt(fp32, 3), fmt(bf16, 3) + " (the faster of each)",
                 fmt(fp32 / bf16, 2) + "x" if math.isfinite(fp32 / bf16) else "-", ""])
    return markdown_table(["layer (NHWC in -> out)", "fp32 ms", "bf16 ms", "bf16 speedup", "kept"], body,
                          align="lrrrl")


def end_to_end_table(summaries: list[str]) -> str:
    """One row per summary: the run's minutes and every runtime's median, with the tuned model's ratio to each."""
    rows = []
    for path in summaries:
        summary = read_json(path)
        medians = summary["report"]
        tuned = next((v for k, v in medians.items() if k.startswith("TVM tuned")), None)
        for name, ms in medians.items():
            if name == "TVM untuned":
                continue
            ratio = "" if tuned is None or name.startswith("TVM tuned") else fmt(ms / tuned, 2) + "x"
            rows.append([os.path.basename(os.path.dirname(path)), fmt(summary["run_secs"] / 60, 1), name, fmt(ms, 2),
                         ratio, summary.get("cpu", "")])
    return markdown_table(["run", "tuning min", "runtime", "median ms", "its time / tuned TVM's", "CPU"], rows,
                          align="lrlrrl")


def plot(rows: list[dict], path: str, title: str) -> None:
    import numpy as np

    from autosearch.plots import figure, save

    fig, axes = figure(size=(9, 0.45 * len(rows) + 1.5), grid="x")
    ax = axes[0][0]
    y = np.arange(len(rows))
    ax.barh(y - 0.2, [r["fp32_ms"] if math.isfinite(r["fp32_ms"]) else 0 for r in rows], 0.4, label="fp32")
    ax.barh(y + 0.2, [r["bf16_ms"] if math.isfinite(r["bf16_ms"]) else 0 for r in rows], 0.4, label="bf16 (AMX)")
    ax.set_yticks(y, [r["layer"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tuned latency, ms (weight x best of the layer's tasks)")
    ax.set_title(title, fontsize=10)
    ax.legend()
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="a tuning log of run --precision auto")
    p.add_argument("--summary", action="append", default=[], help="user_path.py summary.json (repeatable)")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and OUT.png")
    args = p.parse_args(argv)
    from experiments.lib.machine import cpu_model

    rows = layer_rows(args.log)
    if not rows:
        raise SystemExit(f"{args.log} has no layer tuned in both precisions (run --precision auto on a CPU with AMX)")
    title = f"fp32 vs bf16 per layer: {os.path.relpath(args.log)}"
    text = [f"**{title}** (CPU: {cpu_model()})", "", layer_table(rows), ""]
    if args.summary:
        text += ["**End to end** (report, runtimes taking turns)", "", end_to_end_table(args.summary), ""]
    out = results_path(args.out)
    write_text(out + ".md", "\n".join(text))
    plot(rows, out + ".png", title)
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
