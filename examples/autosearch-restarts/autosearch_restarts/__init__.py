"""An example autosearch plug-in: :class:`~autosearch_restarts.hill_climbing.RandomRestartHillClimbing`, registered
as the strategy ``restarts`` by this distribution's entry point (group ``autosearch.strategies``)."""

from autosearch_restarts.hill_climbing import OPTIONS, RandomRestartHillClimbing

__all__ = ["OPTIONS", "RandomRestartHillClimbing"]
