"""fio JSON output (also when fio mixed it with its normal text output)."""

from __future__ import annotations

import json
from typing import Any

from nodecert_node.parse import ParseError


def _json_object(text: str) -> dict[str, Any]:
    """The first top-level JSON object in text ({"fio version": ...})."""
    start = text.find('{\n  "fio version"')
    if start < 0:
        start = text.find("{")
    if start < 0:
        raise ParseError("no JSON object: run fio with --output-format=json")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise ParseError(f"fio JSON is cut short or corrupt: {exc}") from exc
    if not isinstance(obj, dict) or "jobs" not in obj:
        raise ParseError("JSON has no 'jobs': not fio --output-format=json output")
    return obj


def parse_fio(text: str) -> list[dict[str, Any]]:
    """Per job: name, read/write bandwidth (bytes/s), IOPS, mean latency (us), errors."""
    data = _json_object(text)
    out = []
    for job in data["jobs"]:
        row: dict[str, Any] = {"name": job.get("jobname"), "error": int(job.get("error", 0)),
                               "fio_version": data.get("fio version", "")}
        for side in ("read", "write"):
            s = job.get(side, {})
            lat = s.get("lat_ns") or {}
            row[side] = {"bw_bytes": float(s.get("bw_bytes", s.get("bw", 0) * 1024)),
                         "iops": float(s.get("iops", 0.0)),
                         "io_bytes": int(s.get("io_bytes", 0)),
                         "lat_mean_us": float(lat.get("mean", 0.0)) / 1000.0}
        out.append(row)
    return out
