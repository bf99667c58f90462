"""`nvidia-smi topo -m` matrix and `nvidia-smi nvlink -s` link status."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Union

from nodecert_node.parse import ParseError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Column names: GPUs, NICs as the new layout names them (NICn + a legend) or as the old
# one did (the RDMA device: mlx5_N, rocep49s0, ibp12s0, ...).
_DEVNAME = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+|[a-z][a-z0-9]*?p\d+s\d+(?:f\d+)?|"
                      r"[a-z]+\d+")
# One matrix cell: self, bonded NVLinks, or a PCIe path class (SOC: old name of SYS).
_CELL = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_AFFINITY = ("CPU", "NUMA", "GPU")  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"


def _split_glued(token: str, pattern: re.Pattern[str]) -> list[str] | None:
    """'NV18PIX' -> ['NV18', 'PIX']: whole-token split into known parts, else None."""
    parts: list[str] = []
    pos = 0
    while pos < len(token):
        m = pattern.match(token, pos)
        if not m:
            return None
        parts.append(m.group(0))
        pos = m.end()
    return parts


def _header(tokens: list[str]) -> list[str]:
    cols: list[str] = []
    for t in tokens:
        if t in _AFFINITY:
            break
        parts = _split_glued(t, _DEVNAME)
        if parts is None:
            raise ParseError(f"topo header: cannot read column name {t!r} (glued to "
                             "something that is not a device name); paste the output "
                             "with its TABs")
        cols.extend(parts)
    return cols


def parse_topo_matrix(text: str) -> dict[str, dict[str, str]]:
    """{"GPU0": {"GPU1": "NV18", "NIC0": "PIX", ...}, ...} for GPU rows.

    Reads the old layout (NIC columns named mlx5_N, no NUMA column) and the new one
    (NICn columns plus a NIC legend, see nic_legend). Cells are read by their grammar, so
    TABs expanded to spaces or cells glued by copy/paste ("NV18NV18", "SYS0-55") split
    where the split is unambiguous; a row whose cells do not add up to the header's
    device columns is refused rather than shifted.
    """
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header: list[str] | None = None
    out: dict[str, dict[str, str]] = {}
    for n, line in enumerate(lines, 1):
        tokens = line.split()
        if header is None:
            if tokens and tokens[0].startswith("GPU0") and \
                    (len(tokens) == 1 or not _CELL.fullmatch(tokens[1])):
                header = _header(tokens)
            continue
        if not tokens or tokens[0] == "Legend:":
            break
        row = re.match(r"^(GPU\d+)(.*)$", tokens[0])
        if not row:
            continue
        rest = ([row.group(2)] if row.group(2) else []) + tokens[1:]
        cells: list[str] = []
        for t in rest:
            if len(cells) == len(header):
                break  # the affinity columns follow (possibly blank)
            parts = _split_glued(t, _CELL)
            if parts is None:  # a cell glued to the CPU affinity: "SYS0-55,112-167"
                m = _CELL.match(t)
                parts = [m.group(0)] if m and t[m.end():m.end() + 1].isdigit() else None
            if parts is None and (t[:1].isdigit() or t == "N/A"):
                break  # the affinity columns began before every device cell was read
            if parts is None:
                raise ParseError(f"topo line {n}: {row.group(1)} cell {t!r} is not a "
                                 "link type (X, NV#, PIX, PXB, PHB, NODE, SYS)")
            cells.extend(parts)
        if len(cells) != len(header):
            raise ParseError(f"topo line {n}: {row.group(1)} has {len(cells)} cells for "
                             f"{len(header)} device columns ({' '.join(header)}); refusing "
                             "to guess which column a value belongs to")
        if row.group(1) in header and cells[header.index(row.group(1))] != "X":
            raise ParseError(f"topo line {n}: {row.group(1)} is not 'X' against itself: "
                             "the columns are shifted")
        out[row.group(1)] = dict(zip(header, cells))
    if header is None:
        raise ParseError("no 'GPU0 GPU1 ...' header row: not `nvidia-smi topo -m` output")
    return out


def nic_legend(text: str) -> dict[str, str]:
    """The new layout's 'NIC Legend:' ({"NIC0": "mlx5_0", ...}); {} in the old layout."""
    return dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.MULTILINE))


def nvlink_count(cell: str) -> int:
    """'NV18' -> 18 bonded links; anything else (PIX, SYS, X) -> 0."""
    m = re.match(r"^NV(\d+)$", cell)
    return int(m.group(1)) if m else 0


LinkStatus = Dict[int, Union[List[Optional[float]], str]]


def parse_nvlink_status(text: str) -> LinkStatus:
    """GPU index -> per-link GB/s (None = <inactive>), or the tool's message
    ("all links are inactive", "not supported ...") when it printed one."""
    out: LinkStatus = {}
    if not text.strip():
        # A GPU whose NVLinks are not exposed (seen on a real single-H200 VM, driver
        # 580.159.04) makes the tool print nothing and exit 0: no links reported.
        return out
    cur: int | None = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+): .*\(UUID: [^)]*\)\s*$", line)
        if m:
            cur = int(m.group(1))
            out[cur] = []
            continue
        if cur is None or not line.strip():
            continue
        lm = re.match(r"^\s*Link (\d+): (?:([\d.]+) GB/s|<inactive>)\s*$", line)
        links = out[cur]
        if lm and isinstance(links, list):
            links.append(float(lm.group(2)) if lm.group(2) else None)
        elif not lm:
            out[cur] = line.strip()
    if not out:
        raise ParseError("no 'GPU n: ... (UUID: ...)' line: not `nvidia-smi nvlink -s` output")
    return out
