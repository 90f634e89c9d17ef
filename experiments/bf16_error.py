"""Where a bf16 model's output error comes from: the exported model, then each bf16 layer back in fp32, one at a time.

``report`` checks a model tuned with ``--precision auto`` against ONNX Runtime's fp32 output on one random input,
held to bf16's tolerance. On a deep net with random weights the rounding of 8-bit mantissas builds up layer by layer,
and OpenVINO in bf16 comes close to the tolerance too; this separates the model's sensitivity from the lowering's
share of it. From one database (``export`` of such a run) it compiles:

- the model as exported (each layer in the precision and algorithm measured faster);
- where bf16 Winograd layers were kept, the same with each of them as bf16 direct convolutions ("no bf16 Winograd");
- for each layer kept in bf16, the model with that layer alone in fp32 (its tuned fp32 kernels: export writes every
  alternative's best, and the database's lowering file says which one is compiled);
- every layer in fp32: what is left is the rounding of the activations, which the lowering keeps in bf16 whatever
  the choices (:mod:`autosearch.tensor_units.activations`), so a layer "in fp32" above still reads bf16 inputs.

Each is run in this process on ``--inputs`` random inputs (report's first input is seed 0), beside ONNX Runtime
(the reference) and OpenVINO at its default precision; errors are report's (the worst slice of any output, bf16's
floor). The milliseconds a layer costs in fp32 come from the log (weight x best latency of its tasks, as ``export``
chose)::

    python -m experiments.bf16_error --model yolov3-tiny \\
        --log experiments/results/user-yolov3-tiny-default-zen5/log.jsonl.gz --out bf16-error-yolov3-tiny-zen5

Writes ``experiments/results/OUT.json`` (after each variant: a killed run resumes where it stopped), ``OUT.md`` and
``OUT.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile

import numpy as np

from autosearch.tables import markdown_table
from experiments.lib.io import publish, read_json, results_path, write_json
from experiments.lib.machine import host_label

AS_EXPORTED = "as exported"
NO_WINOGRAD = "no bf16 Winograd"
ALL_FP32 = "every layer fp32 (bf16 activations)"


def variants(choices: dict[str, str]) -> dict[str, dict[str, str]]:
    """Name -> the layers' choices to compile: as exported, without bf16 Winograd (if any was kept), each bf16
    layer alone in fp32 (heaviest first, as ``choices`` lists them), all in fp32."""
    from autosearch.frontend.winograd import BF16_WINOGRAD

    out = {AS_EXPORTED: dict(choices)}
    if BF16_WINOGRAD in choices.values():
        out[NO_WINOGRAD] = {k: "bf16" if a == BF16_WINOGRAD else a for k, a in choices.items()}
    for layer, algorithm in choices.items():
        if algorithm != "fp32":
            out[f"{layer} in fp32"] = {**choices, layer: "fp32"}
    out[ALL_FP32] = {k: "fp32" for k in choices}
    return out


def errors(outputs: list[dict[str, np.ndarray]], reference: list[dict[str, np.ndarray]]) -> list[dict[str, float]]:
    """Per input, each output's error against the reference as report measures a bf16 runtime's."""
    from autosearch.deploy.report import LOW_PRECISION_TOLERANCE
    from autosearch.deploy.timing import relative_error

    return [{name: relative_error(out[name], ref[name], floor=LOW_PRECISION_TOLERANCE) for name in ref}
            for out, ref in zip(outputs, reference, strict=True)]


def global_error(output: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    """The largest |difference| over the output's largest |value|, the worst output: report's measure before it
    judged each slice on its own scale (2026-12-04), which the figures of earlier sittings used."""
    return max(float(np.abs(output[n].astype(np.float64) - reference[n]).max() / np.abs(reference[n]).max())
               for n in reference)


def run_tvm(library: str, inputs: list[dict[str, np.ndarray]], names: list[str]) -> list[dict[str, np.ndarray]]:
    import tvm

    from autosearch.deploy.artifact import load_model

    model = load_model(library)
    dev = tvm.cpu()
    outs = []
    for feed in inputs:
        out = model(*(tvm.runtime.tensor(v, dev) for v in feed.values()))
        arrays = [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]
        outs.append(dict(zip(names, arrays, strict=True)))
    return outs


def run_ort(onnx_path: str, inputs: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """ONNX Runtime's fp32 outputs: the reference, as report's."""
    import onnxruntime as ort

    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(None, feed), strict=True)) for feed in inputs]


def run_openvino(onnx_path: str, inputs: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """OpenVINO's outputs at its default precision (no precision hint), as report's "default precision" row."""
    import openvino

    compiled = openvino.Core().compile_model(onnx_path, "CPU")
    request = compiled.create_infer_request()
    names = [o.get_any_name() for o in compiled.outputs]
    outs = []
    for feed in inputs:
        result = request.infer(feed)
        outs.append({n: np.array(result[o], copy=True) for n, o in zip(names, compiled.outputs, strict=True)})
    return outs


def layer_costs(log: str, choices: dict[str, str]) -> dict[str, float]:
    """Per layer kept in bf16: the milliseconds its fp32 kernels add to the model's estimate (the log's bests)."""
    from autosearch.frontend.winograd import BF16_WINOGRAD
    from experiments.precision import layer_rows

    rows = {r["layer"]: r for r in layer_rows(log)}
    column = {"bf16": "bf16_ms", BF16_WINOGRAD: "winograd_ms"}
    return {layer: rows[layer]["fp32_ms"] - rows[layer][column[a]]
            for layer, a in choices.items() if a in column and layer in rows}


def summary_row(name: str, errs: list[dict[str, float]], seed0_global: float, cost: float | None) -> list[str]:
    worst = [max(e.values()) for e in errs]
    by_output = {o: max(e[o] for e in errs) for o in errs[0]}
    return [name, f"{worst[0]:.2e}", f"{seed0_global:.2e}", f"{np.median(worst):.2e}", f"{max(worst):.2e}",
            ", ".join(f"{o} {v:.2e}" for o, v in by_output.items()),
            "" if cost is None else f"+{cost:.2f}"]


def plot(data: dict, path: str, title: str) -> None:
    from autosearch.plots import figure, save

    names = [n for n in data["variants"] if n in data["errors"]]
    medians = [np.median([max(e.values()) for e in data["errors"][n]]) for n in names]
    worst = [max(max(e.values()) for e in data["errors"][n]) for n in names]
    fig, axes = figure(size=(9, 0.35 * len(names) + 1.8), grid="x")
    ax = axes[0, 0]
    y = np.arange(len(names))
    ax.barh(y, medians, color="#4c72b0", label="median over inputs")
    ax.scatter(worst, y, color="#c44e52", zorder=3, s=14, label="worst input")
    ov = data.get("openvino")
    if ov:
        ax.axvline(np.median([max(e.values()) for e in ov]), color="#55a868", linestyle="--",
                   label=f"OpenVINO {data['openvino_precision']}, median")
    ax.axvline(data["tolerance"], color="black", linewidth=0.8, label="report's bf16 tolerance")
    ax.set_yticks(y, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("max relative error vs ONNX Runtime fp32 (report's measure)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the model the log was tuned on")
    p.add_argument("--log", required=True, help="a tuning log of run --precision auto (.jsonl or .jsonl.gz)")
    p.add_argument("--inputs", type=int, default=8, help="random inputs (seeds 0..N-1; report's is seed 0)")
    p.add_argument("--out", required=True, help="results name: experiments/results/OUT.{json,md,png}")
    args = p.parse_args(argv)
    if args.inputs < 1:
        p.error("--inputs must be at least 1")

    import onnx

    import autosearch
    from autosearch.deploy.database import LOWERING_FILE
    from autosearch.deploy.report import LOW_PRECISION_TOLERANCE
    from autosearch.deploy.timing import openvino_default_precision, random_inputs
    from autosearch.frontend.importer import load_onnx, resolve_input_shapes

    base = results_path(args.out)
    data = read_json(base + ".json") if os.path.exists(base + ".json") else {}
    if data and (data.get("log") != args.log or data.get("inputs") != args.inputs):
        p.error(f"{base}.json holds another log or input count: choose another --out")
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "db")
        autosearch.export(args.log, db)
        with open(os.path.join(db, LOWERING_FILE)) as fh:
            lowering = json.load(fh)
        choices = dict(lowering.get("choices") or {})
        if not any(a != "fp32" for a in choices.values()):
            p.error(f"{args.log}: no layer was kept in bf16 (run --precision auto on a CPU with a bf16 unit)")
        proto = load_onnx(args.model)[1]
        onnx_path = os.path.join(tmp, "model.onnx")
        onnx.save(proto, onnx_path)
        names = [o.name for o in proto.graph.output]
        shapes = resolve_input_shapes(proto, {})
        inputs = [random_inputs(shapes, seed=seed) for seed in range(args.inputs)]
        reference = run_ort(onnx_path, inputs)
        ov_precision = openvino_default_precision()
        compiled = variants(choices)
        data.update(model=args.model, log=args.log, inputs=args.inputs, cpu=host_label(),
                    tolerance=LOW_PRECISION_TOLERANCE, choices=choices, openvino_precision=ov_precision,
                    costs_ms=layer_costs(args.log, choices), variants=list(compiled))
        if ov_precision and "openvino" not in data:
            outs = run_openvino(onnx_path, inputs)
            data["openvino"], data["openvino_global"] = errors(outs, reference), global_error(outs[0], reference[0])
        data.setdefault("errors", {})
        data.setdefault("global", {})
        for name, chosen in compiled.items():
            if name in data["errors"]:
                continue
            variant_db = os.path.join(tmp, f"db-{len(data['errors'])}")
            shutil.copytree(db, variant_db)  # every alternative's best: only the lowering file differs
            with open(os.path.join(variant_db, LOWERING_FILE), "w") as fh:
                json.dump({**lowering, "choices": chosen}, fh)
            library = os.path.join(tmp, f"model-{len(data['errors'])}.so")
            autosearch.compile(args.model, variant_db, library)
            outs = run_tvm(library, inputs, names)
            data["errors"][name], data["global"][name] = errors(outs, reference), global_error(outs[0], reference[0])
            write_json(base + ".json", data)

    costs = data["costs_ms"]
    rows = [summary_row(n, data["errors"][n], data["global"][n], costs.get(n.removesuffix(" in fp32")))
            for n in data["variants"]]
    if data.get("openvino"):
        rows.append(summary_row(f"OpenVINO ({data['openvino_precision']})", data["openvino"], data["openvino_global"],
                                None))
    title = f"bf16 output error of {args.model}, layer by layer back in fp32"
    text = (f"**{title}** ({data['cpu']}; `{args.log}`; {args.inputs} random inputs, seed 0 = report's; error = "
            f"report's max relative error vs ONNX Runtime fp32, bf16 floor {LOW_PRECISION_TOLERANCE:.0e}; "
            f"seed 0 global: the output's largest difference over its largest value, report's measure before "
            f"2026-12-04; "
            f"+ms = the fp32 kernels' cost over the kept bf16 ones, from the log)\n\n"
            + markdown_table(["compiled", "seed 0", "seed 0 global", "median", "worst", "worst per output", "+ms"],
                             rows) + "\n\n"
            + "Kept: " + ", ".join(f"{k} {a}" for k, a in choices.items()) + "\n")
    publish(base, data=data, text=text, plot=lambda path: plot(data, path, title))
    return 0 if all(math.isfinite(max(e.values())) for es in data["errors"].values() for e in es) else 1


if __name__ == "__main__":
    raise SystemExit(main())
