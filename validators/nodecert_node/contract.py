"""The contract between the node and the control side.

The only module of the node package that the control side imports. Standard
library only (the node runs it under its own python3, 3.8+). It holds:

* `Verdict` (PASS < WARN < FAIL < ERROR) and `worst`;
* `Evidence` and `Result`, immutable and JSON-round-trippable: the node emits a
  Result, the control side stores it, certification signs it;
* `Threshold`, whose `check(measured)` is the one place a limit is compared
  (honouring its `op`) and the one message format ("needs >= 440 GB/s, measured
  37.9 GB/s"); `Limits`, the thresholds resolved for one host;
* `Plan`, what the control side sends a node, serialised here and nowhere else;
* `figures(result)`, the headline numbers of a check, used by drift, the HTML
  report, the node's metrics and history alike;
* `write_atomic`, the one way a result file is written (temp file, fsync, rename).

This module is long because it is the whole contract in one file: the control side
imports nothing else of the node package but it and the parsers.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable

RESULT_SCHEMA = "nodecert.result/v1"
PLAN_SCHEMA = "nodecert.plan/v1"
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


def json_sha256(doc: Any) -> str:
    """sha256 of a JSON document in canonical form (sorted keys, no whitespace, UTF-8):
    what the node states of a document and the control side computes again."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


# --- thresholds ----------------------------------------------------------------------------

OPS = (">=", "<=", ">", "<", "==", "in")

# What a host must be for a check to apply (a check's `needs`); the control side plans
# such a check only for a host whose order spec says so (nodecert.validation.plan).
NEEDS = {
    "rack": "a compute tray of a rack (its NVLink domain)",
    "rack-imex": "in a rack that runs an IMEX domain (the host's, or ComputeDomains')",
    "attestation": "a host whose site asked for GPU attestation",
}

# A rack's `imex` when the customer's Kubernetes runs IMEX (DRA ComputeDomains): the trays
# carry nvidia-imex, and its host service must be stopped and masked (they exclude each
# other: NVIDIA's DRA driver install guide).
COMPUTE_DOMAINS = "compute-domains"


def _fmt(v: Any, unit: str) -> str:
    if isinstance(v, float):
        text = f"{v:.4g}" if abs(v) < 1e6 else f"{v:.0f}"
    elif isinstance(v, (list, tuple)):
        text = " / ".join(str(x) for x in v)
    else:
        text = str(v)
    return f"{text} {unit}" if unit and not isinstance(v, (list, tuple, str)) else text


@dataclass(frozen=True)
class Outcome:
    """One comparison: whether the measured value meets the threshold, and the message."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Threshold:
    """A limit, how it compares, and where it came from (profile + cited source, spec, CLI)."""

    value: Any
    op: str  # one of OPS
    unit: str = ""
    origin: str = ""  # e.g. "profile H200-SXM (profiles/H200-SXM.yml)", "inventory ..."
    source: str = ""  # the citation behind the number

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"threshold op {self.op!r} is not one of {', '.join(OPS)}")

    def describe(self) -> str:
        """'>= 440 GB/s' (or 'one of NVIDIA H200')."""
        if self.op == "in":
            return f"one of {_fmt(self.value, '')}"
        return f"{self.op} {_fmt(self.value, self.unit)}"

    def check(self, measured: Any) -> Outcome:
        """Compare `measured` with the limit; the message is the one format every judge uses.

        A measured value that cannot be compared (None, NaN, the wrong type) never
        passes: a missing figure must not read as a met limit.
        """
        ok = False
        if self.op == "in":
            ok = measured in list(self.value)
        elif self.op == "==":
            ok = measured == self.value
        else:
            try:
                v = float(self.value)
            except (TypeError, ValueError):
                # A limit that is not a number is a configuration error, not a measurement:
                # raised, so the check is ERROR (never a FAIL the node did not earn).
                origin = self.origin or "unknown origin"
                raise ValueError(f"threshold value {self.value!r} ({origin}) is not a number "
                                 f"for {self.op!r}") from None
            try:
                m = float(measured)
            except (TypeError, ValueError):
                m = math.nan
            if not math.isnan(m):
                ok = {">=": m >= v, "<=": m <= v, ">": m > v, "<": m < v}[self.op]
        shown = repr(measured) if self.op == "in" and isinstance(measured, str) else \
            _fmt(measured, self.unit)
        return Outcome(ok, f"needs {self.describe()}, measured {shown}")

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "op": self.op, "unit": self.unit, "origin": self.origin,
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Threshold:
        return cls(d["value"], str(d["op"]), str(d.get("unit", "")), str(d.get("origin", "")),
                   str(d.get("source", "")))


class Limits:
    """The thresholds the control side resolved for one host (profile, spec, options)."""

    def __init__(self, raw: dict[str, dict[str, Any]],
                 gaps: dict[str, str] | None = None) -> None:
        self._t = {k: Threshold.from_dict(v) for k, v in raw.items()}
        # Keys the model's profile deliberately leaves open, each with the profile's
        # statement of why (no published or recorded figure): judged as WARN, not PASS.
        self._gaps = {k: str(v) for k, v in (gaps or {}).items() if k not in self._t}

    def has(self, key: str) -> bool:
        return key in self._t

    def get(self, key: str) -> Threshold:
        if key not in self._t:
            raise KeyError(f"threshold {key!r} is not set by the profile, spec or options")
        return self._t[key]

    def opt(self, key: str) -> Threshold | None:
        """The threshold, or None where this host's profile sets none (then nothing is
        judged against it, and the judge says so)."""
        return self._t.get(key)

    def value(self, key: str, default: Any = None) -> Any:
        return self._t[key].value if key in self._t else default

    def pick(self, *keys: str) -> dict[str, Threshold]:
        return {k: self._t[k] for k in keys if k in self._t}

    def gap_notes(self, *keys: str) -> list[str]:
        """One WARN finding per key the profile states it cannot set a floor for."""
        return [f"{k} not judged: {self._gaps[k]}" for k in keys if k in self._gaps]


# --- results -------------------------------------------------------------------------------

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

    def noted(self, source: str, notes: Iterable[str]) -> Result:
        """This result with what a tool said beside its figures (NCCL's root causes,
        perftest's warnings) in its message and in facts["tool_notes"]; the verdict is
        the figures' and stays as it is."""
        notes = [n for n in notes if n]
        if not notes:
            return self
        shown = "; ".join(notes[:3]) + (f" (+{len(notes) - 3} more)" if len(notes) > 3 else "")
        return replace(self, summary=f"{self.summary} [{source} says: {shown}]",
                       facts={**self.facts, "tool_notes": {
                           **self.facts.get("tool_notes", {}), source: list(notes)}})

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": RESULT_SCHEMA, "check": self.check, "verdict": self.verdict.name,
            "simulated": self.simulated, "summary": self.summary, "value": self.value,
            "unit": self.unit,
            "thresholds": {k: t.as_dict() for k, t in sorted(self.thresholds.items())},
            "findings": list(self.findings), "fault_code": self.fault_code,
            "remediation": self.remediation, "duration_s": round(self.duration_s, 3),
            "facts": self.facts, "evidence": [e.as_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        if d.get("schema") != RESULT_SCHEMA:
            raise ValueError(f"not a {RESULT_SCHEMA} result: schema={d.get('schema')!r}")
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


# --- the plan ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What the control side sends a node for one run: the checks in order, the order
    spec, the resolved thresholds, the suite's options and limits."""

    run_id: str
    host: str
    suite: str
    checks: list[str]
    check_timeout_s: float = 300.0
    tool_timeout_s: float = 60.0
    host_timeout_s: float = 0.0
    check_timeouts_s: dict[str, float] = field(default_factory=dict)
    simulated: bool = False
    spec: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    conformance: dict[str, Any] = field(default_factory=dict)
    framework: dict[str, Any] = field(default_factory=dict)
    # Only some of the suite's checks (an operator's --only): such a plan is never kept
    # as the one the node's scheduled runs judge with.
    partial: bool = False

    def as_dict(self) -> dict[str, Any]:
        # A deep copy through json (C) rather than dataclasses.asdict (Python, recursive):
        # a plan carries hundreds of nested threshold entries, and a fleet's controller
        # writes and sends one per host. Every value of a plan is JSON already.
        return {"schema": PLAN_SCHEMA,
                **{f.name: (json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v)
                   for f in fields(self) for v in (getattr(self, f.name),)}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        """Read a plan; refuses another schema and names unknown keys (a plan from a newer
        or older control side must not be half-understood)."""
        if not isinstance(d, dict) or d.get("schema") != PLAN_SCHEMA:
            got = d.get("schema") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not a {PLAN_SCHEMA} plan: schema={got!r}")
        known = {f.name for f in fields(cls)}
        extra = sorted(set(d) - known - {"schema"})
        if extra:
            raise ValueError(f"plan has unknown keys: {', '.join(extra)}")
        missing = sorted({"run_id", "host", "suite", "checks"} - set(d))
        if missing:
            raise ValueError(f"plan lacks: {', '.join(missing)}")
        return cls(**{k: v for k, v in d.items() if k != "schema"})

    def with_(self, **changes: Any) -> Plan:
        return replace(self, **changes)

    def limits(self) -> Limits:
        return Limits(self.thresholds, self.spec.get("threshold_gaps") or {})

    def timeout_for(self, check: str) -> float:
        return float(self.check_timeouts_s.get(check, self.check_timeout_s))


# --- headline figures ----------------------------------------------------------------------

@dataclass(frozen=True)
class Figure:
    """One headline number of a check: its value, unit, which way is better, and the
    label it has per GPU or target where it is one of several."""

    value: float
    unit: str
    better: str  # "higher" | "lower"
    labels: tuple[tuple[str, str], ...] = ()


def _nums(d: Any) -> dict[str, float]:
    if not isinstance(d, dict):
        return {}
    return {str(k): float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _per_gpu(out: dict[str, Figure], name: str, per: dict[str, float], unit: str,
             better: str) -> None:
    """The node's worst GPU under `name` (gemm_tflops_min / soak_peak_temp), and each
    GPU under `name{gpu=N}`."""
    if not per:
        return
    worst_value = min(per.values()) if better == "higher" else max(per.values())
    out[name + ("_min" if better == "higher" else "")] = Figure(worst_value, unit, better)
    for g, x in sorted(per.items()):
        out[f"{name}{{gpu={g}}}"] = Figure(x, unit, better, (("gpu", g),))


def figures(result: dict[str, Any]) -> dict[str, Figure]:
    """The headline figures of one Result (as a dict): name -> Figure.

    Names are stable (they key drift comparisons and metrics): `allreduce_busbw`,
    `gemm_tflops_min`, `gemm_tflops{gpu=N}`, `gemm_tflops_per_w{gpu=N}`, `h2d_gbs_min`,
    `soak_peak_temp`, `soak_peak_temp{gpu=N}`, `soak_sm_mhz{gpu=N}`, `soak_power_w{gpu=N}`,
    `h2d_gbs{gpu=N}`, `d2h_gbs{gpu=N}`, `p2p_gbs{pair=A-B}`, `ecc_corrected{gpu=N}`,
    `link_errors{port=mlx5_N/P}`,
    `idle_temp{gpu=N}`,
    `storage <target> <metric>`, `scaling_efficiency`,
    `training_tokens_s`, `storage <mount> shared_<metric>`. An ERROR result has none:
    a figure from a run that did not finish is no figure.
    """
    if result.get("verdict") == "ERROR":
        return {}
    check = result.get("check")
    v = result.get("value")
    if not isinstance(v, dict):
        return {}
    out: dict[str, Figure] = {}
    if check == "fabric.nccl_allreduce":
        bw = v.get("busbw_gbs")
        if isinstance(bw, (int, float)) and not isinstance(bw, bool):
            out["allreduce_busbw"] = Figure(float(bw), "GB/s", "higher")
    elif check == "load.burnin":
        _per_gpu(out, "gemm_tflops", _nums(v.get("tflops_per_gpu")), "TFLOPS", "higher")
        # Per GPU only: efficiency is stated and compared across the fleet, not held to
        # a node's own past (drift judges node-wide figures).
        energy = v.get("energy")
        per_w = energy.get("tflops_per_w_per_gpu") if isinstance(energy, dict) else None
        for g, x in sorted(_nums(per_w).items()):
            out[f"gemm_tflops_per_w{{gpu={g}}}"] = Figure(x, "TFLOPS/W", "higher",
                                                          (("gpu", g),))
    elif check == "fabric.bandwidth":
        per = _nums(v.get("host_to_device_memcpy_ce"))
        if per:
            out["h2d_gbs_min"] = Figure(min(per.values()), "GB/s", "higher")
        for key, name in (("host_to_device_memcpy_ce", "h2d_gbs"),
                          ("device_to_host_memcpy_ce", "d2h_gbs")):
            for g, x in sorted(_nums(v.get(key)).items()):
                out[f"{name}{{gpu={g}}}"] = Figure(x, "GB/s", "higher", (("gpu", g),))
        for pair, x in sorted(_nums(v.get("device_to_device_memcpy_read_ce")).items()):
            out[f"p2p_gbs{{pair={pair}}}"] = Figure(x, "GB/s", "higher", (("pair", pair),))
    elif check == "load.thermal_soak":
        _per_gpu(out, "soak_peak_temp", _nums(v.get("peak_temp_c")), "C", "lower")
        # The plateau (the soak's second half): a GPU that clocks lower or draws other
        # power than its peers under the same load is the one to look at.
        for key, name, unit in (("plateau_sm_mhz", "soak_sm_mhz", "MHz"),
                                ("plateau_power_w", "soak_power_w", "W")):
            for g, x in sorted(_nums(v.get(key)).items()):
                out[f"{name}{{gpu={g}}}"] = Figure(x, unit, "higher" if unit == "MHz"
                                                   else "lower", (("gpu", g),))
    elif check == "health.gpu":
        # At rest: what a node's runs show over time (a rising count, a warmer idle GPU).
        for key, name, unit in (("ecc_corrected_per_gpu", "ecc_corrected", "errors"),
                                ("temp_c_per_gpu", "idle_temp", "C")):
            for g, x in sorted(_nums(v.get(key)).items()):
                out[f"{name}{{gpu={g}}}"] = Figure(x, unit, "lower", (("gpu", g),))
    elif check in ("net.ib", "net.roce"):
        # Per port, every error counter's count since the last clear, summed: what the
        # port's runs show over time (a link wearing out counts up between runs).
        counters = v.get("counters")
        for port, got in sorted((counters if isinstance(counters, dict) else {}).items()):
            errs = _nums(got)
            if errs:
                out[f"link_errors{{port={port}}}"] = Figure(
                    float(sum(errs.values())), "errors", "lower", (("port", str(port)),))
    elif check == "load.scaling":
        for key, name, unit in (("efficiency", "scaling_efficiency", "ratio"),
                                ("tokens_s_n", "training_tokens_s", "tokens/s")):
            got = v.get(key)
            if isinstance(got, (int, float)) and not isinstance(got, bool):
                out[name] = Figure(float(got), unit, "higher")
    elif check in ("storage.fio", "storage.shared"):
        prefix = "" if check == "storage.fio" else "shared_"
        for target, m in sorted(v.items()):
            for key, unit in (("seq_read_mbps", "MB/s"), ("seq_write_mbps", "MB/s"),
                              ("rand_read_iops", "IOPS"), ("checkpoint_mbps", "MB/s"),
                              ("small_files_per_s", "files/s"), ("gds_read_mbps", "MB/s")):
                got = m.get(key) if isinstance(m, dict) else None
                if isinstance(got, (int, float)) and not isinstance(got, bool):
                    out[f"storage {target} {prefix}{key}"] = Figure(
                        float(got), unit, "higher", (("target", str(target)),))
    return out


def all_figures(results: Iterable[dict[str, Any]]) -> dict[str, Figure]:
    out: dict[str, Figure] = {}
    for r in results:
        out.update(figures(r))
    return out


# --- files ---------------------------------------------------------------------------------

def write_atomic(path: str, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Write `path` whole or not at all: a private temp file in the same directory,
    fsync, rename over the target, fsync the directory. A reader never sees a
    half-written file, and a crash leaves the old file or the new one. durable=False
    skips both fsyncs: still whole or nothing if the process dies, but a power loss
    may keep the old file (for a file rewritten again and again, made durable at the
    end)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            # On the descriptor, never by name: whoever can write the directory could
            # have put a link where the temp file was (chmod would follow it).
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


__all__ = ["COMPUTE_DOMAINS", "EVIDENCE_LIMIT", "NEEDS", "OPS", "PLAN_SCHEMA", "RESULT_SCHEMA",
           "Evidence", "Figure", "Limits", "Outcome", "Plan", "Result", "Threshold", "Verdict",
           "all_figures", "error_result", "figures", "worst", "write_atomic"]
