"""What every PyTorch cost model here shares: a seeded, thread-limited session, and weights as plain arrays.

- :func:`session`: torch's global RNG forked and seeded (a fit is reproducible and leaves the caller's RNG
  as it was) and torch's intra-op threads limited for the duration (the default, one per core, would compete
  with a measurement on the other core, and on a busy 2-core machine a multi-threaded small matmul mostly
  waits). The previous thread count is restored afterwards.
- :func:`state_arrays` / :func:`load_state`: a module's ``state_dict`` as NumPy arrays for ``_io.write_npz``
  (no pickle, unlike ``torch.save``), and back.
- :func:`pair_loss` and :func:`lambda_weights`: the pairwise logistic (RankNet) loss over same-task pairs,
  optionally weighted by LambdaRank's |delta NDCG| so that pairs that move the top of a task's ranking count most.
- :func:`fit_ranker`: the training loop of the rankers (``seq``, ``mlp-rank``): every step draws a few tasks
  and records of each, so every pair compared is of one task, and a network of any input learns to order them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

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


def ranking_steps(n_records: int, *, n_epochs: int, min_steps: int, max_steps: int, per_step: int) -> int:
    """Steps for ``n_epochs`` passes over ``n_records`` records drawn ``per_step`` at a time, within the bounds: a
    small dataset still gets enough steps to learn and a large one a bounded fit time."""
    return int(np.clip(math.ceil(n_epochs * n_records / per_step), min_steps, max_steps))


def fit_ranker(net: torch.nn.Module, score: Callable[[np.ndarray], torch.Tensor], y: np.ndarray,
               groups: np.ndarray | None, *, name: str, steps: int, learning_rate: float, weight_decay: float,
               grad_clip: float, tasks_per_step: int, records_per_task: int, gain_scale: float | None,
               rng: np.random.Generator) -> torch.nn.Module:
    """Train ``net`` (in place; returned in eval mode) to order the records of each task.

    Each step draws ``tasks_per_step`` tasks and up to ``records_per_task`` records of each, scores them with
    ``score(rows)`` (a forward pass of ``net`` over those rows of the caller's input) and takes one AdamW step
    on the mean over the drawn tasks of :func:`pair_loss` over their pairs, weighted by :func:`lambda_weights`
    when ``gain_scale`` is given (plain RankNet when it is ``None``). One-cycle learning rate, gradient-norm
    clipping. Call it inside :func:`session`.
    """
    y_t = torch.as_tensor(np.asarray(y, dtype=np.float32))
    groups = np.zeros(len(y_t), dtype=np.int64) if groups is None else np.asarray(groups)
    by_task = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    by_task = [rows for rows in by_task if len(rows) > 1]  # a task of one record has no pair to learn from
    if not by_task:
        raise ValueError(f"{name} learns orders within a task: it needs a task with at least 2 records")
    optimiser = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=learning_rate, total_steps=steps, pct_start=0.1)
    net.train()
    for _ in range(steps):
        picked = rng.choice(len(by_task), size=min(tasks_per_step, len(by_task)), replace=False)
        rows = [rng.choice(by_task[t], size=min(records_per_task, len(by_task[t])), replace=False) for t in picked]
        pred = score(np.concatenate(rows))
        loss, start = pred.sum() * 0.0, 0
        for r in rows:
            p, t = pred[start:start + len(r)], y_t[r]
            weights = None if gain_scale is None else lambda_weights(p.detach(), t, gain_scale)
            loss = loss + pair_loss(p, t, torch.zeros(len(r), dtype=torch.int64), weights)
            start += len(r)
        optimiser.zero_grad()
        (loss / len(rows)).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
        optimiser.step()
        schedule.step()
    return net.eval()
