"""Text from nodes is untrusted: what reaches a terminal, HTML or XML is cleaned first.

A node must not be able to move the cursor, recolour or overwrite a line ("NOT READY"
repainted as "READY"), nor put characters XML cannot hold into a JUnit file. ANSI escape
sequences go whole; the other C0 controls (except newline and TAB), DEL and the C1
controls (U+0080-U+009F, which some terminals honour as escapes) are dropped.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|[\ud800-\udfff]")


def clean(text: str) -> str:
    """text without terminal escapes or control characters (newline and TAB stay)."""
    return _CONTROL.sub("", _ANSI.sub("", text))


__all__ = ["clean"]
