"""perftest (ib_write_bw, ib_read_bw, ib_send_bw): the run's settings and its result
rows, with bandwidth in Gb/s whichever unit the run printed.

perftest prints `BW ...[MB/sec]` by default, where a MB is 2^20 bytes, and
`[Gb/sec]` (10^9 bits) with --report_gbits. Lines other tools interleave (CPU
frequency warnings, CUDA set-up) are skipped; a row that does not read is refused.
A server and a client printed into one file give one report each.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

_HEAD = re.compile(r"^#bytes\s+#iterations\s+BW peak\[(MB|Gb)/sec\]\s+BW average\[(MB|Gb)/sec\]"
                   r"\s+MsgRate\[Mpps\]")
_ROW = re.compile(r"^(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)$")
_SETTING = re.compile(r"([A-Za-z][A-Za-z .*]+?)\s*:\s*(\S+)")


def _gbps(value: float, unit: str) -> float:
    return value if unit == "Gb" else value * 2**20 * 8 / 1e9


def parse_perftest(text: str) -> list[dict[str, Any]]:
    """One report per test run in the text: test, device, qps, link_type, gpudirect (a
    CUDA buffer was used), unit and rows of bytes, iterations, peak/average Gb/s, Mpps."""
    reports: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    cuda = False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if "cuMemAlloc" in line or line.startswith("initializing CUDA"):
            cuda = True
        if line.endswith(" Test") and ("BW" in line or "Lat" in line):
            cur = {"test": line, "gpudirect": cuda, "rows": [], "unit": None}
            reports.append(cur)
            continue
        if cur is None:
            continue
        head = _HEAD.match(line)
        if head:
            cur["unit"], cur["open"] = head.group(1), True
            continue
        if not cur.get("open"):
            if cur["unit"] is not None:
                continue  # after the result table: the tool's own closing lines
            for raw_key, value in _SETTING.findall(line):
                key = raw_key.strip()
                if key == "Device":
                    cur["device"] = value
                elif key == "Number of qps":
                    cur["qps"] = int(value)
                elif key == "Link type":
                    cur["link_type"] = value
            continue
        if not line or "Conflicting CPU frequency" in line:
            continue
        if not line[0].isdigit():
            cur["open"] = False  # a rule or the other side's banner closes the table
            continue
        m = _ROW.match(line)
        if not m:  # a row that does not read is refused, never shifted
            raise ParseError(f"line {n}: {line[:70]!r} is not a perftest result row")
        unit = cur["unit"]
        cur["rows"].append({"bytes": int(m.group(1)), "iterations": int(m.group(2)),
                            "peak_gbps": round(_gbps(float(m.group(3)), unit), 3),
                            "avg_gbps": round(_gbps(float(m.group(4)), unit), 3),
                            "msg_rate_mpps": float(m.group(5))})
    if not reports:
        raise ParseError("no 'RDMA_... BW Test' header: not perftest output")
    for r in reports:
        r.pop("open", None)
    return reports


__all__ = ["parse_perftest"]
