"""RDMA fabric tools: ibstat, ibstatus, ibv_devinfo, perfquery, and the kernel's
`rate` text ("400 Gb/sec (4X NDR)").

Indentation differs between versions and pastes (TABs, spaces): fields are read by
name, never by column. A value that does not read as the field's type is refused,
never moved into another field.
"""

from __future__ import annotations

import re
from typing import Any, Dict

from nodecert_node.parse import ParseError

Port = Dict[str, Any]

_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Z0-9]+)\))?$")


def parse_rate(text: str) -> tuple[float, str | None, str | None]:
    """'400 Gb/sec (4X NDR)' -> (400.0, '4X', 'NDR'); '40' (ibstat) -> (40.0, None, None)."""
    t = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t), None, None
    m = _RATE.match(t)
    if not m:
        raise ParseError(f"cannot read the link rate {t!r}")
    return float(m.group(1)), (f"{m.group(2)}X" if m.group(2) else None), m.group(3)


def _int(text: str, what: str) -> int:
    t = text.strip()
    try:
        return int(t, 16) if t.lower().startswith("0x") else int(t)
    except ValueError:
        raise ParseError(f"{what}: {t!r} is not a number") from None


LINK_LAYERS = ("InfiniBand", "Ethernet")
# Port states (IBTA PortState and PortPhysicalState) as the tools print them.
STATES = ("Active", "Down", "Init", "Armed", "ActDefer")
PHYS_STATES = ("LinkUp", "Polling", "Disabled", "Sleep", "PortConfigurationTraining",
               "LinkErrorRecovery", "PhyTest")
_STATE = re.compile(r"^(?:\d+:\s*)?([A-Za-z_]+)(?:\s*\(\d+\))?$")


def _state(text: str) -> str:
    """'Active', '4: ACTIVE', 'PORT_ACTIVE (4)' -> 'Active'; 'LinkUp', '5: LinkUp'."""
    m = _STATE.match(text.strip())
    if not m:
        raise ParseError(f"cannot read the port state {text.strip()!r}")
    word = m.group(1)
    word = word[5:] if word.upper().startswith("PORT_") else word
    word = word if any(c.islower() for c in word) else word.capitalize()
    if word not in STATES + PHYS_STATES:  # a cut or unknown state is never taken as one
        raise ParseError(f"unknown port state {text.strip()!r}")
    return word


def _ca_field(ca: dict[str, Any], key: str, value: str) -> None:
    if key == "Number of ports":
        ca["ports"] = _int(value, f"CA {ca['name']} number of ports")
    elif key in ("CA type", "Firmware version", "Node GUID"):
        ca[{"CA type": "type", "Firmware version": "firmware", "Node GUID": "guid"}[key]] = value


def _port_field(port: Port, key: str, value: str) -> None:
    if key in ("State", "Physical state"):
        port["state" if key == "State" else "phys_state"] = _state(value)
    elif key == "Rate":
        port["rate_gbps"] = parse_rate(value)[0]
    elif key == "Link layer":
        if value not in LINK_LAYERS:  # also what a cut "Link layer: Eth" would leave
            raise ParseError(f"{port['ca']} port {port['port']}: unknown link layer {value!r}")
        port["link_layer"] = value
    elif key == "Port GUID":
        port["port_guid"] = value
    elif key == "Base lid":
        port["lid"] = _int(value, f"{port['ca']} port {port['port']} base lid")


# Every field ibstat prints (infiniband-diags ibstat.c: ca_dump, port_dump): a line with
# another name is not ibstat's (an error message, another tool's text), never skipped.
CA_FIELDS = frozenset({"CA type", "Number of ports", "Firmware version", "Hardware version",
                       "Node GUID", "System image GUID"})
PORT_FIELDS = frozenset({"State", "Physical state", "Rate", "Base lid", "LMC", "SM lid",
                         "Capability mask", "Port GUID", "Link layer"})
# infiniband-diags' own messages (ibpanic aborts the tool; ibwarn/iberror report a
# failure): the listing after them, or instead of them, is not complete.
DIAG_PREFIXES = ("ibpanic:", "ibwarn:", "iberror:")


def parse_ibstat(text: str) -> list[Port]:
    """Every port of every HCA `ibstat` lists: ca, port, ca_type, firmware, node_guid,
    state, phys_state, rate_gbps, link_layer, port_guid, lid."""
    ports: list[Port] = []
    ca: dict[str, Any] | None = None
    port: Port | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"^CA '([^']+)'$", line)
        if m:
            if ca is not None and ca["seen"] < ca["ports"]:
                raise ParseError(f"CA {ca['name']} lists {ca['seen']} of its {ca['ports']} "
                                 "ports: the output is cut short")
            ca = {"name": m.group(1), "ports": 0, "seen": 0}
            port = None
            continue
        if ca is None:
            raise ParseError(f"line {n}: {line[:60]!r} before any \"CA '...'\" line: not ibstat "
                             "output")
        m = re.match(r"^Port (\d+):$", line)
        if m:
            port = {"ca": ca["name"], "port": int(m.group(1)), "ca_type": ca.get("type", ""),
                    "firmware": ca.get("firmware", ""), "node_guid": ca.get("guid", "")}
            ports.append(port)
            ca["seen"] += 1
            continue
        if line.startswith(DIAG_PREFIXES):
            raise ParseError(f"line {n}: ibstat reported an error, so its listing is not "
                             f"complete: {line[:200]!r}")
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(f"line {n}: {line[:60]!r} is not a 'Field: value' line")
        key = key.strip()
        if key not in (CA_FIELDS if port is None else PORT_FIELDS):
            raise ParseError(f"line {n}: {line[:60]!r}: {key[:40]!r} is not a "
                             f"{'CA' if port is None else 'port'} field ibstat prints")
        if port is None:
            _ca_field(ca, key, value.strip())
        else:
            _port_field(port, key, value.strip())
    if ca is not None and ca["seen"] < ca["ports"]:
        raise ParseError(f"CA {ca['name']} lists {ca['seen']} of its {ca['ports']} ports: "
                         "the output is cut short")
    for p in ports:
        missing = [k for k in ("state", "phys_state", "rate_gbps", "link_layer") if k not in p]
        if missing:
            raise ParseError(f"{p['ca']} port {p['port']} has no {', '.join(missing)}: the "
                             "output is cut short or not ibstat's")
    return ports


def parse_ibstatus(text: str) -> list[Port]:
    """`ibstatus`: per port ca, port, state, phys_state, rate_gbps, width, speed,
    link_layer."""
    ports: list[Port] = []
    cur: Port | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = re.match(r"^Infiniband device '([^']+)' port (\d+) status:$", line)
        if m:
            cur = {"ca": m.group(1), "port": int(m.group(2))}
            ports.append(cur)
            continue
        if cur is None:
            raise ParseError(f"line {n}: {line[:60]!r} before any \"Infiniband device\" line")
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(f"line {n}: {line[:60]!r} is not a 'field: value' line")
        key = key.strip()
        if key == "state":
            cur["state"] = _state(value)
        elif key == "phys state":
            cur["phys_state"] = _state(value)
        elif key == "rate":
            cur["rate_gbps"], cur["width"], cur["speed"] = parse_rate(value)
        elif key == "link_layer":
            cur["link_layer"] = value.strip()
    for p in ports:
        if "state" not in p or "rate_gbps" not in p:
            raise ParseError(f"{p['ca']} port {p['port']} has no state or rate: the output "
                             "is cut short")
    return ports


def parse_ibv_devinfo(text: str) -> list[Port]:
    """`ibv_devinfo [-v]`: per port ca, port, firmware, part, board_id, state,
    link_layer and, with -v, width and speed."""
    ports: list[Port] = []
    hca: dict[str, Any] = {}
    cur: Port | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError(f"line {n}: {line[:60]!r} is not a 'field: value' line")
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            hca, cur = {"ca": value}, None
            continue
        if not hca:
            raise ParseError(f"line {n}: {line[:60]!r} before any hca_id: not ibv_devinfo output")
        if key == "port":
            cur = {"ca": hca["ca"], "port": _int(value, f"{hca['ca']} port"),
                   "firmware": hca.get("fw_ver", ""), "part": hca.get("vendor_part_id", ""),
                   "board_id": hca.get("board_id", "")}
            ports.append(cur)
        elif cur is None:
            hca[key] = value
        elif key == "state":
            cur["state"] = _state(value)
        elif key == "phys_state":
            cur["phys_state"] = _state(value)
        elif key == "link_layer":
            cur["link_layer"] = value
        elif key == "active_width":
            cur["width"] = value.split()[0]
        elif key == "active_speed":
            cur["speed_text"] = value
    return ports


_COUNTER = re.compile(r"^([A-Za-z][A-Za-z0-9]*):\.*\s*(0x[0-9A-Fa-f]+|\d+)$")
_HEADER = re.compile(r"^# (.+?) counters: Lid (\d+) port (\d+)")


def parse_perfquery(text: str) -> list[dict[str, Any]]:
    """`perfquery [-x] [-l]`: one block per port queried ('# Port extended counters: Lid
    133 port 1 ...'): kind, lid, port and every counter by name, as numbers."""
    blocks: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        h = _HEADER.match(line)
        if h:
            cur = {"kind": h.group(1), "lid": int(h.group(2)), "port": int(h.group(3)),
                   "counters": {}}
            blocks.append(cur)
            continue
        if line.startswith("#"):
            continue
        m = _COUNTER.match(line)
        if not m:
            raise ParseError(f"line {n}: {line[:60]!r} is not a 'Counter:....value' line")
        if cur is None:
            raise ParseError(f"line {n}: a counter before any '# ... counters: Lid N port N' "
                             "line: not perfquery output")
        cur["counters"][m.group(1)] = _int(m.group(2), m.group(1))
    if not blocks or not all(b["counters"] for b in blocks):
        raise ParseError("no counters: not perfquery output, or cut short")
    return blocks


# The error counters of the InfiniBand port counter attributes (IBTA PortCounters and
# PortCountersExtended): each one that grows while a link carries traffic is a fault.
ERROR_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter",
                  "PortRcvErrors", "PortRcvRemotePhysicalErrors", "PortXmitDiscards",
                  "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors")




_BLOCK = re.compile(r"^=+\s*(\S+)(?:\s+(.*?))?\s*=+$")


def _ber(text: str) -> float | None:
    """'15E-255' -> 1.5e-254 (mlxlink writes the mantissa without a point)."""
    t = text.strip()
    if not re.fullmatch(r"\d+(?:\.\d+)?[Ee][-+]?\d+", t):
        return None
    return float(t)


def parse_mlxlink(text: str) -> list[dict[str, Any]]:
    """`mlxlink -d DEV [--show_counters]`, one block per device ('===== mlx5_0 ... ====='):
    state, phys_state, speed, width, fec, firmware, recommendation, symbol_errors,
    effective_errors, effective_ber, raw_ber, link_error_recovery and the tool's own
    error lines (-E-)."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    fields = {"State": "state", "Physical state": "phys_state", "Speed": "speed",
              "Width": "width", "FEC": "fec", "Firmware Version": "firmware",
              "Recommendation": "recommendation"}
    numbers = {"Symbol Errors": "symbol_errors", "Effective Physical Errors": "effective_errors",
               "Link Error Recovery Counter": "link_error_recovery"}
    bers = {"Effective Physical BER": "effective_ber", "Raw Physical BER": "raw_ber",
            "Symbol BER": "symbol_ber"}
    for raw in text.splitlines():
        line = raw.strip()
        m = _BLOCK.match(line)
        if m:
            cur = {"device": m.group(1), "errors": []}
            out.append(cur)
            continue
        if cur is None or not line:
            continue
        if line.startswith("-E-"):
            cur["errors"].append(line[3:].strip())
            continue
        key, sep, value = line.partition(" : ") if " : " in line else line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue  # section titles ("Operational Info") and rules
        if key in fields:
            cur[fields[key]] = value
        elif key in numbers:
            cur[numbers[key]] = _int(value, f"{cur['device']} {key}")
        elif key in bers:
            ber = _ber(value)
            if ber is None:
                raise ParseError(f"{cur['device']} {key}: {value!r} is not a BER")
            cur[bers[key]] = ber
    if not out:
        raise ParseError("no '=== device ===' block: not mlxlink output")
    return out


__all__ = ["ERROR_COUNTERS", "parse_ibstat", "parse_ibstatus", "parse_ibv_devinfo",
           "parse_mlxlink", "parse_perfquery", "parse_rate"]
