"""One-line messages from libraries' multi-line exceptions (:func:`autosearch.errors.last_line`)."""

from __future__ import annotations

from autosearch.errors import last_line


def test_the_last_line_of_a_message_says_what_failed_and_an_empty_one_gives_the_type() -> None:
    tvm_like = RuntimeError("Traceback (most recent call last):\n  0: tvm::Foo\n  File x.cc, line 3\n"
                            "InternalError: Check failed: n > 0\n\n")
    assert last_line(tvm_like) == "InternalError: Check failed: n > 0"
    assert last_line(ValueError("  one line  ")) == "one line"
    assert last_line(ValueError("")) == "ValueError"
    assert last_line(ValueError("\n  \n")) == "ValueError"
