"""An ONNX model of attentions of many shapes, none of them YOLO12n's: the attention part of the shipped cost model's
training set.

A ranker trained on convolutions ranks a fused attention's schedules at chance (0.47-0.54 pairwise on YOLO12n's two
attentions, 2026-11-29; the fused kernel is :mod:`autosearch.tensor_units.attention`): its score matrix, softmax and
second product are nothing a convolution has. The records must come from attentions, and so that YOLO12n stays a
network the shipped model has not seen, from attentions of other shapes: vision transformers' (14 x 14 and 7 x 7
windows, 24 x 24 and 32 x 32 grids), heads of 16 to 64 channels, batches of heads and windows, one cross-attention
(fewer queries than keys). Each is ``softmax((x * scale) @ relu(x)^T) @ relu(x)``: three activations, as in a model.

    python -m experiments.attention_zoo --out attention-zoo.onnx
    python -m autosearch train-model --measure --model attention-zoo.onnx --minutes 25 --tasks-per-layout 10 \\
        --out /tmp/attention-zoo-model
    cp /tmp/attention-zoo-model/dataset.jsonl experiments/results/dataset-attention-xeon-amx.jsonl && gzip ...

On a CPU without AMX the attentions are not fused (their matmuls are bf16 tasks where the CPU has AVX512-BF16).
"""

from __future__ import annotations

import argparse
import math
import sys

# (batch dims, queries, keys, channels per head): none is one of YOLO12n's (4 x 2 or 1 x 4 heads of 400 x 400, 32)
SHAPES = (
    ((1, 2), 256, 256, 32),
    ((1, 4), 196, 196, 64),
    ((2, 2), 144, 144, 32),
    ((1, 1), 1024, 1024, 32),
    ((1, 8), 64, 64, 16),
    ((1, 2), 576, 576, 48),
    ((4, 1), 100, 100, 64),
    ((8, 4), 49, 49, 32),
    ((1, 2), 784, 784, 32),
    ((1, 2), 64, 400, 32),
)


def attention_zoo(shapes=SHAPES):
    """The model: one input and one output per attention."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes, inputs, outputs, inits = [], [], [], []
    for i, (batch, m, n, d) in enumerate(shapes):
        x, kv = f"x{i}", f"kv{i}"
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [*batch, m, d]))
        if m != n:
            inputs.append(helper.make_tensor_value_info(kv, TensorProto.FLOAT, [*batch, n, d]))
        source = kv if m != n else x
        inits.append(numpy_helper.from_array(np.asarray(1 / math.sqrt(d), np.float32), f"scale{i}"))
        perm = [*range(len(batch)), len(batch) + 1, len(batch)]
        nodes += [
            helper.make_node("Mul", [x, f"scale{i}"], [f"q{i}"]),
            helper.make_node("Relu", [source], [f"v{i}"]),
            helper.make_node("Transpose", [f"v{i}"], [f"k{i}"], perm=perm),
            helper.make_node("MatMul", [f"q{i}", f"k{i}"], [f"s{i}"]),
            helper.make_node("Softmax", [f"s{i}"], [f"p{i}"], axis=-1),
            helper.make_node("MatMul", [f"p{i}", f"v{i}"], [f"y{i}"]),
        ]
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [*batch, m, d]))
    model = helper.make_model(helper.make_graph(nodes, "attention_zoo", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main(argv: list[str] | None = None) -> int:
    import onnx

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the .onnx file to write")
    args = ap.parse_args(argv)
    onnx.save(attention_zoo(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
