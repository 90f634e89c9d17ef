"""An attention, ``softmax(q @ k) @ v``, fused into one bf16 kernel on the CPU's bf16 unit (AMX tiles, or the
AVX512-BF16 dot product: :mod:`.attention_sketch`).

Apart, an attention's three operations each cross memory with the score matrix: the first matmul writes it, the
softmax reads it and writes the probabilities, the second matmul reads those. In an area attention (YOLO12's
``A2C2f``) that matrix is heads x 400 x 400 fp32, 5 MB a call, and the three kernels are bound by moving it, in
bf16 as in fp32 (:mod:`.matmul` makes both matmuls bf16 and leaves that traffic as it is). Fused, each block of
16 or 32 query rows computes its scores on the tiles, their softmax, and its part of the output while the
scores' rows are in cache: the matrix is never written.

The kernel, per batch and block of rows (blocks of the TE compute below, scheduled by :mod:`.attention_sketch`):

- ``attn_flat_q``: the block's rows of q, rounded to bf16, padded to whole tile rows (the flattened A of
  :mod:`.conv`); ``attn_pack_k``, ``attn_pack_v``: k and v rounded to bf16 in the layout ``tdpbf16ps`` reads B in
  (:func:`.matmul.matmul_bf16`'s packing), once per call, before the blocks;
- ``attn_scores``: ``q @ k`` on the tiles, in fp32 (the flattened convolution's GEMM with a 1x1 filter, so the
  convolution's intrinsics compute it);
- ``attn_max``, ``attn_exp``, ``attn_sum``: the softmax's maximum, exponentials and sum over each row's real
  columns, in fp32;
- ``attn_probs``: the probabilities rounded to bf16, the padded columns zero: the A of the second GEMM. Each is
  its exponential times the reciprocal of its row's sum, which LLVM hoists out of the row: a vector division per
  16 values was the fused kernel's costliest instruction (docs/results.md);
- ``attn_gemm``: ``probs @ v`` on the tiles; ``attn_out``: its real rows and columns, fp32.

The numerics are those of a bf16 attention (OpenVINO's at its default precision): q, k and v rounded to bf16,
scores and softmax in fp32, the probabilities rounded to bf16 before the second product, accumulation in fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

from autosearch.tensor_units.activations import op_name, referenced
from autosearch.tensor_units.conv import BLOCK_N, MIN_CHANNELS, TILE
from autosearch.tensor_units.matmul import MIN_ROWS, batch_flat, flat_matmul, flatten_a, gemm_1x1, pack_b

TASK_NAME = "attention_bf16"  # the PrimFunc's name hint
Q_BLOCK, K_BLOCK, V_BLOCK = "attn_flat_q", "attn_pack_k", "attn_pack_v"
SCORES_BLOCK, MAX_BLOCK, DELTA_BLOCK, EXP_BLOCK, SUM_BLOCK = (
    "attn_scores", "attn_max", "attn_delta", "attn_exp", "attn_sum")
PROBS_BLOCK, GEMM_BLOCK, OUT_BLOCK = "attn_probs", "attn_gemm", "attn_out"
ROW_BLOCK = 2 * TILE  # rows are padded to whole pairs of tiles: a block of rows may be one tile or two


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class FlatAttention:
    """``softmax(q @ k) @ v`` with q ``(*batch, m, d)``, k ``(*batch, d, n)``, v ``(*batch, n, dv)``."""

    batch: tuple[int, ...]
    m: int
    d: int
    n: int
    dv: int

    @property
    def batches(self) -> int:
        return math.prod(self.batch)

    @property
    def rows(self) -> int:
        """The query rows computed: whole pairs of 16-row tiles."""
        return _round_up(self.m, ROW_BLOCK)

    @property
    def d_pad(self) -> int:
        """The first product's reduction: whole 32-value tile rows."""
        return _round_up(self.d, 2 * TILE)

    @property
    def n_pad(self) -> int:
        """The scores' columns, the second product's reduction: whole tile rows and packed blocks."""
        return _round_up(self.n, BLOCK_N)

    @property
    def dv_pad(self) -> int:
        """The output's columns: one 16-column tile, or whole packed blocks of 32."""
        return TILE if self.dv <= TILE else _round_up(self.dv, BLOCK_N)


def attention_key(batch, m: int, n: int) -> str:
    """An attention's key for its precision alternatives: its score matrix's shape (``attention:4x2x400x400``),
    which each of its fp32 tasks (the two matmuls, the softmax) has as an argument and its fused task computes."""
    return "attention:" + "x".join(str(int(d)) for d in (*batch, m, n))


def attention_bf16(q, k, v, *, at: FlatAttention, fast_exp: bool = True):
    """The fused kernel's TE compute (see the module's docstring)."""
    from tvm import te, tirx, topi

    nb, rows, n_ = at.batches, at.rows, at.n
    flat_q = flatten_a(q, batch=at.batch, m=at.m, k=at.d, rows=rows, k_pad=at.d_pad, name=Q_BLOCK)
    packed_k = pack_b(k, batch=at.batch, k=at.d, n=at.n, k_pad=at.d_pad, n_pad=at.n_pad, name=K_BLOCK)
    packed_v = pack_b(v, batch=at.batch, k=at.n, n=at.dv, k_pad=at.n_pad, n_pad=at.dv_pad, name=V_BLOCK)
    scores = gemm_1x1(flat_q, packed_k, rows=rows, depth=at.d_pad, cols=at.n_pad, name=SCORES_BLOCK)
    j = te.reduce_axis((0, n_), name="j")
    row_max = te.compute((nb, rows), lambda b, i: te.max(scores[b, 0, i, j], axis=j), name=MAX_BLOCK)
    delta = te.compute((nb, rows, at.n_pad), lambda b, i, c: scores[b, 0, i, c] - row_max[b, i], name=DELTA_BLOCK)
    exp = topi.fast_exp(delta) if fast_exp else topi.exp(delta)
    masked = te.compute((nb, rows, at.n_pad), lambda b, i, c: tirx.if_then_else(
        c < n_, exp[b, i, c], tirx.const(0, "float32")), name=EXP_BLOCK)
    j2 = te.reduce_axis((0, n_), name="j2")
    row_sum = te.compute((nb, rows), lambda b, i: te.sum(masked[b, i, j2], axis=j2), name=SUM_BLOCK)
    one = tirx.const(1, "float32")  # times the row's reciprocal: one division a row, not one a value
    probs = te.compute((nb, rows, at.n_pad), lambda b, i, c: (masked[b, i, c] * (one / row_sum[b, i])).astype(
        "bfloat16"), name=PROBS_BLOCK)
    out = gemm_1x1(probs, packed_v, rows=rows, depth=at.n_pad, cols=at.dv_pad, name=GEMM_BLOCK)

    return te.compute((*at.batch, at.m, at.dv), lambda *i: out[batch_flat(i[:-2], at.batch), 0, i[-2], i[-1]],
                      name=OUT_BLOCK)


def flat_attention(softmax, scores, product) -> FlatAttention | None:
    """The attention of three Relax calls, ``scores = matmul(q, k)``, ``softmax(scores)`` over the last axis, and
    ``product = matmul(softmax, v)``, when both products are matmuls of two fp32 activations of one batch shape
    (:func:`.matmul.flat_matmul`), else None."""
    if (op_name(scores), op_name(softmax), op_name(product)) != ("relax.matmul", "relax.nn.softmax", "relax.matmul"):
        return None
    ndim = len(scores.ty.shape) if scores.ty.shape is not None else 0
    if int(softmax.attrs.axis) not in (-1, ndim - 1):
        return None
    first, second = flat_matmul(scores), flat_matmul(product)
    if first is None or second is None or first.lead or second.lead or first.batch != second.batch:
        return None
    if first.m < MIN_ROWS or second.n < MIN_CHANNELS:
        return None
    return FlatAttention(batch=first.batch, m=first.m, d=first.k, n=first.n, dv=second.n)


def fuse_attention(policy_bf16, *, fast_exp: bool = True):
    """The pass: each attention (``matmul``, ``softmax`` over the last axis, ``matmul``, the scores and the
    probabilities read by nothing else) for which ``policy_bf16(attention_key)`` is true computed by the fused
    kernel (:func:`attention_bf16`)."""
    import tvm
    from tvm import relax

    def readers_of(func) -> dict[Any, int]:
        """Variable -> how many bindings (and the function's result) read it."""
        counts: dict[Any, int] = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                for var in dict.fromkeys(referenced(binding.value)):
                    counts[var] = counts.get(var, 0) + 1
        for var in dict.fromkeys(referenced(func.body.body)):
            counts[var] = counts.get(var, 0) + 1
        return counts

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def __init__(self, mod, counts):
            super().__init__(mod)
            self.counts = counts

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if op_name(call) != "relax.matmul" or not isinstance(call.args[0], relax.Var):
                return call
            probs = call.args[0]
            softmax = self.lookup_binding(probs)
            if op_name(softmax) != "relax.nn.softmax" or not isinstance(softmax.args[0], relax.Var):
                return call
            scores = self.lookup_binding(softmax.args[0])
            if self.counts.get(probs) != 1 or self.counts.get(softmax.args[0]) != 1:  # read by nothing else
                return call
            at = flat_attention(softmax, scores, call)
            if at is None or not policy_bf16(attention_key(at.batch, at.m, at.n)):
                return call
            q, k = scores.args
            return self.builder_.call_te(partial(attention_bf16, at=at, fast_exp=fast_exp), q, k, call.args[1],
                                         primfunc_name_hint=TASK_NAME)

    @tvm.transform.module_pass(opt_level=0, name="FuseAttention")
    def rewrite(mod, _ctx):
        functions = [(gv, func) for gv, func in mod.functions_items() if isinstance(func, relax.Function)]
        counts = {}
        for _, func in functions:
            counts.update(readers_of(func))
        mutator = Rewrite(mod, counts)
        for gv, func in functions:
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return relax.transform.DeadCodeElimination()(mutator.builder_.get())  # the unread scores, softmax

    return rewrite


__all__ = ["FlatAttention", "GEMM_BLOCK", "OUT_BLOCK", "PROBS_BLOCK", "SCORES_BLOCK", "TASK_NAME", "attention_bf16",
           "attention_key", "flat_attention", "fuse_attention"]
