"""NCHW vs NHWC: the same conv layers of a model tuned in both lowerings at equal trials (``--layout``).

Each layer is taken from the model lowered both ways (``--winograd off``: direct convolutions in both),
tuned with the same strategy, budget and seed, one run at a time, and the best config of each run is
re-timed in a fresh measuring process. Layers are named by their NCHW shapes (``1x16x320x320->1x32x160x160``).

    python experiments/layouts.py --model yolov8n --budget 64 [--layers LAYER,...]

Writes experiments/results/layouts-MODEL.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autosearch.importer import import_model  # noqa: E402
from autosearch.measure.base import EvaluatorConfig  # noqa: E402
from autosearch.target import parse_target  # noqa: E402
from autosearch.winograd import layer_key  # noqa: E402
from experiments.compare_strategies import RESULTS, retime, run_autosearch  # noqa: E402

# YOLOv8n: the stem, the stride-2 downsamplers, a 1x1 at 160x160, the 3x3 layers that repeat most
DEFAULT_LAYERS = ("1x3x640x640->1x16x320x320", "1x16x320x320->1x32x160x160", "1x32x160x160->1x64x80x80",
                  "1x48x160x160->1x32x160x160", "1x64x80x80->1x64x80x80", "1x64x40x40->1x64x40x40",
                  "1x128x40x40->1x256x20x20", "1x192x40x40->1x128x40x40")


def layer_of(task, layout: str) -> str | None:
    """The NCHW layer key (``autosearch.winograd.layer_key``) of a conv task, or None for other tasks."""
    if "conv2d" not in task.name or len(task.args) < 3:
        return None
    data, out = list(task.args[0][0]), list(task.args[-1][0])
    if len(data) != 4 or len(out) != 4:
        return None
    if layout == "NHWC":
        data, out = [data[0], data[3], data[1], data[2]], [out[0], out[3], out[1], out[2]]
    return layer_key(data, out)


def pick(tasks, layout: str, key: str):
    found = [t for t in tasks if layer_of(t, layout) == key]
    if not found:
        raise SystemExit(f"no {layout} conv task for layer {key}")
    return max(found, key=lambda t: (t.flops * t.weight, t.name))  # a layer fused several ways: its heaviest


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
    out = os.path.join(RESULTS, f"layouts-{args.model}")
    rows = []
    for key in args.layers.split(","):
        row = {"layer": key}
        for layout, model in models.items():
            task = pick(model.tasks, layout, key)
            records, wall = run_autosearch(task, target, args.strategy, args.budget, args.batch, args.seed, evaluator)
            valid = [r for r in records if r.ok]
            best = min(valid, key=lambda r: r.latency) if valid else None
            secs = retime(task, target, [best.trace], evaluator)[0] if best is not None else float("nan")
            row.update({"task_" + layout: task.name, "weight": task.weight, "gflop": task.gflop,
                        f"ms_{layout}": secs * 1e3, f"gflops_{layout}": task.flops / secs / 1e9,
                        f"wall_{layout}": wall, f"trials_{layout}": len(records)})
        row["nhwc_speedup"] = row["ms_NCHW"] / row["ms_NHWC"]
        rows.append(row)
        sys.stdout.write(f"{key}: NCHW {row['gflops_NCHW']:.1f} GFLOPS, NHWC {row['gflops_NHWC']:.1f} GFLOPS "
                         f"({row['nhwc_speedup']:.2f}x)\n")
        sys.stdout.flush()
        with open(out + ".json", "w") as fh:
            json.dump({"model": args.model, "target": str(target), "budget": args.budget,
                       "strategy": args.strategy, "seed": args.seed, "rows": rows}, fh, indent=1)
    write_report(rows, args, out)
    return 0


def write_report(rows: list[dict], args, out: str) -> None:
    from autosearch.plots import figure, save

    lines = [f"{args.model}, {args.strategy}, {args.budget} trials per layer and layout, seed {args.seed}, "
             "best config re-timed in a fresh process", "",
             "| layer (NCHW shapes) | w | GFLOP | NCHW ms | NHWC ms | NCHW GFLOPS | NHWC GFLOPS | NHWC speedup |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['weight']} | {r['gflop']:.3f} | {r['ms_NCHW']:.3f} | {r['ms_NHWC']:.3f} | "
                     f"{r['gflops_NCHW']:.1f} | {r['gflops_NHWC']:.1f} | {r['nhwc_speedup']:.2f}x |")
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
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
