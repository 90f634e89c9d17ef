"""Errors a user can fix: the CLI turns them into one line on stderr and exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (unknown name, unreadable file, malformed target, ...); message is one line."""
