"""Optuna parameters for the decision space, and back: one encoding per kind of sampler.

Part of the ``optuna`` strategy (:mod:`autosearch.strategies.optuna_search`), in its own module because the two
encodings are a job of their own. An encoding turns a :class:`Config` into the parameters of a trial
(``params``, with their ``distributions``, for ``enqueue_trial`` and ``create_trial``) and a trial's
suggestions into a config (``suggest``); every config must come back from its own parameters unchanged.

- :class:`CategoricalEncoding` (TPE, random): ``sketch``, then one categorical parameter per
  decision of that sketch, named ``s{k}.{decision}`` (conditional on the sketch). Each measured value
  is the value of exactly one parameter vector, and TPE models conditional spaces. A sampler that
  models the intersection of all trials' parameters (GP, CMA-ES, NSGA-II, QMC) would model ``sketch``
  alone and draw every decision from its independent sampler, i.e. at random.
- :class:`OrdinalEncoding` (GP, CMA-ES, NSGA-II, QMC): the same parameters in every trial, numbers whose
  distance means something. The layout is the union over sketches of their decisions (by name):
  ``sketch`` (an integer), and per decision with more than one choice, floats in [0, 1]:

  - a tile decision of ``n`` factors of extent ``E`` gets ``n - 1`` parameters ``{name}.f{j}``, the
    log-size of its factors j = 1 .. n-1 (all but the outermost, which the product fixes) as a share
    of the extent, ``log f_j / log E``; a suggestion becomes the legal tiling nearest to it
    (Euclidean, in that space), so close numbers are close tile shapes;
  - an unroll (``SampleCategorical``) or compute location gets one parameter ``{name}``, cut into as
    many equal bins as the decision has choices, in a meaningful order: unroll candidates as
    MetaSchedule lists them (depth ascending, 0/16/64/512); compute locations root, then the loops
    outermost to innermost, then inline (how deep the producer moves into its consumer).

  A parameter the trial's sketch lacks is suggested all the same (ignored, ``0.5`` in the parameters
  of a given config), so the sampler sees one fixed space. Many parameter vectors map to one config:
  the strategy answers such repeats with the known result (see :mod:`autosearch.strategies.optuna_search`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import Trial

from autosearch.search.space import DecisionSpace
from autosearch.types import Config, Decision

PARAM_SKETCH = "sketch"
UNUSED = 0.5  # the value of a parameter the config's sketch does not have


class Encoding(Protocol):
    name: str

    def suggest(self, trial: Trial) -> Config: ...

    def params(self, config: Config) -> dict[str, Any]: ...

    def distributions(self, config: Config) -> dict[str, BaseDistribution]: ...

    def describe(self) -> list[Any]: ...


def _to_param(value: Any) -> Any:
    return "x".join(map(str, value)) if isinstance(value, tuple) else value


def _from_param(value: Any) -> Any:
    return tuple(int(p) for p in value.split("x")) if isinstance(value, str) else int(value)


class CategoricalEncoding:
    """``sketch``, then the chosen sketch's decisions as categoricals (tiles as strings like ``"1x2x13x4"``:
    Optuna's categorical choices must be None/bool/int/float/str)."""

    name = "categorical"

    def __init__(self, space: DecisionSpace) -> None:
        self.space = space
        self._names = [[f"s{s.index}.{d.name}" for d in s.decisions] for s in space.sketches]

    def _choices(self, sketch: int) -> list[tuple[str, list[Any]]]:
        decisions = self.space.decisions(sketch)
        return [(name, [_to_param(c) for c in d.choices]) for name, d in zip(self._names[sketch], decisions)]

    def suggest(self, trial: Trial) -> Config:
        sketch = trial.suggest_categorical(PARAM_SKETCH, list(range(len(self.space.sketches))))
        values = tuple(_from_param(trial.suggest_categorical(name, choices)) for name, choices in self._choices(sketch))
        return Config(sketch, values)

    def params(self, config: Config) -> dict[str, Any]:
        out: dict[str, Any] = {PARAM_SKETCH: config.sketch}
        out.update({name: _to_param(v) for name, v in zip(self._names[config.sketch], config.values)})
        return out

    def distributions(self, config: Config) -> dict[str, BaseDistribution]:
        sketches = CategoricalDistribution(list(range(len(self.space.sketches))))
        out: dict[str, BaseDistribution] = {PARAM_SKETCH: sketches}
        out.update({name: CategoricalDistribution(choices) for name, choices in self._choices(config.sketch)})
        return out

    def describe(self) -> list[Any]:
        return [[d.name, [_to_param(c) for c in d.choices]] for s in self.space.sketches for d in s.decisions]


def _location_order(choice: int) -> float:
    """Root (-1) first, loops outermost to innermost (0, 1, ...), inline (-2) last."""
    return math.inf if choice == -2 else float(choice)


@dataclass(frozen=True)
class _Slotted:
    """One decision of one sketch in the ordinal layout: its parameter names and how values map to choices."""

    slots: tuple[str, ...]  # parameter names; empty for a decision with one choice
    choices: tuple[Any, ...]  # tiles: the decision's choices; others: in the meaningful order
    points: np.ndarray | None  # tiles: one row of parameter values per choice

    def decode(self, values: list[float]) -> Any:
        if not self.slots:
            return self.choices[0]
        if self.points is not None:
            return self.choices[int(np.argmin(((self.points - np.asarray(values)) ** 2).sum(axis=1)))]
        return self.choices[min(len(self.choices) - 1, int(values[0] * len(self.choices)))]

    def encode(self, choice: Any) -> list[float]:
        if not self.slots:
            return []
        if self.points is not None:
            return [float(v) for v in self.points[self.choices.index(choice)]]
        return [(self.choices.index(choice) + 0.5) / len(self.choices)]


def _slotted(decision: Decision) -> _Slotted:
    if len(decision.choices) < 2:
        return _Slotted((), tuple(decision.choices), None)
    if decision.kind == "SamplePerfectTile":
        n = len(decision.choices[0])
        log_extent = math.log(math.prod(decision.choices[0]))
        points = np.array([[math.log(f) / log_extent for f in tile[1:]] for tile in decision.choices])
        return _Slotted(tuple(f"{decision.name}.f{j}" for j in range(1, n)), tuple(decision.choices), points)
    key = _location_order if decision.kind == "SampleComputeLocation" else None
    return _Slotted((decision.name,), tuple(sorted(decision.choices, key=key)), None)


class OrdinalEncoding:
    """The same numeric parameters in every trial (module docstring): what a relative sampler can model."""

    name = "ordinal"

    def __init__(self, space: DecisionSpace) -> None:
        self.space = space
        self._layout = [[_slotted(d) for d in s.decisions] for s in space.sketches]
        names = dict.fromkeys(slot for sketch in self._layout for d in sketch for slot in d.slots)
        self._slots = list(names)
        self._sketch = IntDistribution(0, len(space.sketches) - 1)
        self._unit = FloatDistribution(0.0, 1.0)

    def suggest(self, trial: Trial) -> Config:
        sketch = trial.suggest_int(PARAM_SKETCH, self._sketch.low, self._sketch.high)
        values = {slot: trial.suggest_float(slot, 0.0, 1.0) for slot in self._slots}
        return Config(sketch, tuple(d.decode([values[s] for s in d.slots]) for d in self._layout[sketch]))

    def params(self, config: Config) -> dict[str, Any]:
        out: dict[str, Any] = {PARAM_SKETCH: config.sketch, **dict.fromkeys(self._slots, UNUSED)}
        for d, value in zip(self._layout[config.sketch], config.values):
            out.update(zip(d.slots, d.encode(value)))
        return out

    def distributions(self, config: Config) -> dict[str, BaseDistribution]:
        return {PARAM_SKETCH: self._sketch, **dict.fromkeys(self._slots, self._unit)}

    def describe(self) -> list[Any]:
        return [self.name, *([d.slots, list(map(_to_param, d.choices))] for s in self._layout for d in s)]


__all__ = ["PARAM_SKETCH", "CategoricalEncoding", "Encoding", "OrdinalEncoding"]
