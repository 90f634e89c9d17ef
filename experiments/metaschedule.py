"""Moved to :mod:`experiments.lib.metaschedule`; kept for ``experiments/time_to_quality.py``, which imports
``builder_and_runner`` from here, until it moves onto the helpers too."""

from experiments.lib.metaschedule import MetaScheduleRun, builder_and_runner, tune_tir  # noqa: F401
