"""Replay and surrogate "measurements" for strategy tests: no kernel is built or timed.

What a search-strategy test checks is the search (which configs it asks for, what it learns from
the answers), not kernel timing. So the answers come from a deterministic source instead:

- :class:`SyntheticLatency`: a made-up latency function of a config with a known optimum, a smooth
  landscape with interactions between decisions, and failures at a fixed rate.
- :class:`ReplayRunner`: returns recorded results for recorded configs (a tuning log) and, for the
  rest, a *surrogate benchmark*: the inverse-distance-weighted latency of the nearest recorded configs
  in :meth:`DecisionSpace.encode` space, plus a small hash-based noise. The surrogate is a test fixture,
  not a performance model: never report its numbers as measurements.
- :func:`run_strategy`: the smallest ask -> measure -> tell loop, checking the strategy contract.
  The real loop (budget over tasks, logging, cost-model filtering) is :mod:`autosearch.search.tuner`.

Everything here is a pure function of (seed, config): the same config always gets the same answer,
in any order, in any process (no Python ``hash``, which is salted per process).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from autosearch.search.space import DecisionSpace, config_key
from autosearch.types import Config, MeasureResult, Status

LatencySource = Callable[[Config], MeasureResult]


def unit_hash(seed: int, config: Config, salt: str = "") -> float:
    """A deterministic number in [0, 1) for (seed, config, salt), the same in every process."""
    digest = hashlib.blake2b(f"{seed}|{salt}|{config_key(config)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def _noisy(seed: int, config: Config, latency: float, noise: float, repeats: int) -> tuple[float, ...]:
    """``repeats`` latencies within +-``noise`` (relative) of ``latency``, hash-determined."""
    return tuple(
        latency * (1.0 + noise * (2.0 * unit_hash(seed, config, f"repeat{r}") - 1.0)) for r in range(repeats)
    )


class SyntheticLatency:
    """A deterministic latency landscape over a real decision space, with a known optimum.

    Per sketch, a hidden target config is drawn from ``seed``. The latency (seconds) of a config is

        base * sketch_factor * exp(alpha * (sum_j w_j * dev_j + gamma * (footprint - footprint*)^2))

    where ``dev_j`` is the distance of decision j from the target's (log2 of the tile factors, or the
    index difference, scaled to about [0, 1]), ``w_j`` random weights, and ``footprint`` the summed
    log2 of the two innermost factors of every tile decision: a coupling term, like a working set that
    must fit a cache, which makes the best value of one tile depend on the others. Both terms are zero
    at the target, so the optimum is the target of the best sketch (``optimum()``), ``base`` seconds.
    ``alpha`` is calibrated so that a random config is ``median_ratio`` times slower than the optimum
    (median over random samples), about the spread MetaSchedule's design space shows on a real conv2d.

    A fixed share of configs (hash-chosen, never the optimum) fails: ``fail_rate`` with
    ``build_error``, ``wrong_rate`` with ``wrong_result``; ok results carry ``repeats`` latencies with
    a relative ``noise``.
    """

    def __init__(
        self,
        space: DecisionSpace,
        *,
        seed: int = 0,
        base_seconds: float = 1e-3,
        median_ratio: float = 8.0,
        fail_rate: float = 0.08,
        wrong_rate: float = 0.02,
        noise: float = 0.02,
        repeats: int = 3,
    ) -> None:
        self.space = space
        self.seed = seed
        self.base_seconds = base_seconds
        self.fail_rate = fail_rate
        self.wrong_rate = wrong_rate
        self.noise = noise
        self.repeats = repeats
        rng = np.random.default_rng([seed, 0x5EED])
        n_sketches = len(space.sketches)
        self._targets = [self._sample_in_sketch(s, rng) for s in range(n_sketches)]
        self._weights = [rng.uniform(0.5, 2.0, size=len(space.decisions(s))) for s in range(n_sketches)]
        order = rng.permutation(n_sketches)
        self._sketch_factor = np.empty(n_sketches)
        self._sketch_factor[order] = 1.0 + 0.25 * np.arange(n_sketches)  # one best sketch, others slower
        self._gamma = 0.5
        self._footprint_target = [self._footprint(t) for t in self._targets]
        calib = [self._raw(space.sample(rng)) for _ in range(256)]
        self._alpha = math.log(median_ratio) / max(float(np.median(calib)), 1e-9)

    # ------------------------------------------------------------------ landscape
    def _sample_in_sketch(self, sketch: int, rng: np.random.Generator) -> Config:
        decisions = self.space.decisions(sketch)
        return Config(sketch, tuple(d.choices[int(rng.integers(len(d.choices)))] for d in decisions))

    def _footprint(self, config: Config) -> float:
        total = 0.0
        for d, v in zip(self.space.decisions(config.sketch), config.values):
            if d.kind == "SamplePerfectTile" and len(v) >= 2:
                total += math.log2(v[-1]) + math.log2(v[-2])
        return total

    def _raw(self, config: Config) -> float:
        """The exponent before calibration: weighted distance to the target plus the coupling term."""
        target = self._targets[config.sketch]
        decisions = self.space.decisions(config.sketch)
        devs = np.zeros(len(decisions))
        for j, (d, v, t) in enumerate(zip(decisions, config.values, target.values)):
            if len(d.choices) < 2:
                continue
            if d.kind == "SamplePerfectTile":
                span = max(1.0, math.log2(max(math.prod(t), 2)))
                devs[j] = sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(v, t)) / span
            else:
                pos = {c: i for i, c in enumerate(d.choices)}
                devs[j] = abs(pos[v] - pos[t]) / (len(d.choices) - 1)
        coupling = (self._footprint(config) - self._footprint_target[config.sketch]) / 4.0
        return float(self._weights[config.sketch] @ devs + self._gamma * coupling**2)

    def latency(self, config: Config) -> float:
        """Noise-free latency in seconds (also defined for configs that 'fail')."""
        return (
            self.base_seconds
            * float(self._sketch_factor[config.sketch])
            * math.exp(self._alpha * self._raw(config))
        )

    def optimum(self) -> Config:
        """The fastest config: the hidden target of the best sketch."""
        return self._targets[int(np.argmin(self._sketch_factor))]

    def __call__(self, config: Config) -> MeasureResult:
        if not self.space.contains(config):
            return MeasureResult.failed(
                Status.INVALID_CONFIG, "config is not in this space", worker="synthetic"
            )
        u = unit_hash(self.seed, config, "status")
        if config not in self._targets:
            if u < self.fail_rate:
                return MeasureResult.failed(Status.BUILD_ERROR, "synthetic build error", worker="synthetic")
            if u < self.fail_rate + self.wrong_rate:
                return MeasureResult.failed(Status.WRONG_RESULT, "synthetic wrong result", worker="synthetic")
        lat = self.latency(config)
        return MeasureResult(
            Status.OK, latencies=_noisy(self.seed, config, lat, self.noise, self.repeats), worker="synthetic"
        )


class ReplayRunner:
    """Answers ``measure_configs`` from records or a latency function, deterministically.

    ``source`` is either a callable ``Config -> MeasureResult`` (e.g. :class:`SyntheticLatency`) or
    records ``[(Config, MeasureResult), ...]`` (e.g. from a tuning log). With records, a recorded
    config gets its recorded result; any other config gets the surrogate: among the ``k`` nearest
    records (Euclidean, in ``space.encode`` space, weights ``1 / (distance + eps)^2``) the weighted share
    of failures is the probability that it fails (decided by a hash of the config, with the nearest
    failure's status), else its latency is the weighted geometric mean of the ok neighbours' medians,
    times a hash-based noise of +-``noise``.
    """

    name = "replay"

    def __init__(
        self,
        space: DecisionSpace,
        source: LatencySource | Iterable[tuple[Config, MeasureResult]],
        *,
        seed: int = 0,
        k: int = 4,
        noise: float = 0.02,
        repeats: int = 3,
    ) -> None:
        self.space = space
        self.seed = seed
        self.k = k
        self.noise = noise
        self.repeats = repeats
        self.calls = 0  # configs answered, recorded or not
        self.surrogate_calls = 0  # configs answered by the surrogate
        self._fn: LatencySource | None = None
        self._records: dict[Config, MeasureResult] = {}
        if callable(source):
            self._fn = source
        else:
            for config, result in source:
                self._records[config] = result
            if not self._records:
                raise ValueError("ReplayRunner needs a latency function or at least one record")
            self._configs = list(self._records)
            self._X = np.stack([space.encode(c) for c in self._configs]).astype(np.float64)

    def measure_configs(self, configs: Sequence[Config]) -> list[MeasureResult]:
        """One result per config, in order (the strategy-test stand-in for ``Runner.measure``)."""
        self.calls += len(configs)
        return [self._one(c) for c in configs]

    def _one(self, config: Config) -> MeasureResult:
        if self._fn is not None:
            return self._fn(config)
        if config in self._records:
            return self._records[config]
        if not self.space.contains(config):
            return MeasureResult.failed(
                Status.INVALID_CONFIG, "config is not in this space", worker=self.name
            )
        self.surrogate_calls += 1
        return self._surrogate(config)

    def _surrogate(self, config: Config) -> MeasureResult:
        dist = np.linalg.norm(self._X - self.space.encode(config).astype(np.float64), axis=1)
        nearest = np.argsort(dist, kind="stable")[: self.k]
        weights = 1.0 / (dist[nearest] + 1e-3) ** 2
        results = [self._records[self._configs[i]] for i in nearest]
        ok = np.array([r.ok for r in results])
        p_fail = float(weights[~ok].sum() / weights.sum())
        if unit_hash(self.seed, config, "surrogate-status") < p_fail:
            first_failure = next(r for r in results if not r.ok)
            return MeasureResult.failed(
                first_failure.status, "surrogate: near recorded failures", worker=self.name
            )
        log_lat = np.log([r.median for r in results if r.ok])
        latency = math.exp(float(weights[ok] @ log_lat / weights[ok].sum()))
        return MeasureResult(
            Status.OK,
            latencies=_noisy(self.seed, config, latency, self.noise, self.repeats),
            worker=self.name,
        )


def run_strategy(
    strategy: Any,
    runner: ReplayRunner,
    budget: int,
    batch: int,
    *,
    cost_model: Any = None,
) -> list[tuple[Config, MeasureResult]]:
    """Ask -> measure -> (update the cost model) -> tell until ``budget`` configs or the strategy stops.

    Raises ``ValueError`` when the strategy breaks its contract (more configs than asked, or a config
    it asked before), so every test that uses this loop also checks the contract.
    """
    history: list[tuple[Config, MeasureResult]] = []
    seen: set[Config] = set()
    while len(history) < budget:
        n = min(batch, budget - len(history))
        configs = list(strategy.ask(n))
        if not configs:
            break
        if len(configs) > n:
            raise ValueError(f"strategy returned {len(configs)} configs for ask({n})")
        repeats = [c for c in configs if c in seen]
        if repeats or len(set(configs)) != len(configs):
            raise ValueError(f"strategy repeated configs: {repeats[:3] or configs}")
        seen.update(configs)
        results = runner.measure_configs(configs)
        if cost_model is not None:
            cost_model.update(configs, results)
        strategy.tell(configs, results)
        history.extend(zip(configs, results))
    return history


def best_latency(history: Iterable[tuple[Config, MeasureResult]]) -> float:
    """Lowest median latency (seconds) of the ok results, inf when none."""
    return min((r.median for _, r in history if r.ok), default=math.inf)


__all__ = ["ReplayRunner", "SyntheticLatency", "best_latency", "run_strategy", "unit_hash"]
