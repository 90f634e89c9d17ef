"""FLOP counting on ONNX graphs, independent of TVM, used to cross-check TVM's own FLOP estimates.

Only the compute-bound operators are counted (Conv, ConvTranspose, MatMul, Gemm), as 2 x multiply-
accumulates, which is the convention of Darknet's BFLOPs and Ultralytics' GFLOPs.  Elementwise ops,
pooling and normalisation are ignored.  Subgraphs of control-flow ops are not visited.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import onnx


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Map every tensor name with a fully known shape to that shape, after ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in graph.initializer}
    for info in (*graph.input, *graph.value_info, *graph.output):
        dims = info.type.tensor_type.shape.dim
        if info.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    return shapes


def _shape(shapes: dict[str, tuple[int, ...]], node: onnx.NodeProto, name: str) -> tuple[int, ...]:
    """Look up a shape, failing with a clear message instead of silently miscounting dynamic graphs."""
    if name not in shapes:
        raise ValueError(f"shape of {name!r} (used by {node.op_type} node {node.name!r}) is not static")
    return shapes[name]


def _conv_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """N*Cout*Hout*Wout * (Cin/group)*kh*kw; the weight is (Cout, Cin/group, kh, kw)."""
    weight = _shape(shapes, node, node.input[1])
    return math.prod(_shape(shapes, node, node.output[0])) * math.prod(weight[1:])


def _conv_transpose_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """Every input pixel scatters into (Cout/group)*kh*kw outputs; the weight is (Cin, Cout/group, kh, kw)."""
    weight = _shape(shapes, node, node.input[1])
    return math.prod(_shape(shapes, node, node.input[0])) * math.prod(weight[1:])


def _matmul_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """Each output element is a dot product over A's last axis."""
    a = _shape(shapes, node, node.input[0])
    return math.prod(_shape(shapes, node, node.output[0])) * a[-1]


def _gemm_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """M*N*K, with K taken from A honouring ``transA``."""
    a = _shape(shapes, node, node.input[0])
    trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
    return math.prod(_shape(shapes, node, node.output[0])) * (a[0] if trans_a else a[1])


_MAC_COUNTERS: dict[str, Callable[[onnx.NodeProto, dict[str, tuple[int, ...]]], int]] = {
    "Conv": _conv_macs,
    "ConvTranspose": _conv_transpose_macs,
    "MatMul": _matmul_macs,
    "Gemm": _gemm_macs,
}


def count_flops(model: onnx.ModelProto) -> int:
    """Return 2 x the multiply-accumulates of all Conv/ConvTranspose/MatMul/Gemm nodes of the main graph.

    Raises ``ValueError`` if a counted node has a tensor whose shape inference cannot make static.
    """
    shapes = _static_shapes(model)
    macs = 0
    for node in model.graph.node:
        counter = _MAC_COUNTERS.get(node.op_type)
        if counter is not None and node.domain in ("", "ai.onnx"):
            macs += counter(node, shapes)
    return 2 * macs
