"""Random search: uniform samples of the decision space, never the same config twice.

The baseline every other strategy must beat, and the right choice when nothing is known. Sampling
is ``DecisionSpace.sample`` (a random sketch, then a random legal choice per decision) with rejection
of configs asked before. A space small enough to list (``enumerate_below`` configs) is enumerated and
shuffled instead, so it is exhausted exactly and without wasted draws; ``ask`` then returns fewer
configs than asked for, and finally none.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from autosearch.search.cost_model import ConfigScorer
from autosearch.search.space import DecisionSpace, enumerate_space
from autosearch.search.strategy import Option
from autosearch.types import Config, MeasureResult

log = logging.getLogger(__name__)

OPTIONS: dict[str, Option] = {
    "max_retries": Option(
        "draws per requested config before rejection sampling gives up (the space looks exhausted)", 100, int
    ),
    "enumerate_below": Option(
        "list and shuffle every config when the space has fewer configs than this", 100_000, int
    ),
}


class RandomSearch:
    """Uniform random configs without repeats. The cost model, if any, is ignored (pure baseline)."""

    def __init__(
        self,
        space: DecisionSpace,
        *,
        seed: int,
        cost_model: ConfigScorer | None = None,
        task_id: str = "",
        max_retries: int = OPTIONS["max_retries"].default,
        enumerate_below: int = OPTIONS["enumerate_below"].default,
    ) -> None:
        self.space = space
        self.max_retries = max(1, max_retries)
        self._rng = np.random.default_rng(seed)
        self._asked: set[Config] = set()
        self._pool: list[Config] | None = None  # shuffled full listing of a small space
        if space.size() < enumerate_below:
            self._pool = enumerate_space(space)
            self._rng.shuffle(self._pool)  # type: ignore[arg-type]

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        if self._pool is not None:
            while self._pool and len(out) < n:
                config = self._pool.pop()
                if config not in self._asked:
                    out.append(config)
                    self._asked.add(config)
            return out
        misses = 0
        while len(out) < n and misses < self.max_retries * n:
            config = self.space.sample(self._rng)
            if config in self._asked:
                misses += 1
                continue
            out.append(config)
            self._asked.add(config)
        if len(out) < n:
            log.info(
                "random search: %d draws in a row were repeats; returning %d of %d configs",
                misses,
                len(out),
                n,
            )
        return out

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Random search learns nothing; the configs were recorded as asked already."""

    def resume(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Logged configs are never drawn again."""
        self._asked.update(configs)


AUTO_GUIDANCE = False  # random search asks no model: a scorer would only cost time
