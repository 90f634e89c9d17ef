"""Building and measuring kernels: warm worker processes, the local runner, the Ray device pool."""

from autosearch.measure.base import EvaluatorConfig, MeasureJob, Runner

__all__ = ["EvaluatorConfig", "MeasureJob", "Runner"]
