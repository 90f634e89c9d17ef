"""Winograd vs direct convolution, layer by layer, at the same trial budget (the `--winograd` choice).

For every candidate layer of ``--winograd auto`` (tuned both ways by ``run``), the direct task and the
winograd task are tuned alone with the same strategy, budget and seed, one after the other: how often
the FLOP rule (``MAX_FLOP_RATIO``, used where nothing was measured) picks the faster algorithm.
Latency is what counts (FLOPs differ between the algorithms); the table also gives direct-equivalent
GFLOPS (the direct convolution's FLOPs / latency).

    python -m experiments.winograd_vs_direct --model tiny-yolov2 --trials 64 [--strategy optuna]

Writes experiments/results/winograd_vs_direct-<model>.{json,md,png}.
"""

from __future__ import annotations

import argparse
import sys

from autosearch.frontend.importer import import_model
from autosearch.frontend.target import parse_target
from autosearch.measure.base import EvaluatorConfig
from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_json, write_text
from experiments.lib.tuning import run_autosearch


def tune(task, target, strategy: str, trials: int, batch: int, seed: int) -> dict:
    """One task tuned alone: its best latency (ms, as the run chose it: finalists re-timed), its untuned latency
    and the latency of every trial."""
    run = run_autosearch(task, target, strategy, trials, batch, seed, evaluator=EvaluatorConfig(),
                         finalist_rounds=3)
    best, baseline = run.log.best(task.workload_key), run.log.baseline(task.workload_key)
    return {"best_ms": best.latency * 1e3 if best else None,
            "baseline_ms": baseline.latency * 1e3 if baseline and baseline.ok else None,
            "trials": len(run.records), "failures": sum(not r.ok for r in run.records), "wall_secs": run.wall_secs,
            "curve_ms": [r.latency * 1e3 if r.ok else None for r in run.records]}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tiny-yolov2")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--strategy", default="optuna")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=0, help="at most this many layers, heaviest first (0: all)")
    args = p.parse_args()

    target = parse_target(None)
    # both alternatives of every candidate layer (lowering["layer"]), heaviest winograd task first
    tasks = import_model(args.model, target, winograd="auto").tasks
    direct = {t.lowering["layer"]: t for t in tasks if t.lowering.get("algorithm") == "direct"}
    wino = [t for t in tasks if t.lowering.get("algorithm") == "winograd"]
    if args.layers:
        wino = wino[: args.layers]
    rows = []
    for wt in wino:
        dt = direct[wt.lowering["layer"]]
        row = {"layer": f"{wt.args[0][0][1]}->{wt.args[-1][0][1]} @{wt.args[-1][0][2]}x{wt.args[-1][0][3]}",
               "direct_task": dt.name, "winograd_task": wt.name, "direct_gflop": dt.gflop, "winograd_gflop": wt.gflop,
               "flop_ratio": wt.gflop / dt.gflop}
        for label, task in (("direct", dt), ("winograd", wt)):
            row[label] = tune(task, target, args.strategy, args.trials, args.batch, args.seed)
            sys.stdout.write(f"{row['layer']} {label}: best {row[label]['best_ms']:.3f} ms\n")
            sys.stdout.flush()
        rows.append(row)
    stem = results_path(f"winograd_vs_direct-{args.model}")
    write_json(stem + ".json", {"model": args.model, "trials": args.trials, "strategy": args.strategy,
                                "target": str(target), "rows": rows})
    header = ["layer", "direct GFLOP", "winograd GFLOP (TVM count)", "FLOP ratio", "direct ms", "winograd ms",
              "speedup", "direct-equiv. GFLOPS (direct / winograd)"]
    table = []
    for r in rows:
        d, w = r["direct"]["best_ms"], r["winograd"]["best_ms"]
        table.append([r["layer"], f"{r['direct_gflop']:.3f}", f"{r['winograd_gflop']:.3f}", f"{r['flop_ratio']:.2f}",
                      f"{d:.3f}", f"{w:.3f}", f"{d / w:.2f}x",
                      f"{r['direct_gflop'] / d * 1e3:.0f} / {r['direct_gflop'] / w * 1e3:.0f}"])
    lines = [f"{args.model}: each layer tuned {args.trials} trials per algorithm ({args.strategy}, seed {args.seed}); "
             "latency of the best config; GFLOPS as direct-convolution FLOPs / latency", "",
             markdown_table(header, table)]
    total_d = sum(r["direct"]["best_ms"] for r in rows)
    total_w = sum(r["winograd"]["best_ms"] for r in rows)
    lines += ["", f"sum over these layers: direct {total_d:.2f} ms, winograd {total_w:.2f} ms "
                  f"({total_d / total_w:.2f}x)"]
    write_text(stem + ".md", "\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    plot(rows, stem + ".png", args)
    return 0


def plot(rows: list[dict], path: str, args) -> None:
    from autosearch.plots import figure, save

    fig, axes = figure(1, len(rows), size=(3.2 * len(rows), 3.2))
    for ax, r in zip(axes[0], rows):
        for label, color in (("direct", "tab:blue"), ("winograd", "tab:orange")):
            best, ys = float("inf"), []
            for ms in r[label]["curve_ms"]:
                best = min(best, ms) if ms is not None else best
                ys.append(best if best < float("inf") else None)
            ax.step(range(1, len(ys) + 1), ys, where="post", label=label, color=color)
        ax.set_title(r["layer"], fontsize=9)
        ax.set_xlabel("trials")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("best latency so far (ms)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"{args.model}: winograd vs direct, {args.strategy}, {args.trials} trials each", fontsize=10)
    save(fig, path)


if __name__ == "__main__":
    sys.exit(main())
