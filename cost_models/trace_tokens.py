"""Tokens of a schedule's trace: the input of the sequence cost model (``seq``).

Every logged trial carries the trace of its schedule as MetaSchedule built it (``[instructions, decisions]``,
``Trace.as_json``): 40-140 instructions, each a kind (``SamplePerfectTile``, ``Split``, ``Annotate``, ...), its
inputs (random variables: blocks ``b..``, loops ``l..``, sampled values ``v..``; or literals), attributes and
outputs, and the decision of each sampling instruction. A config's decision vector says only which choices
were made; the trace says what was done with them: which loop each tile factor splits, where a block was
computed, which loops the postprocessors fused, parallelised and vectorised, with what unroll depth. TLP
(ASPLOS'23) learns from the same kind of sequence (Ansor's schedule steps) with attention; this is its
tokenisation for MetaSchedule traces.

One token per instruction, ``TOKEN_WIDTH`` numbers, plus a first token for the task:

==========  ==========================================================================================
column      content
==========  ==========================================================================================
0           kind: 2 + index in ``KINDS`` (0: a kind not listed, 1: the task token)
1           name: hash bucket (1..``BUCKETS``-1) of the first short string attribute other than the
            function name: a block name, an annotation key, a storage scope; 0 if none
2           literal: hash bucket of the first short string literal input (a tiling structure "SSRSRS")
3           1 after ``EnterPostproc`` (the postprocessors' instructions), else 0
4-7         the decision: tile factors (``SamplePerfectTile``), the chosen candidate's value
            (``SampleCategorical``: the unroll depth), the location (``SampleComputeLocation``)
8-11        integer inputs, as far as the trace alone tells: a sampled value (``v..``), a loop's extent
            when split factors give it (and fused loops' product), an integer literal
12-13       the first integer attributes
14, 15      number of inputs, number of outputs
==========  ==========================================================================================

Numbers (columns 4-15) are ``sign(x) * log2(1 + |x|)``. The task token holds log2 of the task's FLOPs
(column 4) and its output buffer's shape (8-11). No TVM call is needed (microseconds per record, no trace
replay), so a guided search pays only ``space.apply`` for it; loop extents that only a replay would tell
come from the loop features, which ``seq@sequence+loop`` joins to the sequence.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

KINDS = (
    "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks", "Split",
    "LoopPartition", "Fuse", "Merge", "Reorder", "ReorderBlockIterVar", "AddUnitLoop", "Parallel", "Vectorize",
    "Bind", "Unroll", "CacheRead", "CacheWrite", "ReindexCacheRead", "ReindexCacheWrite", "CacheInplace",
    "CacheIndex", "ReIndex", "ReadAt", "WriteAt", "ComputeAt", "ReverseComputeAt", "ComputeInline",
    "ReverseComputeInline", "FuseReductionEpilogue", "Blockize", "Tensorize", "Annotate", "Unannotate",
    "TransformLayout", "TransformBlockLayout", "DecomposePadding", "PadEinsum", "RollingBuffer",
    "DecomposeReduction", "RFactor", "StorageAlign", "SetScope", "UnsafeSetDType", "EnterPostproc",
    "SamplePerfectTile", "SamplePartitionedTile", "SampleCategorical", "SampleComputeLocation",
    "UnsafeHideBufferAccess", "AnnotateBufferAccess",
)
N_KINDS = len(KINDS) + 2  # + unknown kind + task token
BUCKETS = 64  # string hash buckets (0 = no string)
TOKEN_WIDTH = 16
NUMERIC = slice(4, TOKEN_WIDTH)  # the columns that hold numbers (the rest are ids and a flag)
_KIND_ID = {k: i + 2 for i, k in enumerate(KINDS)}
_TASK, _DECISION, _INPUTS, _ATTRS = 1, 4, 8, 12
_SHORT = 40  # longer strings (index maps of TransformLayout, as JSON) are not names
_FUNCTION = "main"


def _bucket(text: str) -> int:
    return zlib.crc32(text.encode()) % (BUCKETS - 1) + 1


def _number(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(x)), x)


def _put(token: np.ndarray, start: int, width: int, values: Sequence[float]) -> None:
    for j, v in enumerate(list(values)[:width]):
        token[start + j] = _number(float(v))


def _ints(items: Sequence[Any]) -> list[int]:
    return [int(a) for a in items if isinstance(a, int | float) and not isinstance(a, bool)]


def trace_tokens(trace: Any, flops: float, args: Sequence[Any]) -> np.ndarray:
    """(1 + instructions) x ``TOKEN_WIDTH`` float32 tokens of a logged trace (``[instructions, decisions]``);
    ``flops`` and ``args`` (``[[shape, dtype], ...]``, the output last) are the task's."""
    instructions, decisions = (trace[0], trace[1]) if len(trace) == 2 else (trace, [])
    decided = {int(i): d for i, d in decisions}
    out = np.zeros((1 + len(instructions), TOKEN_WIDTH), dtype=np.float32)
    out[0, 0] = _TASK
    _put(out[0], _DECISION, 1, [flops])
    _put(out[0], _INPUTS, 4, list(args[-1][0]) if args else [])
    values: dict[str, int] = {}  # sampled integer variables
    extents: dict[str, int] = {}  # loops whose extent the trace tells (split / fused from known factors)
    postproc = False
    for i, (kind, inputs, attrs, outputs) in enumerate(instructions):
        token = out[1 + i]
        token[0] = _KIND_ID.get(kind, 0)
        postproc = postproc or kind == "EnterPostproc"
        token[3] = float(postproc)
        names = [a for a in attrs if isinstance(a, str) and a != _FUNCTION and len(a) <= _SHORT]
        literals = [a for a in inputs if isinstance(a, str) and a.startswith('"') and len(a) <= _SHORT]
        token[1] = _bucket(names[0]) if names else 0
        token[2] = _bucket(literals[0]) if literals else 0
        decision = decided.get(i)
        chosen: list[int] = []
        if kind == "SamplePerfectTile" and decision is not None:
            chosen = [int(f) for f in decision]
            values.update(zip(outputs, chosen))
        elif kind == "SampleCategorical" and decision is not None:
            candidates = attrs[0] if attrs and isinstance(attrs[0], list) else []
            chosen = [int(candidates[int(decision)])] if int(decision) < len(candidates) else [int(decision)]
            values.update(zip(outputs, chosen))
        elif kind == "SampleComputeLocation" and decision is not None:
            chosen = [int(decision)]
        resolved = []
        for a in inputs:
            if isinstance(a, str) and a in values:
                resolved.append(values[a])
            elif isinstance(a, str) and a in extents:
                resolved.append(extents[a])
            elif isinstance(a, int | float) and not isinstance(a, bool):
                resolved.append(int(a))
        if kind == "Split":
            _split_extents(inputs, outputs, values, extents)
        elif kind == "Fuse" and outputs and all(isinstance(a, str) and a in extents for a in inputs):
            extents[outputs[0]] = math.prod(extents[a] for a in inputs)
        _put(token, _DECISION, 4, chosen)
        _put(token, _INPUTS, 4, resolved)
        _put(token, _ATTRS, 2, _ints(attrs))
        token[14] = _number(len(inputs))
        token[15] = _number(len(outputs))
    return out


def _split_extents(inputs: Sequence[Any], outputs: Sequence[str], values: dict[str, int],
                   extents: dict[str, int]) -> None:
    """Extents of a split's output loops: its factors, and the one left ``None`` when the loop's is known."""
    factors: list[int | None] = []
    for a in inputs[1:]:
        if isinstance(a, str) and a in values:
            factors.append(values[a])
        elif isinstance(a, int) and not isinstance(a, bool):
            factors.append(a)
        else:
            factors.append(None)
    known = math.prod(f for f in factors if f is not None)
    if factors.count(None) == 1 and inputs and inputs[0] in extents and known:
        factors[factors.index(None)] = -(-extents[inputs[0]] // known)
    for loop, f in zip(outputs, factors):
        if f is not None:
            extents[loop] = f


def sequence_input(tokens: Sequence[np.ndarray], vectors: np.ndarray | None = None) -> np.ndarray:
    """One 2-D model input for records of different trace lengths: per row, the joined feature vector (if
    any) then the tokens flattened, padded with NaN tokens to the longest trace of the call."""
    n = len(tokens)
    length = max([len(t) for t in tokens] + [1])
    width = 0 if vectors is None else np.asarray(vectors).shape[1]
    out = np.full((n, width + length * TOKEN_WIDTH), np.nan, dtype=np.float32)
    if width:
        out[:, :width] = vectors
    for i, t in enumerate(tokens):
        out[i, width:width + t.size] = t.reshape(-1)
    return out


def split_sequence_input(X: np.ndarray, vector_width: int) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of :func:`sequence_input`: (vectors (n x ``vector_width``), tokens (n x length x
    ``TOKEN_WIDTH``), padding tokens all NaN)."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2 or (X.shape[1] - vector_width) % TOKEN_WIDTH or X.shape[1] <= vector_width:
        raise ValueError(f"not a sequence input with a {vector_width}-wide vector: shape {X.shape}")
    return X[:, :vector_width], X[:, vector_width:].reshape(len(X), -1, TOKEN_WIDTH)
