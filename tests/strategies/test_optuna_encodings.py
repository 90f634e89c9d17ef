"""The ordinal encoding the relative samplers get: one fixed numeric space, configs round-trip, and the
numbers are ordered the way the schedules are (bigger number, bigger tile factor / deeper placement)."""

from __future__ import annotations

import numpy as np
import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FixedTrial

from autosearch.strategies.optuna_encodings import CategoricalEncoding, OrdinalEncoding
from autosearch.types import Config


def _decode(encoding, params: dict) -> Config:
    return encoding.suggest(FixedTrial(params))


def test_every_config_comes_back_from_its_parameters(conv_space) -> None:
    rng = np.random.default_rng(0)
    configs = [conv_space.sample(rng) for _ in range(300)]
    assert {c.sketch for c in configs} == set(range(len(conv_space.sketches)))
    for encoding in (OrdinalEncoding(conv_space), CategoricalEncoding(conv_space)):
        for config in configs:
            assert _decode(encoding, encoding.params(config)) == config


def test_one_fixed_numeric_space_for_every_sketch(conv_space) -> None:
    encoding = OrdinalEncoding(conv_space)
    rng = np.random.default_rng(1)
    layouts = {frozenset(encoding.params(conv_space.sample(rng))) for _ in range(50)}
    assert len(layouts) == 1  # the same parameter names whatever the sketch
    config = conv_space.sample(rng)
    distributions = encoding.distributions(config)
    assert set(distributions) == set(encoding.params(config))
    assert distributions.pop("sketch") == IntDistribution(0, len(conv_space.sketches) - 1)
    assert set(distributions.values()) == {FloatDistribution(0.0, 1.0)}
    # a tile of n factors has n-1 parameters; a decision with one choice has none
    tiles = [d for d in conv_space.decisions(0) if d.kind == "SamplePerfectTile" and len(d.choices) > 1]
    for d in tiles:
        assert {f"{d.name}.f{j}" for j in range(1, len(d.choices[0]))} <= set(distributions)
        assert f"{d.name}.f0" not in distributions
    fixed = [d for d in conv_space.decisions(0) if len(d.choices) == 1]
    assert fixed and not any(name.startswith(f"{d.name}.") or name == d.name for d in fixed for name in distributions)


def test_any_numbers_decode_to_a_legal_config(conv_space) -> None:
    encoding = OrdinalEncoding(conv_space)
    names = list(encoding.params(conv_space.sample(np.random.default_rng(0))))
    rng = np.random.default_rng(2)
    for _ in range(200):
        params = {n: float(rng.uniform()) for n in names}
        params["sketch"] = int(rng.integers(len(conv_space.sketches)))
        assert conv_space.contains(_decode(encoding, params))


def _sweep(encoding, config: Config, name: str, index: int) -> list:
    """The decision ``index`` of the configs decoded as parameter ``name`` goes from 0 to 1, the rest fixed."""
    params = encoding.params(config)
    return [_decode(encoding, {**params, name: u}).values[index] for u in np.linspace(0.0, 1.0, 101)]


def test_larger_numbers_are_larger_tile_factors(conv_space) -> None:
    """Raising one tile parameter never shrinks that factor, and sweeps it from 1 to the whole extent (the
    other inner factors at 1); the other decisions stay."""
    encoding = OrdinalEncoding(conv_space)
    decisions = conv_space.decisions(0)
    i = max(range(len(decisions)), key=lambda k: len(decisions[k].choices))  # the 56-choice tile
    outer_only = max(decisions[i].choices)  # (extent, 1, ..., 1)
    config = conv_space.default(0).replace(i, outer_only)
    n = len(outer_only)
    innermost = [tile[-1] for tile in _sweep(encoding, config, f"{decisions[i].name}.f{n - 1}", i)]
    assert innermost == sorted(innermost)
    assert innermost[0] == 1 and innermost[-1] == outer_only[0]
    params = encoding.params(config)
    nudged = _decode(encoding, {**params, f"{decisions[i].name}.f{n - 1}": 1.0})
    assert [k for k, (a, b) in enumerate(zip(nudged.values, config.values)) if a != b] == [i]


def test_unroll_and_compute_location_run_from_shallow_to_deep(conv_space) -> None:
    encoding = OrdinalEncoding(conv_space)
    decisions = conv_space.decisions(0)
    config = conv_space.default(0)
    loc = next(k for k, d in enumerate(decisions) if d.kind == "SampleComputeLocation")
    unroll = next(k for k, d in enumerate(decisions) if d.kind == "SampleCategorical")
    locations = list(dict.fromkeys(_sweep(encoding, config, decisions[loc].name, loc)))
    loops = sorted(c for c in decisions[loc].choices if c >= 0)
    assert locations == [-1, *loops, -2]  # root, the loops outer to inner, inline
    assert list(dict.fromkeys(_sweep(encoding, config, decisions[unroll].name, unroll))) == [0, 1, 2, 3]


def test_enqueued_parameters_reach_the_trial_unchanged(conv_space) -> None:
    """``enqueue_trial`` (model picks, neighbours) and ``create_trial`` (resume) take these parameters."""
    encoding = OrdinalEncoding(conv_space)
    config = conv_space.sample(np.random.default_rng(3))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(encoding.params(config))
    assert encoding.suggest(study.ask()) == config
