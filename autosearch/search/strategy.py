"""The Strategy protocol (ask/tell), per-strategy option tables and the registry by name.

A strategy proposes configs of one task's :class:`~autosearch.search.space.DecisionSpace` and learns from
their results. The tuning loop owns the budget: a strategy never counts trials, it only answers
``ask(n)`` with at most ``n`` configs it has not asked for before. A run continued from its log
(``--resume``) hands a fresh strategy the logged trials through ``resume``, so it goes on from them
whatever seed, batch size or options the new run has.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from autosearch import plugins
from autosearch.errors import UserError
from autosearch.options import Option, parse
from autosearch.types import Config, MeasureResult

# name -> module path: a view of the plug-in registry's group "autosearch.strategies" (autosearch.plugins), whose
# entry points name the classes; the class's module defines OPTIONS (the options table), and AUTO_GUIDANCE if any.
STRATEGIES: Mapping[str, str] = plugins.View(plugins.STRATEGIES, lambda ep: ep.module)


@runtime_checkable
class Strategy(Protocol):
    """Ask/tell search over one task's decision space. Constructed as
    ``Cls(space, *, seed=..., cost_model=None, task_id="", **options)``: ``task_id`` names the task
    (the tuning loop passes its name and workload key), for a strategy that keeps state outside the
    process under that name (Optuna's study in a storage); the others ignore it."""

    def ask(self, n: int) -> list[Config]:
        """Up to ``n`` configs never asked before (fewer, or none, when the space is exhausted)."""

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Results of configs this strategy asked for, in the same order; failures included."""

    def resume(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Trials measured before this strategy existed (a resumed log), failures included; called once,
        before the first ``ask``. Learn from them as if told, and never ask any of them. A config may lie
        outside :meth:`~autosearch.search.space.DecisionSpace.contains` (a compute location as TVM placed it):
        it is only never to be asked."""


def strategy_class(name: str) -> type:
    """The class of a strategy, by name, found through the registry (its module imported now)."""
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}; valid strategies: {', '.join(sorted(STRATEGIES))}")
    return plugins.load(plugins.STRATEGIES, name, missing=lambda missing: (
        f"strategy {name!r} needs the package {missing!r}: pip install {missing}"))


def _load(name: str):
    """The module of a strategy's class: its ``OPTIONS`` and ``AUTO_GUIDANCE``."""
    strategy_class(name)
    return importlib.import_module(STRATEGIES[name])


def guided_by_default(name: str) -> bool:
    """Whether ``--cost-model auto`` guides this strategy: its module's ``AUTO_GUIDANCE`` says so where the
    strategy's use of a model is cheap enough for every run (it scores a pool of candidates per batch); a
    strategy that scores thousands per ask, or none, runs unguided unless a cost model is named."""
    return bool(getattr(_load(name), "AUTO_GUIDANCE", False))


def strategy_options(name: str) -> dict[str, Option]:
    """The options table of a strategy (docs and CLI parsing)."""
    return dict(getattr(_load(name), "OPTIONS", {}))


def parse_options(name: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Check and convert user options (``--option key=value``) against the strategy's table."""
    return parse(strategy_options(name), raw, f"strategy {name!r}")


def make_strategy(name: str, space, *, seed: int, cost_model=None, task_id: str = "", **options: Any) -> Strategy:
    """Instantiate a strategy by name for one task's space."""
    cls = strategy_class(name)
    return cls(space, seed=seed, cost_model=cost_model, task_id=task_id, **parse_options(name, options))
