"""Plug-in options: a table of typed knobs a plug-in's module declares, and the check of a user's ``KEY=VALUE`` pairs
against it. Strategies (``--option``) and runners (``--runner-option``) declare theirs the same way: a module-level
``OPTIONS`` dict of :class:`Option`, so the help, the defaults and the one-line errors come from one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autosearch.errors import UserError


@dataclass(frozen=True)
class Option:
    """One tunable knob of a plug-in: documentation, default and type in one place (Kernel Tuner style)."""

    help: str
    default: Any
    type: type = str
    choices: tuple[Any, ...] | None = None


def parse(table: Mapping[str, Option], raw: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``raw`` (strings from the command line, or values from Python) checked and converted against ``table``;
    ``owner`` names the plug-in in the one-line errors (``"strategy 'optuna'"``)."""
    out = {}
    for key, value in raw.items():
        if key not in table:
            valid = ", ".join(sorted(table)) or "none"
            raise UserError(f"{owner} has no option {key!r}; its options: {valid}")
        opt = table[key]
        try:
            if opt.type is bool and isinstance(value, str):
                converted: Any = value.lower() in ("1", "true", "yes", "on")
            else:
                converted = opt.type(value)
        except (TypeError, ValueError) as exc:
            raise UserError(f"option {key}={value!r} of {owner} must be {opt.type.__name__}") from exc
        if opt.choices is not None and converted not in opt.choices:
            raise UserError(f"option {key}={converted!r} of {owner}: choose one of {', '.join(map(str, opt.choices))}")
        out[key] = converted
    return out


__all__ = ["Option", "parse"]
