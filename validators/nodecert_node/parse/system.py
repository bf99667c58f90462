"""Host facts: dmidecode (system, baseboard, memory), lscpu, /proc/meminfo, lsblk."""

from __future__ import annotations

import json
import re
from typing import Any

from nodecert_node.parse import ParseError

_PLACEHOLDERS = {"", "Not Specified", "To Be Filled By O.E.M.", "Default string",
                 "Not Present", "None", "Unknown", "0123456789", "System Serial Number"}


def parse_dmidecode(text: str) -> list[dict[str, Any]]:
    """Records as {"handle", "type", "title", fields...}; blank/TAB-only lines separate."""
    records: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    expect_title = False
    for raw in text.splitlines():
        m = re.match(r"^Handle (0x[0-9A-Fa-f]+), DMI type (\d+),", raw)
        if m:
            cur = {"handle": m.group(1), "type": int(m.group(2))}
            records.append(cur)
            expect_title = True
            continue
        if not cur or not raw.strip():
            continue
        if expect_title:
            cur["title"] = raw.strip()
            expect_title = False
            continue
        key, sep, value = raw.strip().partition(":")
        if sep and raw[:1].isspace() and raw.count("\t") <= 1 and not raw.startswith("\t\t"):
            cur.setdefault(key.strip(), value.strip())
    return records


def dmi_value(value: Any) -> str:
    """'' for the placeholders firmware writes instead of a real value."""
    v = str(value or "").strip()
    return "" if v in _PLACEHOLDERS else v


def dmi_identity(records: list[dict[str, Any]]) -> dict[str, str]:
    system = next((r for r in records if r["type"] == 1), {})
    board = next((r for r in records if r["type"] == 2), {})
    return {"system_manufacturer": dmi_value(system.get("Manufacturer")),
            "system_product": dmi_value(system.get("Product Name")),
            "system_serial": dmi_value(system.get("Serial Number")),
            "system_uuid": dmi_value(system.get("UUID")).lower(),
            "baseboard_serial": dmi_value(board.get("Serial Number")),
            "baseboard_product": dmi_value(board.get("Product Name"))}


def dmi_memory_gb(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Installed DIMMs (type 17) and their total in GB (GiB-based, as dmidecode prints)."""
    total_mb = 0
    count = 0
    empty = 0
    for r in records:
        if r["type"] != 17:
            continue
        size = str(r.get("Size", ""))
        m = re.match(r"^(\d+)\s*(MB|GB|TB)$", size)
        if not m:
            empty += 1
            continue
        count += 1
        total_mb += int(m.group(1)) * {"MB": 1, "GB": 1024, "TB": 1024 * 1024}[m.group(2)]
    return {"dimms": count, "empty_slots": empty, "total_gb": round(total_mb / 1024, 1)}


def parse_lscpu(text: str) -> dict[str, Any]:
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            kv.setdefault(key.strip(), value.strip())
    if "CPU(s)" not in kv:
        raise ParseError("no 'CPU(s):' line: not lscpu output")

    def num(k: str) -> int:
        m = re.match(r"^(\d+)", kv.get(k, ""))
        return int(m.group(1)) if m else 0

    sockets = num("Socket(s)") or 1
    cores_per_socket = num("Core(s) per socket")
    return {"model": kv.get("Model name", ""), "arch": kv.get("Architecture", ""),
            "sockets": sockets,
            "cores_per_socket": cores_per_socket, "cores": sockets * cores_per_socket,
            "threads": num("CPU(s)"), "numa_nodes": num("NUMA node(s)")}


def parse_meminfo(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+):\s+(\d+) kB$", line.strip())
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    if "MemTotal" not in out:
        raise ParseError("no MemTotal line: not /proc/meminfo")
    return out


def parse_lsblk(text: str) -> list[dict[str, Any]]:
    """`lsblk -J -b -d -o NAME,SIZE,MODEL,SERIAL,TRAN,TYPE` -> disks."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"lsblk did not print JSON: {exc}") from exc
    out = []
    for d in data.get("blockdevices", []):
        out.append({"name": d.get("name"), "size_bytes": int(d.get("size") or 0),
                    "model": (d.get("model") or "").strip(),
                    "serial": (d.get("serial") or "").strip(), "tran": d.get("tran") or "",
                    "type": d.get("type") or ""})
    return out


def parse_runc_version(text: str) -> dict[str, str]:
    """`runc --version`: {"version": "1.1.12", "commit": "v1.1.12-0-g51d5e94"} (commit
    absent where the build does not print one). Raises ParseError without a version."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" version ")
        if key == "runc" and value.strip():
            out["version"] = value.strip().split()[0]
        elif line.strip().startswith("commit:"):
            out["commit"] = line.split(":", 1)[1].strip()
    if "version" not in out:
        raise ParseError("runc --version printed no 'runc version' line")
    return out


_MODULE = re.compile(r"^[A-Za-z0-9_]+$")
_USERS = re.compile(r"^[A-Za-z0-9_,]+,?$")


def _users(field: str) -> list[str]:
    """A module's users as lsmod and /proc/modules write them: "a,b", "a,b," or "-"
    (none); "[permanent]" is a flag, not a user."""
    return [u for u in field.split(",") if u and u not in ("-", "[permanent]")]


def parse_lsmod(text: str) -> dict[str, list[str]]:
    """`lsmod`: module -> the modules using it. The header and blank lines are skipped; a
    line holding only a comma list after a row is that row's users wrapped onto the next
    line (a narrow terminal or a paste); any other line that is no module row (name,
    size, use count) is refused."""
    out: dict[str, list[str]] = {}
    last: str | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] == "Module":
            continue
        if len(parts) == 1 and last is not None and "," in parts[0] \
                and _USERS.match(parts[0]):
            out[last] += _users(parts[0])
            continue
        if len(parts) < 3 or not _MODULE.match(parts[0]) or not parts[1].isdigit() \
                or not parts[2].lstrip("-").isdigit():
            raise ParseError(f"lsmod: not a module row: {line.strip()!r}")
        out[parts[0]] = [u for p in parts[3:] for u in _users(p)]
        last = parts[0]
    return out


def parse_proc_modules(text: str) -> dict[str, list[str]]:
    """`/proc/modules` ("name size refcount users state address [taints]"): module -> the
    modules using it. A line that is not such a row is refused."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 5 or not _MODULE.match(parts[0]) or not parts[1].isdigit() \
                or not parts[2].lstrip("-").isdigit():
            raise ParseError(f"/proc/modules: not a module row: {line.strip()!r}")
        out[parts[0]] = _users(parts[3])
    return out


def loaded_modules(*listings: dict[str, list[str]]) -> set[str]:
    """Every module a listing shows loaded: each row, and each module named as another's
    user (a user is loaded, whether or not its own row was kept by a filter)."""
    return {name for rows in listings for mod, users in rows.items()
            for name in (mod, *users)}


_CPU = re.compile(r"^analyzing CPU (\d+):")
_GOV = re.compile(r'The governor "([^"]+)"')


def parse_cpupower_governors(text: str) -> dict[int, str | None]:
    """`cpupower [-c all] frequency-info [-p]`: CPU -> the governor of its current
    policy (None where the CPU reports no policy). The policy text wraps over lines."""
    out: dict[int, str | None] = {}
    cpu: int | None = None
    joined = ""
    for line in text.splitlines():
        m = _CPU.match(line.strip())
        if m:
            if cpu is not None:
                g = _GOV.search(joined)
                out[cpu] = g.group(1) if g else None
            cpu, joined = int(m.group(1)), ""
        elif cpu is not None:
            joined += " " + line.strip()
    if cpu is not None:
        g = _GOV.search(joined)
        out[cpu] = g.group(1) if g else None
    if not out:
        raise ParseError("cpupower printed no 'analyzing CPU' block")
    return out
