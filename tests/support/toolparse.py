"""Minimal parsers for GPU tool output, used by tests on real and simulated output alike.

They check shape (fields, units, layout) so the simulator is held to the real
tools' formats. Where the validators have a parser for the same output
(validators/nodecert_node/parse), these delegate to it.
"""

from __future__ import annotations

import csv
import io
import re

from nodecert_node.parse import kernel, topo


def parse_q(text: str) -> dict[str, dict[str, str]]:
    """nvidia-smi -q: {bus_id: {"Section/Sub/Label": value}} plus "" for the header."""
    out: dict[str, dict[str, str]] = {"": {}}
    cur = ""
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        if line.startswith("GPU "):
            cur = line.split()[1]
            out[cur] = {}
            stack = []
            continue
        indent = (len(line) - len(line.lstrip(" "))) // 4
        label, sep, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [label.strip()])
        if sep and value.strip():
            out[cur][path] = value.strip()
        else:
            stack.append((indent, label.strip()))
    return out


def parse_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text), skipinitialspace=True))


NCCL_ROW = re.compile(
    r"^\s+(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")


def parse_allreduce(text: str) -> dict[str, object]:
    rows = []
    oob = None
    for line in text.splitlines():
        m = NCCL_ROW.match(line)
        if m:
            rows.append({"size": int(m.group(1)), "busbw": float(m.group(8)),
                         "wrong": int(m.group(9)), "busbw_inplace": float(m.group(12))})
        m2 = re.match(r"^# Out of bounds values : (\d+) (OK|FAILED)", line)
        if m2:
            oob = int(m2.group(1))
    version = re.search(r"^NCCL version (\S+)", text, re.MULTILINE)
    return {"rows": rows, "oob": oob, "nccl": version.group(1) if version else None}


def parse_topo(text: str) -> dict[str, dict[str, str]]:
    """GPU-to-GPU cells of `topo -m` (the validators' parser, NIC columns dropped)."""
    return {row: {col: cell for col, cell in cells.items() if col.startswith("GPU")}
            for row, cells in topo.parse_topo_matrix(text).items()}


def parse_nvlink(text: str) -> topo.LinkStatus:
    return topo.parse_nvlink_status(text)


def parse_nvbandwidth(text: str) -> dict[str, list[list[float | None]]]:
    out: dict[str, list[list[float | None]]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^Running (\w+)\.$", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        if cur and re.match(r"^\s*\d+(\s+([\d.]+|N/A))+\s*$", line) and not re.match(
                r"^\s+0\s+1", line):
            cells = line.split()[1:]
            out[cur].append([None if c == "N/A" else float(c) for c in cells])
    return out


def parse_dcgmi(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\| (.+?)\s+\| (.+?)\s+\|$", line)
        if m and not m.group(1).startswith("-"):
            out.setdefault(m.group(1), m.group(2))
    return out


LSPCI_NN = re.compile(
    r"^([0-9a-f:.]+) (.+?) \[([0-9a-f]{4})\]: (.+) \[([0-9a-f]{4}):([0-9a-f]{4})\]")


def parse_lspci_nn(text: str) -> list[dict[str, str]]:
    out = []
    for line in text.splitlines():
        m = LSPCI_NN.match(line)
        if m:
            out.append({"slot": m.group(1), "class": m.group(2), "class_id": m.group(3),
                        "vendor": m.group(5), "device": m.group(6)})
    return out


def parse_xids(text: str) -> list[tuple[str, int]]:
    return [(e["pci"], e["xid"]) for e in kernel.parse_xids(text)]
