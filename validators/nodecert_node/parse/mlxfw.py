"""NVIDIA (Mellanox) firmware tools: `flint -d DEV query` (or mstflint) and the
per-device blocks `mlxup` and `mlxfwmanager --query` print.

flint: "Key:  value" lines, a value that wraps onto lines that start with spaces (its
Rom Info), a `Description:` header row for the GUID/MAC table. mlxup/mlxfwmanager: one
block a device ("Device #N:"), its fields, a `Versions: Current Available` table whose
columns are padded with trailing spaces, and a Status. Pure; a block without the fields
it must have is refused, never read as empty.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

_KEY = re.compile(r"^([A-Z][A-Za-z /]+?):\s*(.*)$")


def _base(key: str, fields: dict[str, list[str]], digits: int
          ) -> tuple[str | None, int | None]:
    """A "Base GUID:  e09d730300126474   16" row (the table under `Description: UID
    GuidsNumber`): the identifier (lower-case hex) and how many follow it. N/A or absent
    is None; anything else there is refused, never read as an identifier."""
    raw = (fields.get(key) or [""])[0].split()
    if not raw or raw[0] in ("N/A", "-"):
        return None, None
    ident = raw[0].lower().removeprefix("0x")
    if not re.fullmatch(rf"[0-9a-f]{{{digits}}}", ident) or \
            (len(raw) > 1 and not raw[1].isdigit()) or len(raw) > 2:
        raise ParseError(f"flint query: {key} {' '.join(raw)!r} is not {digits} hex digits "
                         "and a count")
    return ident, int(raw[1]) if len(raw) > 1 else None


def parse_flint_query(text: str) -> dict[str, Any]:
    """{"fw_version", "base_guid", "guids", "base_mac", "macs", "product_version",
    "psid", "image_type", "release_date", "rom_info": [..], "security": ...} of `flint -d
    DEV query` (the base GUID and MAC identify the card: kept with their counts)."""
    fields: dict[str, list[str]] = {}
    last = ""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        m = _KEY.match(raw) if not raw[:1].isspace() else None
        if m:
            last = m.group(1).strip()
            fields.setdefault(last, []).append(m.group(2).strip())
        elif last:
            fields[last].append(raw.strip())  # a wrapped value (Rom Info's next type)
    fw = (fields.get("FW Version") or [""])[0]
    if not re.fullmatch(r"\d+\.\d+\.\d+", fw):
        raise ParseError(f"flint query: no FW Version like 28.42.1000 (got {fw!r})")
    guid, guids = _base("Base GUID", fields, 16)
    mac, macs = _base("Base MAC", fields, 12)
    return {"fw_version": fw,
            "base_guid": guid, "guids": guids, "base_mac": mac, "macs": macs,
            "product_version": (fields.get("Product Version") or [""])[0] or None,
            "psid": (fields.get("PSID") or [""])[0] or None,
            "image_type": (fields.get("Image type") or [""])[0] or None,
            "release_date": (fields.get("FW Release Date") or [""])[0] or None,
            "rom_info": [r for r in fields.get("Rom Info", []) if r],
            "security": (fields.get("Security Attributes") or [""])[0] or None}


_DEVICE = re.compile(r"^Device #(\d+):\s*$")
_VERSION_ROW = re.compile(r"^\s+(FW|PXE|UEFI|FCODE|UEFI Virtio blk|UEFI Virtio net)\s{2,}"
                          r"(\S+)\s+(\S+)\s*$")


def parse_mlx_query(text: str) -> list[dict[str, Any]]:
    """Each device mlxup or mlxfwmanager lists: {"index", "device_type", "part_number",
    "psid", "pci", "versions": {name: {"current", "available"}}, "status"}."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    in_versions = False
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _DEVICE.match(line.strip())
        if m:
            cur = {"index": int(m.group(1)), "versions": {}, "status": None}
            out.append(cur)
            in_versions = False
            continue
        if cur is None or not line.strip() or set(line.strip()) == {"-"}:
            in_versions = False if not line.strip() else in_versions
            continue
        vm = _VERSION_ROW.match(line)
        if in_versions and vm:
            cur["versions"][vm.group(1)] = {
                "current": vm.group(2), "available": None if vm.group(3) == "N/A"
                else vm.group(3)}
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        in_versions = key == "Versions"
        name = {"Device Type": "device_type", "Part Number": "part_number", "PSID": "psid",
                "PCI Device Name": "pci", "Status": "status", "Base MAC": "base_mac",
                "Description": "description"}.get(key)
        if name:
            cur[name] = value
    for d in out:
        if "FW" not in d["versions"] or not d.get("psid"):
            raise ParseError(f"device #{d['index']}: no FW version row or no PSID")
    return out


__all__ = ["parse_flint_query", "parse_mlx_query"]
