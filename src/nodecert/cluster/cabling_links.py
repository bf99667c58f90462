"""Links as the fabric's own tools report them, each as a `Link` (a node's port and the
switch port at its other end, with what it trained at).

* `ibnetdiscover -p` (infiniband-diags): one line per port, both ends' type, LID, port,
  GUID, the width and speed, and the two names; a port without a link lists one end.
* `iblinkinfo` (infiniband-diags): per port `LID PORT[..] ==( WIDTH LANE_SPEED Gbps
  STATE/ PHYS)==> LID PORT[..] "NAME" ( ... )`, under `CA: NAME:` / `Switch: GUID NAME:`
  headers (a filtered listing has none: the names at the far ends still pair them).
* `lldpctl -f json` (lldpd): per local interface the neighbour's chassis (keyed by its
  system name) and port; lldpd collapses one-element lists, so both forms are read.

A node's port is named as the HCA's node description gives it ("host mlx5_0", "host
HCA-1": the host, then the rest), or by the interface LLDP ran on. Lines the format
does not know are refused with the line, never guessed into a link.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from nodecert.core.errors import NodecertError

# Per-lane signalling rate (Gb/s) of each InfiniBand speed name.
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.3125, "FDR": 14.0625,
             "EDR": 25.78125, "HDR": 53.125, "NDR": 106.25, "XDR": 212.5}


class DiscoverError(NodecertError):
    """Tool output that is not what the tool prints."""


@dataclass(frozen=True)
class Link:
    node: str
    port: str
    switch: str
    switch_port: str
    width: str | None = None  # "4X"
    lane_gbps: float | None = None
    state: str = "Active"
    source: str = ""

    @property
    def speed_gbps(self) -> float | None:
        """The link's rate: lanes x lane rate (4X EDR: 103.1 Gb/s)."""
        if self.width is None or self.lane_gbps is None:
            return None
        return int(self.width[:-1]) * self.lane_gbps


def _split_name(name: str) -> tuple[str, str]:
    """'gpu-01 mlx5_0' -> ('gpu-01', 'mlx5_0'); a name without a space is the node."""
    head, _, rest = name.strip().partition(" ")
    return head, rest.strip() or "1"


# --- ibnetdiscover -p ---------------------------------------------------------------------

_IBND = re.compile(
    r"^(?P<t1>CA|SW|RT)\s+(?P<lid1>\d+)\s+(?P<p1>\d+)\s+(?P<g1>0x[0-9a-fA-F]+)\s+"
    r"(?P<w>\d+x)\s+(?P<s>[A-Za-z0-9?]+)"
    r"(?:\s+-\s+(?P<t2>CA|SW|RT)\s+(?P<lid2>\d+)\s+(?P<p2>\d+)\s+(?P<g2>0x[0-9a-fA-F]+)"
    r"\s+\(\s*'(?P<n1>[^']*)'\s+-\s+'(?P<n2>[^']*)'\s*\))?"
    r"(?:\s+'(?P<lone>[^']*)')?\s*$")


def parse_ibnetdiscover_ports(text: str, names: dict[str, str] | None = None) -> list[Link]:
    """`ibnetdiscover -p`: every active link from a CA to a switch, named by the CA's
    node description (or `names`: GUID or description -> 'host port'); the switch by its
    description or `names` (a node-name map). A port line without its far end (down,
    `???` speed) gives no link."""
    names = names or {}
    out: list[Link] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _IBND.match(line)
        if not m:
            # the legacy single-port form: an unquoted name, no far end
            if re.match(r"^(CA|SW|RT)\s+\d+\s+\d+\s+0x[0-9a-fA-F]+\s+\d+x\s+\S+(\s+.*)?$",
                        line) and not re.search(r"\s-\s+(CA|SW|RT)\s", line):
                continue
            raise DiscoverError(f"ibnetdiscover line {n}: not a port line: {line[:120]!r}")
        if not m.group("t2") or m.group("t1") != "CA" or m.group("t2") != "SW":
            continue  # a port without a link, or the link seen from the switch
        ca = names.get(m.group("g1").lower()) or names.get(m.group("n1")) or m.group("n1")
        node, port = _split_name(ca)
        switch = names.get(m.group("g2").lower()) or names.get(m.group("n2")) or m.group("n2")
        out.append(Link(node, port, switch, m.group("p2"), m.group("w").upper(),
                        LANE_GBPS.get(m.group("s").upper()), source="ibnetdiscover"))
    return out


# --- iblinkinfo ---------------------------------------------------------------------------

_IBL = re.compile(
    r"^\s*(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<lid>\d+)\s+(?P<port>\d+)\[[^\]]*\]\s+==\(\s*"
    r"(?:(?P<w>\d+X)\s+(?P<sp>[\d.]+)\s+Gbps\s+)?(?P<st>\w+)/\s*(?P<ph>[\w ]+?)\)==>\s*"
    r"(?:(?P<rlid>\d+)\s+(?P<rport>\d+))?\[[^\]]*\]\s+\"(?P<rname>[^\"]*)\"\s+\((?P<note>[^)]*)\)"
    r"\s*$")
_HEADER = re.compile(r"^(?P<kind>CA|Switch):\s+(?:(?P<guid>0x[0-9a-fA-F]+)\s+)?(?P<name>.*):\s*$")


def parse_iblinkinfo(text: str, names: dict[str, str] | None = None) -> list[Link]:
    """`iblinkinfo` (whole or filtered): every active link between a CA port and a switch
    port. A switch's name comes from its header, or from the name a CA's line gives its
    LID at the far end; a CA's from its header or the name a switch's line gives it."""
    names = names or {}
    rows: list[dict[str, Any]] = []
    section: dict[str, Any] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        h = _HEADER.match(raw.strip())
        if h:
            section = {"kind": h.group("kind"), "name": h.group("name").strip()}
            continue
        m = _IBL.match(raw)
        if not m:
            raise DiscoverError(f"iblinkinfo line {n}: not a port line: {raw.strip()[:120]!r}")
        rows.append({**m.groupdict(), "kind": "CA" if m.group("guid") else section.get("kind"),
                     "name": section.get("name")})
    # what each LID is called, from the far ends every line names
    lid_name: dict[str, str] = {}
    lid_kind: dict[str, str] = {}
    for r in rows:
        if r["rlid"] and r["rname"]:
            lid_name.setdefault(r["rlid"], r["rname"])
        if r["name"]:
            lid_name.setdefault(r["lid"], r["name"])
        if r["kind"]:
            lid_kind.setdefault(r["lid"], r["kind"])
    for r in rows:  # a line whose far end is a CA's LID was printed by a switch
        if r["rlid"] and lid_kind.get(r["rlid"]) == "CA":
            lid_kind.setdefault(r["lid"], "Switch")
    out: dict[tuple[str, str], Link] = {}
    for r in rows:
        if r["st"] != "Active" or not r["rlid"]:
            continue
        lane = float(r["sp"]) if r["sp"] else None
        here, there = lid_kind.get(r["lid"]), lid_kind.get(r["rlid"], "Switch")
        if here == "CA" and there == "Switch":
            ca, ca_port, sw, sw_port = lid_name.get(r["lid"], r["lid"]), r["port"], \
                lid_name.get(r["rlid"], r["rlid"]), r["rport"]
        elif here == "Switch" and there == "CA":
            ca, ca_port, sw, sw_port = lid_name.get(r["rlid"], r["rlid"]), r["rport"], \
                lid_name.get(r["lid"], r["lid"]), r["port"]
        else:
            continue  # switch to switch: not a node's cable
        node, port = _split_name(names.get(ca, ca))
        link = Link(node, port if " " in names.get(ca, ca) else ca_port,
                    names.get(sw, sw), sw_port, r["w"], lane, source="iblinkinfo")
        out.setdefault((link.node, link.port), link)
    return list(out.values())


# --- lldpctl -f json ----------------------------------------------------------------------

def _entries(raw: Any) -> list[tuple[str, Any]]:
    """lldpd's {name: {...}} or [{name: {...}}, ...] as (name, value) pairs."""
    if isinstance(raw, dict):
        return [(str(k), v) for k, v in raw.items()]
    if isinstance(raw, list):
        return [(str(k), v) for item in raw if isinstance(item, dict) for k, v in item.items()]
    return []


def parse_lldpctl_json(text: str, node: str) -> list[Link]:
    """`lldpctl -f json` run on `node`: each local interface with a neighbour, the
    neighbour's system name and port id (its description where the id is a MAC)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DiscoverError(f"lldpctl output is not JSON: {exc}") from None
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    if not isinstance(lldp, dict):
        raise DiscoverError("lldpctl output has no 'lldp' object: not `lldpctl -f json`")
    out = []
    for iface, body in _entries(lldp.get("interface")):
        if not isinstance(body, dict):
            continue
        chassis = _entries(body.get("chassis"))
        if not chassis:
            continue
        sysname, cbody = chassis[0]
        if sysname in ("id", "name") or not isinstance(cbody, dict):
            # a chassis without a system name: {"id": {...}, "name": {"value": ...}}
            name = (body["chassis"].get("name") or {}) if isinstance(body["chassis"], dict) \
                else {}
            sysname = str(name.get("value") or "") if isinstance(name, dict) else ""
            if not sysname:
                continue
        raw_port = body.get("port")
        port: dict[str, Any] = raw_port if isinstance(raw_port, dict) else {}
        raw_id = port.get("id")
        pid: dict[str, Any] = raw_id if isinstance(raw_id, dict) else {}
        value, kind = str(pid.get("value") or ""), str(pid.get("type") or "")
        if kind == "mac" or not value:
            value = str(port.get("descr") or value)
        if not value:
            continue
        out.append(Link(node, iface, sysname, value, source="lldp"))
    return out


__all__ = ["LANE_GBPS", "DiscoverError", "Link", "parse_iblinkinfo",
           "parse_ibnetdiscover_ports", "parse_lldpctl_json"]
