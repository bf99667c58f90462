"""What every check gets (its context) and the helpers checks share.

`Ctx` wraps the plan the control side sent: the order spec, the resolved limits,
the suite's options. Every GPU check starts with `gpu.inventory(ctx)` (the GPU
backend), which turns "no GPU" or "no driver" into a FAIL (`NoGpu`), never a pass.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from nodecert_node.contract import Evidence, Limits, Plan, Result, Verdict
from nodecert_node.tools import ToolError, run

Facts = Dict[str, Any]
Gathered = Tuple[Facts, List[Evidence]]


class Ctx:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.spec: dict[str, Any] = dict(plan.spec)
        self.limits: Limits = plan.limits()
        self.options: dict[str, Any] = dict(plan.options)
        self.timeout = float(plan.tool_timeout_s)


class NoGpu(Exception):
    """The node has no usable GPU (absent, or no driver): a FAIL, never a pass."""

    def __init__(self, message: str, evidence: list[Evidence], code: str, fix: str) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.code = code
        self.fix = fix


def try_text(ev: list[Evidence], argv: list[str], ctx: Ctx, *, name: str = "") -> str | None:
    """A tool's output, or None when it is missing, fails or hangs (its evidence kept
    either way): for facts a check can do without."""
    try:
        out = run(argv, timeout=ctx.timeout, name=name)
    except ToolError as exc:
        if exc.evidence:
            ev.append(exc.evidence)
        return None
    ev.append(out.evidence)
    return out.text


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


def within(limits: Limits, key: str, measured: Any, what: str, into: list[str]) -> bool | None:
    """Judge `measured` against the threshold `key` with Threshold.check; on a miss, add
    "<what>: needs >= X, measured Y" to `into`. None where the host has no such threshold."""
    t = limits.opt(key)
    if t is None:
        return None
    outcome = t.check(measured)
    if not outcome.ok:
        into.append(f"{what}: {outcome.message}")
    return outcome.ok
