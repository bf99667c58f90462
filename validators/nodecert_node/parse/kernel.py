"""Kernel log: NVRM Xid events from `dmesg` (relative or --ctime/-T timestamps)."""

from __future__ import annotations

import re
import time
from typing import Any

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+), (.*)$")
_REL = re.compile(r"^\[\s*(\d+\.\d+)\]")
_CTIME = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]")


def _stamp(line: str, boot_time: float | None) -> float | None:
    m = _CTIME.match(line)
    if m:
        return time.mktime(time.strptime(re.sub(r"\s+", " ", m.group(1)),
                                         "%a %b %d %H:%M:%S %Y"))
    m = _REL.match(line)
    if m and boot_time is not None:
        return boot_time + float(m.group(1))
    return None


def parse_xids(text: str, boot_time: float | None = None) -> list[dict[str, Any]]:
    """Each Xid line: PCI address, code, message, absolute time (epoch s) when known."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if not m:
            continue
        out.append({"pci": m.group(1).lower(), "xid": int(m.group(2)),
                    "message": m.group(3).strip(), "time": _stamp(line, boot_time),
                    "line": line.strip()})
    return out
