"""Errors a user can fix: the CLI turns them into one line on stderr and exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (unknown name, unreadable file, malformed target, ...); message is one line."""


# How to install an optional dependency, where a bare "pip install NAME" is the wrong advice: PyPI's default
# torch wheel pulls several GB of CUDA libraries, and the [learned] extra pins the CPU build.
_INSTALL = {"torch": "pip install -e '.[learned]'"}


def install_hint(*packages: str) -> str:
    """The command that installs ``packages`` here (the project's extra where one pins the right build)."""
    extras = sorted({_INSTALL[p] for p in packages if p in _INSTALL})
    plain = [p for p in packages if p not in _INSTALL]
    return "; ".join(extras + ([f"pip install {' '.join(plain)}"] if plain else []))
