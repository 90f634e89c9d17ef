"""Where a tuned fp32 model loses to ONNX Runtime, layer by layer: kernel quality or budget.

For each convolution of a model tuned by ``run`` (its log), side by side on this machine:

- **ONNX Runtime**: the layer's time under its own profiler (its MLAS kernels, NCHWc, activation fused);
- **tuned**: the run's best for the layer (weight x best latency; the layout ``export`` would keep), and the
  trials it got;
- **longer search** (``--long-trials N``): the same task searched alone for N trials (Optuna TPE guided by the
  shipped model): what the design space holds when the budget is not the limit;
- **MetaSchedule** (``--ms-trials N``): TVM's own tuner on the same task, same evaluator, N trials;
- ``--algorithm winograd`` makes the longer search tune each layer's Winograd form (the layers that have one);
- ``--behind`` searches only the layers the run left slower than ONNX Runtime's; ``--keep-logs`` keeps the longer
  searches' logs beside the results, where the known schedules' writer reads them;
- each as GFLOPS and as a fraction of this machine's fp32 peak, measured as the GFLOPS of a large sgemm (NumPy's
  BLAS on the same threads).

Tuned against longer search separates the budget (the run gave the layer too few trials) from kernel quality (the
space holds nothing faster); longer search against ONNX Runtime is what the space itself lacks::

    python -m experiments.fp32_gap --model tiny-yolov2 --log LOG --long-trials 160 --ms-trials 64 \\
        --out fp32-gap-tiny-yolov2

Writes ``experiments/results/OUT.md`` (table, the CPU named), ``OUT.png`` and ``OUT.json``, the state it resumes
from: each layer's searches are kept as they finish, so an interrupted run repeats none.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import read_json, results_path, write_json, write_text


def sgemm_gflops(threads: int, sizes: tuple[int, ...] = (2048, 4096), repeats: int = 5) -> float:
    """The best GFLOPS of a square fp32 matrix product through NumPy's BLAS on ``threads`` threads: the machine's
    attainable fp32 peak, the yardstick of every layer's GFLOPS."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    best = 0.0
    rng = np.random.default_rng(0)
    with threadpool_limits(threads):
        for n in sizes:
            a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
            a @ b
            for _ in range(repeats):
                start = time.perf_counter()
                a @ b
                best = max(best, 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def ort_conv_layers(proto, threads: int, runs: int) -> dict[str, float]:
    """ONNX Runtime's time per pass for each conv layer, keyed as :func:`layer_name` keys TVM's tasks (a layer
    that occurs several times: the sum over its nodes)."""
    from experiments.ort_profile import conv_events, profile

    out: dict[str, float] = collections.defaultdict(float)
    for key, ms in conv_events(profile(proto, threads, runs), runs):
        out[key] += ms
    return dict(out)


def ort_time(ort: dict[str, float], layer: str) -> float:
    """ONNX Runtime's ms for a TVM layer key; NCHWc pads output channels to its block (125 -> 128), so a layer
    it padded matches the ORT layer of the same input, kernel and image with up to 15 more output channels."""
    if layer in ort:
        return ort[layer]
    shapes, _, kernel = layer.partition("@")
    data, _, out = shapes.partition("->")
    n, c, h, w = (int(d) for d in out.split("x"))
    for padded in range(c + 1, c + 16):
        key = f"{data}->{n}x{padded}x{h}x{w}@{kernel}"
        if key in ort:
            return ort[key]
    return math.nan


def layer_name(header: dict) -> tuple[str, str, str] | None:
    """(``layer@KxK``, algorithm, layout) of a conv task from its log header; None for other tasks and for tasks
    both layouts of a ``--layout auto`` run share."""
    from types import SimpleNamespace

    from autosearch.frontend.alternatives import task_layouts
    from experiments.lib.tasks import conv_signature

    layouts = task_layouts(header.get("lowering") or {})
    if len(layouts) != 1:
        return None
    signature = conv_signature(SimpleNamespace(name=header["name"], args=header["args"]), layouts[0])
    if signature is None:
        return None
    layer, kernel, algorithm = signature
    return f"{layer}@{kernel}", algorithm, layouts[0]


def tuned_layers(contents, layout: str | None = None) -> tuple[dict, dict[str, dict]]:
    """How ``export`` lowers the log (:func:`autosearch.deploy.database.lowering_of`: the layout it keeps, the fast
    math) and, per conv layer of that layout (or of ``layout``, the other one of a ``--layout auto`` run), its
    faster algorithm's ms per pass, trials and GFLOP (the direct convolution's FLOPs, so that GFLOPS compare like
    for like when Winograd is faster).

    A layer the model runs in several places can be several tasks (fused with different epilogues, e.g. a residual
    add or none), each with its calls per pass (its weight): the layer's time is the sum over them, as ONNX Runtime's
    is the sum over its nodes. An algorithm whose tasks are not all tuned counts its tuned ones' time per call for
    the layer's calls. ``searched_calls`` is the weight of the task a longer search of each algorithm tunes
    (:func:`experiments.lib.tasks.pick_task`'s, the heaviest), which its time is scaled from."""
    from autosearch.deploy.database import lowering_of

    lowering = lowering_of(contents)
    if not lowering:
        raise SystemExit(f"{contents.path}: its tasks were lowered in more than one way; give the log of one run")
    if layout:
        lowering = {**lowering, "layout": layout}
    by_layer: dict[str, dict[str, list[dict]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for key, header in contents.tasks.items():
        named = layer_name(header)
        if named is None or named[2] != lowering["layout"]:
            continue
        best = contents.best(key)
        by_layer[named[0]][named[1]].append({
            "calls": int(header.get("weight", 1)), "flops": float(header["flops"]), "name": header["name"],
            "ms": best.latency * 1e3 if best is not None else None, "trials": len(contents.trials(key))})
    layers = {}
    for layer, forms in by_layer.items():
        calls = max(sum(t["calls"] for t in tasks) for tasks in forms.values())
        summed = {}
        for algorithm, tasks in forms.items():
            tuned = [t for t in tasks if t["ms"] is not None]
            if not tuned:
                continue
            per_call = sum(t["ms"] * t["calls"] for t in tuned) / sum(t["calls"] for t in tuned)
            summed[algorithm] = {"ms": per_call * calls, "trials": sum(t["trials"] for t in tasks),
                                 "algorithm": algorithm, "tasks": len(tasks),
                                 "name": max(tuned, key=lambda t: t["ms"] * t["calls"])["name"]}
        if not summed:
            continue
        fastest = dict(min(summed.values(), key=lambda e: e["ms"]))
        direct = forms.get("direct") or next(iter(forms.values()))
        fastest.update(calls=calls, gflop=sum(t["flops"] * t["calls"] for t in direct) / sum(
            t["calls"] for t in direct) * calls / 1e9, searched_calls={
            algorithm: max(tasks, key=lambda t: (t["flops"] * t["calls"], t["name"]))["calls"]
            for algorithm, tasks in forms.items()})
        layers[layer] = fastest
    return lowering, layers


def searched_ms(state: dict, kind: str, layer: str) -> float:
    """A longer search's (``kind``: long, metaschedule) ms per pass for all of ``layer``'s calls: it tuned one of
    the layer's tasks, and the others (the same convolution, another epilogue) are counted at its time per call."""
    result = state[kind].get(layer)
    if not result:
        return math.nan
    tuned = state["tuned"][layer]
    searched = tuned.get("searched_calls", {}).get(state.get("algorithm", "direct"), tuned.get("calls", 1))
    return result["ms"] / searched * tuned.get("calls", searched)


def _task(model: str, layout: str, layer: str, fast_math: str, threads: int):
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import host_target
    from experiments.lib.tasks import pick_task

    target = host_target(threads)
    tasks = import_model(model, target, layout=layout, fast_math=fast_math, precision="fp32").tasks
    return pick_task(tasks, layer if "/" in layer else f"{layer}/direct", layout=layout), target


def _long_search(model: str, layout: str, layer: str, fast_math: str, threads: int, trials: int,
                 seed: int, log_path: str | None = None) -> dict:
    from autosearch.api import resolve_guidance
    from experiments.lib.tuning import run_autosearch

    os.environ["TVM_NUM_THREADS"] = str(threads)
    task, target = _task(model, layout, layer, fast_math, threads)
    guidance, _ = resolve_guidance("auto", target, "optuna", seed=seed)  # as run's default
    run = run_autosearch(task, target, "optuna", trials, 16, seed, cost_model=guidance, log_path=log_path)
    if log_path:  # kept gzipped: experiments/known_schedules.py reads every log under experiments/results
        with open(log_path, "rb") as src, gzip.open(log_path + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(log_path)
    valid = [r.latency for r in run.records if r.ok]
    return {"ms": min(valid) * task.weight * 1e3 if valid else math.inf, "trials": len(run.records),
            "wall_secs": run.wall_secs}


def _metaschedule(model: str, layout: str, layer: str, fast_math: str, threads: int, trials: int,
                  seed: int, log_path: str | None = None) -> dict:
    from experiments.lib.metaschedule import tune_tir

    os.environ["TVM_NUM_THREADS"] = str(threads)
    task, target = _task(model, layout, layer, fast_math, threads)
    with tempfile.TemporaryDirectory(prefix="fp32-gap-ms-") as work:
        run = tune_tir(task.mod, target, work, trials, seed=seed)
    return {"ms": run.best_secs * task.weight * 1e3, "trials": run.trials, "wall_secs": run.wall_secs}


def _in_fresh_process(fn, *args) -> dict:
    """One search per spawned process: TVM's thread pools and MetaSchedule's workers end with it."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def table(state: dict) -> str:
    peak = state["sgemm_gflops"]
    rows, totals = [], collections.defaultdict(float)
    layers = sorted(state["tuned"], key=lambda k: -state["tuned"][k]["ms"])
    for layer in layers:
        tuned = state["tuned"][layer]
        ort = ort_time(state["ort"], layer)
        long_ = state["long"].get(layer, {})
        ms_ = state["metaschedule"].get(layer, {})
        long_ms, ms_ms = searched_ms(state, "long", layer), searched_ms(state, "metaschedule", layer)
        gflop = tuned["gflop"]
        best = min(tuned["ms"], long_ms if long_ else math.inf)
        for name, value in (("ort", ort), ("tuned", tuned["ms"]), ("long", long_ms), ("metaschedule", ms_ms),
                            ("best", best)):
            totals[name] += value
        notes = [str(tuned["trials"])] + (["winograd"] if tuned["algorithm"] == "winograd" else []) + (
            [f"{tuned['calls']} calls"] if tuned.get("calls", 1) > 1 else [])
        rows.append([layer.replace("->", " -> "), fmt(gflop, 3), fmt(ort, 3),
                     f"{fmt(tuned['ms'], 3)} ({', '.join(notes)})",
                     f"{fmt(long_ms, 3)} ({long_['trials']})" if long_ else "-",
                     f"{fmt(ms_ms, 3)} ({ms_['trials']})" if ms_ else "-",
                     f"{100 * gflop / ort * 1e3 / peak:.0f}%" if math.isfinite(ort) else "-",
                     f"{100 * gflop / tuned['ms'] * 1e3 / peak:.0f}%",
                     f"{100 * gflop / best * 1e3 / peak:.0f}%",
                     fmt(tuned["ms"] / ort, 2) + "x" if math.isfinite(ort) else "-",
                     fmt(best / ort, 2) + "x" if math.isfinite(ort) else "-"])
    rows.append(["**all conv layers**", fmt(sum(state["tuned"][k]["gflop"] for k in layers), 3),
                 fmt(totals["ort"], 3), fmt(totals["tuned"], 3),
                 fmt(totals["long"], 3) if state["long"] else "-",
                 fmt(totals["metaschedule"], 3) if state["metaschedule"] else "-", "", "", "",
                 fmt(totals["tuned"] / totals["ort"], 2) + "x", fmt(totals["best"] / totals["ort"], 2) + "x"])
    return markdown_table(["layer (NCHW) @ kernel", "GFLOP", "ONNX Runtime ms", "tuned ms (trials)",
                           "longer search ms (trials)", "MetaSchedule ms (trials)", "ORT % of peak",
                           "tuned % of peak", "best % of peak", "tuned / ORT", "best / ORT"], rows,
                          align="lrrrrrrrrrr")


def plot(state: dict, path: str, title: str) -> None:
    import numpy as np

    from autosearch.plots import figure, save

    layers = sorted(state["tuned"], key=lambda k: -state["tuned"][k]["ms"])
    series = {"ONNX Runtime": [ort_time(state["ort"], k) for k in layers],
              "tuned (the run)": [state["tuned"][k]["ms"] for k in layers],
              "longer search": [searched_ms(state, "long", k) for k in layers],
              "MetaSchedule": [searched_ms(state, "metaschedule", k) for k in layers]}
    series = {k: v for k, v in series.items() if any(math.isfinite(x) for x in v)}
    fig, axes = figure(size=(10, 0.5 * len(layers) + 2), grid="x")
    ax = axes[0][0]
    y = np.arange(len(layers))
    height = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.barh(y + i * height, values, height=height, label=label)
    ax.set_yticks(y + 0.4 - height / 2, [k.replace("->", " -> ") for k in layers], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per pass")
    ax.legend()
    ax.set_title(title, fontsize=9)
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="built-in model or .onnx (the one the log tuned)")
    p.add_argument("--log", required=True, help="the run's tuning log (fp32)")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.md, .png and .json")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=25, help="ONNX Runtime's profiled passes")
    p.add_argument("--long-trials", type=int, default=0, help="a longer search of each layer alone (0: none)")
    p.add_argument("--ms-trials", type=int, default=0, help="MetaSchedule on each layer (0: none)")
    p.add_argument("--layers", type=int, default=0, help="only the N slowest layers as tuned get the searches")
    p.add_argument("--layout", choices=("NCHW", "NHWC"),
                   help="the layout whose layers are compared and searched (default: the one export keeps)")
    p.add_argument("--algorithm", choices=("direct", "winograd"), default="direct",
                   help="the form the longer search tunes (winograd: the layers that have one)")
    p.add_argument("--behind", action="store_true", help="only layers the run left slower than ONNX Runtime's")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the longer searches' logs (experiments/results/OUT-logs/, gzipped): their best "
                        "configs then join the known schedules experiments/known_schedules.py writes")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from autosearch.frontend.importer import load_onnx
    from autosearch.records import read_log
    from experiments.lib.machine import host_label

    state_path = results_path(f"{args.out}.json")
    state = read_json(state_path) if os.path.exists(state_path) else {}
    if state.get("log") not in (None, args.log) or state.get("model") not in (None, args.model):
        p.error(f"{state_path} holds another model or log: choose another --out")
    state.update(model=args.model, log=args.log, cpu=host_label(), threads=args.threads)
    state.setdefault("long", {})
    state.setdefault("metaschedule", {})
    if "sgemm_gflops" not in state:
        print("sgemm peak ...", file=sys.stderr, flush=True)
        state["sgemm_gflops"] = sgemm_gflops(args.threads)
        write_json(state_path, state)
    if "ort" not in state:
        print("ONNX Runtime's profile ...", file=sys.stderr, flush=True)
        state["ort"] = ort_conv_layers(load_onnx(args.model)[1], args.threads, args.runs)
        write_json(state_path, state)
    if state.get("long") and state.get("algorithm", "direct") != args.algorithm:
        p.error(f"{state_path} holds searches of the {state.get('algorithm', 'direct')} form: choose another --out")
    state["algorithm"] = args.algorithm
    lowering, state["tuned"] = tuned_layers(read_log(args.log), args.layout)
    state["layout"], fast_math = lowering["layout"], lowering["fast_math"]
    write_json(state_path, state)
    order = sorted(state["tuned"], key=lambda k: -state["tuned"][k]["ms"])
    if args.behind:
        order = [k for k in order if state["tuned"][k]["ms"] > ort_time(state["ort"], k)]
    if args.algorithm == "winograd":  # the layers the lowering offers a winograd form (its candidates)
        from autosearch.frontend.winograd import CANDIDATE_RATIO, ConvShape

        def candidate(layer: str) -> bool:
            shapes, _, kernel = layer.partition("@")
            shape = ConvShape.from_key(shapes)  # fp32_gap's keys are NCHW whatever the layout
            return kernel == "3x3" and shape.winograd_flops() / shape.direct_flops <= CANDIDATE_RATIO

        order = [k for k in order if candidate(k)]
    order = order[: args.layers] if args.layers else order
    logs_dir = results_path(f"{args.out}-logs")
    if args.keep_logs:
        os.makedirs(logs_dir, exist_ok=True)
    for kind, trials, fn in (("long", args.long_trials, _long_search), ("metaschedule", args.ms_trials, _metaschedule)):
        for i, layer in enumerate(order if trials else []):
            if state[kind].get(layer, {}).get("trials", 0) >= trials:
                continue
            print(f"{kind} {i + 1}/{len(order)}: {layer}, {trials} trials ...", file=sys.stderr, flush=True)
            log_path = (os.path.join(logs_dir, re.sub(r"[^0-9A-Za-z]+", "_", layer) + ".jsonl")
                        if args.keep_logs and kind == "long" else None)
            which = f"{layer.partition('@')[0]}/winograd" if args.algorithm == "winograd" else layer
            state[kind][layer] = _in_fresh_process(fn, args.model, state["layout"], which, fast_math, args.threads,
                                                   trials, args.seed, log_path)
            write_json(state_path, state)
    title = (f"{args.model}, fp32, {state['layout']}: conv layers against ONNX Runtime, {args.threads} threads "
             f"({state['cpu']}; sgemm peak {state['sgemm_gflops']:.0f} GFLOPS)")
    text = "\n".join([f"**{title}**; log `{args.log}`. ms per pass (a layer the model runs several times: all its "
                      "calls; a longer search tuned its heaviest task, counted at that task's time per call); trials "
                      "in brackets; % of peak: the layer's GFLOPS over the sgemm's; best: the faster of tuned and "
                      "longer search.", "", table(state), ""])
    write_text(results_path(f"{args.out}.md"), text)
    plot(state, results_path(f"{args.out}.png"), title.replace(" (", "\n(", 1))
    sys.stdout.write(text + "\n" + json.dumps({"written": results_path(f"{args.out}.md")}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
