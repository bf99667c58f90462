"""What every check gets (its context) and the helpers checks share.

`Ctx` wraps the plan the control side sent: the order spec, the resolved limits,
the suite's options. `nvidia_smi_q` is the common first step of every GPU check
and turns "no GPU" or "no driver" into a FAIL (`NoGpu`), never a pass.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from nodecert_node.contract import Evidence, Limits, Plan, Result, Verdict
from nodecert_node.parse import pci, smi
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
    """The node has no usable NVIDIA GPU (absent, or no driver): a FAIL, never a pass."""

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
