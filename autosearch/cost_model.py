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
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from autosearch.errors import UserError, install_hint
from autosearch.records import Config, MeasureResult

SKLEARN_PREFIX = "sklearn:"  # sklearn:<EstimatorName>, e.g. sklearn:KNeighborsRegressor
PRETRAINED = "pretrained"
# The registry: name -> "module:factory"; the factory is called as factory(name, seed=...) -> CostModel.
# The SKLEARN_PREFIX entry takes every "sklearn:<EstimatorName>".
COST_MODELS: dict[str, str] = {
    "xgb": "autosearch.cost_models.xgboost_model:create",
    "xgb-rank": "autosearch.cost_models.xgboost_model:create",
    "rf": "autosearch.cost_models.sklearn_model:create",
    "gbr": "autosearch.cost_models.sklearn_model:create",
    "mlp": "autosearch.cost_models.learned:create",
    "tvm-xgb": "autosearch.cost_models.tvm_xgb:create",
    "tvm-mlp": "autosearch.cost_models.tvm_mlp:create",
    "seq": "autosearch.cost_models.sequence_model:create",
    "mlp-rank": "autosearch.cost_models.mlp_rank:create",
    "blend": "autosearch.cost_models.blend:create",
    SKLEARN_PREFIX: "autosearch.cost_models.sklearn_model:create",
    # pre-trained and refit online: "pretrained" is the model autosearch ships; a directory that
    # train-model wrote is taken by the same factory (``--cost-model DIR``)
    PRETRAINED: "autosearch.cost_models.pretrained:create",
}
# What the package of a registry entry's module exposes to turn one of its models into a task's
# ConfigScorer: scorer(model, space, task, *, seed, warm_start, **options). A package, not each family
# module, because featurising a task's configs (and caching it) depends on the model's input, not on the
# model, so one scorer serves every family of a package; and the core then finds it through the registry
# entry it already resolved, with no second plug-in path to keep in step.
SCORER_FACTORY = "scorer"
# "model@features" picks the feature set of a tabular model (xgb, xgb-rank, rf, gbr, sklearn:...) or of the
# sequence model (seq: the trace's tokens, alone or joined with loop (+ assembly) features)
FEATURE_SETS = ("loop", "pooled", "pooled+loop", "asm", "loop+asm", "encoding",
                "sequence", "sequence+loop", "sequence+loop+asm")


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


def _resolve(spec: str):
    module_path, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_path)
    except ImportError as exc:
        missing = exc.name or str(exc)
        how = install_hint(missing)
        raise UserError(f"cost model needs the package {missing!r}: {how}") from exc
    return getattr(module, attr)


def cost_model_names() -> list[str]:
    return sorted(k for k in COST_MODELS if k != SKLEARN_PREFIX) + [f"{SKLEARN_PREFIX}<Regressor>",
                                                                     "<model>@<features>", "<directory>"]


def _entry(base: str) -> str:
    """The registry entry ("module:factory") of a model name without its feature set (a directory: a model
    that train-model wrote)."""
    key = SKLEARN_PREFIX if base.startswith(SKLEARN_PREFIX) else base
    if key not in COST_MODELS and os.path.isdir(base):  # registry names first: a folder named "xgb" is not one
        key = PRETRAINED
    if key not in COST_MODELS:
        raise UserError(f"unknown cost model {base!r}; valid cost models: {', '.join(cost_model_names())}, none")
    return COST_MODELS[key]


def split_features(spec: str) -> tuple[str, str | None]:
    """``"xgb@pooled"`` -> ``("xgb", "pooled")``; ``"xgb"`` -> ``("xgb", None)``."""
    name, sep, features = spec.partition("@")
    if sep and features not in FEATURE_SETS:
        raise UserError(f"cost model {spec!r}: the feature set after '@' must be one of {', '.join(FEATURE_SETS)}")
    return name, features or None


def make_cost_model(name: str, *, seed: int = 0) -> CostModel:
    """A cost model by name: ``xgb``, ``xgb-rank``, ``rf``, ``gbr``, ``mlp``, ``tvm-xgb``, ``tvm-mlp``, ``seq``,
    ``sklearn:<Estimator>``, optionally with a feature set for the tabular ones: ``xgb@pooled`` (TVM's pooled
    per-store features), ``rf@pooled+loop``, ``xgb@loop+asm`` (adds the compiled kernel's instruction mix); their
    default is ``loop``; and for ``seq``: ``seq@sequence+loop`` (its default: ``sequence``)."""
    base, features = split_features(name)
    kwargs = {"input_kind": features} if features else {}
    factory = _resolve(_entry(base))
    if kwargs and "input_kind" not in inspect.signature(factory).parameters:  # mlp: per-store, tvm-xgb: programs
        raise UserError(f"cost model {base!r} has its own input; it takes no '@{features}'")
    return factory(base, seed=seed, **kwargs)


def make_scorer(name: str, space, task, *, seed: int = 0, warm_start: Sequence[Any] = (),
                **options: Any) -> ConfigScorer:
    """A config scorer for one task, backed by the named cost model and made by its package's
    ``SCORER_FACTORY``; ``options`` go to the scorer (for ``autosearch.cost_models``: ``features="tvm"`` for program
    features, ``cache_dir`` for the featurised warm start, see ``autosearch.cost_models.guidance``)."""
    model = make_cost_model(name, seed=seed)
    module_path = _entry(split_features(name)[0]).partition(":")[0]
    # the package the factory's module is in (imported by make_cost_model above); a top-level module: itself
    package = importlib.import_module(module_path).__package__ or module_path
    factory = _resolve(f"{package}:{SCORER_FACTORY}")
    return factory(model, space, task, seed=seed, warm_start=warm_start, **options)
