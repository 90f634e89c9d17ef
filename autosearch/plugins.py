"""Plug-ins by name: one registry, read from the entry points of the installed distributions.

Strategies, cost models, workloads and runners are found by name in four entry-point groups, :data:`STRATEGIES`
(``autosearch.strategies``: name -> the strategy's class), :data:`COST_MODELS` (``autosearch.cost_models``:
name -> the factory ``create``), :data:`WORKLOADS` (``autosearch.workloads``: name -> the builder ``build``) and
:data:`RUNNERS` (``autosearch.runners``: name -> the factory ``create``). autosearch declares its own built-ins there
(``[project.entry-points."autosearch.strategies"]`` ... in ``pyproject.toml``); another distribution adds a plug-in
by declaring an entry point in one of these groups in its own metadata, and the core finds it without being edited.

The names are read from the installed metadata again whenever a directory on ``sys.path`` (or the path itself)
changed since the last read, so a plug-in installed while a process runs is found; otherwise the last read serves
(a read takes milliseconds, and a model's set-up looks names up for each of its tasks). A plug-in's module is
imported only when its name is used, so one plug-in's dependencies (Optuna, Ray, PyTorch) are never imported for
another. The name registries of the core (:data:`autosearch.search.strategy.STRATEGIES`,
:data:`autosearch.search.cost_model.COST_MODELS`, :data:`autosearch.frontend.importer.BUILTIN_MODELS`,
:data:`autosearch.api.RUNNERS`) are views of these groups (:class:`View`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Any

from autosearch.errors import UserError

STRATEGIES = "autosearch.strategies"
COST_MODELS = "autosearch.cost_models"
WORKLOADS = "autosearch.workloads"
RUNNERS = "autosearch.runners"
GROUPS = (STRATEGIES, COST_MODELS, WORKLOADS, RUNNERS)


def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The plug-ins of ``group`` by name, in the order the installed metadata lists them: the source every
    look-up reads. A name two distributions declare is the first one's (as imports take the first on the path)."""
    found = dict(_read(group, _installed()))
    if not found and group in GROUPS:  # autosearch declares built-ins in each: its metadata is not the installed one
        raise UserError(f"no plug-ins in the entry-point group {group!r}, not even autosearch's own: Python reads "
                        "stale autosearch metadata (an autosearch.egg-info in the working directory? delete it) "
                        "or autosearch is not installed (pip install -e .)")
    return found


def _installed() -> tuple[tuple[str, int | None], ...]:
    """Where the installed metadata is read from: each ``sys.path`` entry with its directory's modification time.
    Installing or removing a distribution adds or removes its metadata directory there, which changes the time."""
    found = []
    for entry in sys.path:
        path = entry or os.getcwd()
        try:
            found.append((path, os.stat(path).st_mtime_ns))
        except OSError:
            found.append((path, None))
    return tuple(found)


@functools.lru_cache(maxsize=len(GROUPS) * 4)
def _read(group: str, installed: tuple[tuple[str, int | None], ...]) -> tuple[tuple[str, metadata.EntryPoint], ...]:
    """The plug-ins of ``group`` read from the metadata ``installed`` describes (the key: a change reads again)."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, ep)
    return tuple(found.items())


def names(group: str) -> list[str]:
    """The names of the plug-ins of ``group``, sorted."""
    return sorted(entry_points(group))


def entry_point(group: str, name: str) -> metadata.EntryPoint:
    """The entry point of the plug-in ``name`` of ``group``; ``KeyError`` when there is none (the callers
    word the one-line error, with the valid names)."""
    return entry_points(group)[name]


def load(group: str, name: str, *, missing: Callable[[str], str] | None = None) -> Any:
    """The object the plug-in's entry point names, its module imported now. A package the module needs that is
    not installed: ``UserError(missing(package))``, one line (``missing`` None: the ``ImportError`` itself)."""
    ep = entry_point(group, name)
    try:
        return ep.load()
    except ImportError as exc:
        if missing is None:
            raise
        raise UserError(missing(exc.name or str(exc))) from exc


def package(group: str, name: str) -> str:
    """The package the plug-in's module is in (the module itself when it is a package or a top-level module),
    found without importing the module."""
    module = entry_point(group, name).module
    spec = importlib.util.find_spec(module)
    return (spec.parent if spec is not None else "") or module


class View(Mapping[str, str]):
    """A read-only ``dict`` of one group, name -> ``value(entry point)`` (by default its ``"module:attr"``),
    read live from the registry: every plug-in installed is in it, and nothing else."""

    def __init__(self, group: str, value: Callable[[metadata.EntryPoint], str] | None = None) -> None:
        self.group = group
        self._value = value or (lambda ep: ep.value)

    def __getitem__(self, name: str) -> str:
        return self._value(entry_point(self.group, name))

    def __contains__(self, name: object) -> bool:
        return name in entry_points(self.group)

    def __iter__(self) -> Iterator[str]:
        return iter(list(entry_points(self.group)))

    def __len__(self) -> int:
        return len(entry_points(self.group))

    def __repr__(self) -> str:
        return f"View({self.group!r}, {dict(self)!r})"


__all__ = ["COST_MODELS", "GROUPS", "RUNNERS", "STRATEGIES", "WORKLOADS", "View", "entry_point", "entry_points", "load",
           "names", "package"]
