"""One layout per convolution against the one layout ``export`` keeps, from the same ``--layout auto`` fp32 log.

A ``--layout auto`` run tunes every convolution in NCHW (with its Winograd alternative) and in NHWC. ``export``
compiles the faster whole model; this takes each layer's faster layout instead (its tasks' weight x re-timed best
latency, :func:`autosearch.frontend.layer_layouts.choose`), builds both models from the log's records (the
layout transforms between layers of different layouts are the only untuned kernels) and times them taking turns,
each round a fresh load of each, on the same threads; their outputs are compared::

    python -m experiments.layer_layouts --model tiny-yolov2 \\
        --log experiments/results/user-tiny-yolov2-quickstart-xeon-amx-fp32-v6/log.jsonl.gz \\
        --out layer-layouts-tiny-yolov2-xeon-amx-fp32

Writes ``experiments/results/OUT.md`` (each layer's tuned cost in both layouts and its choice; both models' medians,
the CPU named) and ``OUT.png``. Nothing is kept between runs: it takes a few minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

from autosearch.tables import markdown_table
from experiments.lib.io import results_path, write_text
from experiments.lib.machine import host_label


def main() -> int:
    from autosearch.deploy.bench import measure
    from autosearch.deploy.build import compile_model
    from autosearch.deploy.database import lowering_of, memory_database
    from autosearch.errors import UserError
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.layer_layouts import choose, header_entries
    from autosearch.frontend.target import parse_target
    from autosearch.frontend.winograd import WinogradPolicy, choose_algorithms, layer_totals
    from autosearch.records import read_log

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="built-in model or .onnx the log tuned")
    p.add_argument("--log", required=True, help="a --layout auto, fp32 tuning log")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md and OUT.png")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8, help="each model loaded afresh and timed this many times, in turn")
    p.add_argument("--runs", type=int, default=40, help="timed forward passes per round")
    args = p.parse_args()

    contents = read_log(args.log)
    lowering = lowering_of(contents)
    if lowering.get("precision", "fp32") not in ("fp32", "auto") or "layout_totals" not in lowering:
        raise UserError(f"{args.log}: not a --layout auto log in fp32")
    target = parse_target(None)
    imported = import_model(args.model, target, winograd=lowering["winograd"], layout="auto", precision="fp32",
                            fast_math=lowering["fast_math"])
    bests = {key: contents.best_seconds(key) for key in contents.tasks}
    every_choice = choose_algorithms(layer_totals(((h.get("lowering") or {}), int(h.get("weight", 1)), bests[key])
                                                  for key, h in contents.tasks.items()))
    chosen, costs = choose(header_entries(contents.tasks, bests))
    db = memory_database(contents)
    work = tempfile.mkdtemp(prefix="layer-layouts-")
    kept = lowering["layout"]
    models = {f"{kept} (export's)": compile_model(
                  imported.relax_mod, target, imported.tasks, db, os.path.join(work, "kept.so"),
                  winograd=WinogradPolicy.of(lowering["winograd"], lowering.get("choices")), layout=kept,
                  fast_math=lowering["fast_math"]),
              "one layout per layer": compile_model(
                  imported.relax_mod, target, imported.tasks, db, os.path.join(work, "mixed.so"),
                  winograd=WinogradPolicy.of(lowering["winograd"], every_choice), fast_math=lowering["fast_math"],
                  layer_layouts=chosen)}
    rng = np.random.default_rng(0)
    inputs = {name: rng.random(shape, dtype=np.float32) for name, shape in imported.input_shapes.items()}
    medians: dict[str, list[float]] = {name: [] for name in models}
    outputs = {}
    for r in range(args.rounds):
        for name, model in models.items():
            result = measure("tvm", model.path, inputs, args.runs, args.threads)
            medians[name].append(statistics.median(result["runs_ms"]))
            outputs[name] = result["outputs"]
        sys.stderr.write(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {v[-1]:.2f} ms" for n, v in medians.items()) + "\n")
    first, second = (outputs[n] for n in models)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / (np.max(np.abs(np.asarray(a))) + 1e-12)))
               for a, b in zip(first, second))

    rows = []
    def heaviest(item) -> float:
        return -max((c for c in item[1].values() if c < float("inf")), default=0.0)

    for geometry, by_layout in sorted(costs.items(), key=heaviest):
        rows.append([geometry, *(f"{by_layout[lay] * 1e3:.3f}" if by_layout.get(lay, float("inf")) < float("inf")
                                 else "-" for lay in ("NCHW", "NHWC")), chosen.get(geometry, "-")])
    totals = {lay: sum(v.get(lay, 0.0) for v in costs.values() if v.get(lay, float("inf")) < float("inf"))
              for lay in ("NCHW", "NHWC")}
    mixed_sum = sum(min(v.values()) for k, v in costs.items() if k in chosen)
    model_rows = [[name, f"{statistics.median(v):.2f}", f"{min(v):.2f}", f"{max(v):.2f}"]
                  for name, v in medians.items()]
    names = list(models)
    ratio = statistics.median(medians[names[0]]) / statistics.median(medians[names[1]])
    lines = [f"**{args.model}: one layout per convolution against export's {kept} model** ({host_label()}; log "
             f"`{args.log}`; each model loaded afresh {args.rounds} times, taking turns, {args.runs} passes each, "
             f"{args.threads} threads)", "",
             markdown_table(["model", "median of the rounds' medians ms", "fastest round", "slowest round"],
                            model_rows), "",
             f"One layout per layer is **{ratio:.2f}x** the speed of export's model; outputs within {diff:.1e} "
             "(max difference over the output's largest magnitude).", "",
             "Each convolution's tuned cost (weight x re-timed best latency of its faster algorithm, ms), per layout:",
             "", markdown_table(["convolution (in -> out / filter)", "NCHW ms", "NHWC ms", "chosen"], rows), "",
             f"Sums over these convolutions: NCHW {totals['NCHW'] * 1e3:.2f} ms, NHWC {totals['NHWC'] * 1e3:.2f}, "
             f"each layer's faster {mixed_sum * 1e3:.2f}."]
    stem = results_path(args.out)
    write_text(stem + ".md", "\n".join(lines) + "\n")
    sys.stdout.write("\n".join(lines) + "\n")
    plot(costs, chosen, stem + ".png", args.model)
    return 0


def plot(costs: dict[str, dict[str, float]], chosen: dict[str, str], path: str, model: str) -> None:
    from autosearch.plots import figure, save

    keys = [k for k in costs if k in chosen]
    fig, axes = figure(1, 1, size=(8, 0.4 * len(keys) + 1.5))
    ax = axes[0][0]
    y = np.arange(len(keys))
    for offset, layout, color in ((-0.2, "NCHW", "tab:blue"), (0.2, "NHWC", "tab:orange")):
        ax.barh(y + offset, [costs[k][layout] * 1e3 for k in keys], height=0.4, label=layout, color=color)
    ax.set_yticks(y, keys, fontsize=7)
    ax.set_xlabel("tuned ms (weight x re-timed best, faster algorithm)")
    ax.legend(fontsize=8)
    ax.set_title(f"{model}: each convolution's tuned cost per layout", fontsize=10)
    save(fig, path)


if __name__ == "__main__":
    sys.exit(main())
