"""What moves peak memory: the tuned model's variants and the peers, each built and measured (issue 23).

Takes a tuning log (``run``'s, as ``experiments/end_to_end.py`` writes it; ``--layout auto`` and ``--winograd auto``
give the most variants) and the model it was tuned on. Every TVM variant is compiled in this process from the
log's best records (``autosearch.deploy.database.memory_database``) and measured in fresh processes (``--rounds`` of
them, ``--runs`` forward passes in all), as ``report`` measures: median latency, and the process's peak resident memory
over loading and running above a process that imported the same runtime and loaded no model, beside the memory
computed from the module before the build (``autosearch.deploy.memory``). Variants (``--only`` picks some):

- ``tuned``: as ``export`` compiles it (the faster layout, per layer the faster algorithm), Relax's static
  memory planning on, weights prepacked;
- ``planning-off``: the same without ``StaticPlanBlockMemory`` (every tensor its own allocation from the VM's pool);
- ``prepacking-off``: the same with each kernel's weight layout rewrite left inside it, run on every call;
- ``nchw-direct``, ``nchw-winograd``: NCHW with every layer tuned both ways direct / as Winograd; ``nhwc``: the
  NHWC model (when the log has it); ``winograd-at:LAYER``: NCHW all direct but ``LAYER`` (``--per-layer``);
- ``ort``, ``ort-no-arena``: ONNX Runtime with and without its CPU memory arena; ``openvino``: OpenVINO fp32.

``--front``: the latency / memory front of ``export --memory-budget`` instead: ``--points`` budgets evenly from
the smallest model's predicted peak to the fastest one's, each chosen as ``export`` chooses, compiled and
measured; predicted against measured memory and latency.

Resumable: each finished variant (or budget) is kept in ``RESULTS/memory-MODEL/state.json``; a rerun measures
only what is missing. Writes ``RESULTS/memory-MODEL.{md,json,png}`` (``memory-front-MODEL.*`` with ``--front``).

    python -m experiments.memory --model tiny-yolov2 --log experiments/results/e2e-tiny-yolov2.jsonl
    python -m experiments.memory --model yolov8n --log experiments/results/e2e-yolov8n.jsonl --no-per-layer
    python -m experiments.memory --model tiny-yolov2 --log experiments/results/e2e-tiny-yolov2.jsonl --front
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
from dataclasses import dataclass, field

from autosearch.frontend.target import host_cores
from autosearch.tables import markdown_table
from experiments.lib.io import RESULTS
from experiments.lib.machine import host_label
from experiments.time_to_quality import State

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = {"ort": ("ONNX Runtime", "ort"), "ort-no-arena": ("ONNX Runtime, arena off", "ort-no-arena"),
         "openvino": ("OpenVINO fp32", "ov")}  # variant -> (label, autosearch.deploy.bench kind)
MIB = 2**20
ESTIMATE_COLUMNS = ("peak_bytes", "weight_bytes", "planned_bytes", "unplanned_bytes", "scratch_bytes")  # in the table


@dataclass(frozen=True)
class Variant:
    """A TVM build of the log's model: layout, per-layer algorithms and the two build switches."""

    key: str
    label: str
    layout: str
    choices: dict[str, str] = field(default_factory=dict)
    plan_memory: bool = True
    prepack: bool = True


class Setup:
    """The log, the model it was tuned on, its lowering and the database every build uses."""

    def __init__(self, args) -> None:
        from autosearch.deploy.budget import import_tuned_model
        from autosearch.deploy.database import lowering_of, memory_database
        from autosearch.frontend.alternatives import task_layouts
        from autosearch.frontend.target import parse_target
        from autosearch.records import read_log

        self.target = parse_target(None)
        self.contents = read_log(args.log)
        self.base = lowering_of(self.contents)
        if not self.base:
            raise SystemExit(f"{args.log}: its tasks were lowered in different ways; one model's log is needed")
        self.model = import_tuned_model(self.contents, args.model, self.target, input_shape=args.input_shape)
        self.database = memory_database(self.contents)
        self.layers = sorted({h["lowering"]["layer"] for h in self.contents.tasks.values()
                              if "layer" in (h.get("lowering") or {})})
        self.layouts = sorted({layout for h in self.contents.tasks.values()
                               for layout in task_layouts(h.get("lowering") or {})})

    def compile(self, variant: Variant, path: str):
        from autosearch.deploy.build import compile_model
        from autosearch.frontend.winograd import WinogradPolicy

        # the log's precision: a layer the choices keep in bf16 is compiled so (a --precision auto log)
        policy = WinogradPolicy.of(self.base["winograd"], variant.choices, self.base.get("precision", "fp32"))
        return compile_model(self.model.relax_mod, self.target, [], self.database, path, winograd=policy,
                             layout=variant.layout, fast_math=self.base["fast_math"],
                             plan_memory=variant.plan_memory, prepack=variant.prepack)


def variants(setup: Setup, per_layer: bool) -> list[Variant]:
    tuned = Variant("tuned", f"tuned ({setup.base['layout']}, as export chooses)", setup.base["layout"],
                    dict(setup.base.get("choices", {})))
    out = [tuned,
           Variant("planning-off", "tuned, static memory planning off", tuned.layout, tuned.choices, plan_memory=False),
           Variant("prepacking-off", "tuned, weight prepacking off", tuned.layout, tuned.choices, prepack=False)]
    if "NCHW" in setup.layouts:
        out.append(Variant("nchw-direct", "NCHW, every layer direct", "NCHW", dict.fromkeys(setup.layers, "direct")))
        if setup.layers:
            out.append(Variant("nchw-winograd", "NCHW, every layer Winograd", "NCHW",
                               dict.fromkeys(setup.layers, "winograd")))
        if tuned.layout != "NCHW":
            out.append(Variant("nchw-measured", "NCHW, per layer the faster", "NCHW", tuned.choices))
        if per_layer:
            out += [Variant(f"winograd-at:{layer}", f"NCHW direct, Winograd at {layer}", "NCHW",
                            {**dict.fromkeys(setup.layers, "direct"), layer: "winograd"}) for layer in setup.layers]
    if "NHWC" in setup.layouts and tuned.layout != "NHWC":
        out.append(Variant("nhwc", "NHWC (every layer direct)", "NHWC"))
    return out


class Measurer:
    """Fresh-process measurements of one session: inputs, the ONNX file, a baseline per runtime library."""

    def __init__(self, setup: Setup, state: State, work: str, args) -> None:
        import onnx

        from autosearch.deploy.timing import save_inputs

        self.state, self.work, self.args = state, work, args
        self.onnx_path, self.inputs = os.path.join(work, "model.onnx"), os.path.join(work, "inputs.npz")
        if not os.path.exists(self.inputs):
            onnx.save(setup.model.onnx_model, self.onnx_path)
            save_inputs(setup.model.input_shapes, self.inputs)

    def baseline(self, kind: str) -> int:
        from autosearch.deploy.bench import library_of
        from autosearch.deploy.timing import baseline_peak

        baselines = self.state.data.setdefault("baselines", {})
        library = library_of(kind)
        if not baselines.get(library):
            baselines[library] = baseline_peak(kind, inputs_path=self.inputs, threads=self.args.threads)
            self.state.save()
        return baselines[library]

    def measure(self, label: str, kind: str, path: str) -> dict:
        """Median latency (ms) and peaks (bytes) over ``--rounds`` fresh processes."""
        from autosearch.deploy.timing import Runtime, Timing, time_in_subprocess

        total = Timing(label, [])
        rounds = max(1, min(self.args.rounds, self.args.runs))
        for r in range(rounds):
            runs = self.args.runs // rounds + (1 if r < self.args.runs % rounds else 0)
            t = time_in_subprocess(Runtime(label, kind, path), inputs_path=self.inputs, runs=runs,
                                   threads=self.args.threads, out_dir=self.work)
            if not t.ok:
                return {"error": t.error}
            total.runs.extend(t.runs)
            total.merge_peaks(t)
        total.baseline_bytes = self.baseline(kind)
        return {"median_ms": total.stats()["median"], "runs_ms": total.runs, "peak_bytes": total.peak_bytes,
                "load_peak_bytes": total.load_peak_bytes, "run_peak_bytes": total.run_peak_bytes,
                "baseline_bytes": total.baseline_bytes, "model_peak_bytes": total.model_peak_bytes,
                "max_rel_error_vs_ort": self.error_vs_ort(t.output_path)}

    def error_vs_ort(self, output_path: str) -> float:
        """Largest relative error of a variant's outputs against ONNX Runtime's (computed once, kept)."""
        from autosearch.deploy.timing import Runtime, max_relative_error, time_in_subprocess

        reference = os.path.join(self.work, "reference.npz")
        if not os.path.exists(reference):
            t = time_in_subprocess(Runtime("reference", "ort", self.onnx_path), inputs_path=self.inputs, runs=1,
                                   threads=self.args.threads, out_dir=self.work)
            if not t.ok:
                raise SystemExit(f"ONNX Runtime could not run the model: {t.error}")
        return max_relative_error(output_path, reference)

    def build_and_measure(self, setup: Setup, variant: Variant) -> dict:
        lib = os.path.join(self.work, "lib", re.sub(r"[^A-Za-z0-9]+", "-", variant.key) + ".so")
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        from autosearch.deploy.artifact import compiled_files

        compiled = setup.compile(variant, lib)
        try:
            result = self.measure(variant.label, "tvm", lib)
        finally:
            for path in compiled_files(lib):  # hundreds of MiB for a Winograd-heavy model: only the figures are kept
                os.unlink(path)
        estimate = compiled.memory
        peak = estimate.peak_bytes(planned=variant.plan_memory)
        return {**result, "estimate": {**estimate.to_json(), "peak_bytes": peak}}


def run_variants(setup: Setup, measurer: Measurer, state: State, args) -> dict:
    done = state.data.setdefault("variants", {})
    todo = [(v.key, v.label) for v in variants(setup, args.per_layer)]
    todo += [(key, label) for key, (label, kind) in PEERS.items()
             if key != "openvino" or _openvino_installed()]
    wanted = set(args.only.split(",")) if args.only else None
    by_key = {v.key: v for v in variants(setup, args.per_layer)}
    for key, label in todo:
        if (wanted is not None and key not in wanted) or key in done:
            continue
        print(f"[{key}] {label} ...", flush=True)
        if key in PEERS:
            result = measurer.measure(label, PEERS[key][1], measurer.onnx_path)
        else:
            result = measurer.build_and_measure(setup, by_key[key])
        done[key] = {"label": label, **result}
        state.save()
    return {k: done[k] for k, _ in todo if k in done}


def run_front(setup: Setup, measurer: Measurer, state: State, args) -> list[dict]:
    """``--points`` budgets from the smallest model's predicted peak to the fastest one's, each chosen as
    ``export --memory-budget`` chooses, compiled and measured."""
    from autosearch.deploy.budget import budget_choice, model_options

    options = model_options(setup.contents, setup.model.relax_mod, setup.target, setup.database,
                            fast_math=setup.base["fast_math"], precision=setup.base.get("precision", "fp32"))
    low = min(o.memory.peak_bytes() for o in options)  # the smallest model: every budget below fails
    fastest, _ = budget_choice(setup.contents, setup.model.relax_mod, setup.target, 10**6)  # no budget binds
    # the knapsack bounds scratch and Winograd weights from above, so the fastest model needs this much budget
    # (a little above its own prediction) to be chosen:
    option = next(o for o in options if o.layout == fastest.layout)
    high = max(low, option.memory.peak_bytes() + sum(layer.extra_bytes for layer in option.layers
                                                      if fastest.choices.get(layer.layer) == "winograd"))
    front = state.data.setdefault("front", {})
    for i in range(args.points):
        budget = low + (high - low) * i / max(1, args.points - 1)
        key = f"{budget / MIB:.3f}"
        if key in front:
            continue
        choice, lowering = budget_choice(setup.contents, setup.model.relax_mod, setup.target, budget / MIB + 1e-6)
        wino = sorted(k for k, a in choice.choices.items() if a == "winograd")
        variant = Variant(f"budget-{key}", f"budget {key} MiB", choice.layout, choice.choices)
        print(f"[budget {key} MiB] {choice.layout}, Winograd at {len(wino)} layer(s) ...", flush=True)
        result = measurer.build_and_measure(setup, variant)
        front[key] = {"budget_bytes": choice.budget_bytes, "layout": choice.layout, "winograd_layers": wino,
                      "predicted_bytes": choice.predicted.peak_bytes(), "predicted_ms": choice.predicted_secs * 1e3,
                      **result}
        state.save()
    return [front[k] for k in sorted(front, key=float)]


def _openvino_installed() -> bool:
    from autosearch.deploy.timing import openvino_default_precision

    return openvino_default_precision() is not None


def _mib(n) -> str:
    return "-" if n is None else f"{n / MIB:.1f}"


def write_variants(results: dict, args, stem: str, cpu: str) -> None:
    from autosearch.plots import figure, save

    header = ["variant", "median ms", "peak MiB", "loading", "runs", "predicted peak", "weights",
              "activations planned", "unplanned", "kernel scratch", "error vs ORT"]
    rows = []
    for r in results.values():
        if "error" in r:
            rows.append([r["label"], r["error"][:80], *[""] * (len(header) - 2)])
            continue
        e = r.get("estimate") or {}
        above = [None if n is None else n - r["baseline_bytes"] for n in (r["load_peak_bytes"], r["run_peak_bytes"])]
        computed = [e.get(k) for k in ESTIMATE_COLUMNS]
        cells = [r["label"], f"{r['median_ms']:.2f}", *map(_mib, [r["model_peak_bytes"], *above, *computed]),
                 f"{r.get('max_rel_error_vs_ort', math.nan):.1e}"]
        rows.append(cells)
    lines = [markdown_table(header, rows)]
    caption = (f"\n{args.name}: latency (median of {args.runs} runs in {args.rounds} fresh processes, "
               f"{args.threads} threads) and peak resident memory (MiB) over loading and running, above a process "
               "that imported the same runtime and loaded no model (loading / runs: the two phases' peaks); TVM's "
               "predicted peak and its parts computed from the module before the build (autosearch.deploy.memory); "
               f"{cpu}.\n")
    with open(stem + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n" + caption)
    with open(stem + ".json", "w") as fh:
        json.dump({"model": args.model, "log": args.log, "cpu": cpu, "threads": args.threads, "variants": results},
                  fh, indent=1)
    fig, axes = figure(size=(8.0, 5.5))
    ax = axes[0, 0]
    points = [(key, r["model_peak_bytes"] / MIB, r["median_ms"], r["label"]) for key, r in results.items()
              if "error" not in r and r["model_peak_bytes"] is not None]
    for key, x, y, _ in points:
        ax.scatter([x], [y], color="C1" if key in PEERS else "C0", marker="s" if key in PEERS else "o")
    for (x, y, label), dy in zip([p[1:] for p in points], _label_offsets([(p[1], p[2]) for p in points])):
        ax.annotate(label, (x, y), xytext=(4, dy), textcoords="offset points", fontsize=7)
    ax.set_xlabel("peak memory (MiB above the runtime imported)")
    ax.set_ylabel("latency (ms, median)")
    ax.set_title(f"{args.name}: latency vs peak memory of the tuned variants and the peers", fontsize=10)
    save(fig, stem + ".png")
    print("\n".join(lines) + caption + f"plot: {stem}.png")


def _label_offsets(xy: list[tuple[float, float]], *, axis_points: float = 300.0) -> list[float]:
    """Vertical label offsets (points) so that the labels of points close together (variants that differ in a
    detail, e.g. ORT's arena on and off) stack downwards instead of printing over each other; ``axis_points``
    is about the axes' height."""
    if not xy:
        return []
    xs, ys = [p[0] for p in xy], [p[1] for p in xy]
    near_x = 0.15 * ((max(xs) - min(xs)) or 1.0)
    scale = axis_points / (1.1 * ((max(ys) - min(ys)) or 1.0))  # points per data unit
    placed: list[tuple[float, float]] = []  # (x, label baseline in points)
    offsets = [0.0] * len(xy)
    for i in sorted(range(len(xy)), key=lambda j: -xy[j][1]):
        x, y = xy[i]
        at = y * scale + 3
        while clash := [b for px, b in placed if abs(x - px) < near_x and abs(at - b) < 9]:
            at = min(clash) - 9
        placed.append((x, at))
        offsets[i] = at - y * scale
    return offsets


def write_front(front: list[dict], args, stem: str, cpu: str) -> None:
    from autosearch.plots import figure, save

    header = ["budget MiB", "layout", "Winograd layers", "predicted peak", "measured peak", "error",
              "predicted ms", "measured ms", "output vs ORT"]
    rows = []
    for p in front:
        measured = p.get("model_peak_bytes")
        error = f"{100 * (p['predicted_bytes'] - measured) / measured:+.1f}%" if measured else "-"
        rows.append([_mib(p["budget_bytes"]), p["layout"], str(len(p["winograd_layers"])), _mib(p["predicted_bytes"]),
                     _mib(measured), error, f"{p['predicted_ms']:.2f}", f"{p.get('median_ms', math.nan):.2f}",
                     f"{p.get('max_rel_error_vs_ort', math.nan):.1e}"])
    lines = [markdown_table(header, rows)]
    caption = (f"\n{args.name}: export --memory-budget at {len(front)} budgets; predicted peak "
               "(autosearch.deploy.memory) "
               "vs measured peak over loading and running (MiB above TVM imported), predicted latency (sum of the "
               f"tuned tasks) vs measured median ({args.runs} runs in {args.rounds} fresh processes, {args.threads} "
               f"threads); {cpu}.\n")
    with open(stem + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n" + caption)
    with open(stem + ".json", "w") as fh:
        json.dump({"model": args.model, "log": args.log, "cpu": cpu, "threads": args.threads, "front": front},
                  fh, indent=1)
    fig, axes = figure(size=(8.0, 5.0))
    ax = axes[0, 0]
    ok = [p for p in front if p.get("model_peak_bytes")]
    ax.plot([p["model_peak_bytes"] / MIB for p in ok], [p["median_ms"] for p in ok], "o-", label="measured")
    ax.plot([p["predicted_bytes"] / MIB for p in ok], [p["predicted_ms"] for p in ok], "o--", mfc="none",
            label="predicted")
    for p in ok:
        ax.axvline(p["budget_bytes"] / MIB, color="grey", alpha=0.3, linewidth=0.8)
    ax.set_xlabel("peak memory (MiB above TVM imported); grey: the budgets")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"{args.name}: export --memory-budget, the latency / memory front", fontsize=10)
    ax.legend()
    save(fig, stem + ".png")
    print("\n".join(lines) + caption + f"plot: {stem}.png")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-yolov2", help="the model the log was tuned on")
    p.add_argument("--log", required=True, help="the tuning log (run's)")
    p.add_argument("--input-shape", help="as the log was tuned with")
    p.add_argument("--threads", type=int, default=host_cores())
    p.add_argument("--runs", type=int, default=15, help="timed forward passes per variant, over all rounds")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per variant")
    p.add_argument("--only", help="comma-separated variant keys (tuned, planning-off, ..., ort, openvino)")
    p.add_argument("--no-per-layer", dest="per_layer", action="store_false",
                   help="leave out the winograd-at:LAYER variants")
    p.add_argument("--front", action="store_true", help="the --memory-budget front instead of the variants")
    p.add_argument("--points", type=int, default=5, help="budgets on the front")
    p.add_argument("--results", default=RESULTS, help="where to write (default experiments/results)")
    args = p.parse_args(argv)
    name = args.name = os.path.splitext(os.path.basename(args.model))[0]
    work = os.path.join(args.results, f"memory-{name}")
    os.makedirs(work, exist_ok=True)
    state = State(os.path.join(work, "state.json"))
    if state.data.get("log") not in (None, os.path.abspath(args.log)):
        raise SystemExit(f"{work} holds results of another log ({state.data['log']}): move it away first")
    state.data.update(log=os.path.abspath(args.log), cpu=state.data.get("cpu") or host_label())
    state.save()
    setup = Setup(args)
    measurer = Measurer(setup, state, work, args)
    if args.front:
        write_front(run_front(setup, measurer, state, args), args,
                    os.path.join(args.results, f"memory-front-{name}"), state.data["cpu"])
    else:
        write_variants(run_variants(setup, measurer, state, args), args, os.path.join(args.results, f"memory-{name}"),
                       state.data["cpu"])
    shutil.rmtree(os.path.join(work, "lib"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
