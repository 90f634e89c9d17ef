"""Building and measuring kernels: warm worker processes, the local runner, the Ray device pool."""

from autosearch.measure.base import EvaluatorConfig, Runner

__all__ = ["EvaluatorConfig", "Runner"]
