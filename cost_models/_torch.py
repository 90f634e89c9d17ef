"""What every PyTorch cost model here shares: a seeded, thread-limited session, and weights as plain arrays.

- :func:`session`: torch's global RNG forked and seeded (a fit is reproducible and leaves the caller's RNG
  as it was) and torch's intra-op threads limited for the duration (the default, one per core, would compete
  with a measurement on the other core, and on a busy 2-core machine a multi-threaded small matmul mostly
  waits). The previous thread count is restored afterwards.
- :func:`state_arrays` / :func:`load_state`: a module's ``state_dict`` as NumPy arrays for ``_io.write_npz``
  (no pickle, unlike ``torch.save``), and back.
- :func:`pair_loss` and :func:`lambda_weights`: the pairwise logistic (RankNet) loss over same-task pairs,
  optionally weighted by LambdaRank's |delta NDCG| so that pairs that move the top of a task's ranking count most.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

_TIE = 1e-6  # normalised throughputs closer than this are a tie, not a pair to learn


@contextlib.contextmanager
def session(seed: int, threads: int = 1) -> Iterator[None]:
    """Seeded torch RNG (forked: the global stream is restored on exit) and at most ``threads`` intra-op threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            yield
    finally:
        torch.set_num_threads(previous)


def state_arrays(module: torch.nn.Module, prefix: str = "") -> dict[str, np.ndarray]:
    """``module.state_dict()`` as NumPy arrays, keys prefixed (for ``write_npz``)."""
    return {f"{prefix}{k}": v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_state(module: torch.nn.Module, arrays: dict[str, np.ndarray], prefix: str = "") -> torch.nn.Module:
    """Load arrays written by :func:`state_arrays` into ``module`` (strict: every weight must be there)."""
    state = {k[len(prefix):]: torch.from_numpy(np.asarray(v)) for k, v in arrays.items() if k.startswith(prefix)}
    module.load_state_dict(state, strict=True)
    return module


def pair_loss(pred: torch.Tensor, y: torch.Tensor, groups: torch.Tensor,
              weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean RankNet loss ``log(1 + exp(-(s_i - s_j)))`` over pairs of the same group with ``y_i > y_j``
    (weighted by ``weights[i, j]`` when given); 0 when there is no such pair."""
    better = (y[:, None] > y[None, :] + _TIE) & (groups[:, None] == groups[None, :])
    w = better.to(pred.dtype) if weights is None else weights * better
    total = w.sum()
    if float(total) <= 0:
        return pred.sum() * 0.0
    diff = pred[:, None] - pred[None, :]
    return (w * torch.nn.functional.softplus(-diff)).sum() / total


@torch.no_grad()
def lambda_weights(pred: torch.Tensor, y: torch.Tensor, gain_scale: float) -> torch.Tensor:
    """LambdaRank's |delta NDCG| of swapping records i and j of one task in the order ``pred`` gives them.

    Gains are ``2 ** (gain_scale * y) - 1`` on normalised throughput ``y`` (1.0 = the task's fastest), so a
    larger ``gain_scale`` concentrates the loss on the best configs, which is what top-1 measures.
    """
    gain = torch.pow(2.0, gain_scale * y) - 1.0
    rank = torch.empty_like(pred)
    rank[torch.argsort(pred, descending=True)] = torch.arange(1, len(pred) + 1, dtype=pred.dtype)
    discount = 1.0 / torch.log2(1.0 + rank)
    ideal = (torch.sort(gain, descending=True).values
             / torch.log2(2.0 + torch.arange(len(pred), dtype=pred.dtype))).sum().clamp_min(1e-9)
    return (gain[:, None] - gain[None, :]).abs() * (discount[:, None] - discount[None, :]).abs() / ideal
