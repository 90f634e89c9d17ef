"""The replay runner and synthetic landscape the strategy tests stand on: deterministic, faithful, checked."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from autosearch.types import Config, MeasureResult, Status
from tests.strategies.replay import ReplayRunner, SyntheticLatency, run_strategy


def test_synthetic_optimum_is_fastest_and_never_fails(conv_space, synthetic) -> None:
    best = synthetic.optimum()
    assert conv_space.contains(best) and synthetic(best).ok
    rng = np.random.default_rng(5)
    samples = [conv_space.sample(rng) for _ in range(300)]
    optimum = synthetic.latency(best)
    assert optimum == pytest.approx(synthetic.base_seconds)
    assert all(synthetic.latency(c) >= optimum for c in samples)
    # calibrated: a random config is ~median_ratio (8x) slower than the optimum
    assert 5 < statistics.median(synthetic.latency(c) for c in samples) / optimum < 12
    # one decision away from the optimum is slower, but far less than a random config
    neighbour = conv_space.mutate(best, rng)
    assert optimum < synthetic.latency(neighbour) < statistics.median(synthetic.latency(c) for c in samples)


def test_synthetic_failures_at_the_stated_rates(conv_space, synthetic) -> None:
    rng = np.random.default_rng(6)
    statuses = [synthetic(conv_space.sample(rng)).status for _ in range(600)]
    share = {s: statuses.count(s) / len(statuses) for s in set(statuses)}
    assert share[Status.BUILD_ERROR] == pytest.approx(synthetic.fail_rate, abs=0.035)
    assert share[Status.WRONG_RESULT] == pytest.approx(synthetic.wrong_rate, abs=0.02)
    assert set(share) == {Status.OK, Status.BUILD_ERROR, Status.WRONG_RESULT}


def test_synthetic_is_a_pure_function_of_seed_and_config(conv_space) -> None:
    a, b, c = (SyntheticLatency(conv_space, seed=s) for s in (1, 1, 2))
    config = conv_space.sample(np.random.default_rng(0))
    assert a(config) == b(config) == a(config)
    assert a.optimum() == b.optimum() != c.optimum()
    outside = Config(0, ())
    assert a(outside).status is Status.INVALID_CONFIG


def test_replay_returns_records_exactly_and_a_deterministic_surrogate(conv_space, recorded) -> None:
    runner = ReplayRunner(conv_space, recorded, seed=0)
    configs = [c for c, _ in recorded[:5]]
    assert runner.measure_configs(configs) == [r for _, r in recorded[:5]]
    assert runner.surrogate_calls == 0
    rng = np.random.default_rng(7)
    fresh = [c for c in (conv_space.sample(rng) for _ in range(40)) if c not in dict(recorded)][:20]
    forward = runner.measure_configs(fresh)
    backward = ReplayRunner(conv_space, recorded, seed=0).measure_configs(fresh[::-1])[::-1]
    assert forward == backward  # order and instance do not matter
    assert runner.surrogate_calls == len(fresh)
    assert any(r.ok for r in forward)


def test_surrogate_interpolates_between_recorded_latencies(conv_space) -> None:
    """Two recorded configs one decision apart: an unrecorded config next to them gets a latency between
    theirs (up to the noise), and a config surrounded by failures fails."""
    rng = np.random.default_rng(8)
    base = conv_space.sample(rng)
    near = conv_space.mutate(base, rng)
    records = [
        (base, MeasureResult(Status.OK, latencies=(1e-3,))),
        (near, MeasureResult(Status.OK, latencies=(4e-3,))),
    ]
    probe = next(c for c in (conv_space.mutate(base, rng) for _ in range(100)) if c not in (base, near))
    result = ReplayRunner(conv_space, records, seed=0, k=2).measure_configs([probe])[0]
    assert result.ok and 1e-3 * 0.97 <= result.median <= 4e-3 * 1.03
    failing = [
        (base, MeasureResult.failed(Status.BUILD_ERROR, "x")),
        (near, MeasureResult.failed(Status.BUILD_ERROR, "y")),
    ]
    assert ReplayRunner(conv_space, failing, seed=0).measure_configs([probe])[0].status is Status.BUILD_ERROR


class _Repeater:
    """A broken strategy (asks the same config twice): run_strategy must refuse it."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def ask(self, n: int) -> list[Config]:
        return [self.config]

    def tell(self, configs, results) -> None:
        pass


def test_run_strategy_refuses_a_strategy_that_repeats(conv_space, synthetic) -> None:
    with pytest.raises(ValueError, match="repeated"):
        run_strategy(_Repeater(synthetic.optimum()), ReplayRunner(conv_space, synthetic), 4, 2)


def test_best_latency_ignores_failures(conv_space) -> None:
    from tests.strategies.replay import best_latency

    c = Config(0, ())
    assert best_latency([(c, MeasureResult.failed(Status.BUILD_ERROR, "x"))]) == math.inf
    assert best_latency([(c, MeasureResult(Status.OK, latencies=(2.0, 3.0, 4.0)))]) == 3.0
