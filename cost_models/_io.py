"""Saving cost models without pickle: one ``.npz`` holding arrays plus a JSON header.

``np.load(..., allow_pickle=False)`` refuses object arrays, so a saved model can be loaded from an
untrusted file without running code. The header names the model family, so
:func:`load_model` dispatches to the right module.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

import numpy as np

from autosearch.errors import UserError

FORMAT_VERSION = 1
# family (as written in the header) -> module with a ``load_from(header, arrays)`` function
FAMILIES = {
    "xgboost": "cost_models.xgboost_model",
    "sklearn": "cost_models.sklearn_model",
    "mlp": "cost_models.learned",
    "tvm-xgb": "cost_models.tvm_xgb",
}


def write_npz(path: str, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON) and named numeric arrays to ``path`` (an ``.npz`` file, name as given)."""
    payload = {f"a_{k}": np.asarray(v) for k, v in arrays.items()}
    header = {"format": FORMAT_VERSION, **header}
    payload["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "wb") as fh:  # an open file: np.savez would otherwise append ".npz" to the name
        np.savez_compressed(fh, **payload)


def read_npz(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays written by :func:`write_npz`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            arrays = {k[2:]: data[k] for k in data.files if k.startswith("a_")}
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"{path} is not a saved autosearch cost model: {exc}") from exc
    if header.get("format") != FORMAT_VERSION:
        raise UserError(f"{path}: cost-model format {header.get('format')} is not {FORMAT_VERSION}")
    return header, arrays


def load_model(path: str):
    """Load any cost model saved by this package (dispatch on the family in its header)."""
    header, arrays = read_npz(path)
    family = header.get("family")
    if family not in FAMILIES:
        raise UserError(f"{path}: unknown cost-model family {family!r}")
    return importlib.import_module(FAMILIES[family]).load_from(header, arrays)
