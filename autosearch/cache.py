"""Where autosearch keeps, per user and machine, what it computes once and reads many times: the features of
measured records (:mod:`autosearch.cost_models.feature_store`) and the sketches of tasks' design spaces
(:mod:`autosearch.search.sketch_store`). Each keys its files by everything its contents depend on, so a stale file
is never read, only left behind; deleting the directory costs only the time to compute them again."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from typing import BinaryIO

CACHE_ENV = "AUTOSEARCH_CACHE"


def default_cache_dir() -> str:
    """autosearch's cache directory: ``$AUTOSEARCH_CACHE``, else the XDG user cache dir + ``/autosearch``."""
    if override := os.environ.get(CACHE_ENV):
        return override
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "autosearch")


def replace_atomically(path: str, write: Callable[[BinaryIO], None]) -> None:
    """``write(fh)`` into a file beside ``path``, then renamed over it: a reader (another process sharing the
    directory) sees the whole file or the one before it, never half of one; a failed write leaves nothing behind."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["CACHE_ENV", "default_cache_dir", "replace_atomically"]
