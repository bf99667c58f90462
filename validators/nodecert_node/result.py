"""The one Result type every check produces, and the verdict scale.

A Result is immutable and JSON-round-trippable: the node emits it, the control
side stores it, certification (a later issue) signs it.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

SCHEMA = "nodecert.result/v1"
EVIDENCE_LIMIT = 64 * 1024  # characters of raw output kept inline; the digest covers all of it


class Verdict(enum.IntEnum):
    """PASS < WARN < FAIL < ERROR; a node's verdict is the worst of its checks."""

    PASS = 0
    WARN = 1
    FAIL = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return max(verdicts, default=Verdict.PASS)


@dataclass(frozen=True)
class Evidence:
    """Raw output of one tool run: what ran, how it ended, the output and its digest."""

    name: str
    command: str
    returncode: int | None
    output: str
    sha256: str
    truncated: bool = False
    duration_s: float = 0.0

    @classmethod
    def of(cls, name: str, command: str, returncode: int | None, output: str,
           duration_s: float = 0.0) -> Evidence:
        digest = hashlib.sha256(output.encode("utf-8", "surrogateescape")).hexdigest()
        kept = output if len(output) <= EVIDENCE_LIMIT else output[:EVIDENCE_LIMIT]
        return cls(name, command, returncode, kept, digest, len(output) > EVIDENCE_LIMIT,
                   round(duration_s, 3))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "command": self.command, "returncode": self.returncode,
                "sha256": self.sha256, "truncated": self.truncated,
                "duration_s": self.duration_s, "output": self.output}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        return cls(str(d["name"]), str(d["command"]), d.get("returncode"), str(d["output"]),
                   str(d["sha256"]), bool(d.get("truncated", False)),
                   float(d.get("duration_s", 0.0)))


@dataclass(frozen=True)
class Threshold:
    """A limit and where it came from (profile file + its cited source, spec, or CLI)."""

    value: Any
    op: str  # ">=", "<=", "==", "in", ...
    unit: str = ""
    origin: str = ""  # e.g. "profile h200-sxm (validators/profiles/h200-sxm.yml)", "inventory"
    source: str = ""  # the citation behind the number

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "op": self.op, "unit": self.unit, "origin": self.origin,
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Threshold:
        return cls(d["value"], str(d["op"]), str(d.get("unit", "")), str(d.get("origin", "")),
                   str(d.get("source", "")))


@dataclass(frozen=True)
class Result:
    check: str
    verdict: Verdict
    summary: str
    value: Any = None
    unit: str = ""
    thresholds: dict[str, Threshold] = field(default_factory=dict)
    findings: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    fault_code: str = ""
    remediation: str = ""
    duration_s: float = 0.0
    simulated: bool = False
    facts: dict[str, Any] = field(default_factory=dict)  # parsed data later stages reuse

    def with_(self, **changes: Any) -> Result:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "check": self.check, "verdict": self.verdict.name,
            "simulated": self.simulated, "summary": self.summary, "value": self.value,
            "unit": self.unit,
            "thresholds": {k: t.as_dict() for k, t in sorted(self.thresholds.items())},
            "findings": list(self.findings), "fault_code": self.fault_code,
            "remediation": self.remediation, "duration_s": round(self.duration_s, 3),
            "facts": self.facts, "evidence": [e.as_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} result: schema={d.get('schema')!r}")
        return cls(
            check=str(d["check"]), verdict=Verdict[str(d["verdict"])],
            summary=str(d["summary"]), value=d.get("value"), unit=str(d.get("unit", "")),
            thresholds={k: Threshold.from_dict(v) for k, v in d.get("thresholds", {}).items()},
            findings=tuple(str(f) for f in d.get("findings", [])),
            evidence=tuple(Evidence.from_dict(e) for e in d.get("evidence", [])),
            fault_code=str(d.get("fault_code", "")), remediation=str(d.get("remediation", "")),
            duration_s=float(d.get("duration_s", 0.0)), simulated=bool(d.get("simulated")),
            facts=dict(d.get("facts", {})))


def error_result(check: str, summary: str, *, evidence: tuple[Evidence, ...] = (),
                 fault_code: str = "NC-CHECK-ERROR", remediation: str = "",
                 duration_s: float = 0.0) -> Result:
    return Result(check, Verdict.ERROR, summary, evidence=evidence, fault_code=fault_code,
                  remediation=remediation or "Look at the evidence; re-run the check after "
                  "fixing the cause. An ERROR is never a pass.", duration_s=duration_s)
