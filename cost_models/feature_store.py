"""Featurised records kept on disk, so a record is featurised once: not once per task of a run, not every run.

Why: a scorer learns from a warm start of thousands of records of other tasks, and featurising one record
means replaying its trace in TVM and running the extractors (tens of milliseconds, an LLVM build for the
assembly features). Each task of a run has its own scorer, so without a cache the same warm start was
featurised once per task, and again by every later run. Now the first scorer that needs a record's features
computes them and writes them here; every later scorer, of this run (the tuner creates them one after
another) or of the next, reads them. Model comparisons and pre-training read the same rows.

What a row depends on is what keys it:

- the file: the extractor, its version (the ``VERSION`` of its module, bumped when its output changes,
  and TVM's, which replays the trace and extracts or compiles), the task (its workload key) and the facts
  about the target that the extractor reads (``features.feature_key`` builds these);
- the row: the record's schedule (:func:`record_key`).

Where: ``$AUTOSEARCH_CACHE``, else ``$XDG_CACHE_HOME/autosearch``, else ``~/.cache/autosearch``, under
``features/<extractor>/``, one ``.npz`` per file key (no pickle). A file is written beside its name and
renamed over it; a file that cannot be read is ignored with a warning and rebuilt; a directory that cannot
be written costs only the speed-up (one warning; the rows stay in memory for this store). Two processes
writing one file at once can each drop the other's new rows: those are recomputed on the next miss, never
wrong.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from autosearch.cache import CACHE_ENV, default_cache_dir
from autosearch.cost_models._io import UNREADABLE, load_npz, write_npz

log = logging.getLogger(__name__)

def _digest(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode(), digest_size=16).hexdigest()


def record_key(record) -> str:
    """The schedule a logged record's features are computed from, as a digest.

    A record with a config: the config (its effective decisions) and the number of instructions of its
    trace. A config names one schedule of its task for a given TVM version (the file key holds that), as
    it does when a log is resumed; the instruction count guards against a space whose sketches changed.
    Hashing the whole trace instead costs tens of times more, for every record and every scorer. A record
    without a config (read from a TVM database) is keyed by its whole trace.
    """
    trace = record.trace
    if record.config is not None and isinstance(trace, list | tuple) and len(trace) == 2:
        return _digest([record.config.to_json(), len(trace[0])])
    return _digest(trace)


@dataclass(frozen=True)
class FeatureKey:
    """What one cache file's rows depend on besides the records themselves."""

    extractor: str  # "loop", "asm", "per_store"
    version: str  # the extractor's version and TVM's
    workload_key: str
    facts: Mapping[str, Any]  # what the extractor reads off the target (and the task), JSON values

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), sort_keys=True))

    @property
    def file_name(self) -> str:
        return os.path.join(self.extractor, f"{_digest(self.to_json())}.npz")


class FeatureStore:
    """Feature rows by (:class:`FeatureKey`, :func:`record_key`), read from ``directory`` once per file and
    kept in memory; :meth:`put` writes a file's rows back at once. One store may serve every scorer of a run.

    ``directory``: the cache root (``features/`` goes under it); ``None``: :func:`default_cache_dir`.
    """

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = os.fspath(directory) if directory is not None else default_cache_dir()
        self._files: dict[str, dict[str, np.ndarray]] = {}
        self._writable = True

    def path(self, key: FeatureKey) -> str:
        return os.path.join(self.directory, "features", key.file_name)

    def get(self, key: FeatureKey, record_keys: Sequence[str]) -> list[np.ndarray | None]:
        """The cached rows of these records (None where not cached)."""
        rows = self._rows(key)
        return [rows.get(k) for k in record_keys]

    def put(self, key: FeatureKey, new: Mapping[str, np.ndarray]) -> None:
        """Add rows (one array per record: a vector, or a matrix such as per-store features) and write the file."""
        if not new:
            return
        path = self.path(key)
        rows = {**self._read(key, path), **self._rows(key), **new}  # rows another process wrote meanwhile too
        self._files[path] = rows
        if self._writable:
            try:
                self._write(key, path, rows)
            except OSError as exc:
                self._writable = False
                log.warning("feature cache %s is not writable (%s): features are kept for this run only",
                            self.directory, exc)

    # ------------------------------------------------------------------ files
    def _rows(self, key: FeatureKey) -> dict[str, np.ndarray]:
        path = self.path(key)
        if path not in self._files:
            self._files[path] = self._read(key, path)
        return self._files[path]

    def _read(self, key: FeatureKey, path: str) -> dict[str, np.ndarray]:
        if not os.path.exists(path):
            return {}
        try:
            header, arrays = load_npz(path)
            if header.get("key") != key.to_json():
                raise ValueError("written for another key")
            keys, counts, data = arrays["keys"], arrays["counts"], arrays["rows"]
            bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            if len(keys) != len(counts) or bounds[-1] != len(data):
                raise ValueError("row counts do not match the rows")
        except UNREADABLE as exc:
            log.warning("feature cache file %s is unreadable (%s): ignored, it will be rebuilt", path, exc)
            return {}
        vectors = bool(header.get("vectors"))
        return {str(k): data[bounds[i]] if vectors else data[bounds[i]:bounds[i + 1]] for i, k in enumerate(keys)}

    @staticmethod
    def _write(key: FeatureKey, path: str, rows: Mapping[str, np.ndarray]) -> None:
        values = list(rows.values())
        vectors = values[0].ndim == 1
        matrices = [v[None, :] if vectors else v for v in values]
        arrays = {
            "keys": np.asarray(list(rows), dtype=str),
            "counts": np.asarray([len(m) for m in matrices], dtype=np.int64),
            "rows": np.concatenate(matrices, axis=0),
        }
        write_npz(path, {"kind": "features", "key": key.to_json(), "vectors": vectors}, arrays)


def as_store(store: FeatureStore | str | os.PathLike | None) -> FeatureStore:
    """A store from what a caller passed: a store (shared as is), a cache directory, or None (the default one)."""
    return store if isinstance(store, FeatureStore) else FeatureStore(store)


__all__ = ["CACHE_ENV", "FeatureKey", "FeatureStore", "as_store", "default_cache_dir", "record_key"]
