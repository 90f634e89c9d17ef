"""The Strategy protocol (ask/tell), per-strategy option tables and the registry by name.

A strategy proposes configs of one task's :class:`~autosearch.space.DecisionSpace` and learns from
their results. The tuning loop owns the budget: a strategy never counts trials, it only answers
``ask(n)`` with at most ``n`` configs it has not asked for before. A run continued from its log
(``--resume``) hands a fresh strategy the logged trials through ``resume``, so it goes on from them
whatever seed, batch size or options the new run has.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from autosearch.errors import UserError
from autosearch.records import Config, MeasureResult

# name -> module path; the module defines STRATEGY (the class) and OPTIONS (the options table).
STRATEGIES: dict[str, str] = {
    "random": "autosearch.strategies.random_search",
    "annealing": "autosearch.strategies.annealing",
    "optuna": "autosearch.strategies.optuna_search",
    "coordinate_descent": "autosearch.strategies.coordinate_descent",
}


@dataclass(frozen=True)
class Option:
    """One tunable knob of a strategy: documentation, default and type in one place (Kernel Tuner style)."""

    help: str
    default: Any
    type: type = str
    choices: tuple[Any, ...] | None = None


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
        outside :meth:`~autosearch.space.DecisionSpace.contains` (a compute location as TVM placed it):
        it is only never to be asked."""


def _load(name: str):
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}; valid strategies: {', '.join(sorted(STRATEGIES))}")
    module_path = STRATEGIES[name]
    try:
        return importlib.import_module(module_path)
    except ImportError as exc:
        missing = exc.name or str(exc)
        raise UserError(f"strategy {name!r} needs the package {missing!r}: pip install {missing}") from exc


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
    table = strategy_options(name)
    out = {}
    for key, value in raw.items():
        if key not in table:
            valid = ", ".join(sorted(table)) or "none"
            raise UserError(f"strategy {name!r} has no option {key!r}; its options: {valid}")
        opt = table[key]
        try:
            if opt.type is bool and isinstance(value, str):
                converted: Any = value.lower() in ("1", "true", "yes", "on")
            else:
                converted = opt.type(value)
        except (TypeError, ValueError) as exc:
            raise UserError(f"option {key}={value!r} of strategy {name!r} must be {opt.type.__name__}") from exc
        if opt.choices is not None and converted not in opt.choices:
            raise UserError(f"option {key}={converted!r} of strategy {name!r}: choose one of "
                            f"{', '.join(map(str, opt.choices))}")
        out[key] = converted
    return out


def make_strategy(name: str, space, *, seed: int, cost_model=None, task_id: str = "", **options: Any) -> Strategy:
    """Instantiate a strategy by name for one task's space."""
    module = _load(name)
    return module.STRATEGY(space, seed=seed, cost_model=cost_model, task_id=task_id, **parse_options(name, options))
