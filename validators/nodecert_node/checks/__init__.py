"""Check registry and the context every check gets.

A check is `gather(ctx) -> (facts, evidence)` plus a pure `judge(facts, ctx.limits)`;
`run_check` glues them and turns any exception into an ERROR Result.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Dict, List, Tuple

from nodecert_node.parse import ParseError, pci, smi
from nodecert_node.result import Evidence, Result, Threshold, Verdict, error_result
from nodecert_node.tools import ToolError, run

Facts = Dict[str, Any]
Gathered = Tuple[Facts, List[Evidence]]


class Limits:
    """The thresholds the control side resolved for this host (profile, spec, CLI)."""

    def __init__(self, raw: dict[str, dict[str, Any]]) -> None:
        self._t = {k: Threshold.from_dict(v) for k, v in raw.items()}

    def has(self, key: str) -> bool:
        return key in self._t

    def get(self, key: str) -> Threshold:
        if key not in self._t:
            raise KeyError(f"threshold {key!r} is not set by the profile, spec or options")
        return self._t[key]

    def value(self, key: str, default: Any = None) -> Any:
        return self._t[key].value if key in self._t else default

    def pick(self, *keys: str) -> dict[str, Threshold]:
        return {k: self._t[k] for k in keys if k in self._t}


class Ctx:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.spec: dict[str, Any] = dict(plan.get("spec") or {})
        self.limits = Limits(plan.get("thresholds") or {})
        self.options: dict[str, Any] = dict(plan.get("options") or {})
        self.timeout = float(plan.get("tool_timeout_s", 60))


class NoGpu(Exception):
    """The node has no usable NVIDIA GPU (absent, or no driver): a FAIL, never a pass."""

    def __init__(self, message: str, evidence: list[Evidence], code: str, fix: str) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.code = code
        self.fix = fix


Check = Callable[[Ctx], Result]
REGISTRY: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    def deco(fn: Check) -> Check:
        REGISTRY[name] = fn
        return fn
    return deco


def result(name: str, verdict: Verdict, summary: str, **kw: Any) -> Result:
    return Result(name, verdict, summary, **kw)


def judge_findings(name: str, fails: list[str], warns: list[str], ok_summary: str,
                   **kw: Any) -> Result:
    """FAIL when any fail finding, WARN when only warnings, else PASS."""
    if fails:
        summary = fails[0] if len(fails) == 1 else f"{fails[0]} (+{len(fails) - 1} more)"
        return Result(name, Verdict.FAIL, summary, findings=tuple(fails + warns), **kw)
    if warns:
        summary = warns[0] if len(warns) == 1 else f"{warns[0]} (+{len(warns) - 1} more)"
        return Result(name, Verdict.WARN, summary, findings=tuple(warns), **kw)
    return Result(name, Verdict.PASS, ok_summary, **kw)


def nvidia_smi_q(ctx: Ctx) -> tuple[dict[str, str], list[dict[str, Any]], list[Evidence]]:
    """`nvidia-smi -q`, parsed; NoGpu when there is no GPU or no working driver."""
    try:
        out = run(["nvidia-smi", "-q"], timeout=ctx.timeout, ok_codes=(0,))
    except ToolError as exc:
        ev = [exc.evidence] if exc.evidence else []
        gpus_on_bus: int | None = None
        try:
            ls = run(["lspci", "-nn", "-D"], timeout=ctx.timeout)
            ev.append(ls.evidence)
            gpus_on_bus = len(pci.nvidia_gpus(pci.parse_lspci(ls.text)))
        except ToolError as exc2:
            if exc2.evidence:
                ev.append(exc2.evidence)
        if gpus_on_bus == 0:
            raise NoGpu("no NVIDIA GPU on this node: lspci shows no NVIDIA display/3D "
                        "controller", ev, "NC-NO-GPU",
                        "Check that the GPUs are seated and powered and the node is the one "
                        "ordered; a GPU node without GPUs cannot be certified.") from exc
        if exc.kind == "timeout":
            raise
        raise NoGpu(f"the NVIDIA driver is not working: {exc}", ev, "NC-NO-DRIVER",
                    "Install/load the pinned NVIDIA driver (nodecert provision), then check "
                    "`nvidia-smi` and `dmesg | grep NVRM`.") from exc
    header, gpus = smi.parse_q(out.text)
    if not gpus:
        raise NoGpu("nvidia-smi reports no GPU (\"No devices were found\")", [out.evidence],
                    "NC-NO-GPU", "Check GPU seating/power and `dmesg | grep NVRM`.")
    return header, gpus, [out.evidence]


def run_check(name: str, ctx: Ctx) -> Result:
    """Run one check; whatever happens, return a Result (never raise)."""
    start = time.monotonic()
    fn = REGISTRY.get(name)
    if fn is None:
        return error_result(name, f"unknown check {name!r}", fault_code="NC-UNKNOWN-CHECK")
    try:
        res = fn(ctx)
    except NoGpu as exc:
        res = Result(name, Verdict.FAIL, str(exc), evidence=tuple(exc.evidence),
                     fault_code=exc.code, remediation=exc.fix)
    except ToolError as exc:
        what = {"timeout": "NC-TOOL-TIMEOUT", "missing": "NC-TOOL-MISSING"}.get(
            exc.kind, "NC-TOOL-FAILED")
        res = error_result(name, str(exc), evidence=(exc.evidence,) if exc.evidence else (),
                           fault_code=what)
    except ParseError as exc:
        res = error_result(name, f"could not read the tool output: {exc}",
                           fault_code="NC-PARSE")
    except Exception:  # a crash in one check must never abort the suite
        tb = traceback.format_exc()
        res = error_result(name, f"check crashed: {tb.strip().splitlines()[-1]}",
                           evidence=(Evidence.of("traceback", "", None, tb),),
                           fault_code="NC-CHECK-CRASH")
    return res.with_(duration_s=time.monotonic() - start)
