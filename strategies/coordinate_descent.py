"""Coordinate descent over the decision space, Droplet Search style: one decision at a time, restarts when stuck.

Droplet Search (Canesche et al.; TVM 0.27 runs it after MetaSchedule with ``ms.tune_tir(...,
post_optimization=True)``) walks a schedule's knobs one at a time: it measures the neighbours of the best
point found so far, moves to a better one as soon as a batch finds it, first trying the same move again
(the direction that just helped), and stops when no neighbour is better. This module is that walk over
:class:`~autosearch.search.space.DecisionSpace`, with restarts instead of stopping:

- **Start**: ``init_random`` random configs; the walk starts at the best of them (or, after ``--resume``,
  at the best logged config).
- **Neighbours** of a config: every config one *step* of one decision away. A tile decision (a perfect
  tiling such as ``(1, 4, 8, 2)``) steps by moving one prime factor from one loop level to another
  (``(2, 2, 8, 2)``, ``(1, 2, 8, 4)``, ...) where the result is a legal choice; an unroll or compute-location
  decision steps to the adjacent choice. Tile tuples, unlike their list order, have no useful order of their
  own, so "adjacent" means "one factor moved". The sketch is a decision too: the same values in another
  sketch, where they are legal there, are a neighbour.
- **Walk**: each batch is the next unmeasured neighbours of the walk's centre (a random order, or the cost
  model's, with the move that led to the centre repeated first). After the batch the centre moves to the
  best measured config of the walk if it is faster; failed kernels never become the centre.
- **Restart**: a centre whose neighbours are all measured without a faster one is a local optimum. The next
  walk starts at a random config (share ``restart_random``) or at the best config found, perturbed by
  ``perturb`` random one-decision changes (iterated local search), and its first batch holds the start and
  its neighbours. When a batch finds the centre's neighbourhood exhausted before it is full, the rest of the
  batch already starts the next walk, so the tuning loop always gets full batches.

Nothing here counts the budget. With a cost model, the neighbours are measured in the model's order (best
predicted first) and the random start configs are the model's top picks from a larger random pool once the
model is fitted; without one the walk needs no model at all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from autosearch.search.cost_model import ConfigScorer
from autosearch.search.space import DecisionSpace, draw_unseen
from autosearch.search.strategy import Option
from autosearch.types import Config, MeasureResult

log = logging.getLogger(__name__)

OPTIONS: dict[str, Option] = {
    "init_random": Option("random configs measured before the first walk (which starts at their best)", 16, int),
    "restart_random": Option(
        "share of restarts from a random config; the others perturb the best config found", 0.5, float
    ),
    "perturb": Option("one-decision changes applied to the best config for a perturbed restart", 3, int),
    "model_pool": Option(
        "with a fitted cost model: random configs per start config, of which the model picks the best", 8, int
    ),
    "max_retries": Option("draws per config before the space is treated as exhausted", 100, int),
}

# (decision, source level, target level, prime) for tiles; (decision, +-1) for others; (-1, sketch) for the sketch
Move = tuple[int, ...]


@lru_cache(maxsize=1024)
def _primes(n: int) -> tuple[int, ...]:
    """The distinct prime factors of ``n``."""
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            out.append(p)
            while n % p == 0:
                n //= p
        p += 1
    return (*out, n) if n > 1 else tuple(out)


@dataclass
class _Walk:
    """One descent: its centre (best ok config so far, None until one is measured) and unmeasured neighbours."""

    anchor: Config  # where the walk started
    centre: Config | None = None
    value: float = 0.0  # throughput of the centre, 1 / seconds
    queue: list[Config] = field(default_factory=list)  # neighbours of the centre (or anchor) to measure, next first
    moves: dict[Config, Move] = field(default_factory=dict)  # neighbour -> the move from the centre to it
    pending: set[Config] = field(default_factory=set)  # asked for this walk, not told yet
    steps: int = 0  # moves made


class CoordinateDescent:
    """Steepest-first coordinate descent with restarts (see the module docstring)."""

    def __init__(
        self,
        space: DecisionSpace,
        *,
        seed: int,
        cost_model: ConfigScorer | None = None,
        task_id: str = "",
        init_random: int = OPTIONS["init_random"].default,
        restart_random: float = OPTIONS["restart_random"].default,
        perturb: int = OPTIONS["perturb"].default,
        model_pool: int = OPTIONS["model_pool"].default,
        max_retries: int = OPTIONS["max_retries"].default,
    ) -> None:
        self.space = space
        self.cost_model = cost_model
        self.init_random = max(0, init_random)
        self.restart_random = min(1.0, max(0.0, restart_random))
        self.perturb = max(1, perturb)
        self.model_pool = max(1, model_pool)
        self.max_retries = max(1, max_retries)
        self._rng = np.random.default_rng(seed)
        self._asked: set[Config] = set()
        self._value: dict[Config, float] = {}  # measured throughput, 1 / seconds; 0 for failures
        self._main: _Walk | None = None
        self._spare: _Walk | None = None  # the next walk, started when the main one ran dry inside a batch
        self._member: dict[Config, _Walk] = {}  # asked config -> the walk it was asked for
        self._walks = 0
        self._exhausted = False
        self.optima: list[tuple[Config, float]] = []  # local optima found (config, throughput), for inspection
        self._index: list[list[dict[Any, int]]] = [
            [{c: k for k, c in enumerate(d.choices)} for d in space.decisions(s.index)] for s in space.sketches
        ]

    # ------------------------------------------------------------------ ask / tell / resume
    def ask(self, n: int) -> list[Config]:
        if n <= 0:
            return []
        if len(self._asked) < self.init_random:
            out = self._start_configs(n, set())
        else:
            out = self._walk_batch(n)
        self._asked.update(out)
        return out

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self._learn(configs, results)
        told: dict[int, list[Config]] = {}
        for config in configs:
            walk = self._member.pop(config, None)
            if walk is not None:
                walk.pending.discard(config)
                told.setdefault(id(walk), []).append(config)
        for walk in (self._main, self._spare):
            if walk is not None and id(walk) in told:
                self._advance(walk, told[id(walk)])
        if self._main is not None and self._stuck(self._main):
            if self._main.centre is not None:
                self.optima.append((self._main.centre, self._main.value))
                log.debug("coordinate descent: local optimum after %d moves", self._main.steps)
            spare = self._spare if self._spare is not None and not self._stuck(self._spare) else None
            self._main, self._spare = spare, None

    def resume(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Logged trials count as measured: the first walk starts at the best of them, none is asked again."""
        self._asked.update(configs)
        inside = [(c, r) for c, r in zip(configs, results) if self.space.contains(c)]
        self._learn([c for c, _ in inside], [r for _, r in inside])

    # ------------------------------------------------------------------ the walk
    def _walk_batch(self, n: int) -> list[Config]:
        out: list[Config] = []
        taken: set[Config] = set()
        for _ in range(4 * n + 8):  # every pass adds a config or starts a walk; bounded for exhausted spaces
            if len(out) >= n:
                break
            if self._main is None:
                self._main = self._start_walk(out, taken)
                if self._main is None:
                    break
                continue
            walk = self._main
            config = self._next(walk, taken)
            if config is None:
                if self._spare is None:
                    self._spare = self._start_walk(out, taken)
                    if self._spare is None:
                        break
                    continue
                walk = self._spare
                config = self._next(walk, taken)
                if config is None:
                    self._spare = None  # a start with no unmeasured neighbour: the next pass starts another
                    continue
            self._take(walk, config, out, taken)
        if len(out) < n:
            out += self._random(n - len(out), taken)
        return out

    def _take(self, walk: _Walk, config: Config, out: list[Config], taken: set[Config]) -> None:
        out.append(config)
        taken.add(config)
        walk.pending.add(config)
        self._member[config] = walk

    def _start_walk(self, out: list[Config], taken: set[Config]) -> _Walk | None:
        """A new walk: the first at the best measured config, later ones at a restart point (asked at once)."""
        self._walks += 1
        best = self._best()
        if self._walks == 1 and best is not None:
            walk = _Walk(anchor=best, centre=best, value=self._value[best])
            self._fill_queue(walk, best, None)
            return walk
        anchor = self._restart_point(taken)
        if anchor is None:
            return None
        walk = _Walk(anchor=anchor)
        self._take(walk, anchor, out, taken)
        self._fill_queue(walk, anchor, None)
        return walk

    def _restart_point(self, taken: set[Config]) -> Config | None:
        """An unasked config: random (share ``restart_random``), else the best config perturbed."""
        best = self._best()
        if best is not None and self._rng.random() >= self.restart_random:
            for _ in range(self.max_retries):
                config = best
                for _ in range(self.perturb):
                    config = self.space.mutate(config, self._rng)
                if config not in self._asked and config not in taken:
                    return config
        picked = self._random(1, taken)
        return picked[0] if picked else None

    def _next(self, walk: _Walk, taken: set[Config]) -> Config | None:
        while walk.queue:
            config = walk.queue.pop(0)
            if config not in self._asked and config not in taken:
                return config
        return None

    def _advance(self, walk: _Walk, told: list[Config]) -> None:
        """Move the walk's centre to its best newly measured config if that is faster."""
        best = max(told, key=lambda c: self._value.get(c, 0.0))  # first of equals: the order asked
        value = self._value.get(best, 0.0)
        if value <= 0 or value <= walk.value:
            return
        move = walk.moves.get(best)
        walk.centre, walk.value = best, value
        walk.steps += 1
        self._fill_queue(walk, best, move)

    def _stuck(self, walk: _Walk) -> bool:
        """Every neighbour measured (or asked and answered) and none faster: a local optimum, or a dead start."""
        walk.queue = [c for c in walk.queue if c not in self._asked]
        return not walk.queue and not walk.pending

    # ------------------------------------------------------------------ neighbours
    def _fill_queue(self, walk: _Walk, centre: Config, repeat: Move | None) -> None:
        """The unasked neighbours of ``centre``, the repeated move first, then in random or model order."""
        moves = [(m, c) for m, c in self._neighbours(centre) if c not in self._asked]
        order = self._rng.permutation(len(moves))
        moves = [moves[int(i)] for i in order]
        if self.cost_model is not None and moves:
            scores = np.nan_to_num(np.asarray(self.cost_model.score([c for _, c in moves]), dtype=np.float64),
                                   nan=-np.inf)
            moves = [moves[int(i)] for i in np.argsort(-scores, kind="stable")]
        if repeat is not None:
            again = self._apply_move(centre, repeat)
            if again is not None and again not in self._asked:
                moves = [(repeat, again)] + [(m, c) for m, c in moves if c != again]
        walk.queue = [c for _, c in moves]
        walk.moves = dict((c, m) for m, c in moves)

    def _neighbours(self, config: Config) -> list[tuple[Move, Config]]:
        """Every config one step of one decision away, with the move that reaches it."""
        out: list[tuple[Move, Config]] = []
        for sketch in range(len(self.space.sketches)):
            neighbour = self._apply_move(config, (-1, sketch))
            if neighbour is not None:
                out.append(((-1, sketch), neighbour))
        for i, d in enumerate(self.space.decisions(config.sketch)):
            if len(d.choices) < 2:
                continue
            value = config.values[i]
            if d.kind == "SamplePerfectTile":
                for src in range(len(value)):
                    for p in _primes(value[src]):
                        for dst in range(len(value)):
                            move = (i, src, dst, p)
                            neighbour = self._apply_move(config, move) if dst != src else None
                            if neighbour is not None:
                                out.append((move, neighbour))
            else:
                for step in (-1, 1):
                    neighbour = self._apply_move(config, (i, step))
                    if neighbour is not None:
                        out.append(((i, step), neighbour))
        return out

    def _apply_move(self, config: Config, move: Move) -> Config | None:
        """``config`` with one decision stepped by ``move``; None where that is no legal choice."""
        i = move[0]
        if i < 0:
            other = Config(move[1], config.values)
            return other if other.sketch != config.sketch and self.space.contains(other) else None
        decision = self.space.decisions(config.sketch)[i]
        value = config.values[i]
        if len(move) == 4:
            _, src, dst, p = move
            if value[src] % p:
                return None
            tiles = list(value)
            tiles[src] //= p
            tiles[dst] *= p
            new: Any = tuple(tiles)
            return config.replace(i, new) if new in decision.choice_set else None
        pos = self._index[config.sketch][i].get(value)
        if pos is None or not 0 <= pos + move[1] < len(decision.choices):
            return None
        return config.replace(i, decision.choices[pos + move[1]])

    # ------------------------------------------------------------------ helpers
    def _learn(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        for config, result in zip(configs, results):
            self._value[config] = 1.0 / result.median if result.ok and result.median > 0 else 0.0

    def _best(self) -> Config | None:
        """The fastest measured config inside the space (first measured among equals)."""
        best, value = None, 0.0
        for config, v in self._value.items():
            if v > value and self.space.contains(config):
                best, value = config, v
        return best

    def _start_configs(self, n: int, taken: set[Config]) -> list[Config]:
        """Random configs; with a fitted cost model, its top picks from ``model_pool`` times as many."""
        if self.cost_model is None or not getattr(self.cost_model, "fitted", False):
            return self._random(n, taken)
        pool = self._random(n * self.model_pool, set(taken))
        if not pool:
            return []
        scores = np.nan_to_num(np.asarray(self.cost_model.score(pool), dtype=np.float64), nan=-np.inf)
        picked = [pool[int(i)] for i in np.argsort(-scores, kind="stable")[:n]]
        taken.update(picked)
        return picked

    def _random(self, n: int, taken: set[Config]) -> list[Config]:
        """Up to n random configs never asked and not in ``taken`` (:func:`draw_unseen`)."""
        out: list[Config] = []
        if not self._exhausted:
            out, self._exhausted = draw_unseen(self.space, self._rng, n, self._asked, taken,
                                               max_retries=self.max_retries)
        if len(out) < n:
            log.debug("coordinate descent: %d of %d random configs found", len(out), n)
        return out


# --cost-model auto leaves it unguided: a pure search baseline; name a model (--cost-model pretrained) and the
# model orders each centre's neighbours (one scoring of ~100 configs per move)
AUTO_GUIDANCE = False
