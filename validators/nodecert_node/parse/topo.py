"""`nvidia-smi topo -m` matrix and `nvidia-smi nvlink -s` link status."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Union

from nodecert_node.parse import ParseError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVCOL = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|mlx5_\w+|[a-z]+\w*\d)$")


def parse_topo_matrix(text: str) -> dict[str, dict[str, str]]:
    """{"GPU0": {"GPU1": "NV18", "NIC0": "PIX", ...}, ...} for GPU rows.

    Splits on whitespace runs (some captures expand the TABs), so it relies on the
    device columns coming first; affinity columns, which may be empty, come after.
    """
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header: list[str] | None = None
    out: dict[str, dict[str, str]] = {}
    for line in lines:
        tokens = line.split()
        if header is None:
            if tokens and tokens[0] == "GPU0" and line[:1].isspace():
                header = []
                for t in tokens:
                    if t == "CPU" or not (_DEVCOL.match(t) or t.startswith("GPU")):
                        break
                    header.append(t)
            continue
        if not tokens or tokens[0] == "Legend:":
            break
        if not re.match(r"^GPU\d+$", tokens[0]):
            continue
        cells = tokens[1:1 + len(header)]
        if len(cells) < len(header):
            raise ParseError(f"topo row {tokens[0]} has {len(cells)} cells for "
                             f"{len(header)} columns")
        out[tokens[0]] = dict(zip(header, cells))
    if header is None:
        raise ParseError("no 'GPU0 GPU1 ...' header row: not `nvidia-smi topo -m` output")
    return out


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
