"""The cable plan: one CSV line per cable, the columns integrators exchange.

    node,port,rail,switch,switch_port,cable_type,length_m,width,speed_gbps
    gpu-01,mlx5_0,0,leaf-01,1,AOC,3,4X,400

`node`, `port` (the HCA or NIC on the node), `switch` and `switch_port` are required;
`rail` (the rail the port belongs to, in a rail-optimised fabric), `cable_type`,
`length_m`, `width` (1X..12X) and `speed_gbps` (the link's rate) are optional. The
header names the columns, in any order; `#` lines and blank lines are skipped. Every
error names the file and line: a missing or unknown column, a required cell empty, a
value that is not what its column holds, a node port or a switch port used twice, a
rail without a switch, and (with the inventory's hosts) a node the inventory lacks.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

from nodecert.core.errors import NodecertError

REQUIRED = ("node", "port", "switch", "switch_port")
OPTIONAL = ("rail", "cable_type", "length_m", "width", "speed_gbps")
MAX_BYTES = 16 * 1024 * 1024  # a plan of 100,000 cables is some 6 MB
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+-]*$")
_WIDTH = re.compile(r"^(1|2|4|8|12)X$")


class PlanError(NodecertError):
    """A cable plan that cannot be read as one."""


@dataclass(frozen=True)
class PlanLink:
    """One cable of the plan: the node's port it starts at, the switch port it ends at,
    and what the plan says of the cable (REQUIRED, then OPTIONAL columns)."""

    line: int  # of the plan file, for messages
    node: str
    port: str
    switch: str
    switch_port: str
    rail: str | None = None
    cable_type: str | None = None
    length_m: float | None = None
    width: str | None = None
    speed_gbps: float | None = None

    @property
    def end(self) -> tuple[str, str]:
        return self.node, self.port

    def where(self) -> str:
        return f"{self.switch} port {self.switch_port}"


@dataclass(frozen=True)
class Plan:
    path: str
    digest: str  # sha256 of the file's bytes: what a certificate binds
    links: tuple[PlanLink, ...]

    def rails(self) -> dict[str, set[str]]:
        """Rail -> the switches its links go to."""
        out: dict[str, set[str]] = {}
        for link in self.links:
            if link.rail is not None:
                out.setdefault(link.rail, set()).add(link.switch)
        return out


def _number(raw: str, what: str, where: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise PlanError(f"{what} {raw!r} is not a number", where=where,
                        hint=f"write {what} as a plain number") from None
    if not 0 < value < float("inf"):  # NaN fails both comparisons too
        raise PlanError(f"{what} {raw!r} must be a positive number", where=where)
    return value


def _links(path: Path, columns: list[str], rows: list[tuple[int, list[str]]],
           hosts: set[str] | None) -> list[PlanLink]:
    links: list[PlanLink] = []
    ends: dict[tuple[str, str], int] = {}
    switch_ports: dict[tuple[str, str], int] = {}
    for n, row in rows:
        where = f"{path}:{n}"
        if len(row) != len(columns):
            raise PlanError(f"{len(row)} cells where the header names {len(columns)}",
                            where=where, hint="one cell per column (quote a cell that "
                                              "holds a comma)")
        cell = {c: v.strip() for c, v in zip(columns, row, strict=True)}
        for c in REQUIRED:
            if not cell[c]:
                raise PlanError(f"{c} is empty", where=where)
            if not _NAME.match(cell[c]):
                raise PlanError(f"{c} {cell[c]!r} is not a plain name", where=where)
        if cell.get("rail") and not cell.get("switch"):
            raise PlanError(f"rail {cell['rail']} has no switch", where=where)
        width = cell.get("width") or None
        if width is not None and not _WIDTH.match(width.upper()):
            raise PlanError(f"width {width!r} is not 1X, 2X, 4X, 8X or 12X", where=where)
        link = PlanLink(
            n, cell["node"], cell["port"], cell["switch"], cell["switch_port"],
            rail=cell.get("rail") or None, cable_type=cell.get("cable_type") or None,
            length_m=_number(cell["length_m"], "length_m", where)
            if cell.get("length_m") else None,
            width=width.upper() if width else None,
            speed_gbps=_number(cell["speed_gbps"], "speed_gbps", where)
            if cell.get("speed_gbps") else None)
        if hosts is not None and link.node not in hosts:
            raise PlanError(f"node {link.node} is not a host of the inventory", where=where,
                            hint="name the node as the inventory does, or add it there")
        first = ends.setdefault(link.end, n)
        if first != n:
            raise PlanError(f"{link.node} {link.port} is cabled twice (first on line "
                            f"{first})", where=where)
        first = switch_ports.setdefault((link.switch, link.switch_port), n)
        if first != n:
            raise PlanError(f"{link.where()} is used twice (first on line {first})",
                            where=where)
        links.append(link)
    return links


def read_plan(path: Path, hosts: set[str] | None = None) -> Plan:
    """The plan in `path`; `hosts`: the inventory's host names (a node outside them is
    refused). PlanError naming the file and line for anything it cannot take."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PlanError(f"cannot read the cable plan: {exc.strerror}", where=str(path)) \
            from None
    if len(data) > MAX_BYTES:
        raise PlanError(f"the cable plan is larger than {MAX_BYTES // 1024 // 1024} MiB",
                        where=str(path))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PlanError(f"not UTF-8 text (byte {exc.start})", where=str(path),
                        hint="save the plan as CSV in UTF-8") from None
    rows = [(n, r) for n, r in enumerate(csv.reader(io.StringIO(text)), 1)
            if r and any(c.strip() for c in r) and not r[0].lstrip().startswith("#")]
    if not rows:
        raise PlanError("the cable plan has no header and no line", where=str(path),
                        hint="the first line names the columns: " + ",".join(REQUIRED))
    head_line, head = rows[0]
    columns = [c.strip().lower() for c in head]
    unknown = [c for c in columns if c not in REQUIRED + OPTIONAL]
    missing = [c for c in REQUIRED if c not in columns]
    twice = sorted({c for c in columns if columns.count(c) > 1})
    where = f"{path}:{head_line}"
    if unknown or missing or twice:
        raise PlanError("; ".join(
            ([f"unknown column(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing column(s) {', '.join(missing)}"] if missing else [])
            + ([f"column(s) {', '.join(twice)} named twice"] if twice else [])),
            where=where, hint="columns: " + ", ".join(REQUIRED + OPTIONAL)
            + " (the first four required)")
    links = _links(path, columns, rows[1:], hosts)
    if not links:
        raise PlanError("the cable plan names no cable", where=str(path))
    return Plan(str(path), hashlib.sha256(data).hexdigest(), tuple(links))


__all__ = ["OPTIONAL", "REQUIRED", "Plan", "PlanError", "PlanLink", "read_plan"]
