"""stack.conformance, stack.advisories and stack.framework_smoke.

stack.conformance and stack.advisories are gathered here and judged on the control side.

The judge is the post-provision conformance logic (nodecert.stack.conformance.judge),
which needs the stack manifest; rather than duplicate it on the node, the node
runs the same gathering script (sent in the plan) and returns its raw output.
The control side always replaces this provisional Result with the judged one;
if it cannot, the check stays ERROR, never PASS.
"""

from __future__ import annotations

import os
from typing import Any

from nodecert_node import gpu
from nodecert_node.context import Ctx, judge_findings
from nodecert_node.contract import Result, Verdict
from nodecert_node.framework import WORKERS, NoFramework, framework, framework_python
from nodecert_node.parse import ParseError
from nodecert_node.parse.events import events
from nodecert_node.parse.system import parse_runc_version
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run


@check("stack.conformance", order=30, suites=("quick", "standard", "full", "lab"),
       tools=("dpkg-query", "apt-mark", gpu.SMI),
       description="every pinned package installed at its version and held; driver loaded")
def stack_conformance(ctx: Ctx) -> Result:
    spec = ctx.plan.conformance
    script = spec.get("script")
    if not script:
        return Result("stack.conformance", Verdict.ERROR,
                      "no stack assigned to this host, so conformance cannot be judged",
                      fault_code="NC-NO-STACK",
                      remediation="Give the host a stack (nodecert_stack in the inventory or "
                                  "--stack) and re-run.")
    out = run(["/bin/sh", "-c", script], timeout=ctx.timeout, name="conformance facts")
    return Result("stack.conformance", Verdict.ERROR, "gathered; awaiting the control-side judge",
                  evidence=(out.evidence,), facts={"conformance_output": out.text,
                                                   "stack": spec.get("stack")},
                  fault_code="NC-NOT-JUDGED")


# --- stack.advisories ----------------------------------------------------------------------

@check("stack.advisories", order=31, suites=("quick", "standard", "full", "lab"),
       tools=(gpu.SMI,),
       description="driver, container toolkit and runc at or above the security bulletins' "
                   "fixed releases")
def stack_advisories(ctx: Ctx) -> Result:
    """Gathers the installed versions; the control side judges them against its table of
    security bulletins (nodecert.stack.advisories) and always replaces this Result."""
    driver, drv_ev = gpu.backend(ctx).driver_version(ctx)
    versions: dict[str, Any] = {"driver": driver}
    evidence = [drv_ev]
    try:
        ctk = run(["dpkg-query", "-W", "-f=${Version}\t${db:Status-Abbrev}",
                   "nvidia-container-toolkit"], timeout=ctx.timeout, ok_codes=(0, 1),
                  name="container toolkit version")
        evidence.append(ctk.evidence)
        ver, _, state = ctk.text.strip().partition("\t")
        versions["container_toolkit"] = ver if state[1:2] == "i" else None
    except ToolError as exc:
        if exc.kind != "missing":
            raise
        versions["container_toolkit"] = None  # not a dpkg system: nothing installed by us
    try:
        runc = run(["runc", "--version"], timeout=ctx.timeout, name="runc version")
        evidence.append(runc.evidence)
        try:
            versions["runc"] = parse_runc_version(runc.text)
        except ParseError as exc:
            versions["runc"] = {"error": str(exc)}
    except ToolError as exc:
        if exc.kind != "missing":
            raise
        versions["runc"] = None
    return Result("stack.advisories", Verdict.ERROR, "gathered; awaiting the control-side judge",
                  evidence=tuple(evidence), facts={"installed": versions},
                  fault_code="NC-NOT-JUDGED")


# --- stack.framework_smoke ---------------------------------------------------------------------


def _libraries(fw: str, info: dict[str, Any], expect: dict[str, Any], on_gpus: bool, *,
               fails: list[str], warns: list[str]) -> None:
    """The libraries a framework bundles: cuDNN present (another major than the system's
    warns), and torch's NCCL usable where there are GPUs (another minor warns)."""
    if not info.get("cudnn"):
        fails.append(f"{fw}: no cuDNN")
    elif expect.get("cudnn") and _major(info["cudnn"]) != _major(expect["cudnn"]):
        warns.append(f"{fw}: bundles cuDNN {info['cudnn']}, the stack's system cuDNN is "
                     f"{expect['cudnn']} (different major)")
    if fw == "torch" and on_gpus:
        nccl = str(info.get("nccl") or "")
        if not nccl or nccl.startswith("unavailable"):
            fails.append(f"torch: NCCL {nccl or 'not reported'}")
        elif expect.get("nccl") and _mm(nccl) != _mm(expect["nccl"]):
            warns.append(f"torch: bundles NCCL {nccl}, the stack's system NCCL is "
                         f"{expect['nccl']} (different minor)")


def judge_smoke(evs: list[dict[str, Any]], expect: dict[str, Any], gpu_count: int) -> Result:
    """expect: {"torch": version, "torch_cuda": "13.0", "tensorflow": ..., "tensorflow_cuda":
    ..., "cudnn": stack's cuDNN, "nccl": stack's NCCL}; gpu_count: GPUs nvidia-smi sees."""
    fails: list[str] = []
    warns: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    for e in evs:
        if e["event"] == "framework":
            seen[str(e["framework"])] = e
    wanted = [f for f in ("torch", "tensorflow") if expect.get(f)]
    for fw in wanted:
        info = seen.get(fw)
        errs = [str(e.get("message")) for e in evs
                if e["event"] == "error" and e.get("framework") == fw]
        if info is None:
            fails.append(f"{fw}: {errs[0] if errs else 'did not report'}")
            continue
        if str(info.get("version")) != str(expect[fw]):
            fails.append(f"{fw}: version {info.get('version')}, the stack pins {expect[fw]}")
        want_cuda = expect.get(f"{fw}_cuda")
        if want_cuda and str(info.get("cuda")) != str(want_cuda):
            fails.append(f"{fw}: built for CUDA {info.get('cuda')}, the stack pins "
                         f"{want_cuda}")
        gpus = list(info.get("gpus") or [])
        if len(gpus) != gpu_count:
            fails.append(f"{fw}: sees {len(gpus)} GPUs, nvidia-smi sees {gpu_count}")
        _libraries(fw, info, expect, bool(gpus), fails=fails, warns=warns)
        trained = {str(e["device"]): e for e in evs
                   if e["event"] == "train" and e.get("framework") == fw}
        for msg in errs if info is not None else []:
            fails.append(f"{fw}: {msg[:300]}")
        for dev, t in sorted(trained.items()):
            curve = [float(v) for v in t.get("losses") or []]
            if len(curve) < 2 or not curve[-1] < 0.5 * curve[0]:
                fails.append(f"{fw} on {dev}: loss did not fall by half "
                             f"({curve[0] if curve else '-'} -> "
                             f"{curve[-1] if curve else '-'})")
        if gpus and len(trained) < len(gpus) and not errs:
            fails.append(f"{fw}: trained on {len(trained)} of {len(gpus)} GPUs")
    if not wanted:
        return Result("stack.framework_smoke", Verdict.ERROR, "the stack pins no framework "
                      "to test", fault_code="NC-NO-FRAMEWORK")
    value = {fw: {"version": seen.get(fw, {}).get("version"),
                  "cuda": seen.get(fw, {}).get("cuda"), "cudnn": seen.get(fw, {}).get("cudnn"),
                  "nccl": seen.get(fw, {}).get("nccl"), "gpus": len(seen.get(fw, {}).get("gpus")
                                                                     or [])} for fw in wanted}
    losses = {f"{e.get('framework')} {e.get('device')}": [e["losses"][0], e["losses"][-1]]
              for e in evs if e["event"] == "train" and e.get("losses")}
    return judge_findings(
        "stack.framework_smoke", fails, warns,
        "; ".join(f"{fw} {value[fw]['version']} (CUDA {value[fw]['cuda']}) sees "
                  f"{value[fw]['gpus']} GPUs and trains on each" for fw in wanted),
        value=value, facts={"loss_first_last": losses},
        fault_code="NC-FRAMEWORK" if fails else "",
        remediation="Re-provision the framework environment (nodecert provision) and check "
                    "that it matches the stack; a framework that cannot train is not ready."
                    if fails else "")


def _major(v: Any) -> str:
    s = str(v)
    return s.split(".", maxsplit=1)[0] if "." in s else (str(int(s) // 10000) if s.isdigit() else s)


def _mm(v: Any) -> str:
    return ".".join(str(v).split(".")[:2])


@check("stack.framework_smoke", order=31, suites=("standard", "full", "lab"),
       tools=(),
       description="the stack's framework sees every GPU and trains a small model on each")
def framework_smoke(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    try:
        py = framework_python(ctx)
    except NoFramework as exc:
        return Result("stack.framework_smoke", Verdict.FAIL, str(exc), evidence=tuple(ev),
                      fault_code="NC-NO-FRAMEWORK",
                      remediation="Provision the stack (nodecert provision) so its framework "
                                  "environment exists, then re-run.")
    fw = framework(ctx)
    evs: list[dict[str, Any]] = []
    steps = int((ctx.options.get("load") or {}).get("smoke_steps", 30))
    for name in ("torch", "tensorflow"):
        if not fw.get(name):
            continue
        try:
            out = run([py, os.path.join(WORKERS, "smoke.py"), "--framework", name, "--steps",
                       str(steps)], timeout=max(ctx.timeout, 600), name=f"{name} smoke",
                      ok_codes=(0, 2, 3))
            evs += events(out.text)
            ev.append(out.evidence)
        except ToolError as exc:
            evs.append({"event": "error", "framework": name, "message": str(exc)})
            if exc.evidence:
                ev.append(exc.evidence)
    return judge_smoke(evs, fw, len(gpus)).with_(evidence=tuple(ev))
