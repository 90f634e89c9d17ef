"""Numeric scaling shared by the feature extractors (each extractor module imports only this, never another)."""

from __future__ import annotations

import numpy as np


def signed_log(x: np.ndarray) -> np.ndarray:
    """``sign(x) log2(1 + |x|)``: counts that span orders of magnitude on a scale distance-based and
    gradient-based regressors can use (tree models are indifferent to it); 0 stays 0, the sign is kept."""
    return np.sign(x) * np.log2(1.0 + np.abs(x))
