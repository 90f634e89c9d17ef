"""Simulated annealing over the decision space, AutoTVM style, with or without a cost model.

Moves are ``DecisionSpace.mutate`` (one decision changed to another legal choice); a move from score
``old`` to ``new`` is accepted with probability ``min(1, exp((new - old) / T))``, and the temperature
``T`` falls linearly from its start to its end value. Two modes:

- **With a cost model** (AutoTVM's ``SimulatedAnnealingOptimizer``): ``parallel_size`` walkers walk
  the space for up to ``n_iter`` steps per ``ask``, scored by ``cost_model.score`` (score differences
  are divided by the spread of the starting population's scores, so the temperature does not depend
  on the model's scale). A heap keeps the best ``diversity * n`` never-asked points seen on the way;
  the batch is picked from it greedily for score while keeping configs at least two decisions apart,
  so one batch does not spend the budget on near-copies of one prediction. The walkers persist
  between asks, and the best measured configs join them. Cost: up to ``parallel_size * n_iter``
  scored configs per ask (cached within the ask): with a scorer that applies schedules and extracts
  TVM features (~30 ms a config) lower ``n_iter``.
- **Without a cost model**: annealing on measurements. After ``init_random`` random configs, ``chains``
  chains start at the best measured configs (distinct ones, best first). Each ask spreads the batch
  over the chains, as unmeasured neighbours of each chain's current config; ``tell`` moves each chain
  to the best of its proposals if that is better, or else with probability ``exp(delta / T)``, where
  ``delta`` is the throughput difference (1 / median latency) relative to the best measured, and ``T``
  falls from ``measured_temp_start`` to ``measured_temp_end`` over ``measured_cooling`` proposals.
  A chain rejected ``patience`` times in a row restarts at the best measured config no chain holds.
  Failed configs are never accepted. Few chains on purpose: at tuning budgets (64-1000 trials a
  task) each chain needs many steps, and on the synthetic landscape of the tests 1-2 chains beat 4-8
  (best of 64: 2 chains 2.0x the optimum, 8 chains 2.8x, random search 2.8x).

In both modes a share ``eps_greedy`` of each batch is random configs, for exploration. A cost model that
is fitted before the first ask (warm-started on earlier records) skips the ``init_random`` start.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autosearch.search.cost_model import ConfigScorer
from autosearch.search.space import DecisionSpace, draw_unseen, pick_diverse
from autosearch.search.strategy import Option
from autosearch.types import Config, MeasureResult

log = logging.getLogger(__name__)

OPTIONS: dict[str, Option] = {
    "init_random": Option("random configs measured before annealing starts", 8, int),
    "eps_greedy": Option("share of each batch that is random configs (exploration)", 0.05, float),
    "parallel_size": Option("with a cost model: walkers of the model-scored walk", 128, int),
    "n_iter": Option("with a cost model: most walk steps per ask", 100, int),
    "early_stop": Option(
        "with a cost model: stop the walk after this many steps without a new top point", 30, int
    ),
    "temp_start": Option(
        "with a cost model: start temperature (score differences / score spread)", 1.0, float
    ),
    "temp_end": Option("with a cost model: end temperature, reached at step n_iter", 0.0, float),
    "diversity": Option(
        "with a cost model: the batch is picked from the top diversity * n walk points", 2.0, float
    ),
    "measured_temp_start": Option(
        "without a cost model: start temperature (throughput differences / best throughput)", 0.05, float
    ),
    "measured_temp_end": Option("without a cost model: end temperature", 0.0, float),
    "measured_cooling": Option(
        "without a cost model: measured proposals over which the temperature falls", 256, int
    ),
    "chains": Option(
        "without a cost model: annealing chains; each batch is spread over them, and each "
        "chain moves to the best of its proposals by the annealing rule",
        2,
        int,
    ),
    "patience": Option("without a cost model: rejected steps in a row before a chain restarts", 4, int),
    "max_retries": Option("draws per config before the space is treated as exhausted", 100, int),
}

@dataclass
class _Chain:
    """One measured annealing chain: its current config and throughput (1 / seconds)."""

    config: Config
    value: float
    rejected: int = 0


class SimulatedAnnealing:
    """Parallel simulated annealing; scored by the cost model when there is one, else by measurements."""

    def __init__(
        self,
        space: DecisionSpace,
        *,
        seed: int,
        cost_model: ConfigScorer | None = None,
        task_id: str = "",
        init_random: int = OPTIONS["init_random"].default,
        eps_greedy: float = OPTIONS["eps_greedy"].default,
        parallel_size: int = OPTIONS["parallel_size"].default,
        n_iter: int = OPTIONS["n_iter"].default,
        early_stop: int = OPTIONS["early_stop"].default,
        temp_start: float = OPTIONS["temp_start"].default,
        temp_end: float = OPTIONS["temp_end"].default,
        diversity: float = OPTIONS["diversity"].default,
        measured_temp_start: float = OPTIONS["measured_temp_start"].default,
        measured_temp_end: float = OPTIONS["measured_temp_end"].default,
        measured_cooling: int = OPTIONS["measured_cooling"].default,
        chains: int = OPTIONS["chains"].default,
        patience: int = OPTIONS["patience"].default,
        max_retries: int = OPTIONS["max_retries"].default,
    ) -> None:
        self.space = space
        self.cost_model = cost_model
        self.init_random = max(0, init_random)
        self.eps_greedy = eps_greedy
        self.parallel_size = max(1, parallel_size)
        self.n_iter = max(0, n_iter)
        self.early_stop = max(1, early_stop)
        self.temp = (temp_start, temp_end)
        self.diversity = max(1.0, diversity)
        self.measured_temp = (measured_temp_start, measured_temp_end)
        self.measured_cooling = max(1, measured_cooling)
        self.chains = max(1, chains)
        self.patience = max(1, patience)
        self.max_retries = max(1, max_retries)
        self._rng = np.random.default_rng(seed)
        self._asked: set[Config] = set()
        self._value: dict[Config, float] = {}  # measured throughput, 1 / seconds; 0 for failures
        self._ok_order: list[Config] = []  # ok configs in the order measured (deterministic ties)
        self._chains: list[_Chain] = []
        self._cursor = 0
        self._pending: dict[Config, int] = {}  # proposal -> chain index
        self._proposals_told = 0
        self._walkers: list[Config] = []  # the model walk's persistent population
        self._exhausted = False

    # ------------------------------------------------------------------ ask / tell
    def ask(self, n: int) -> list[Config]:
        if n <= 0:
            return []
        if self._warm_model():
            out = self._model_batch(n)
        elif len(self._value) < self.init_random or not self._ok_order:
            out = self._random(n)
        elif self.cost_model is not None:
            out = self._model_batch(n)
        else:
            out = self._measured_batch(n)
        self._asked.update(out)
        return out

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        self._learn(configs, results)
        best = self._best_value()
        by_chain: dict[int, list[Config]] = {}
        for config in configs:
            chain_index = self._pending.pop(config, None)
            if chain_index is not None:
                by_chain.setdefault(chain_index, []).append(config)
        for chain_index, proposals in sorted(by_chain.items()):
            self._proposals_told += len(proposals)
            top = max(proposals, key=lambda c: self._value[c])  # first of equals: the order asked
            self._step_chain(self._chains[chain_index], top, self._value[top], best)

    def resume(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Logged trials count as measured: past ``init_random`` they skip the random start, the chains
        (and the model walk's seeds) start at the best of them, at the start temperature, and none is
        asked again."""
        self._asked.update(configs)
        inside = [(c, r) for c, r in zip(configs, results) if self.space.contains(c)]
        self._learn([c for c, _ in inside], [r for _, r in inside])

    # ------------------------------------------------------------------ helpers
    def _learn(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Record measured throughputs (0 for failures)."""
        for config, result in zip(configs, results):
            value = 1.0 / result.median if result.ok and result.median > 0 else 0.0
            if config not in self._value and value > 0:
                self._ok_order.append(config)
            self._value[config] = value

    def _warm_model(self) -> bool:
        """A cost model that already learned (``--warm-start``) picks from the first batch on: measuring
        random configs first would only spend the budget the warm start is there to save."""
        return self.cost_model is not None and bool(getattr(self.cost_model, "fitted", False))

    def _best_value(self) -> float:
        return max((self._value[c] for c in self._ok_order), default=0.0)

    def _top_measured(self, k: int) -> list[Config]:
        """The k best measured ok configs, best first (ties: first measured first)."""
        return sorted(self._ok_order, key=lambda c: -self._value[c])[:k]

    def _random(self, n: int, taken: set[Config] | None = None) -> list[Config]:
        """Up to n random configs never asked and not in ``taken`` (:func:`draw_unseen`)."""
        if self._exhausted:
            return []
        out, self._exhausted = draw_unseen(self.space, self._rng, n, self._asked,
                                           taken if taken is not None else set(), max_retries=self.max_retries)
        return out

    def _unasked_neighbour(self, config: Config, taken: set[Config]) -> Config | None:
        """A random config 1-4 mutations away from ``config`` that was never asked (None if none found)."""
        for distance in (1, 1, 1, 2, 2, 3, 4):
            candidate = config
            for _ in range(distance):
                candidate = self.space.mutate(candidate, self._rng)
            if candidate not in self._asked and candidate not in taken:
                return candidate
        return None

    def _explore_slots(self, n: int) -> int:
        return int((self._rng.random(n) < self.eps_greedy).sum())

    # ------------------------------------------------------------------ measured annealing
    def _temperature(self) -> float:
        start, end = self.measured_temp
        return start + (end - start) * min(1.0, self._proposals_told / self.measured_cooling)

    def _step_chain(self, chain: _Chain, config: Config, value: float, best: float) -> None:
        """Move the chain to its best proposal of the batch by the annealing rule."""
        if value <= 0:
            accept = False
        elif value >= chain.value:
            accept = True
        else:
            t = self._temperature()
            delta = (value - chain.value) / best
            accept = t > 0 and bool(self._rng.random() < math.exp(delta / t))
        if accept:
            chain.config, chain.value, chain.rejected = config, value, 0
        else:
            chain.rejected += 1

    def _restart_point(self, held: set[Config]) -> Config:
        """The best measured config no chain sits on (the best one if every top config is held)."""
        top = self._top_measured(len(self._chains) + 1)
        return next((c for c in top if c not in held), top[0])

    def _measured_batch(self, n: int) -> list[Config]:
        held = {c.config for c in self._chains}
        while len(self._chains) < self.chains:
            start = self._restart_point(held)
            held.add(start)
            self._chains.append(_Chain(start, self._value[start]))
        for chain in self._chains:
            if chain.rejected >= self.patience:
                held.discard(chain.config)
                chain.config = self._restart_point(held)
                chain.value, chain.rejected = self._value[chain.config], 0
                held.add(chain.config)
        n_random = self._explore_slots(n)
        taken: set[Config] = set()
        out: list[Config] = []
        for _ in range(n - n_random):  # spread the batch round-robin over the chains
            index = self._cursor % len(self._chains)
            self._cursor += 1
            proposal = self._unasked_neighbour(self._chains[index].config, taken)
            if proposal is None:
                continue
            out.append(proposal)
            taken.add(proposal)
            self._pending[proposal] = index
        out.extend(self._random(n - len(out), taken))
        return out

    # ------------------------------------------------------------------ model-guided annealing
    def _scores(self, configs: list[Config], cache: dict[Config, float]) -> np.ndarray:
        assert self.cost_model is not None
        missing = list(dict.fromkeys(c for c in configs if c not in cache))
        if missing:
            for c, s in zip(missing, np.asarray(self.cost_model.score(missing), dtype=np.float64)):
                cache[c] = float(s) if math.isfinite(s) else -math.inf
        return np.array([cache[c] for c in configs])

    def _model_batch(self, n: int) -> list[Config]:
        cache: dict[Config, float] = {}
        walkers = self._walkers[: self.parallel_size]
        seeds = [c for c in self._top_measured(max(1, self.parallel_size // 4)) if c not in walkers]
        walkers = (seeds + walkers)[: self.parallel_size]
        while len(walkers) < self.parallel_size:
            walkers.append(self.space.sample(self._rng))
        scores = self._scores(walkers, cache)
        finite = scores[np.isfinite(scores)]
        scale = float(np.std(finite)) if finite.size > 1 else 1.0
        scale = scale if scale > 1e-12 else 1.0

        pool_size = max(n, math.ceil(self.diversity * n))
        heap: list[tuple[float, int, Config]] = []  # min-heap of (score, tiebreak, config)
        in_heap: set[Config] = set()
        counter = 0

        def offer(config: Config, score: float) -> bool:
            nonlocal counter
            if config in self._asked or config in in_heap or not math.isfinite(score):
                return False
            counter += 1
            if len(heap) < pool_size:
                heapq.heappush(heap, (score, -counter, config))
            elif score > heap[0][0]:
                in_heap.discard(heapq.heapreplace(heap, (score, -counter, config))[2])
            else:
                return False
            in_heap.add(config)
            return True

        for c, s in zip(walkers, scores):
            offer(c, float(s))
        t_start, t_end = self.temp
        last_change = 0
        for step in range(self.n_iter):
            if step - last_change >= self.early_stop:
                break
            t = t_start + (t_end - t_start) * step / max(1, self.n_iter)
            proposals = [self.space.mutate(c, self._rng) for c in walkers]
            new_scores = self._scores(proposals, cache)
            with np.errstate(over="ignore", invalid="ignore"):
                ratio = (new_scores - scores) / scale / max(t, 1e-5)
                accept_p = np.exp(np.minimum(np.nan_to_num(ratio, nan=-np.inf), 1.0))
            accept = self._rng.random(len(walkers)) < accept_p
            for i in np.flatnonzero(accept):
                walkers[i], scores[i] = proposals[i], new_scores[i]
            for c, s in zip(proposals, new_scores):
                if offer(c, float(s)):
                    last_change = step
        self._walkers = walkers

        ranked = [c for _, _, c in sorted(heap, key=lambda item: (-item[0], -item[1]))]
        n_random = self._explore_slots(n)
        picked = pick_diverse(ranked, n - n_random)
        return picked + self._random(n - len(picked), set(picked))


# --cost-model auto leaves it unguided: its model walk scores up to parallel_size x n_iter configs per ask, each
# applied and featurised (seconds to minutes per ask); name a model (--cost-model pretrained) to guide it
AUTO_GUIDANCE = False
