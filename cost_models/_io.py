"""Saving cost models and cached features without pickle: one ``.npz`` holding arrays plus a JSON header.

``np.load(..., allow_pickle=False)`` refuses object arrays, so a saved model (or a cache file) can be loaded
from an untrusted file without running code. The header names the model family, so :func:`load_model`
dispatches to the right module. Files are written beside their final name and renamed over it, so a
reader, or a crash mid-write, never sees half a file.
"""

from __future__ import annotations

import importlib
import json
import zipfile
from typing import Any, BinaryIO

import numpy as np

from autosearch.cache import replace_atomically
from autosearch.errors import UserError

FORMAT_VERSION = 1
# family (as written in the header) -> module with a ``load_from(header, arrays)`` function
FAMILIES = {
    "xgboost": "autosearch.cost_models.xgboost_model",
    "sklearn": "autosearch.cost_models.sklearn_model",
    "mlp": "autosearch.cost_models.learned",
    "tvm-xgb": "autosearch.cost_models.tvm_xgb",
    "tvm-mlp": "autosearch.cost_models.tvm_mlp",
    "seq": "autosearch.cost_models.sequence_model",
    "mlp-rank": "autosearch.cost_models.mlp_rank",
    "blend": "autosearch.cost_models.blend",
}
# what np.load and the header check raise for a file that is not (or no longer) one of ours
UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def write_npz(path: str, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON) and named numeric arrays to ``path`` (an ``.npz`` file, name as given), atomically."""
    payload = {f"a_{k}": np.asarray(v) for k, v in arrays.items()}
    header = {"format": FORMAT_VERSION, **header}
    payload["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    # to an open file: np.savez would otherwise append ".npz" to the name
    replace_atomically(path, lambda fh: np.savez_compressed(fh, **payload))


def load_npz(path: str | BinaryIO) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays written by :func:`write_npz`; raises one of ``UNREADABLE`` for anything else."""
    with np.load(path, allow_pickle=False) as data:
        header = json.loads(bytes(data["header"]).decode())
        arrays = {k[2:]: data[k] for k in data.files if k.startswith("a_")}
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        raise ValueError(f"format {header.get('format') if isinstance(header, dict) else None} is not "
                         f"{FORMAT_VERSION}")
    return header, arrays


def read_npz(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """:func:`load_npz` for a file the user named: a one-line ``UserError`` when it is not a saved model."""
    try:
        return load_npz(path)
    except UNREADABLE as exc:
        raise UserError(f"{path} is not a saved autosearch cost model: {exc}") from exc


def load_model(path: str):
    """Load any cost model saved by this package (dispatch on the family in its header)."""
    return model_from(*read_npz(path), where=path)


def model_from(header: dict[str, Any], arrays: dict[str, np.ndarray], *, where: str = "cost model"):
    """The cost model a saved file's header and arrays describe (its family's ``load_from``)."""
    family = header.get("family")
    if family not in FAMILIES:
        raise UserError(f"{where}: unknown cost-model family {family!r}")
    return importlib.import_module(FAMILIES[family]).load_from(header, arrays)
