"""Errors a user can fix: the CLI turns them into one line on stderr and exit code 2."""

from __future__ import annotations

import os


class UserError(Exception):
    """Bad input (unknown name, unreadable file, malformed target, ...); message is one line."""


# How to install an optional dependency, where a bare "pip install NAME" is the wrong advice: PyPI's default
# torch wheel pulls several GB of CUDA libraries, and the [learned] extra pins the CPU build.
_INSTALL = {"torch": "pip install -e '.[learned]'"}


def last_line(exc: BaseException) -> str:
    """What a library's multi-line exception says failed: its message's last non-empty line (TVM's and OpenVINO's
    messages end with it, after their backtraces and check locations), else the exception's type."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def install_hint(*packages: str) -> str:
    """The command that installs ``packages`` here (the project's extra where one pins the right build)."""
    extras = sorted({_INSTALL[p] for p in packages if p in _INSTALL})
    plain = [p for p in packages if p not in _INSTALL]
    return "; ".join(extras + ([f"pip install {' '.join(plain)}"] if plain else []))


def make_writable_dir(path: str) -> None:
    """Create the directory ``path`` (and its parents) and check that a file can be written in it: a one-line
    ``UserError`` ("cannot write to PATH: reason") before any long work that would write there."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".autosearch-write-test")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise UserError(f"cannot write to {path}: {exc.strerror}") from exc
