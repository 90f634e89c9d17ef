"""Cost-model protocols and the registry by name.

Two levels, as in MetaSchedule (FeatureExtractor separate from CostModel) and scikit-learn:

- :class:`CostModel`: a plain regressor/ranker on a feature matrix (``fit(X, y)`` returns self,
  ``predict(X)``; higher prediction = faster kernel), saved as JSON or the library's own format.
- :class:`ConfigScorer`: what a search strategy sees for one task: ``score(configs)`` (higher is
  better) and ``update(configs, results)`` after each measured batch. It featurises configs of its
  task (TVM program features of the applied schedule, or the decision encoding) and refits its model.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from autosearch import plugins
from autosearch.errors import UserError, install_hint
from autosearch.types import Config, MeasureResult

SKLEARN_PREFIX = "sklearn:"  # sklearn:<EstimatorName>, e.g. sklearn:KNeighborsRegressor
PRETRAINED = "pretrained"
# The registry: name -> "module:factory", a view of the plug-in registry's group "autosearch.cost_models"
# (autosearch.plugins); the factory is called as factory(name, seed=...) -> CostModel. The SKLEARN_PREFIX entry
# takes every "sklearn:<EstimatorName>"; PRETRAINED, pre-trained and refit online, is the model autosearch ships,
# and its factory also takes a directory that train-model wrote (``--cost-model DIR``).
COST_MODELS: Mapping[str, str] = plugins.View(plugins.COST_MODELS)
# What the package of a registry entry's module exposes to turn one of its models into a task's
# ConfigScorer: scorer(model, space, task, *, seed, warm_start, **options). A package, not each family
# module, because featurising a task's configs (and caching it) depends on the model's input, not on the
# model, so one scorer serves every family of a package; and the core then finds it through the registry
# entry it already resolved, with no second plug-in path to keep in step.
SCORER_FACTORY = "scorer"
# "model@features" picks the feature set of a tabular model (xgb, xgb-rank, rf, gbr, sklearn:...) or of the
# sequence model (seq: the trace's tokens, alone or joined with loop (+ assembly) features). The sets are named
# by the package of a registry entry's module, as its FEATURE_SETS; this module's FEATURE_SETS (read on use,
# :func:`feature_sets`) are those of the registered models' packages.
FEATURE_SETS_ATTR = "FEATURE_SETS"
# What the package of a registry entry's module may expose to say whether one of its models guides the tasks
# tensorised onto a bf16 unit: guides_unit(name, unit) -> bool. A model trained before the run on fp32 schedules
# ranks such tasks' schedules no better than chance; a package without it guides every task.
GUIDES_UNIT = "guides_unit"


@runtime_checkable
class CostModel(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None) -> CostModel:
        """Fit on features ``X`` and normalised throughput ``y`` (1.0 = best of its task).
        ``groups`` (task ids) lets ranking objectives compare only within a task."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted normalised throughput; only the order within a task matters for search."""

    def save(self, path: str) -> None: ...


@runtime_checkable
class ConfigScorer(Protocol):
    def score(self, configs: Sequence[Config]) -> np.ndarray:
        """Predicted goodness of each config of this task (higher = faster)."""

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Learn from a measured batch (configs as applied, results in the same order)."""


def _missing(package: str) -> str:
    return f"cost model needs the package {package!r}: {install_hint(package)}"


def _import(module_path: str):
    try:
        return importlib.import_module(module_path)
    except ImportError as exc:
        raise UserError(_missing(exc.name or str(exc))) from exc


def _resolve(spec: str):
    module_path, _, attr = spec.partition(":")
    return getattr(_import(module_path), attr)


def _package(name: str) -> str:
    """The package of the registry entry ``name`` (where its ``scorer`` and ``FEATURE_SETS`` are)."""
    try:
        return plugins.package(plugins.COST_MODELS, name)
    except ImportError as exc:
        raise UserError(_missing(exc.name or str(exc))) from exc


def feature_sets() -> tuple[str, ...]:
    """What may follow '@' in a cost-model name: the ``FEATURE_SETS`` of the packages the registered models are
    in, in order, each once. Those packages are imported, not the models' modules."""
    found: dict[str, None] = {}
    for package in dict.fromkeys(_package(name) for name in COST_MODELS):
        found.update(dict.fromkeys(getattr(_import(package), FEATURE_SETS_ATTR, ())))
    return tuple(found)


def __getattr__(name: str) -> Any:
    if name == "FEATURE_SETS":  # a view of the registry, as COST_MODELS
        return feature_sets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cost_model_names() -> list[str]:
    return sorted(k for k in COST_MODELS if k != SKLEARN_PREFIX) + [f"{SKLEARN_PREFIX}<Regressor>",
                                                                     "<model>@<features>", "<directory>"]


def _entry(base: str) -> str:
    """The registry name of a model name without its feature set (a directory: a model that train-model
    wrote: ``PRETRAINED``)."""
    key = SKLEARN_PREFIX if base.startswith(SKLEARN_PREFIX) else base
    if key not in COST_MODELS and os.path.isdir(base):  # registry names first: a folder named "xgb" is not one
        key = PRETRAINED
    if key not in COST_MODELS:
        raise UserError(f"unknown cost model {base!r}; valid cost models: {', '.join(cost_model_names())}, none")
    return key


def split_features(spec: str) -> tuple[str, str | None]:
    """``"xgb@pooled"`` -> ``("xgb", "pooled")``; ``"xgb"`` -> ``("xgb", None)``."""
    name, sep, features = spec.partition("@")
    if sep and features not in (valid := feature_sets()):
        raise UserError(f"cost model {spec!r}: the feature set after '@' must be one of {', '.join(valid)}")
    return name, features or None


def pretrained_model(spec: str) -> bool:
    """Whether a ``--cost-model`` is trained before the run (the shipped model, a train-model directory)."""
    return spec == PRETRAINED or (spec not in COST_MODELS and os.path.isdir(spec))


def guides_unit(spec: str, unit: str | None) -> bool:
    """Whether ``--cost-model spec`` guides the tasks tensorised onto the bf16 ``unit`` (None: fp32 tasks): as its
    package's :data:`GUIDES_UNIT` says, where it says. The tasks it does not guide run unguided, and ``run`` says so."""
    if unit is None:
        return True
    hook = getattr(_import(_package(_entry(split_features(spec)[0]))), GUIDES_UNIT, None)
    return True if hook is None else bool(hook(spec, unit))


def make_cost_model(name: str, *, seed: int = 0) -> CostModel:
    """A cost model by name: ``xgb``, ``xgb-rank``, ``rf``, ``gbr``, ``mlp``, ``tvm-xgb``, ``tvm-mlp``, ``seq``,
    ``sklearn:<Estimator>``, optionally with a feature set for the tabular ones: ``xgb@pooled`` (TVM's pooled
    per-store features), ``rf@pooled+loop``, ``xgb@loop+asm`` (adds the compiled kernel's instruction mix); their
    default is ``loop``; and for ``seq``: ``seq@sequence+loop`` (its default: ``sequence``)."""
    base, features = split_features(name)
    kwargs = {"input_kind": features} if features else {}
    factory = plugins.load(plugins.COST_MODELS, _entry(base), missing=_missing)
    if kwargs and "input_kind" not in inspect.signature(factory).parameters:  # mlp: per-store, tvm-xgb: programs
        raise UserError(f"cost model {base!r} has its own input; it takes no '@{features}'")
    return factory(base, seed=seed, **kwargs)


def make_scorer(name: str, space, task, *, seed: int = 0, warm_start: Sequence[Any] = (),
                **options: Any) -> ConfigScorer:
    """A config scorer for one task, backed by the named cost model and made by its package's
    ``SCORER_FACTORY``; ``options`` go to the scorer (for ``autosearch.cost_models``: ``features="tvm"`` for program
    features, ``cache_dir`` for the featurised warm start, see ``autosearch.cost_models.guidance``)."""
    model = make_cost_model(name, seed=seed)
    factory = _resolve(f"{_package(_entry(split_features(name)[0]))}:{SCORER_FACTORY}")
    return factory(model, space, task, seed=seed, warm_start=warm_start, **options)
