"""fp32 against bf16, per layer and end to end.

Per layer, from a log tuned with ``--precision auto`` (each eligible NHWC convolution tuned in fp32 and in bf16 on
the CPU's bf16 unit, and on the AVX512-BF16 dot product the wide 3x3 layers as bf16 Winograd too): the weight x best
latency of each alternative's tasks, and the ratio; the same sums decide what ``export`` keeps. End to end, the
medians of ``experiments/user_path.py`` runs (``summary.json``: tuned TVM, ONNX Runtime, OpenVINO fp32 and at its
default precision, all timed by ``report`` taking turns in one run)::

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
    """Per layer tuned in both precisions: fp32, bf16 and bf16 Winograd milliseconds (weight x best latency summed
    over its tasks; ``inf`` when one of them has no valid measurement or the layer has no such alternative),
    heaviest layer first. A best reads as export reads it
    (``LogContents.best_seconds``: its re-timed score where the run re-timed its finalists), so "kept" is what
    ``export`` keeps."""
    from autosearch.frontend.winograd import PRECISIONS, layer_totals
    from autosearch.records import read_log

    contents = read_log(log_path)
    entries = []
    for key, header in contents.tasks.items():
        lowering = header.get("lowering") or {}
        if lowering.get("algorithm") not in PRECISIONS:
            continue
        entries.append((lowering, int(header.get("weight", 1)), contents.best_seconds(key)))
    rows = [{"layer": layer, "fp32_ms": by.get("fp32", math.inf) * 1e3, "bf16_ms": by.get("bf16", math.inf) * 1e3,
             "winograd_ms": by.get("bf16-winograd", math.inf) * 1e3}
            for layer, by in layer_totals(entries).items()]
    return sorted(rows, key=lambda r: -min(r["fp32_ms"], _bf16(r)))


def _bf16(row: dict) -> float:
    """The faster of a layer's bf16 alternatives (ms)."""
    return min(row["bf16_ms"], row["winograd_ms"])


def _kept(row: dict) -> str:
    return min((row["fp32_ms"], "fp32"), (row["bf16_ms"], "bf16"), (row["winograd_ms"], "bf16 Winograd"))[1]


def layer_table(rows: list[dict]) -> str:
    """The per-layer table; a bf16 Winograd column where a layer had that alternative."""
    winograd = any(r["winograd_ms"] < math.inf for r in rows)

    def ms(x: float) -> str:
        return fmt(x, 3) if math.isfinite(x) else "-"

    def ratio(a: float, b: float) -> str:
        return fmt(a / b, 2) + "x" if math.isfinite(a / b) else "-"

    body = [[r["layer"], ms(r["fp32_ms"]), ms(r["bf16_ms"]), *((ms(r["winograd_ms"]),) if winograd else ()),
             ratio(r["fp32_ms"], _bf16(r)), _kept(r)] for r in rows]
    fp32, best = sum(r["fp32_ms"] for r in rows), sum(min(r["fp32_ms"], _bf16(r)) for r in rows)
    body.append(["**all layers tuned both ways**", ms(fp32), *(("",) if winograd else ()),
                 ms(best) + " (the faster of each)", ratio(fp32, best), ""])
    heads = ["layer (NHWC in -> out)", "fp32 ms", "bf16 ms", *(("bf16 Winograd ms",) if winograd else ()),
             "bf16 speedup (the faster bf16)", "kept"]
    return markdown_table(heads, body, align="lrr" + ("r" if winograd else "") + "rl")


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
    series = [("fp32_ms", "fp32"), ("bf16_ms", "bf16")]
    if any(math.isfinite(r["winograd_ms"]) for r in rows):
        series.append(("winograd_ms", "bf16 Winograd"))
    height = 0.8 / len(series)
    for i, (key, label) in enumerate(series):
        ax.barh(y + (i - (len(series) - 1) / 2) * height, [r[key] if math.isfinite(r[key]) else 0 for r in rows],
                height, label=label)
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
    from experiments.lib.machine import host_label

    rows = layer_rows(args.log)
    if not rows:
        raise SystemExit(f"{args.log} has no layer tuned in both precisions (run --precision auto on a CPU with a "
                         "bf16 unit)")
    title = f"fp32 vs bf16 per layer: {os.path.relpath(args.log)}"
    text = [f"**{title}** (CPU: {host_label()})", "", layer_table(rows), ""]
    if args.summary:
        text += ["**End to end** (report, runtimes taking turns)", "", end_to_end_table(args.summary), ""]
    out = results_path(args.out)
    write_text(out + ".md", "\n".join(text))
    plot(rows, out + ".png", title)
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
