"""Where experiment results go, and writing them so a killed script never leaves half a file."""

from __future__ import annotations

import json
import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "experiments", "results")


def results_path(name: str) -> str:
    """``experiments/results/NAME`` (the directory is created)."""
    os.makedirs(RESULTS, exist_ok=True)
    return os.path.join(RESULTS, name)


def write_text(path: str, text: str) -> str:
    """Write ``text`` atomically (a temporary file renamed over ``path``); returns ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def write_json(path: str, obj: Any, *, indent: int | None = 1) -> str:
    """Write ``obj`` as JSON atomically; returns ``path``."""
    return write_text(path, json.dumps(obj, indent=indent) + "\n")


def publish(base: str, *, data: Any, text: str, plot=None) -> None:
    """An experiment's results under one name: ``base.json`` (``data``), ``base.md`` (``text``), ``base.png``
    (``plot(path)``, if given), then ``text`` on stdout, in that order: the figures are on disk before anything
    reads them off the console."""
    import sys

    write_json(base + ".json", data)
    write_text(base + ".md", text)
    if plot is not None:
        plot(base + ".png")
    sys.stdout.write(text)


def read_json(path: str) -> Any:
    with open(path) as fh:
        return json.load(fh)
