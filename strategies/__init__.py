"""Search strategies for autosearch: ``random``, ``annealing``, ``optuna``, ``coordinate_descent``.

One module per strategy, each with its class and ``OPTIONS`` (its options table); the core finds the classes
by name through the plug-in registry (the entry-point group ``autosearch.strategies``, :mod:`autosearch.plugins`;
:data:`autosearch.search.strategy.STRATEGIES` is a view of it). The classes are re-exported here lazily, by class name,
as the registry names them, so importing one strategy (or this package) does not import another's dependencies
(Optuna).
"""

from __future__ import annotations

from typing import Any


def _exports() -> dict[str, Any]:
    """Class name -> entry point, for the registered strategies whose classes live in this package."""
    from autosearch import plugins

    return {ep.attr: ep for ep in plugins.entry_points(plugins.STRATEGIES).values()
            if ep.module.startswith(f"{__name__}.")}


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return sorted(_exports())
    ep = _exports().get(name)
    if ep is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return ep.load()
