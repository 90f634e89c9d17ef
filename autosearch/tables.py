"""Markdown tables: one writer for every table autosearch writes (``report --markdown``, ``compare-models``) and
every table an experiment prints or stores in ``experiments/results/``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def fmt(value: Any, digits: int = 1, missing: str = "-") -> str:
    """A number with ``digits`` decimals; ``missing`` for None and NaN; ``inf`` as is; text unchanged."""
    if value is None:
        return missing
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return missing
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, align: str = "") -> str:
    """A GitHub Markdown table; cells are ``str()``-ed (format numbers with :func:`fmt` first). ``align``: one
    letter per column, ``l`` / ``r`` / ``c`` (default: left-aligned, ``---``)."""
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    rule = [marks.get(a, "---") for a in align.ljust(len(header))[: len(header)]]
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
