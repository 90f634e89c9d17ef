"""Tasks' sketches kept on disk, so a task's design space is built once per machine, not once per run.

Why: building a design space is most of a task's set-up (TVM generating the sketches, then listing the loops
each compute location may take, one probe at a time), and the same task gets the same sketches every time it is
set up: a resumed run, the model tuned again with another strategy, a test suite's runs of one small model, the API
called in a loop. The first build writes them here; later ones replay each sketch's trace once instead
(:class:`autosearch.search.space.DecisionSpace`).

What an entry depends on is what keys it: the unscheduled module (TVM's JSON of it), the target, the space's seed,
TVM's version, and autosearch's own code (a digest of its sources: a change to how spaces are built, or to anything
else in the package, starts afresh rather than read what an older version built). A stale entry is never read,
only left behind.

Where: ``sketches/`` under :func:`autosearch.cache.default_cache_dir`, one JSON file per task and seed, written
beside its name and renamed over it. A file that cannot be read is ignored with a warning and rebuilt; a directory
that cannot be written costs only the speed-up (one warning).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from typing import Any

from autosearch.cache import default_cache_dir, replace_atomically

log = logging.getLogger(__name__)

FORMAT = 1  # of an entry's JSON, bumped when it changes


@functools.cache
def code_digest() -> str:
    """A digest of the autosearch package's sources, read once per process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.blake2b(digest_size=16)
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()  # os.walk then visits them in this order
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(directory, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as fh:
                digest.update(fh.read() + b"\0")
    return digest.hexdigest()


class SketchStore:
    """Entries by key (:meth:`key`), as JSON values. ``directory``: the cache root (``sketches/`` goes under it);
    ``None``: :func:`autosearch.cache.default_cache_dir`. One store may serve every space of a run, from threads."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        root = os.fspath(directory) if directory is not None else default_cache_dir()
        self.directory = os.path.join(root, "sketches")
        self._writable = True

    @staticmethod
    def key(mod, target, seed: int) -> str:
        """What a task's sketches depend on, as a digest."""
        import tvm

        digest = hashlib.blake2b(digest_size=20)
        digest.update(json.dumps([FORMAT, tvm.__version__, code_digest(), str(target), int(seed)]).encode())
        digest.update(tvm.ir.save_json(mod).encode())
        return digest.hexdigest()

    def path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def get(self, key: str) -> Any | None:
        """The entry written under ``key``, or None."""
        path = self.path(key)
        try:
            with open(path) as fh:
                entry = json.load(fh)
            if entry.get("key") != key:
                raise ValueError("written for another key")
            return entry["value"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("sketch cache file %s is unreadable (%s): ignored, it will be rebuilt", path, exc)
            return None

    def put(self, key: str, value: Any) -> None:
        """Keep ``value`` (JSON values; tuples are written as arrays) under ``key``."""
        if not self._writable:
            return
        text = json.dumps({"key": key, "value": value}, separators=(",", ":")).encode()
        try:
            replace_atomically(self.path(key), lambda fh: fh.write(text))
        except OSError as exc:
            self._writable = False
            log.warning("sketch cache %s is not writable (%s): design spaces are built afresh in every run",
                        self.directory, exc)


__all__ = ["SketchStore", "code_digest"]
