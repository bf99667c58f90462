"""The JSON event lines nodecert's framework workers print (one object a line, each
with an "event" key), read out of output that may carry framework warnings too."""

from __future__ import annotations

import json
from typing import Any


def events(text: str) -> list[dict[str, Any]]:
    """The JSON event lines of a worker's output (framework warnings are skipped)."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and "event" in ev:
                out.append(ev)
    return out


__all__ = ["events"]
