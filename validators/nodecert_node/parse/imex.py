"""`nvidia-imex-ctl -N`: the IMEX domain as one node's daemon sees it.

Two layouts are known: R570.172 and later (`Node #N   - <address> - READY   - Version: V`,
`!V!`/`!M!` in the legend, 4-character matrix columns, a blank line before `Domain
State`) and the older 570.00 one (no Version column, 3-character columns). A line the
format does not know is kept in `unknown`, never read as a node; text without the
`Domain State` line, or ending inside it (no final newline), is truncated and refused.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

_NODE = re.compile(r"^Node\s+#(\d+)\s+-\s+(\S+)\s+-\s+([A-Z_]+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_HEAD = re.compile(r"^\s*Nodes\s+From\\To\s+((?:\d+\s*)+)$")
_ROW = re.compile(r"^\s*(\d+)\s+((?:\S+\s*)+)$")
_STATE = re.compile(r"^Domain State:\s*(\S+)\s*$")
_LEGEND = re.compile(r"^(\S{1,3}) - (.+)$")

# The connection codes the legend defines (the tool prints its own legend; these are the
# ones nodecert judges by): C is the only one ready for operation.
MEANING = {"C": "Connected", "I": "Invalid (not reachable)", "N": "Never Connected",
           "R": "Recovering", "D": "Disconnected", "A": "Authenticating",
           "!V!": "version mismatch", "!M!": "node map mismatch"}


class _Reading:
    """What has been read so far, section by section (the legend, the node list, the
    connectivity table, the domain state)."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.matrix: dict[int, dict[int, str]] = {}
        self.legend: dict[str, str] = {}
        self.columns: list[int] = []
        self.state: str | None = None
        self.unknown: list[str] = []
        self.section = "legend"

    def feed(self, line: str) -> None:
        text = line.strip()
        if line.startswith("Connectivity Table Legend") or text == "Nodes:":
            self.section = "legend" if text != "Nodes:" else "nodes"
            return
        m = _STATE.match(text)
        if m:
            self.state, self.section = m.group(1), "end"
            return
        head = _HEAD.match(line)
        if head:
            self.columns, self.section = [int(c) for c in head.group(1).split()], "matrix"
            return
        if self.section == "nodes":
            nm = _NODE.match(text)
            if nm is None:
                raise ParseError(f"not an IMEX node line: {text[:120]!r}")
            self.nodes.append({"index": int(nm.group(1)), "address": nm.group(2),
                               "state": nm.group(3), "version": nm.group(4)})
        elif self.section == "matrix":
            rm = _ROW.match(line)
            cells = rm.group(2).split() if rm else []
            if rm is None or len(cells) != len(self.columns):
                raise ParseError(f"connectivity row {text[:80]!r} has {len(cells)} cells "
                                 f"for {len(self.columns)} columns")
            self.matrix[int(rm.group(1))] = dict(zip(self.columns, cells))
        else:
            lm = _LEGEND.match(text) if self.section == "legend" else None
            if lm:
                self.legend[lm.group(1)] = lm.group(2)
            else:  # the timestamp line, or a line of a newer layout
                self.unknown.append(line)


def parse_imex_status(text: str) -> dict[str, Any]:
    """{nodes: [{index, address, state, version}], matrix: {from: {to: code}},
    domain_state, legend: {code: meaning}, unknown: [lines]}. ParseError when the text
    is not this tool's, is truncated, or a matrix row does not fit its header."""
    r = _Reading()
    for raw in text.splitlines():
        if raw.strip():
            r.feed(raw.rstrip())
    if r.state is None:
        raise ParseError("no 'Domain State:' line: not nvidia-imex-ctl -N output, or "
                         "truncated")
    last = text.rstrip("\r\n").rsplit("\n", 1)[-1].strip()
    if last.startswith("Domain State:") and not text.endswith("\n"):
        # The tool ends its output with a newline: without it the state may be cut
        # ("U" of "UP"), and a cut state would be judged as a state the domain is in.
        raise ParseError(f"the output ends inside its last line ({last!r}): truncated")
    if not r.nodes:
        raise ParseError("no 'Node #N - address - STATE' lines: the domain lists no node")
    indexes = [n["index"] for n in r.nodes]
    if len(set(indexes)) != len(indexes):
        raise ParseError("a node index is listed twice")
    if r.matrix and sorted(r.matrix) != sorted(indexes):
        raise ParseError(f"the connectivity table's rows ({sorted(r.matrix)}) are not the "
                         f"listed nodes ({sorted(indexes)})")
    return {"nodes": r.nodes, "matrix": r.matrix, "domain_state": r.state,
            "legend": r.legend, "unknown": r.unknown}


__all__ = ["MEANING", "parse_imex_status"]
