"""Real Ultralytics exports import and give the built-in models' conv workloads.

YOLOv8n and YOLO11n are built by Ultralytics from their yaml (random weights, nothing downloaded) and
exported to ONNX at 640 in the three kinds users make: ``simplify=False`` (shapes computed at run time),
``dynamic=True`` (symbolic batch / height / width, shapes computed at run time) and ``simplify=True``
(onnxslim's static graph). Each is imported by autosearch (``--input-shape`` fixes the dynamic one) and its
conv tasks are compared with the built-in model's by workload key (TVM's structural hash: the same key is the
same kernel, so records and databases carry over). Also shown: whether TVM imports the export without
autosearch's folding, and that the folded graph computes what the export does (ONNX Runtime, one input).

Ultralytics needs torchvision, and PyPI's torchvision for this torch is a CUDA build whose C++ ops do not
load beside the CPU torch. So the exports run in a separate virtualenv, never the project's:

    python3 -m venv /work/ultra-venv
    /work/ultra-venv/bin/pip install torch==2.13.0
    /work/ultra-venv/bin/pip install --no-deps ultralytics "torchvision==0.28.*"
    /work/ultra-venv/bin/pip install numpy pillow pyyaml matplotlib opencv-python-headless polars psutil \\
        requests ultralytics-thop onnx onnxslim
    python -m experiments.real_exports --ultralytics-python /work/ultra-venv/bin/python

torchvision registers fake kernels for its ``nms`` / ``qnms`` ops at import and fails when its C++ library
did not define them; the export script defines their schemas first (an export never calls them).
Exports are kept in ``--work`` (re-used on a second run). Writes experiments/results/real_exports.{md,json}.
Untrained weights are PyTorch's default initialisation, which shrinks a signal about threefold per convolution:
through a hundred of them a YOLO's features fall to 1e-9 of the head's biases, and the export computes the same
output, to the last bit, whatever the image, so no comparison of outputs could see a wrong kernel. Before export
each convolution's weights are scaled so its output has unit variance on a noise image (LSUV; the built-in
models' weights are drawn to that end, ``workloads/builder.py``); shapes, and so every kernel, are unchanged.
The other task heads (``HEADS``: each model's segmentation, pose, oriented-box and classification yaml) are exported
with Ultralytics' defaults at the image size each is trained at, and listed with their outputs, their tasks, the
conv tasks they share with the detection model, and what the NHWC lowering (the one ``run`` tunes them in) leaves
un-lowered: a segmentation head's transposed convolution did not build in NHWC before ``frontend/conv_transpose.py``.
``--export NAME`` only writes ``--work/NAME.onnx``, Ultralytics' default export of a model that is not built in
(YOLO12n, whose area attention is what the results measure it for).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time

import numpy as np

from autosearch.errors import UserError
from autosearch.tables import markdown_table

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
NMS_FREE = "nms-free"  # ``nms=False``: the one-to-one head (YOLOv10, YOLO26), its top-k in the graph
DEFAULT = "default"  # Ultralytics' own options, as ``yolo export model=NAME.pt format=onnx`` exports
MODELS = ("yolov8n", "yolo11n")  # Ultralytics' yaml names are the built-in names
KINDS = {"unsimplified": {"opset": 17, "simplify": False},
         "dynamic": {"opset": 17, "simplify": False, "dynamic": True},
         "simplified": {"opset": 17, "simplify": True}}
# the other task heads, each model's ``-seg`` / ``-pose`` / ``-obb`` / ``-cls`` yaml in Ultralytics' default export,
# at the image size Ultralytics trains it at
HEADS = {"seg": 640, "pose": 640, "obb": 1024, "cls": 224}
# the other detection families Ultralytics builds, each in its default export; those with a one-to-one head (YOLOv10,
# YOLO26) also with ``nms=False``, which selects the detections in the graph (TopK); and its transformer detector
FAMILIES = {"yolov5nu": (DEFAULT,), "yolov9t": (DEFAULT,), "yolov10n": (DEFAULT, NMS_FREE),
            "yolo26n": (DEFAULT, NMS_FREE), "rtdetr-l": (DEFAULT,)}
FAMILY_HEADS = ("yolo26n",)  # whose task heads (HEADS) are listed beside the families' detection models
IMAGE_SHAPE = "images:1,3,640,640"

EXPORT_SCRIPT = """
import json, shutil, sys, torch
lib = torch.library.Library("torchvision", "DEF")  # torchvision's CUDA-built ops cannot load here
lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
import ultralytics
from ultralytics import RTDETR, YOLO
name, out, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
torch.manual_seed(0)
yolo = (RTDETR if name.startswith("rtdetr") else YOLO)(name + ".yaml")
net = yolo.model.eval()  # batch norms at their initial statistics: the identity, as export folds them
x = torch.rand(1, 3, 320, 320, generator=torch.Generator().manual_seed(0))
convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.weight.requires_grad]  # not DFL's
with torch.no_grad():
    for _ in range(2):  # layer-sequential unit variance (Mishkin & Matas, 2016), twice: a layer's input moves
        for conv in convs:
            seen = []
            hook = conv.register_forward_hook(lambda m, i, o: seen.append(o))
            net(x)
            hook.remove()
            if not seen:  # not on the inference path (YOLO26-pose's training-only branch)
                continue
            signal = seen[0] - (conv.bias.view(1, -1, 1, 1) if conv.bias is not None else 0)
            conv.weight.mul_(1.0 / max(float(signal.std()), 1e-12))
path = yolo.export(format="onnx", **{"imgsz": 640, **options})
shutil.move(path, out)
print(json.dumps({"ultralytics": ultralytics.__version__, "torch": torch.__version__, "weights": WEIGHTS}))
"""
WEIGHTS = "random, each convolution scaled to unit output variance"


def export(python: str, name: str, kind: str, path: str, *, imgsz: int = 640) -> dict:
    """One Ultralytics export in the other virtualenv (kept: a second run re-uses it)."""
    versions_path = path + ".versions.json"
    if os.path.exists(path) and os.path.exists(versions_path):
        with open(versions_path) as f:
            versions = json.load(f)
        if versions.get("weights") == WEIGHTS:  # an export of before the scaling is made again
            return versions
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_AUTOINSTALL": "0"}
    kind_options = {NMS_FREE: {"nms": False}}.get(kind, KINDS.get(kind, {}))  # DEFAULT: none but the image size
    options = json.dumps({**kind_options, "imgsz": imgsz})
    script = f"WEIGHTS = {WEIGHTS!r}\n" + EXPORT_SCRIPT
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as work:  # Ultralytics writes NAME.onnx there,
        proc = subprocess.run([python, "-c", script, name, path, options], capture_output=True, text=True,
                              cwd=work, env=env, timeout=900)  # which is another kind's path in --work
    if proc.returncode != 0:
        raise RuntimeError(f"export of {name} ({kind}) failed:\n{proc.stderr[-3000:]}")
    versions = json.loads(proc.stdout.strip().splitlines()[-1])
    with open(versions_path, "w") as f:
        json.dump(versions, f)
    return versions


def import_without_folding(path: str, target) -> str:
    """What TVM makes of the export as it is: "ok", or the last line of its error."""
    import onnx

    from autosearch.frontend.importer import extract_tasks, resolve_input_shapes, to_relax

    proto = onnx.load(path)
    try:
        mod = to_relax(proto, resolve_input_shapes(proto, {"": (1, 3, 640, 640)}))
        extract_tasks(mod, target, winograd="off", layout="NCHW")
    except (AssertionError, UserError) as exc:
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        return f"fails: {lines[-1][:90] if lines else type(exc).__name__}"
    return "ok"


def same_output(original_path: str, folded, size: int = 640) -> float:
    """Max |difference| between ONNX Runtime on the export and on the folded graph, relative to each output's
    largest value, the worst over the outputs."""
    import onnxruntime as ort

    x = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # not its notes on the export's unused initializers
    outs = [ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]).run(None, {"images": x})
            for m in (original_path, folded.SerializeToString())]
    return max(float(np.abs(a - b).max() / np.abs(a).max()) for a, b in zip(*outs))


def unlowered_in_nhwc(imported, target) -> str:
    """What the NHWC lowering (the layout ``run``'s defaults tune these models in) leaves un-lowered: "none", or
    the lowering's one-line error naming the Relax ops TVM's VM could not build (before the transposed
    convolution's own lowering: a segmentation head's mask upsampling)."""
    from autosearch.frontend.lowering import lower

    try:
        lower(imported.relax_mod, target, winograd="off", layout="NHWC", precision="fp32")
    except UserError as exc:  # lower names what it leaves (autosearch.frontend.lowering.unlowered_ops)
        return str(exc)
    return "none"


def head_row(name: str, size: int, path: str, detect: dict[str, int], target) -> dict:
    """One task head's export: its graph, its tasks, what it shares with the detection model of its family (that
    model's :func:`conv_tasks`)."""
    import onnx

    from autosearch.frontend.importer import import_model

    proto = onnx.load(path)
    start = time.perf_counter()
    imported = import_model(path, target, winograd="off", layout="NCHW")
    seconds = time.perf_counter() - start
    convs = conv_tasks(imported)
    shapes = {o.name: "x".join(str(d.dim_value) for d in o.type.tensor_type.shape.dim) for o in proto.graph.output}
    return {
        "model": name, "kind": DEFAULT, "size": size, "nodes": len(proto.graph.node),
        "outputs": ", ".join(f"{k} {v}" for k, v in shapes.items()), "import_s": seconds,
        "tasks": len(imported.tasks), "conv_tasks": len(convs), "conv_layers": sum(convs.values()),
        "gflop": imported.flops / 1e9, "conv_tasks_shared_with_detect": len(convs.keys() & detect.keys()),
        "transposed_conv_tasks": sum("conv2d_transpose" in t.name for t in imported.tasks),
        "unlowered_in_nhwc": unlowered_in_nhwc(imported, target),
        "folded_vs_export_rel_diff": same_output(path, imported.onnx_model, size),
    }


def conv_tasks(model) -> dict[str, int]:
    return {t.workload_key: t.weight for t in model.tasks if "conv2d" in t.name}


def main() -> int:
    import onnx

    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ultralytics-python", default="/work/ultra-venv/bin/python",
                   help="python of a virtualenv with ultralytics (see the module docstring)")
    p.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "autosearch", "real_exports"))
    p.add_argument("--export", metavar="NAME", help="only export Ultralytics' NAME.yaml (e.g. yolo12n, a model not "
                   "built in) with Ultralytics' defaults to --work/NAME.onnx, for `run --model` and user_path")
    p.add_argument("--families", action="store_true", help="only the other detection families (FAMILIES): export, "
                   "import, tasks; writes experiments/results/real_exports_families.md")
    args = p.parse_args()
    if args.families:
        os.makedirs(args.work, exist_ok=True)
        return families(args.ultralytics_python, args.work)
    if args.export:
        os.makedirs(args.work, exist_ok=True)
        path = os.path.join(args.work, f"{args.export}.onnx")
        print(json.dumps({"path": path, **export(args.ultralytics_python, args.export, DEFAULT, path)}))
        return 0
    os.makedirs(args.work, exist_ok=True)
    target = parse_target(None)
    rows, versions = [], {}
    for name in MODELS:
        builtin = import_model(name, target, winograd="off", layout="NCHW")
        builtin_convs, builtin_keys = conv_tasks(builtin), {t.workload_key for t in builtin.tasks}
        rows.append({"model": name, "kind": "built-in", "tasks": len(builtin.tasks), "conv_tasks": len(builtin_convs),
                     "conv_layers": sum(builtin_convs.values()), "gflop": builtin.flops / 1e9})
        for kind in KINDS:
            path = os.path.join(args.work, f"{name}-{kind}.onnx")
            versions = export(args.ultralytics_python, name, kind, path)
            proto = onnx.load(path)
            start = time.perf_counter()
            imported = import_model(path, target, input_shape=IMAGE_SHAPE if kind == "dynamic" else None,
                                    winograd="off", layout="NCHW")
            seconds = time.perf_counter() - start
            convs = conv_tasks(imported)
            rows.append({
                "model": name, "kind": kind, "nodes": len(proto.graph.node),
                "shape_ops": sum(n.op_type in ("Shape", "Size") for n in proto.graph.node),
                "input": "x".join(d.dim_param or str(d.dim_value)
                                  for d in proto.graph.input[0].type.tensor_type.shape.dim),
                "without_folding": import_without_folding(path, target),
                "import_s": seconds, "tasks": len(imported.tasks), "conv_tasks": len(convs),
                "conv_layers": sum(convs.values()), "gflop": imported.flops / 1e9,
                "same_conv_workloads": convs == builtin_convs,
                "tasks_shared_with_builtin": sum(t.workload_key in builtin_keys for t in imported.tasks),
                "folded_vs_export_rel_diff": same_output(path, imported.onnx_model),
            })
            print(json.dumps(rows[-1]), flush=True)
        for head, size in HEADS.items():
            path = os.path.join(args.work, f"{name}-{head}-{size}.onnx")
            versions = export(args.ultralytics_python, f"{name}-{head}", DEFAULT, path, imgsz=size)
            rows.append(head_row(f"{name}-{head}", size, path, builtin_convs, target))
            print(json.dumps(rows[-1]), flush=True)
    write(rows, versions)
    return 0


def families(python: str, work: str) -> int:
    """The other detection families' exports (:data:`FAMILIES`): what autosearch makes of each."""
    from autosearch.frontend.importer import import_model
    from autosearch.frontend.target import parse_target

    target, rows, versions = parse_target(None), [], {}
    builtin = {}  # the built-in models' conv tasks: a family's layers among them have known schedules
    for name in MODELS:
        builtin |= conv_tasks(import_model(name, target, winograd="off", layout="NCHW"))
    for name, kinds in FAMILIES.items():
        for kind in kinds:
            path = os.path.join(work, f"{name}.onnx" if kind == DEFAULT else f"{name}-{kind}.onnx")
            versions = export(python, name, kind, path)
            rows.append({**head_row(name, 640, path, builtin, target), "kind": kind})
            print(json.dumps(rows[-1]), flush=True)
        for head, size in HEADS.items() if name in FAMILY_HEADS else ():
            path = os.path.join(work, f"{name}-{head}-{size}.onnx")
            versions = export(python, f"{name}-{head}", DEFAULT, path, imgsz=size)
            rows.append({**head_row(f"{name}-{head}", size, path, builtin, target), "kind": DEFAULT})
            print(json.dumps(rows[-1]), flush=True)
    header = ["model", "export", "input", "nodes", "outputs", "autosearch", "tasks", "conv tasks (layers)", "GFLOP",
              "conv tasks shared with built-in YOLOv8n / YOLO11n", "un-lowered in NHWC", "folded vs export"]
    cells = [[r["model"], "`nms=False`" if r["kind"] == NMS_FREE else "default", f"1x3x{r['size']}x{r['size']}",
              r["nodes"], r["outputs"],
              f"imports in {r['import_s']:.1f} s", r["tasks"], f"{r['conv_tasks']} ({r['conv_layers']})",
              f"{r['gflop']:.3f}", r["conv_tasks_shared_with_detect"], r["unlowered_in_nhwc"],
              f"{r['folded_vs_export_rel_diff']:.1e}"] for r in rows]
    lines = ["# Ultralytics' other detection families", "",
             f"`python -m experiments.real_exports --families`; Ultralytics {versions.get('ultralytics')} (torch "
             f"{versions.get('torch')}), random weights from the yaml, each convolution scaled to unit output variance,"
             " Ultralytics' default export (the task heads at the image size each is trained at) and, for the models"
             " with a one-to-one head, `nms=False` (the detections selected in the graph: TopK, GatherElements); tasks"
             " as `tasks --winograd off --layout NCHW` lists them.", "", markdown_table(header, cells), "",
             "'un-lowered in NHWC' and 'folded vs export' as in `real_exports.md`. TopK is compiled as TVM lowers it"
             " (a call into its runtime's sort), not a tuning task."]
    with open(os.path.join(RESULTS, "real_exports_families.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


def write(rows: list[dict], versions: dict) -> None:
    import onnxsim
    import tvm

    meta = {**versions, "tvm": tvm.__version__, "onnxsim": onnxsim.__version__.lstrip("v")}
    with open(os.path.join(RESULTS, "real_exports.json"), "w") as f:
        json.dump({"versions": meta, "rows": rows}, f, indent=1)
    lines = [
        "# Real Ultralytics exports vs the built-in models",
        "",
        f"`python -m experiments.real_exports`; Ultralytics {meta.get('ultralytics')} (torch {meta.get('torch')}), "
        f"random weights from the yaml, 640x640, opset 17; TVM {meta['tvm']}, onnxsim {meta['onnxsim']}; "
        "tasks as `tasks --winograd off --layout NCHW` lists them.",
        "",
    ]
    header = ["model", "export", "input", "nodes", "Shape ops", "TVM without folding", "autosearch", "tasks",
              "conv tasks (layers)", "GFLOP", "same conv workloads as built-in", "tasks shared with built-in",
              "folded vs export"]
    cells = []
    for r in (r for r in rows if "size" not in r):
        if r["kind"] == "built-in":
            cells.append([r["model"], "built-in", "1x3x640x640", "", "", "", "", r["tasks"],
                          f"{r['conv_tasks']} ({r['conv_layers']})", f"{r['gflop']:.3f}", "", "", ""])
            continue
        cells.append([r["model"], r["kind"], r["input"], r["nodes"], r["shape_ops"], r["without_folding"],
                      f"imports in {r['import_s']:.1f} s", r["tasks"], f"{r['conv_tasks']} ({r['conv_layers']})",
                      f"{r['gflop']:.3f}", "yes" if r["same_conv_workloads"] else "NO",
                      f"{r['tasks_shared_with_builtin']}/{r['tasks']}", f"{r['folded_vs_export_rel_diff']:.1e}"])
    lines.append(markdown_table(header, cells))
    lines += [
        "",
        "The dynamic export is imported with `--input-shape images:1,3,640,640`. 'folded vs export': max |difference|"
        " of ONNX Runtime's outputs on the export and on the graph autosearch folded, relative to the output's"
        " largest value, one random input. Tasks not shared with the built-in are the Detect head's decoding, which"
        " TVM fuses by the exporter's op order.",
        "",
        "## The other task heads",
        "",
        "Each model's segmentation, pose, oriented-box and classification yaml, exported with Ultralytics' defaults"
        " at the image size Ultralytics trains it at (a released checkpoint's export default); tasks as above.",
        "",
    ]
    header = ["model", "input", "nodes", "outputs", "autosearch", "tasks", "conv tasks (layers)", "GFLOP",
              "conv tasks shared with the detection model", "transposed conv tasks", "un-lowered in NHWC",
              "folded vs export"]
    cells = [[r["model"], f"1x3x{r['size']}x{r['size']}", r["nodes"], r["outputs"], f"imports in {r['import_s']:.1f} s",
              r["tasks"], f"{r['conv_tasks']} ({r['conv_layers']})", f"{r['gflop']:.3f}",
              r["conv_tasks_shared_with_detect"], r["transposed_conv_tasks"], r["unlowered_in_nhwc"],
              f"{r['folded_vs_export_rel_diff']:.1e}"] for r in rows if "size" in r]
    lines += [markdown_table(header, cells), "",
              "'un-lowered in NHWC': Relax ops the NHWC lowering (the layout `run` tunes these models in by default)"
              " left for the VM, which cannot build them; 'none' is a model that builds. 'folded vs export': as above,"
              " the worst of the outputs."]
    with open(os.path.join(RESULTS, "real_exports.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
