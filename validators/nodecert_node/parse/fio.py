"""fio results: JSON and json+ (also when mixed with the normal text output) and the
classic text output of fio 2.x and 3.x."""

from __future__ import annotations

import json
import re
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


def _num(value: Any) -> float | None:
    """A number fio reported, or None (absent, null or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_fio(text: str) -> list[dict[str, Any]]:
    """Per job: name, read/write bandwidth (bytes/s), IOPS, bytes moved, mean latency (us),
    errors. A figure the output does not carry (a side the job did not run in the text
    output, a latency section left out) is None, never 0."""
    if "{" not in text and "(groupid=" in text:
        return parse_fio_text(text)
    data = _json_object(text)
    out = []
    for job in data["jobs"]:
        row: dict[str, Any] = {"name": job.get("jobname"), "error": int(job.get("error", 0)),
                               "fio_version": data.get("fio version", "")}
        for side in ("read", "write"):
            s = job.get(side) or {}
            lat = s.get("lat_ns") or {}
            bw = _num(s.get("bw_bytes"))
            if bw is None and _num(s.get("bw")) is not None:  # older fio: KiB/s only
                bw = float(s["bw"]) * 1024
            mean_ns = _num(lat.get("mean"))
            io = _num(s.get("io_bytes"))
            # absent is None, never 0: a figure fio did not report was not measured
            row[side] = {"bw_bytes": bw, "iops": _num(s.get("iops")),
                         "io_bytes": int(io) if io is not None else None,
                         "lat_mean_us": mean_ns / 1000.0 if mean_ns is not None else None}
        out.append(row)
    return out


# --- the classic text output (fio 2.x and 3.x), for logs kept from other runs -------------

_UNITS = {"": 1, "B": 1, "KIB": 1024, "MIB": 1024 ** 2, "GIB": 1024 ** 3, "TIB": 1024 ** 4,
          "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3, "TB": 1000 ** 4}
_SUFFIX = {"": 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9}
_LAT_UNIT_US = {"nsec": 1e-3, "usec": 1.0, "msec": 1e3, "sec": 1e6}
_JOB = re.compile(r"^(?P<name>\S.*?): \(groupid=\d+, jobs=\d+\): err=\s*(?P<err>\d+)")
_V3 = re.compile(r"^\s+(?P<side>read|write|trim)\s*: IOPS=(?P<iops>[\d.]+)(?P<isuf>[kKmMgG]?), "
                 r"BW=(?P<bw>[\d.]+)(?P<bwu>[KMGT]?i?B)/s(?: \([^)]*\))?"
                 r"\((?P<io>[\d.]+)(?P<iou>[KMGT]?i?B)/\d+msec\)")
# fio 2.x: "read : io=1024.0MB, bw=104857KB/s, iops=26214, runt= 10000msec" (KB = 1024)
_V2 = re.compile(r"^\s+(?P<side>read|write|trim)\s*: io=(?P<io>[\d.]+)(?P<iou>[KMGT]?B), "
                 r"bw=(?P<bw>[\d.]+)(?P<bwu>[KMGT]?B)/s, iops=(?P<iops>[\d.]+)(?P<isuf>[kKmM]?)")
_LAT = re.compile(r"^\s+lat \((?P<unit>[num]?sec)\)\s*: min=\s*[\d.]+[kKmM]?, "
                  r"max=\s*[\d.]+[kKmM]?, avg=\s*(?P<avg>[\d.]+)(?P<suf>[kKmM]?)")


def _bytes(value: str, unit: str, *, v2: bool) -> float:
    u = unit.upper()
    if v2:  # fio 2.x labels binary units KB/MB/GB
        u = {"KB": "KIB", "MB": "MIB", "GB": "GIB", "TB": "TIB"}.get(u, u)
    if u not in _UNITS:
        raise ParseError(f"fio text: unknown unit {unit!r}")
    return float(value) * _UNITS[u]


def parse_fio_text(text: str) -> list[dict[str, Any]]:
    """Per job, from fio's normal output: the same fields as the JSON reader."""
    version = re.search(r"^(fio-\d\S*)\s*$", text, re.MULTILINE)
    jobs: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    side: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        j = _JOB.match(line)
        if j:
            cur = {"name": j.group("name"), "error": int(j.group("err")),
                   "fio_version": version.group(1) if version else "", "_line": n}
            for s in ("read", "write"):
                cur[s] = {"bw_bytes": None, "iops": None, "io_bytes": None,
                          "lat_mean_us": None}
            jobs.append(cur)
            side = None
            continue
        if cur is None:
            continue
        m = _V3.match(line) or _V2.match(line)
        if m:
            v2 = m.re is _V2
            side = m.group("side")
            if side in ("read", "write"):
                cur[side].update(
                    bw_bytes=_bytes(m.group("bw"), m.group("bwu"), v2=v2),
                    iops=float(m.group("iops")) * _SUFFIX[m.group("isuf")],
                    io_bytes=int(_bytes(m.group("io"), m.group("iou"), v2=v2)))
                cur.setdefault("_sides", []).append(side)
            continue
        lat = _LAT.match(line)
        if lat and side in ("read", "write"):
            cur[side]["lat_mean_us"] = float(lat.group("avg")) * _SUFFIX[lat.group("suf")] \
                * _LAT_UNIT_US[lat.group("unit")]
    if not jobs:
        raise ParseError("no '<job>: (groupid=N, jobs=N): err= N' line and no JSON: not "
                         "fio output (run fio with --output-format=json)")
    for job in jobs:
        if not job.pop("_sides", None):
            raise ParseError(f"fio text line {job.pop('_line')}: job {job['name']!r} has no "
                             "read/write result line (output cut short?)")
        job.pop("_line", None)
    return jobs
