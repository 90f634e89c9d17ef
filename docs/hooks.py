"""MkDocs hook for the API reference: the docstrings' Sphinx roles (:class:`~a.b.C`) shown as plain code (C)."""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    tilde, name = match.group(1), match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if tilde else name}</code>"


def on_page_content(html: str, **kwargs: object) -> str:
    return _ROLE.sub(_code, html)
