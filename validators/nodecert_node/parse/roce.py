"""RoCE settings: the GID table (`show_gids`), the QoS of a port (`mlnx_qos -i IF`: trust
state and PFC) and ECN (sysfs). Pure functions of text; ParseError on what does not read.

show_gids prints `DEV PORT INDEX GID [IPv4] VER DEV` rows (tabs, an empty IPv4 column for
link-local GIDs) and `n_gids_found=N`: a table whose rows do not add up to N is
truncated and refused. mlnx_qos prints `Priority trust state: dscp|pcp` and under
`PFC configuration:` a `priority 0 1 ... 7` row and an `enabled 0 0 0 1 ...` row.
"""

from __future__ import annotations

import os
import re
from typing import Any

from nodecert_node.parse import ParseError

_GID = re.compile(r"^[0-9a-f]{4}(?::[0-9a-f]{4}){7}$")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


def parse_show_gids(text: str) -> list[dict[str, Any]]:
    """One entry per GID: dev, port, index, gid, ipv4 (or None), version (v1/v2), ndev."""
    rows: list[dict[str, Any]] = []
    found = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("DEV", "---")):
            continue
        m = re.match(r"^n_gids_found=(\d+)$", line)
        if m:
            found = int(m.group(1))
            continue
        f = line.split()
        ipv4 = None
        if len(f) == 7 and _IPV4.match(f[4]):
            ipv4 = f.pop(4)
        if len(f) == 5 and re.fullmatch(r"v[12]", f[4]):
            f.append("")  # no netdev (an InfiniBand GID, or one without an interface)
        if (len(f) != 6 or not f[1].isdigit() or not f[2].isdigit()
                or not _GID.match(f[3]) or not re.fullmatch(r"v[12]", f[4])):
            raise ParseError(f"line {n}: {line[:80]!r} is not a show_gids row")
        rows.append({"dev": f[0], "port": int(f[1]), "index": int(f[2]), "gid": f[3],
                     "ipv4": ipv4, "version": f[4], "ndev": f[5] or None})
    if found is None:
        raise ParseError("no n_gids_found line: show_gids output is missing or truncated")
    if found != len(rows):
        raise ParseError(f"show_gids counted {found} GIDs but {len(rows)} rows are here: "
                         "truncated output")
    return rows


def routable_v2(rows: list[dict[str, Any]], dev: str) -> list[dict[str, Any]]:
    """The RoCE v2 GIDs of a device that carry an address (IPv4-mapped or global IPv6):
    what NCCL's NCCL_IB_GID_INDEX picks for traffic that crosses a router."""
    return [r for r in rows if r["dev"] == dev and r["version"] == "v2"
            and not r["gid"].startswith("fe80:")]


def parse_mlnx_qos(text: str) -> dict[str, Any]:
    """trust (dscp/pcp), dcbx mode, pfc: the priorities with PFC enabled (None when the
    output has no PFC section)."""
    trust = re.search(r"^\s*Priority trust state:\s*(\S+)", text, re.MULTILINE)
    dcbx = re.search(r"^\s*DCBX mode:\s*(.+?)\s*$", text, re.MULTILINE)
    if not trust and not dcbx and "PFC configuration" not in text:
        raise ParseError("no trust state, DCBX mode or PFC configuration: not mlnx_qos output")
    pfc = None
    block = re.search(r"PFC configuration:\s*\n\s*priority\s+([\d\s]+?)\s*\n\s*enabled\s+"
                      r"([01\s]+?)\s*(?:\n|$)", text)
    if "PFC configuration" in text:
        if not block:
            raise ParseError("a PFC configuration without its priority/enabled rows")
        prios, flags = block.group(1).split(), block.group(2).split()
        if len(prios) != len(flags) or prios != [str(k) for k in range(len(prios))]:
            raise ParseError(f"PFC rows do not line up: priority {' '.join(prios)} / "
                             f"enabled {' '.join(flags)}")
        pfc = [int(p) for p, e in zip(prios, flags) if e == "1"]
    return {"trust": trust.group(1).lower() if trust else None,
            "dcbx": dcbx.group(1) if dcbx else None, "pfc": pfc}


def read_ecn(ndev: str, root: str = "/sys") -> dict[str, list[int]] | None:
    """The priorities with ECN enabled per role (roce_np: notification point, roce_rp:
    reaction point) from the mlx5 sysfs, or None where the driver exposes none."""
    base = os.path.join(root, "class/net", ndev, "ecn")
    if not os.path.isdir(base):
        return None
    out: dict[str, list[int]] = {}
    for role in ("roce_np", "roce_rp"):
        on = []
        for prio in range(8):
            try:
                with open(os.path.join(base, role, "enable", str(prio))) as f:
                    if f.read().strip() == "1":
                        on.append(prio)
            except OSError:
                continue
        out[role] = on
    return out


__all__ = ["parse_mlnx_qos", "parse_show_gids", "read_ecn", "routable_v2"]
