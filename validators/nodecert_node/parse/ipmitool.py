"""ipmitool output: `sensor` (readings with their thresholds), `sel list` / `sel elist`
(the System Event Log) and `mc info` (the BMC's own identity and firmware).

`sensor` rows are ten `|`-separated cells: name, reading, unit, status, then the lower
non-recoverable, lower critical, lower non-critical, upper non-critical, upper critical
and upper non-recoverable thresholds ("na" where the BMC has none). `sel` rows are
id | date | time | sensor | event | direction [| detail]; dates come as MM/DD/YYYY or
MM/DD/YY, times as 24-hour or 12-hour with AM/PM, with or without a zone, or
"Pre-Init" with a raw counter for events logged before the BMC's clock was set.
A row with cells missing or out of place is refused, never shifted into other fields.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from nodecert_node.parse import ParseError

SENSOR_STATUS = {"ok": "OK", "nc": "Warning", "cr": "Critical", "nr": "Critical",
                 "na": "", "ns": ""}
_UNITS = {"degrees C": "C", "RPM": "RPM", "Volts": "V", "Watts": "W", "Amps": "A",
          "percent": "%"}


def _num(cell: str) -> float | None:
    c = cell.strip()
    if c in ("na", "", "no reading", "disabled"):
        return None
    try:
        value = float(c)
    except ValueError:
        if c.startswith("0x"):
            return None  # a discrete sensor's state bits, not a reading
        raise ParseError(f"not a number: {cell!r}") from None
    if not math.isfinite(value):  # float() reads "nan" and "inf"; no sensor reads them
        raise ParseError(f"not a finite reading: {cell!r}")
    return value


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")]


def parse_sensor(text: str) -> list[dict[str, Any]]:
    """The threshold sensors of `ipmitool sensor` (discrete ones are kept, kind
    'discrete', with their state bits in `raw`)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = _cells(line)
        if len(cells) < 10:
            raise ParseError(f"ipmitool sensor line {n}: {len(cells)} cells, expected 10 "
                             f"(name | reading | unit | status | 6 thresholds): {line[:120]!r}")
        name, reading, unit, status = cells[:4]
        try:
            lnr, lc, lnc, unc, uc, unr = (_num(c) for c in cells[4:10])
            value = _num(reading) if unit != "discrete" else None
        except ParseError as exc:
            raise ParseError(f"ipmitool sensor line {n} ({name}): {exc}") from None
        if status not in SENSOR_STATUS and not status.startswith("0x"):
            raise ParseError(f"ipmitool sensor line {n} ({name}): unknown status {status!r}")
        kind = ("temperature" if unit == "degrees C" else "fan" if unit == "RPM" else
                "voltage" if unit == "Volts" else "power" if unit == "Watts" else
                "discrete" if unit == "discrete" else "other")
        out.append({"name": name, "kind": kind, "reading": value,
                    "unit": _UNITS.get(unit, unit),
                    "state": "Absent" if reading in ("na", "") and kind != "discrete"
                    else "Enabled",
                    "health": SENSOR_STATUS.get(status, ""), "raw": reading,
                    "lower_fatal": lnr, "lower_critical": lc, "lower_noncritical": lnc,
                    "upper_noncritical": unc, "upper_critical": uc, "upper_fatal": unr})
    if not out:
        raise ParseError("ipmitool sensor printed no sensors")
    return out


_DATE = re.compile(r"^(\d{2})/(\d{2})/(\d{2}|\d{4})$")
_TIME = re.compile(r"^(\d{1,2}):(\d{2}):(\d{2})(?:\s*(AM|PM))?(?:\s+([A-Z]{2,5}|[+-]\d{4}))?$")
# Zone abbreviations read without doubt; any other is refused (the time is then None).
_ZONES = {"UTC": 0, "GMT": 0, "Z": 0, "EST": -5, "EDT": -4, "CST": -6, "CDT": -5,
          "MST": -7, "MDT": -6, "PST": -8, "PDT": -7, "CET": 1, "CEST": 2}


def sel_time(date: str, clock: str) -> tuple[float | None, str]:
    """(epoch seconds, note) of a SEL row's date and time cells. A row without a zone is
    read as UTC (nodecert runs ipmitool with TZ=UTC); a row it cannot place in time
    (Pre-Init, an unknown zone) gets None and says why."""
    if date.strip().lower().startswith("pre-init"):
        return None, "logged before the BMC's clock was set (Pre-Init)"
    d, t = _DATE.match(date.strip()), _TIME.match(clock.strip())
    if not d or not t:
        return None, f"unreadable time {date.strip()!r} {clock.strip()!r}"
    year = int(d.group(3))
    year += 2000 if year < 100 else 0
    hour = int(t.group(1))
    if t.group(4):
        if not 1 <= hour <= 12:
            return None, f"unreadable time {clock.strip()!r}"
        hour = hour % 12 + (12 if t.group(4) == "PM" else 0)
    zone = t.group(5) or "UTC"
    if zone[0] in "+-":
        offset_h = (1 if zone[0] == "+" else -1) * (int(zone[1:3]) + int(zone[3:5]) / 60)
    elif zone in _ZONES:
        offset_h = _ZONES[zone]
    else:
        return None, f"time zone {zone!r} is ambiguous"
    try:
        when = dt.datetime(year, int(d.group(1)), int(d.group(2)), hour, int(t.group(2)),
                           int(t.group(3)), tzinfo=dt.timezone.utc)
    except ValueError:
        return None, f"unreadable time {date.strip()!r} {clock.strip()!r}"
    return when.timestamp() - offset_h * 3600, ""


def parse_sel(text: str) -> list[dict[str, Any]]:
    """The rows of `ipmitool sel list` or `sel elist`, in order. An empty log ("SEL has
    no entries") is an empty list."""
    out: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.strip().startswith("SEL has no entries"):
            continue
        cells = _cells(line)
        if len(cells) < 6 or not re.match(r"^[0-9a-fA-F]{1,4}$", cells[0]):
            raise ParseError(f"ipmitool sel line {n}: expected id | date | time | sensor | "
                             f"event | direction, got {line[:120]!r}")
        when, note = sel_time(cells[1], cells[2])
        out.append({"id": cells[0], "created": f"{cells[1]} {cells[2]}".strip(),
                    "time": when, "time_note": note, "sensor": cells[3],
                    "message": cells[4], "direction": cells[5],
                    "detail": " | ".join(cells[6:]), "severity": None})
    return out


def parse_mc_info(text: str) -> dict[str, str]:
    """`ipmitool mc info`: its `Key : value` lines (continuation lines are skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not line.startswith((" ", "\t")):
            out[key.strip()] = value.strip()
    if "Firmware Revision" not in out:
        raise ParseError("ipmitool mc info: no 'Firmware Revision' line")
    return out




def parse_sdr_elist(text: str) -> list[dict[str, Any]]:
    """`ipmitool sdr elist` / `sdr type TYPE`: name | id | status | entity | state text;
    a discrete sensor's asserted states are the comma-separated last cell."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = _cells(line)
        if len(cells) != 5 or not re.match(r"^[0-9A-Fa-f]{2}h$", cells[1]):
            raise ParseError(f"ipmitool sdr line {n}: expected name | id | status | entity | "
                             f"reading, got {line[:120]!r}")
        out.append({"name": cells[0], "id": cells[1], "status": cells[2],
                    "entity": cells[3],
                    "states": [s.strip() for s in cells[4].split(",") if s.strip()]})
    return out


def parse_chassis_status(text: str) -> dict[str, str]:
    """`ipmitool chassis status`: its `Key : value` lines (System Power, Power Overload,
    Main Power Fault, Power Control Fault, Last Power Event, Chassis Intrusion, Drive
    Fault, Cooling/Fan Fault, ...). A line that is not `Key : value` is refused."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise ParseError(f"ipmitool chassis status line {n}: expected 'Key : value', "
                             f"got {line[:120]!r}")
        out[key.strip()] = value.strip()
    if "System Power" not in out:
        raise ParseError("ipmitool chassis status: no 'System Power' line")
    return out


__all__ = ["parse_chassis_status", "parse_mc_info", "parse_sdr_elist", "parse_sel",
           "parse_sensor", "sel_time"]
