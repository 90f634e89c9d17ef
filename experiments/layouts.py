"""NCHW vs NHWC: the same conv layers of a model tuned in both lowerings at equal trials (``--layout``).

Each layer is taken from the model lowered both ways (``--winograd off``: direct convolutions in both),
tuned with the same strategy, budget and seed, one run at a time, and the best config of each run is
re-timed in a fresh measuring process. Layers are named by their NCHW shapes (``1x16x320x320->1x32x160x160``).

    python -m experiments.layouts --model yolov8n --budget 64 [--layers LAYER,...]

Writes experiments/results/layouts-MODEL.{json,md,png}.
"""

from __future__ import annotations

import argparse
import sys

from autosearch.frontend.importer import import_model
from autosearch.frontend.target import parse_target
from autosearch.measure.base import EvaluatorConfig
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.retime import retime_secs
from experiments.lib.tasks import pick_task
from experiments.lib.tuning import best_within, run_autosearch

# YOLOv8n: the stem, the stride-2 downsamplers, a 1x1 at 160x160, the 3x3 layers that repeat most
DEFAULT_LAYERS = ("1x3x640x640->1x16x320x320", "1x16x320x320->1x32x160x160", "1x32x160x160->1x64x80x80",
                  "1x48x160x160->1x32x160x160", "1x64x80x80->1x64x80x80", "1x64x40x40->1x64x40x40",
                  "1x128x40x40->1x256x20x20", "1x192x40x40->1x128x40x40")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="yolov8n")
    p.add_argument("--layers", default=",".join(DEFAULT_LAYERS), help="NCHW layer keys, comma-separated")
    p.add_argument("--budget", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--strategy", default="optuna")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    target = parse_target(None)
    evaluator = EvaluatorConfig()
    models = {layout: import_model(args.model, target, winograd="off", layout=layout) for layout in ("NCHW", "NHWC")}
    out = results_path(f"layouts-{args.model}")
    rows = []
    for key in args.layers.split(","):
        row = {"layer": key}
        for layout, model in models.items():
            try:
                task = pick_task(model.tasks, key, layout=layout)
            except ValueError as exc:
                raise SystemExit(str(exc)) from exc
            run = run_autosearch(task, target, args.strategy, args.budget, args.batch, args.seed, evaluator=evaluator)
            records, wall = run.records, run.wall_secs
            best = best_within(records, len(records))
            secs = retime_secs(task, target, [best.trace], evaluator=evaluator)[0] if best is not None else float("nan")
            row.update({"task_" + layout: task.name, "weight": task.weight, "gflop": task.gflop,
                        f"ms_{layout}": secs * 1e3, f"gflops_{layout}": task.flops / secs / 1e9,
                        f"wall_{layout}": wall, f"trials_{layout}": len(records)})
        row["nhwc_speedup"] = row["ms_NCHW"] / row["ms_NHWC"]
        rows.append(row)
        sys.stdout.write(f"{key}: NCHW {row['gflops_NCHW']:.1f} GFLOPS, NHWC {row['gflops_NHWC']:.1f} GFLOPS "
                         f"({row['nhwc_speedup']:.2f}x)\n")
        sys.stdout.flush()
        write_json(out + ".json", {"model": args.model, "target": str(target), "budget": args.budget,
                                   "strategy": args.strategy, "seed": args.seed, "rows": rows})
    write_report(rows, args, out)
    return 0


def write_report(rows: list[dict], args, out: str) -> None:
    from autosearch.plots import figure, save

    header = ["layer (NCHW shapes)", "w", "GFLOP", "NCHW ms", "NHWC ms", "NCHW GFLOPS", "NHWC GFLOPS", "NHWC speedup"]
    table = [[r["layer"], r["weight"], f"{r['gflop']:.3f}", f"{r['ms_NCHW']:.3f}", f"{r['ms_NHWC']:.3f}",
              f"{r['gflops_NCHW']:.1f}", f"{r['gflops_NHWC']:.1f}", f"{r['nhwc_speedup']:.2f}x"] for r in rows]
    lines = [f"{args.model}, {args.strategy}, {args.budget} trials per layer and layout, seed {args.seed}, "
             "best config re-timed in a fresh process", "", markdown_table(header, table)]
    write_text(out + ".md", "\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    fig, axes = figure(size=(9, 4), grid="y")
    ax = axes[0, 0]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["gflops_NCHW"] for r in rows], 0.4, label="NCHW")
    ax.bar([x + 0.2 for x in xs], [r["gflops_NHWC"] for r in rows], 0.4, label="NHWC")
    ax.set_xticks(list(xs), [r["layer"].replace("->", "\n") for r in rows], fontsize=6)
    ax.set_ylabel(f"GFLOPS after {args.budget} trials (re-timed)")
    ax.set_title(f"{args.model}: conv2d layers tuned in both layouts")
    ax.legend()
    save(fig, out + ".png")


if __name__ == "__main__":
    sys.exit(main())
