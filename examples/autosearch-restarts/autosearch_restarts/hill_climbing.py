"""Hill climbing with random restarts: neighbours of the current config while they improve on it, a random config
when they have stopped improving for a while.

Written against autosearch's public strategy interface only (:class:`autosearch.search.strategy.Strategy`: ``ask``,
``tell``, ``resume``; :class:`autosearch.search.space.DecisionSpace` for sampling and one-decision mutations): the
tuning loop owns the budget, so the strategy never counts trials. A restart leaves a local optimum the climb cannot get
out of, which matters on the rugged latency landscapes of tiled loop nests. The cost model, if any, is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autosearch.search.cost_model import ConfigScorer
from autosearch.search.space import DecisionSpace
from autosearch.search.strategy import Option
from autosearch.types import Config, MeasureResult

OPTIONS: dict[str, Option] = {
    "patience": Option("batches without an improvement on the current config before a random restart", 3, int),
    "max_retries": Option("draws per requested config before the space is treated as exhausted", 100, int),
}


class RandomRestartHillClimbing:
    """Asks one-decision mutations of the current config; moves to a measured neighbour that is faster; after
    ``patience`` told batches without a move, starts again from a random config."""

    def __init__(
        self,
        space: DecisionSpace,
        *,
        seed: int,
        cost_model: ConfigScorer | None = None,
        task_id: str = "",
        patience: int = OPTIONS["patience"].default,
        max_retries: int = OPTIONS["max_retries"].default,
    ) -> None:
        self.space = space
        self.patience = max(1, patience)
        self.max_retries = max(1, max_retries)
        self._rng = np.random.default_rng(seed)
        self._asked: set[Config] = set()
        self._current: tuple[float, Config] | None = None  # (median seconds, config) the climb stands on
        self._stale = 0  # told batches since the climb last moved
        self.restarts = 0

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        misses = 0
        while len(out) < n and misses < self.max_retries * n:
            # the current config's neighbours, until they run out (many misses in a row): then random configs
            if self._current is not None and misses < self.max_retries:
                config = self.space.mutate(self._current[1], self._rng)
            else:
                config = self.space.sample(self._rng)
            if config in self._asked:
                misses += 1
                continue
            self._asked.add(config)
            out.append(config)
        return out

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        moved = False
        for config, result in zip(configs, results):
            # a resumed config TVM placed off the listed choices is never climbed from: its neighbours would be too
            if not (result.ok and self.space.contains(config)):
                continue
            if self._current is None or result.median < self._current[0]:
                self._current, moved = (result.median, config), True
        self._stale = 0 if moved else self._stale + 1
        if self._stale >= self.patience and self._current is not None:
            self._current, self._stale = None, 0  # restart: the next batch is random, the climb starts from its best
            self.restarts += 1

    def resume(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """The logged trials: never asked again, and the climb goes on from the fastest of them."""
        self._asked.update(configs)
        self.tell(configs, results)
