"""Fixtures for the strategy tests: replay sources over the real decision space of the small conv task.

``conv_space`` (tests/conftest.py) is MetaSchedule's real design space (3 sketches, ~1e8 configs) of
Conv 16->32 3x3 on 1x16x28x28 + Relu. Nothing is built or timed here: results come from
:mod:`tests.strategies.replay`.
"""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.search.space import DecisionSpace
from autosearch.types import Config, MeasureResult
from tests.strategies.replay import SyntheticLatency


@pytest.fixture(scope="session")
def synthetic(conv_space: DecisionSpace) -> SyntheticLatency:
    return SyntheticLatency(conv_space, seed=3)


@pytest.fixture(scope="session")
def recorded(conv_space: DecisionSpace, synthetic: SyntheticLatency) -> list[tuple[Config, MeasureResult]]:
    """200 distinct random configs with their synthetic results: a stand-in for a tuning log."""
    rng = np.random.default_rng(99)
    out: dict[Config, MeasureResult] = {}
    while len(out) < 200:
        config = conv_space.sample(rng)
        out.setdefault(config, synthetic(config))
    return list(out.items())
