"""gdsio (NVIDIA GPUDirect Storage tools): its one-line results.

    IoType: READ XferType: GPUD Threads: 4 DataSetSize: 104837120/104857600(KiB)
    IOSize: 1024(KiB) Throughput: 6.622534 GiB/sec, Avg_Latency: 589.436984 usecs
    ops: 102380 total_time 15.097011 secs

(one line; batch modes add `IoDepth: N` after Threads). Other lines (gdsio's warnings,
a cufile log) are skipped; a result line missing a field is refused, never half-read.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

_LINE = re.compile(
    r"^IoType:\s*(?P<io>\S+)\s+XferType:\s*(?P<xfer>\S+)\s+Threads:\s*(?P<threads>\d+)\s+"
    r"(?:IoDepth:\s*(?P<depth>\d+)\s+)?"
    r"DataSetSize:\s*(?P<done>\d+)/(?P<want>\d+)\(KiB\)\s+IOSize:\s*(?P<io_kib>\d+)\(KiB\)\s+"
    r"Throughput:\s*(?P<gib>[0-9.]+)\s*GiB/sec,?\s+Avg_Latency:\s*(?P<lat>[0-9.]+)\s*usecs\s+"
    r"ops:\s*(?P<ops>\d+)\s+total_time\s+(?P<secs>[0-9.]+)\s*secs\s*$")


def parse_gdsio(text: str) -> list[dict[str, Any]]:
    """Every result line, in order."""
    out: list[dict[str, Any]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith("IoType:"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(f"gdsio line {n} is not a complete result line: {line[:160]!r}")
        out.append({"io_type": m["io"], "xfer_type": m["xfer"], "threads": int(m["threads"]),
                    "io_depth": int(m["depth"]) if m["depth"] else None,
                    "dataset_kib": int(m["done"]), "requested_kib": int(m["want"]),
                    "io_size_kib": int(m["io_kib"]), "gib_s": float(m["gib"]),
                    "mb_s": round(float(m["gib"]) * 1024 ** 3 / 1e6, 1),
                    "latency_us": float(m["lat"]), "ops": int(m["ops"]),
                    "seconds": float(m["secs"])})
    if not out:
        raise ParseError("no gdsio result line (IoType: ... Throughput: ...) in the output")
    return out


__all__ = ["parse_gdsio"]
