"""An ONNX graph made static for the given input shapes: dynamic axes fixed, shape arithmetic folded.

Exporters that keep shapes symbolic (Ultralytics with ``simplify=False`` or ``dynamic=True``, a plain
``torch.onnx.export``) compute sizes at run time: ``Shape -> Gather -> Add -> Div -> Slice`` for a
``chunk``, ``Shape -> Gather -> Concat -> Reshape`` for a ``view``, ``Range -> Expand`` for anchor grids.
TVM's Relax importer takes them as they are, but its legalisation then stops on the first tensor whose
shape is not a constant expression ("emit_te now only supports Tensor that has ShapeExpr shape"). With
static input shapes all of that arithmetic is constant; onnxsim (ONNX shape inference and constant
folding in one fixed point, with its own operator executor) turns it into constants before Relax sees it.

onnxsim runs with ``perform_optimization=False``: no BatchNorm fusion or other rewrites of the layers
themselves, so a folded graph lowers to the same conv workloads (structural hashes) as the same network
exported statically, and tuning records carry over between export kinds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator

import onnx

from autosearch.errors import UserError

log = logging.getLogger(__name__)

# ops whose output is a tensor's shape or size: with them in the graph, sizes are computed at run time
SHAPE_OPS = frozenset({"Shape", "Size"})


def has_runtime_shapes(proto: onnx.ModelProto) -> bool:
    """Whether the graph computes sizes at run time or has an input axis without a fixed size."""
    if any(n.op_type in SHAPE_OPS for n in proto.graph.node):
        return True
    initializers = {t.name for t in proto.graph.initializer}
    return any(not (d.HasField("dim_value") and d.dim_value > 0)
               for value in proto.graph.input if value.name not in initializers
               for d in value.type.tensor_type.shape.dim)


def make_static(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """``proto`` with its inputs fixed to ``shapes`` and every shape computation folded to a constant.

    A graph that is static already comes back unchanged (the same object), so built-in models and
    simplified exports keep their exact bytes and workload keys.
    """
    if not has_runtime_shapes(proto):
        return proto
    try:
        import onnxsim
    except ImportError as exc:
        raise UserError("this model computes tensor shapes at run time; folding them needs onnxsim "
                        "(pip install 'onnxsim>=0.8.1', Python 3.11 or newer)") from exc

    with stderr_to_log("onnxsim"):  # onnxsim's C++ core reports each node it cannot fold yet on fd 2
        try:
            folded, _ = onnxsim.simplify(proto, perform_optimization=False, certify=False, check_n=0,
                                         overwrite_input_shapes={k: list(v) for k, v in shapes.items()})
        except Exception as exc:  # onnxsim raises RuntimeError / ValidationError with long texts
            text = str(exc).strip().splitlines()
            raise UserError(f"cannot fold the model's shape arithmetic for input shape(s) {format_shapes(shapes)}: "
                            f"{text[-1] if text else type(exc).__name__}") from exc
    left = [n for n in folded.graph.node if n.op_type in SHAPE_OPS]
    log.info("folded shape arithmetic for %s: %d -> %d nodes, %d shape ops left", format_shapes(shapes),
             len(proto.graph.node), len(folded.graph.node), len(left))
    return folded


def first_dynamic_node(proto: onnx.ModelProto) -> onnx.NodeProto | None:
    """The first node (in graph order) whose output ONNX shape inference cannot give a static shape:
    where a graph still sizes tensors from data at run time (``NonZero``, a ``Reshape`` to a computed shape)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # inference is a diagnosis here, not a requirement
        return None
    static = {t.name for t in inferred.graph.initializer}
    for info in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        ttype = info.type.tensor_type
        if ttype.HasField("shape") and all(d.HasField("dim_value") for d in ttype.shape.dim):
            static.add(info.name)
    for node in inferred.graph.node:
        if any(out and out not in static for out in node.output):
            return node
    return None


@contextlib.contextmanager
def stderr_to_log(source: str) -> Iterator[None]:
    """Send what native code (``source``) writes to file descriptor 2 into the debug log instead of the terminal."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
            if text:
                log.debug("%s: %s", source, text)


def format_shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    """``images:1,3,640,640, ...``, as ``--input-shape`` takes them."""
    return ", ".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())
