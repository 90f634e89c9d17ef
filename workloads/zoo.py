"""Registry of the built-in workloads, so callers can ask for a model by name without any download."""

from __future__ import annotations

from collections.abc import Callable

import onnx

from workloads import tiny_yolov2, yolov3_tiny, yolov8n

BUILTIN_MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "tiny-yolov2": tiny_yolov2.build,
    "yolov3-tiny": yolov3_tiny.build,
    "yolov8n": yolov8n.build,
}
"""Model name -> builder taking a keyword-only ``seed`` and returning an ONNX model."""


def build_model(name: str, *, seed: int = 0) -> onnx.ModelProto:
    """Build the built-in model ``name`` with random weights drawn from ``seed``.

    Raises ``KeyError`` (listing the known names) for an unknown model, so typos fail loudly.
    """
    try:
        builder = BUILTIN_MODELS[name]
    except KeyError:
        raise KeyError(f"unknown built-in model {name!r}; known: {sorted(BUILTIN_MODELS)}") from None
    return builder(seed=seed)
