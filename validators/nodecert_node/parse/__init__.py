"""Pure parsers over real tool output. Each raises ParseError naming what is wrong."""

from __future__ import annotations


class ParseError(ValueError):
    """The text is not the tool output the parser expects (truncated, other format, ...)."""


def marked_sections(text: str, mark: str) -> dict[str, str]:
    """A script's output cut at its marker lines (`<mark><name>`, one per tool it ran):
    each name's following lines, up to the next marker. Lines before the first marker
    belong to no section and are left out."""
    sections: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(mark):
            current = line[len(mark):].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections
