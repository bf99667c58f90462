"""`dcgmi diag`: the table of DCGM 2/3/4 and the `-j` JSON of DCGM 3/4."""

from __future__ import annotations

import json
import re
from typing import Any

from nodecert_node.parse import ParseError

_MESSAGE_ROWS = ("Error", "Warning", "Info")
_GPU_SUB = re.compile(r"^GPU\s*(\d+):\s*(\S.*)$")
_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+[+|]")
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+$")
_ROW = re.compile(r"^\|\s?(.*?)\s*\|(.*)\|$")


class _Table:
    """Reading state: the section and test a continuation row belongs to."""

    def __init__(self) -> None:
        self.meta: dict[str, str] = {}
        self.tests: dict[str, str] = {}
        self.details: dict[str, list[str]] = {}
        self.gpus: dict[str, dict[int, str]] = {}
        self.section = ""
        self.cur: str | None = None
        self.in_message = False
        self.complete = False
        self.seen = False
        self.full = False  # the previous message chunk filled its cell (wrapped mid-word)

    def row(self, line: str, name: str, inner: str) -> None:
        value = inner.strip()
        self.seen, self.complete = True, False
        prev_full = self.full
        self.full = (name in _MESSAGE_ROWS or not name) and len(inner) > 10 and \
            len(inner.rstrip()) >= len(inner) - 2
        if name == "Diagnostic" and value == "Result":
            return
        if self.section == "Metadata":
            if name:
                self.meta[name], self.cur = value, name
            elif self.cur is not None:  # a wrapped metadata value
                self.meta[self.cur] = f"{self.meta[self.cur]} {value}".strip()
            return
        if name in _MESSAGE_ROWS:
            if self.cur is None:
                raise ParseError(f"dcgmi diag: a {name!r} row before any test: {line!r}")
            self.details[self.cur].append(f"{name}: {value}")
            self.in_message = True
        elif not name:
            self.continuation(line, inner, value, prev_full)
        else:
            key = name if name not in self.tests else f"{name} ({self.section})"
            self.tests[key], self.cur, self.in_message = value, key, False
            self.details[key], self.gpus[key] = [], {}

    def continuation(self, line: str, inner: str, value: str, prev_full: bool) -> None:
        """A row with an empty name: a per-GPU result or the rest of a wrapped message."""
        if self.cur is None:
            if value:
                raise ParseError(f"dcgmi diag: a continuation row before any test: {line!r}")
            return
        g = _GPU_SUB.match(value)
        msgs = self.details[self.cur]
        if g:
            self.gpus[self.cur][int(g.group(1))] = g.group(2).strip()
            self.in_message = False
        elif value and self.in_message and msgs:
            # DCGM wraps at a fixed width, mid-word: a chunk that filled its cell goes on
            # directly (the next chunk keeps its own leading space)
            msgs[-1] += inner.rstrip() if prev_full else " " + value
        elif value:
            msgs.append(value)
            self.in_message = True


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """`dcgmi diag -r N`: metadata, each test's result, its messages and per-GPU results.

    Reads `-j` JSON (DCGM 3 "DCGM GPU Diagnostic", DCGM 4 "DCGM Diagnostic") and the
    table of DCGM 2/3 ("Fail - GPU: 0" plus "Warning" rows) and DCGM 4 (per-GPU
    "GPU0: Pass" sub-rows). A row with an empty name continues the test above: a per-GPU
    result or a wrapped message; an Error/Warning/Info row is a message, never a test.
    "complete" is False when the closing border is missing (output cut short).
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _dcgmi_json(stripped)
    t = _Table()
    for raw in text.splitlines():
        line = raw.rstrip()
        sm = _SECTION.match(line)
        if sm:
            t.section, t.cur, t.in_message, t.complete = sm.group(1), None, False, False
        elif _BORDER.match(line):
            t.complete = t.seen  # a border after rows closes the table (so far)
        else:
            m = _ROW.match(line)
            if m:
                inner = m.group(2)[1:] if m.group(2).startswith(" ") else m.group(2)
                t.row(line, m.group(1), inner)
    if not t.tests and not t.meta:
        raise ParseError("no diagnostic table: not `dcgmi diag` output")
    return {"meta": t.meta, "tests": t.tests, "details": t.details, "gpus": t.gpus,
            "complete": t.complete, "format": "table"}


def _dcgmi_json(text: str) -> dict[str, Any]:
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except ValueError as exc:
        raise ParseError(f"dcgmi diag -j: JSON is cut short or corrupt: {exc}") from exc
    if not isinstance(obj, dict):
        raise ParseError("dcgmi diag -j: not a JSON object")
    root = obj.get("DCGM Diagnostic") or obj.get("DCGM GPU Diagnostic")
    if not isinstance(root, dict) or not isinstance(root.get("test_categories"), list):
        raise ParseError("dcgmi diag -j: no 'DCGM Diagnostic' / 'DCGM GPU Diagnostic' "
                         "object with test_categories")
    meta: dict[str, str] = {}
    for src in (obj, root, obj.get("metadata"), root.get("metadata")):
        if isinstance(src, dict):
            for k in ("version", "DCGM Version", "Driver Version Detected", "GPU Device IDs"):
                if isinstance(src.get(k), (str, int, float)):
                    meta["DCGM Version" if k == "version" else k] = str(src[k])
    tests: dict[str, str] = {}
    details: dict[str, list[str]] = {}
    gpus: dict[str, dict[int, str]] = {}
    rank = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
    for cat in root["test_categories"]:
        for t in (cat or {}).get("tests") or []:
            name = str(t.get("name") or "")
            if not name:
                raise ParseError("dcgmi diag -j: a test without a name")
            results = t.get("results") or []
            per: dict[int, str] = {}
            msgs: list[str] = []
            for r in results:
                st = str(r.get("status", "")).strip()
                ident = r.get("entity_id", r.get("gpu_id", r.get("gpu_ids")))
                if isinstance(ident, (int, str)) and str(ident).isdigit():
                    per[int(ident)] = st
                for w in r.get("warnings") or []:
                    msgs.append("Warning: " + str(w.get("warning", w) if isinstance(w, dict)
                                                  else w))
                if r.get("info"):
                    msgs.append(f"Info: {r['info']}")
            summary = (t.get("test_summary") or {}).get("status")
            statuses = [summary] if summary else [r.get("status", "") for r in results]
            worst = max((str(s) for s in statuses if s),
                        key=lambda s: rank.get(s.lower()[:4], 3), default="")
            if not worst:
                raise ParseError(f"dcgmi diag -j: test {name!r} has no status")
            tests[name], details[name], gpus[name] = worst, msgs, per
    return {"meta": meta, "tests": tests, "details": details, "gpus": gpus,
            "complete": True, "format": "json"}
