"""A small helper for writing ONNX graphs by hand with ``onnx.helper``.

The built-in YOLO workloads are generated in code instead of being downloaded, so the framework works
offline and every model is reproducible from a seed.  This module holds the shared plumbing: unique
tensor/node names, deterministic random weights and one method per layer type, emitted the way
PyTorch's ONNX exporter emits them (so TVM sees the same operator patterns as for a real export).

Weights are random but scaled so that activations stay of order one through deep networks: conv
weights use a variance-preserving std of ``gain / sqrt(fan_in)`` where ``gain`` matches the following
activation, and batch-norm statistics are near the identity transform.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
"""Opset of every built-in model (what ``torch.onnx.export(opset_version=17)`` writes)."""

IR_VERSION = 8
"""IR version matching opset 17; every onnxruntime release since 1.11 loads it."""

LEAKY_GAIN = math.sqrt(2.0 / (1.0 + 0.1**2))
"""Std gain that preserves the second moment through LeakyRelu(0.1) (He init, leaky variant)."""

SILU_GAIN = 1.0 / math.sqrt(0.3553)
"""Std gain that preserves the second moment through SiLU: E[silu(z)^2] = 0.3553 for z ~ N(0, 1)."""

LINEAR_GAIN = 1.0
"""Std gain for convs that are not followed by an activation (prediction heads)."""


class GraphBuilder:
    """Accumulates nodes and initializers of one ONNX graph and turns them into a ``ModelProto``.

    Every layer method takes input tensor names and returns the output tensor name(s), so model code
    reads like a forward pass.  Names are generated from per-operator counters, which makes the graph
    (and its serialized bytes) a pure function of the construction order and the seed.
    """

    def __init__(self, *, seed: int) -> None:
        """Start an empty graph whose random weights all come from one generator seeded by ``seed``."""
        self._rng = np.random.default_rng(seed)
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._counters: dict[str, int] = {}

    # ------------------------------------------------------------------ naming and plumbing

    def _fresh(self, prefix: str) -> str:
        """Return ``prefix_<n>`` with a per-prefix counter so names never collide."""
        index = self._counters.get(prefix, 0)
        self._counters[prefix] = index + 1
        return f"{prefix}_{index}"

    def input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input with a static shape."""
        self._inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def output(self, tensor: str, name: str, shape: Sequence[int]) -> str:
        """Expose ``tensor`` as graph output ``name`` (renaming it), declaring its static shape.

        Renaming instead of adding an Identity keeps the graph identical to an exporter's output.
        """
        for node in self._nodes:
            node.output[:] = [name if out == tensor else out for out in node.output]
            node.input[:] = [name if inp == tensor else inp for inp in node.input]
        self._outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def constant(self, prefix: str, array: np.ndarray) -> str:
        """Store ``array`` as an initializer with a unique name and return that name."""
        name = self._fresh(prefix)
        self._initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def scalar(self, prefix: str, value: float) -> str:
        """A rank-0 float32 initializer, as torch exports a Python float operand (``x * 0.5``);
        :meth:`constant` stores at least one dimension."""
        name = self._fresh(prefix)
        self._initializers.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def node(self, op_type: str, inputs: Sequence[str], *, n_outputs: int = 1, **attrs: object) -> list[str]:
        """Append one node with fresh output names and return those names."""
        node_name = self._fresh(op_type)
        outputs = [f"{node_name}_out{i}" for i in range(n_outputs)]
        self._nodes.append(helper.make_node(op_type, list(inputs), outputs, name=node_name, **attrs))
        return outputs

    def _op(self, op_type: str, inputs: Sequence[str], **attrs: object) -> str:
        """Append a single-output node and return its output name."""
        return self.node(op_type, inputs, **attrs)[0]

    def normal(self, shape: Sequence[int], std: float, mean: float = 0.0) -> np.ndarray:
        """Draw deterministic float32 normal samples from the builder's generator."""
        return (mean + std * self._rng.standard_normal(tuple(shape))).astype(np.float32)

    # ------------------------------------------------------------------ layers

    def conv(
        self,
        x: str,
        c_in: int,
        c_out: int,
        k: int,
        s: int = 1,
        p: int | None = None,
        bias: bool = False,
        *,
        gain: float = LEAKY_GAIN,
        weight: np.ndarray | None = None,
        group: int = 1,
    ) -> str:
        """2-D convolution with square kernel ``k``, stride ``s`` and symmetric padding ``p``.

        ``p`` defaults to ``k // 2`` ("same" for odd kernels).  Random weights use std
        ``gain / sqrt(fan_in)``; a fixed ``weight`` (e.g. the DFL projection) can be passed instead.
        Biases are small so they shift activations without dominating them. ``group``: grouped
        convolution (``group == c_in == c_out``: depthwise), weights (c_out, c_in / group, k, k).
        """
        pad = k // 2 if p is None else p
        if weight is None:
            fan_in = c_in // group * k * k
            weight = self.normal((c_out, c_in // group, k, k), gain / math.sqrt(fan_in))
        inputs = [x, self.constant("conv_weight", weight.astype(np.float32))]
        if bias:
            inputs.append(self.constant("conv_bias", self.normal((c_out,), 0.1)))
        return self._op(
            "Conv",
            inputs,
            dilations=[1, 1],
            group=group,
            kernel_shape=[k, k],
            pads=[pad, pad, pad, pad],
            strides=[s, s],
        )

    def batchnorm(self, x: str, channels: int, epsilon: float = 1e-5) -> str:
        """Inference-mode BatchNormalization close to identity (gamma~1, beta~0, mean~0, var~1)."""
        scale = self.constant("bn_scale", self.normal((channels,), 0.05, mean=1.0))
        shift = self.constant("bn_bias", self.normal((channels,), 0.05))
        mean = self.constant("bn_mean", self.normal((channels,), 0.05))
        var = 1.0 + 0.1 * self._rng.random(channels)
        var_name = self.constant("bn_var", var.astype(np.float32))
        return self._op("BatchNormalization", [x, scale, shift, mean, var_name], epsilon=epsilon)

    def leaky_relu(self, x: str, alpha: float = 0.1) -> str:
        """LeakyRelu as Darknet's "leaky" activation."""
        return self._op("LeakyRelu", [x], alpha=alpha)

    def sigmoid(self, x: str) -> str:
        """Elementwise logistic function."""
        return self._op("Sigmoid", [x])

    def silu(self, x: str) -> str:
        """SiLU as torch exports it at opset 17: ``Mul(x, Sigmoid(x))`` (there is no SiLU op)."""
        return self.mul(x, self.sigmoid(x))

    def maxpool(self, x: str, k: int, s: int, pads: Sequence[int] | None = None) -> str:
        """MaxPool with square kernel; ``pads`` in ONNX order [top, left, bottom, right]."""
        return self._op(
            "MaxPool",
            [x],
            ceil_mode=0,
            kernel_shape=[k, k],
            pads=list(pads) if pads is not None else [0, 0, 0, 0],
            strides=[s, s],
        )

    def concat(self, xs: Sequence[str], axis: int = 1) -> str:
        """Concatenate tensors along ``axis`` (channels by default)."""
        return self._op("Concat", list(xs), axis=axis)

    def split(self, x: str, sizes: Sequence[int], axis: int = 1) -> list[str]:
        """Split along ``axis`` into chunks of ``sizes`` (sizes as an int64 input, opset >= 13)."""
        sizes_name = self.constant("split_sizes", np.asarray(sizes, dtype=np.int64))
        return self.node("Split", [x, sizes_name], n_outputs=len(sizes), axis=axis)

    def resize_nearest2x(self, x: str) -> str:
        """2x nearest upsampling, attribute-for-attribute what ``nn.Upsample(scale_factor=2)`` exports."""
        scales = self.constant("resize_scales", np.asarray([1.0, 1.0, 2.0, 2.0], dtype=np.float32))
        return self._op(
            "Resize",
            [x, "", scales],
            coordinate_transformation_mode="asymmetric",
            cubic_coeff_a=-0.75,
            mode="nearest",
            nearest_mode="floor",
        )

    def add(self, a: str, b: str) -> str:
        """Elementwise (broadcasting) sum."""
        return self._op("Add", [a, b])

    def sub(self, a: str, b: str) -> str:
        """Elementwise (broadcasting) difference ``a - b``."""
        return self._op("Sub", [a, b])

    def mul(self, a: str, b: str) -> str:
        """Elementwise (broadcasting) product."""
        return self._op("Mul", [a, b])

    def div(self, a: str, b: str) -> str:
        """Elementwise (broadcasting) quotient ``a / b``."""
        return self._op("Div", [a, b])

    def scale(self, x: str, factor: float) -> str:
        """Multiply by a scalar constant (e.g. the 1/255 pixel scaler)."""
        return self.mul(x, self.constant("scale", np.asarray(factor, dtype=np.float32)))

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        """Reshape to a constant shape, so the graph stays static (no Shape/Gather chains)."""
        return self._op("Reshape", [x, self.constant("reshape_shape", np.asarray(shape, dtype=np.int64))])

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        """Permute axes."""
        return self._op("Transpose", [x], perm=list(perm))

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        """``x[start:end]`` along ``axis`` (constant bounds, as a simplified export has them)."""
        bounds = [self.constant("slice_bounds", np.asarray([v], dtype=np.int64)) for v in (start, end, axis)]
        return self._op("Slice", [x, *bounds])

    def matmul(self, a: str, b: str) -> str:
        """Batched matrix product over the last two axes (``torch.matmul``, ``@``)."""
        return self._op("MatMul", [a, b])

    def softmax(self, x: str, axis: int) -> str:
        """Softmax over a single axis (opset >= 13 semantics)."""
        return self._op("Softmax", [x], axis=axis)

    # ------------------------------------------------------------------ result

    def build(self, *, name: str, doc: str) -> onnx.ModelProto:
        """Assemble the accumulated graph into an opset-17 model and validate it structurally."""
        graph = helper.make_graph(
            self._nodes, name, self._inputs, self._outputs, self._initializers, doc_string=doc
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="autosearch.workloads",
            doc_string=doc,
        )
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model
