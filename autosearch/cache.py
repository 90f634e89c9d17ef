"""Where autosearch keeps, per user and machine, what it computes once and reads many times: the features of
measured records (:mod:`autosearch.cost_models.feature_store`) and the sketches of tasks' design spaces
(:mod:`autosearch.search.sketch_store`). Each keys its files by everything its contents depend on, so a stale file
is never read, only left behind; deleting the directory costs only the time to compute them again."""

from __future__ import annotations

import os

CACHE_ENV = "AUTOSEARCH_CACHE"


def default_cache_dir() -> str:
    """autosearch's cache directory: ``$AUTOSEARCH_CACHE``, else the XDG user cache dir + ``/autosearch``."""
    if override := os.environ.get(CACHE_ENV):
        return override
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "autosearch")


__all__ = ["CACHE_ENV", "default_cache_dir"]
