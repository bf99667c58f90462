"""Kernel log: NVRM Xid events and GPU-loss messages, from `dmesg` or the journal.

Reads every timestamp style the tools print: `dmesg` boot-relative (`[  12.345678]`, also
after a raw `<4>` level or a `-x` facility prefix), `dmesg -T` (ctime), `dmesg --time-format
iso` (`2024-11-15T05:39:15,491363+00:00`), `journalctl -k` classic (`Jun 10 03:09:55 host
kernel:`), `-o short-precise` (`.123456` seconds), `-o short-iso` / `short-iso-precise`, and
`-o json` (one object per line). A message printed over several lines (continuation lines
indented under the timestamp) is one record. A line whose time cannot be read keeps
`time: None`; the judge treats such an event as recent, never as old.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from typing import Any, Iterator

# "NVRM: Xid (PCI:0000:19:00): 48, ..." (older drivers print the address without "PCI:").
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:,\s*(.*))?$")
_XID_ANY = re.compile(r"NVRM: Xid\b")

# GPU-loss messages the driver prints without any Xid line (probe and init failures, the
# bus drop seen before the driver assigns an Xid, fatal PCIe AER the driver cannot handle).
GPU_LOSS = (
    ("fallen off the bus", re.compile(r"fallen off the bus", re.I)),
    ("RmInitAdapter failed", re.compile(r"RmInitAdapter failed|rm_init_adapter failed", re.I)),
    ("probe failed", re.compile(r"NVIDIA probe routine failed|nvidia\S*: probe of \S+ failed"
                                r"|None of the NVIDIA devices were initialized", re.I)),
    ("GPU lost", re.compile(r"\bGPU (?:is )?lost\b|GPU has been lost", re.I)),
    ("PCIe error the driver cannot recover", re.compile(r"^nvidia \S+: AER: can't recover")),
)
_PCI = re.compile(r"(?:PCI:)?\b((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                  r"(?:\.[0-7])?\b")

_LEVEL = r"(?:<\d{1,3}>)?(?:[a-z]+\s*:[a-z]+\s*: )?"
_LEVEL_ONLY = re.compile(_LEVEL)
_REL = re.compile(_LEVEL + r"\[\s*(\d+\.\d+)\] ?(.*)$")
_CTIME = re.compile(_LEVEL + r"\[(\w{3} \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\] ?(.*)$")
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
                  r"(Z|[+-]\d{2}:?\d{2})?")
_ISO_LINE = re.compile(_ISO.pattern + r"\s+(.*)$")
_SYSLOG = re.compile(r"(\w{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s+(.*)$")
# After a journal/syslog stamp: "host kernel: message" (ident may carry a [pid]).
_JOURNAL_BODY = re.compile(r"(\S+) ([^\s:\[]+)(?:\[\d+\])?: ?(.*)$")
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def _iso_epoch(m: re.Match[str]) -> float:
    y, mo, d, hh, mi, ss = (int(m.group(i)) for i in range(1, 7))
    frac = float("0." + m.group(7)) if m.group(7) else 0.0
    tz = m.group(8)
    if tz is None:  # no offset: the node's local time
        return time.mktime((y, mo, d, hh, mi, ss, 0, 0, -1)) + frac
    offset = 0
    if tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return calendar.timegm((y, mo, d, hh, mi, ss, 0, 0, 0)) - offset + frac


def _syslog_epoch(m: re.Match[str], now: float) -> float | None:
    """'Jun 10 03:09:55' has no year: the latest year that does not put it in the future."""
    month = _MONTHS.get(m.group(1))
    if month is None:
        return None
    year = time.localtime(now).tm_year
    for y in (year, year - 1):
        try:
            t = time.mktime((y, month, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                             int(m.group(5)), 0, 0, -1))
        except (OverflowError, ValueError):
            return None
        if t <= now + 86400:
            return t + (float("0." + m.group(6)) if m.group(6) else 0.0)
    return None


def _split(line: str, boot_time: float | None, now: float) -> tuple[bool, float | None, str]:
    """(has a timestamp prefix, epoch seconds or None, message text). The stamp may stand
    behind a level prefix: the raw `<4>` of /dev/kmsg and `dmesg -r`, or the
    facility:level of `dmesg --decode` (`kern  :warn  : `), in front of any stamp style."""
    stamped = _split_stamp(line, boot_time, now)
    if not stamped[0]:
        lv = _LEVEL_ONLY.match(line)
        if lv and lv.end():
            stamped = _split_stamp(line[lv.end():], boot_time, now)
    return stamped


def _split_stamp(line: str, boot_time: float | None,
                 now: float) -> tuple[bool, float | None, str]:
    m = _REL.match(line)
    if m:
        return True, (boot_time + float(m.group(1)) if boot_time is not None else None), \
            m.group(2)
    m = _CTIME.match(line)
    if m:
        try:
            t: float | None = time.mktime(time.strptime(re.sub(r"\s+", " ", m.group(1)),
                                                        "%a %b %d %H:%M:%S %Y"))
        except ValueError:
            t = None
        return True, t, m.group(2)
    m = _ISO_LINE.match(line)
    if m:
        rest = m.group(9)
        j = _JOURNAL_BODY.match(rest)
        if j and j.group(2) == "kernel":  # journalctl short-iso: "host kernel: msg"
            rest = j.group(3)
        return True, _iso_epoch(m), rest
    m = _SYSLOG.match(line)
    if m and m.group(1) in _MONTHS:
        j = _JOURNAL_BODY.match(m.group(7))
        return True, _syslog_epoch(m, now), (j.group(3) if j else m.group(7))
    return False, None, line


def _json_records(line: str) -> tuple[float | None, str] | None:
    """A `journalctl -o json` line: (time, message), or None when it is not one."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "MESSAGE" not in obj:
        return None
    msg = obj["MESSAGE"]
    if isinstance(msg, list):  # the journal stores non-UTF-8 messages as byte arrays
        msg = bytes(b for b in msg if isinstance(b, int) and 0 <= b < 256).decode(
            "utf-8", "replace")
    stamp = obj.get("__REALTIME_TIMESTAMP")
    try:
        t = int(stamp) / 1e6 if stamp is not None else None
    except (TypeError, ValueError):
        t = None
    return t, " ".join(str(msg).split("\n"))


def records(text: str, boot_time: float | None = None,
            now: float | None = None) -> Iterator[tuple[float | None, str]]:
    """(time, message) per kernel log record, continuation lines joined to their record."""
    now = time.time() if now is None else now
    cur: list[Any] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            rec = _json_records(line.strip())
            if rec is not None:
                if cur is not None:
                    yield cur[0], cur[1]
                cur = [rec[0], rec[1]]
                continue
        stamped, t, msg = _split(line, boot_time, now)
        if not stamped and cur is not None and line[:1].isspace():
            cur[1] = f"{cur[1]} {line.strip()}"  # indented under the record above
            continue
        if cur is not None:
            yield cur[0], cur[1]
        cur = [t, msg.strip()]
    if cur is not None:
        yield cur[0], cur[1]


def _pci(text: str) -> str | None:
    m = _PCI.search(text)
    if not m:
        return None
    addr = m.group(1).lower()
    parts = addr.split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    return ":".join([parts[0][-4:].rjust(4, "0"), *parts[1:]])


def parse_kernel_log(text: str, boot_time: float | None = None,
                     now: float | None = None) -> list[dict[str, Any]]:
    """Events: {"kind": "xid"|"gpu_lost", "pci", "xid", "message", "time", "line"}.

    An Xid line whose code cannot be read gives an event with xid None (the judge names
    it); a GPU-loss message without an Xid gives kind "gpu_lost" naming what was seen.
    """
    out: list[dict[str, Any]] = []
    recs = list(records(text, boot_time, now))
    # A log cut short (no final newline: a truncated file or capture) may have cut the
    # last record inside its Xid code ("...: 4" of "...: 48"): a code that ends that
    # record with nothing after it is unreadable, never taken for a smaller one.
    cut_short = bool(text) and not text.endswith("\n")
    for n, (t, msg) in enumerate(recs):
        m = _XID.search(msg)
        if m and cut_short and n == len(recs) - 1 and m.group(3) is None:
            m = None
        if m:
            out.append({"kind": "xid", "pci": _pci(m.group(1)) or m.group(1).lower(),
                        "xid": int(m.group(2)), "message": (m.group(3) or "").strip(),
                        "time": t, "line": msg})
            continue
        if _XID_ANY.search(msg):
            out.append({"kind": "xid", "pci": _pci(msg.split("Xid", 1)[1]) or "unknown",
                        "xid": None, "message": msg, "time": t, "line": msg})
            continue
        for what, pattern in GPU_LOSS:
            if pattern.search(msg):
                out.append({"kind": "gpu_lost", "pci": _pci(msg) or _burst_pci(recs, n)
                            or "unknown", "xid": None, "message": what, "time": t,
                            "line": msg})
                break
    return out


# How far the driver's one message may be spread when it arrives as separate records
# ("NVRM: The NVIDIA GPU 0000:b3:00.0" / "NVRM: (PCI ID: 10de:26b5) installed in this
# system has" / "NVRM: fallen off the bus and is not responding to commands."): NVRM
# records either side (other drivers' records between them are passed over, at most
# BURST_SCAN of them), and seconds apart.
BURST_RECORDS, BURST_SCAN, BURST_S = 3, 10, 2.0


def _burst_pci(recs: list[tuple[float | None, str]], n: int) -> str | None:
    """The PCI address a neighbouring NVRM record of the same burst names, nearest first;
    None when none does, or two at the same distance name different GPUs."""
    t = recs[n][0]

    def side(step: int) -> list[str | None]:
        """Each NVRM record's address (or None) going one way, nearest first."""
        out: list[str | None] = []
        k = n + step
        while 0 <= k < len(recs) and abs(k - n) <= BURST_SCAN and len(out) < BURST_RECORDS:
            tk, msg = recs[k]
            if t is not None and tk is not None and abs(tk - t) > BURST_S:
                break
            if "NVRM:" in msg:
                if _XID_ANY.search(msg):
                    break  # an Xid record: another event of its own
                out.append(_pci(msg.split("NVRM:", 1)[1]))
            k += step
        return out

    before, after = side(-1), side(1)
    for d in range(BURST_RECORDS):
        found = {p for p in (before[d] if d < len(before) else None,
                             after[d] if d < len(after) else None) if p}
        if found:
            return found.pop() if len(found) == 1 else None
    return None


def parse_xids(text: str, boot_time: float | None = None,
               now: float | None = None) -> list[dict[str, Any]]:
    """The readable Xid events only (PCI address, code, message, time, line)."""
    return [e for e in parse_kernel_log(text, boot_time, now)
            if e["kind"] == "xid" and e["xid"] is not None]


def starts_at_boot(text: str) -> bool:
    """Whether the log reaches back to boot (its first record is "Linux version ...")."""
    for _, msg in records(text):
        return msg.startswith("Linux version")
    return False


def coverage_start(text: str, boot_time: float | None = None,
                   now: float | None = None) -> float | None:
    """When the log begins, if it does not start at boot (the ring buffer wrapped).

    None when it starts at boot ("Linux version ..." first) or no time can be read.
    """
    for t, msg in records(text, boot_time, now):
        if msg.startswith("Linux version"):
            return None
        return t
    return None
