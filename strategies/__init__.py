"""Search strategies for autosearch: ``random``, ``annealing``, ``optuna``, ``coordinate_descent``.

One module per strategy, each with ``STRATEGY`` (the class) and ``OPTIONS`` (its options table); the
core finds them by name (:data:`autosearch.strategy.STRATEGIES`). The classes are re-exported lazily,
so importing one strategy (or this package) does not import another's dependencies (Optuna).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RandomSearch": "autosearch.strategies.random_search",
    "SimulatedAnnealing": "autosearch.strategies.annealing",
    "OptunaSearch": "autosearch.strategies.optuna_search",
    "CoordinateDescent": "autosearch.strategies.coordinate_descent",
}

__all__ = ["CoordinateDescent", "OptunaSearch", "RandomSearch", "SimulatedAnnealing"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
