"""Text from nodes is untrusted: what reaches a terminal, HTML or XML is cleaned first.

A node must not be able to move the cursor, recolour or overwrite a line ("NOT READY"
repainted as "READY"), start a line of its own where one line per item is printed, nor
put characters XML cannot hold into a JUnit file. ANSI escape
sequences go whole; the other C0 controls (except newline and TAB), DEL and the C1
controls (U+0080-U+009F, which some terminals honour as escapes) are dropped, and so
are the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), with which
a name could make a page or a terminal show its text in another order.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
                      r"|[\ud800-\udfff]")


_BREAKS = re.compile(r"\s*[\n\u2028\u2029]\s*")
FOLD = " \u23ce "  # what a line break inside one line of output is shown as


def clean(text: str) -> str:
    """text without terminal escapes or control characters (newline and TAB stay)."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def one_line(text: str) -> str:
    """clean(text) folded onto one line: every line break (newline, the Unicode line and
    paragraph separators) shown as a return symbol. For every place that prints one line
    per item (verify's steps, progress lines, tables): node text with a newline in it
    must not print a line of its own ("ok verdict READY" under a failed step)."""
    return _BREAKS.sub(FOLD, clean(text).strip())


def tail_line(text: str, n: int = 600) -> str:
    """The last `n` characters of a command's output on one line (lines joined by " | "),
    for an error message quoting what a job said; "no output" for none."""
    text = clean(text).strip()
    return (text[-n:] if text else "no output").replace("\n", " | ")


__all__ = ["FOLD", "clean", "one_line", "tail_line"]
