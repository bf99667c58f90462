"""The CUDA samples users already run: `bandwidthTest` and `p2pBandwidthLatencyTest`.

bandwidthTest prints one block per direction ("Host to Device Bandwidth, N Device(s)",
then the memory kind and a table of transfer size and GB/s); p2pBandwidthLatencyTest
prints the devices, the peer-access lines, the connectivity matrix, then bandwidth
(GB/s) and latency (us) matrices under titles that say what each one is. A table whose
rows do not match its header, a title this parser does not know and a figure that is
not a number are refused naming the line: a matrix is never read into another's place.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

_NUM = re.compile(r"^-?\d+(?:\.\d+)?$")
_DIRECTION = re.compile(r"^(Host to Device|Device to Host|Device to Device) Bandwidth, "
                        r"(\d+) Device\(s\)$")
DIRECTIONS = {"Host to Device": "h2d", "Device to Host": "d2h", "Device to Device": "d2d"}


def parse_bandwidth_test(text: str) -> dict[str, Any]:
    """{"devices": [names], "mode": "Quick"|"Range"|"Shmoo"|None, "memory": "PINNED"|...,
    "result": "PASS"|"FAIL"|None, "h2d"/"d2h"/"d2d": [(bytes, GB/s), ...]}."""
    if "[CUDA Bandwidth Test]" not in text:
        raise ParseError("no '[CUDA Bandwidth Test]' header: not bandwidthTest output")
    out: dict[str, Any] = {"devices": [], "mode": None, "memory": None, "result": None}
    current: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _DIRECTION.match(line)
        if m:
            current = DIRECTIONS[m.group(1)]
            if current in out:
                raise ParseError(f"bandwidthTest line {n}: {m.group(1)} printed twice")
            out[current] = []
            continue
        dev = re.match(r"^Device (\d+): (.+)$", line)
        if dev:
            out["devices"].append(dev.group(2).strip())
        elif line.endswith(" Mode") and len(line.split()) == 2:
            out["mode"] = line.split()[0]
        elif line.endswith("Memory Transfers"):
            out["memory"] = line.split()[0]
        elif line.startswith("Result = "):
            out["result"] = line.split("=", 1)[1].strip()
        elif current and line and line[0].isdigit():
            cells = line.split()
            if len(cells) != 2 or not all(_NUM.match(c) for c in cells):
                raise ParseError(f"bandwidthTest line {n}: expected transfer size and GB/s, "
                                 f"got {raw[:120]!r}")
            out[current].append((int(cells[0]), float(cells[1])))
    if not any(k in out for k in DIRECTIONS.values()):
        raise ParseError("bandwidthTest output without any bandwidth table (cut short?)")
    for k in DIRECTIONS.values():
        if k in out and not out[k]:
            raise ParseError(f"bandwidthTest: the {k} table has no rows (cut short?)")
    return out


# p2pBandwidthLatencyTest's matrix titles, as the sample prints them, and their keys.
P2P_MATRICES = {
    "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)": "unidir_p2p_off_gbs",
    "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)": "unidir_p2p_on_gbs",
    "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)": "unidir_p2p_on_gbs",
    "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)": "bidir_p2p_off_gbs",
    "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)": "bidir_p2p_on_gbs",
    "P2P=Disabled Latency Matrix (us)": "latency_p2p_off_us",
    "P2P=Enabled Latency (P2P Writes) Matrix (us)": "latency_p2p_on_us",
    "P2P=Enabled Latency Matrix (us)": "latency_p2p_on_us",
}


def _matrix_row(n: int, raw: str, size: int) -> tuple[int, list[float]]:
    cells = raw.split()
    if len(cells) != size + 1 or not cells[0].isdigit() or not all(
            _NUM.match(c) for c in cells[1:]):
        raise ParseError(f"p2pBandwidthLatencyTest line {n}: expected a row index and "
                         f"{size} figures, got {raw[:120]!r}")
    return int(cells[0]), [float(c) for c in cells[1:]]


def parse_p2p(text: str) -> dict[str, Any]:
    """{"devices": [{"index", "name", "pci_bus"}], "peer_access": {i: [j, ...]},
    "connectivity": [[0|1]] (None when not printed), and per matrix key (P2P_MATRICES)
    {"gpu": [[...]], "cpu": [[...]] (latency only)}}."""
    if "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]" not in text:
        raise ParseError("no '[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]' header: not "
                         "p2pBandwidthLatencyTest output")
    out: dict[str, Any] = {"devices": [], "peer_access": {}, "connectivity": None}
    lines = text.splitlines()
    key: str | None = None
    part = "gpu"
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        dev = re.match(r"^Device: (\d+), (.+?), pciBusID: ([0-9a-fA-F]+),", line)
        peer = re.match(r"^Device=(\d+) (CAN|CANNOT) Access Peer Device=(\d+)$", line)
        if dev:
            out["devices"].append({"index": int(dev.group(1)), "name": dev.group(2),
                                   "pci_bus": dev.group(3).lower()})
        elif peer:
            if peer.group(2) == "CAN":
                out["peer_access"].setdefault(int(peer.group(1)), []).append(
                    int(peer.group(3)))
        elif line == "P2P Connectivity Matrix":
            key, part = "connectivity", "gpu"
            out["connectivity"] = []
        elif line in P2P_MATRICES:
            key, part = P2P_MATRICES[line], "gpu"
            if key in out:
                raise ParseError(f"p2pBandwidthLatencyTest line {n}: {line!r} printed twice")
            out[key] = {"gpu": []}
        elif line.endswith("Matrix (GB/s)") or line.endswith("Matrix (us)"):
            raise ParseError(f"p2pBandwidthLatencyTest line {n}: a matrix this parser does "
                             f"not know: {line[:120]!r}")
        elif re.match(r"^(D\\D|GPU|CPU)(\s+\d+)+$", line):
            part = "cpu" if line.startswith("CPU") else "gpu"
            if key and key != "connectivity" and part == "cpu":
                out[key]["cpu"] = []
        elif key and line and line[0].isdigit():
            size = len(out["devices"])
            i, row = _matrix_row(n, raw, size)
            target = out["connectivity"] if key == "connectivity" else out[key][part]
            if i != len(target):
                raise ParseError(f"p2pBandwidthLatencyTest line {n}: row {i} where row "
                                 f"{len(target)} was due")
            target.append([int(v) for v in row] if key == "connectivity" else row)
        elif not line or line.startswith(("***NOTE", "So you can see", "NOTE:")):
            key = key if line == "" and key else None
    if not out["devices"]:
        raise ParseError("p2pBandwidthLatencyTest output lists no device")
    size = len(out["devices"])
    present = ["connectivity"] if out["connectivity"] is not None else []
    for k in present + sorted(set(P2P_MATRICES.values()) & set(out)):
        parts = {"gpu": out[k]} if k == "connectivity" else out[k]
        for name, rows in parts.items():
            if len(rows) != size:
                raise ParseError(f"p2pBandwidthLatencyTest: {k} ({name}) has {len(rows)} of "
                                 f"{size} rows (cut short?)")
    return out


__all__ = ["DIRECTIONS", "P2P_MATRICES", "parse_bandwidth_test", "parse_p2p"]
