"""health.gpu (ECC, row remapping, retired pages, clocks events, ...) and health.xid."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from nodecert_node.context import Ctx, NoGpu, judge_findings, nvidia_smi_q, within
from nodecert_node.contract import Limits, Result, Threshold
from nodecert_node.parse import kernel
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

HW_REASONS = {"hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
              "hw_power_brake_slowdown": "HW Power Brake Slowdown"}

# --- health.gpu -------------------------------------------------------------------------


def judge_gpu_health(header: dict[str, str], gpus: list[dict[str, Any]], raw: str,
                     limits: Limits) -> Result:
    name = "health.gpu"
    fails: list[str] = []
    warns: list[str] = []
    for line in raw.splitlines():
        low = line.lower()
        if "unable to determine the device handle" in low or "fallen off the bus" in low:
            fails.append(f"nvidia-smi: {line.strip()} (a GPU has fallen off the bus)")
        elif "infoROM is corrupted" in line or "inforom is corrupted" in low:
            fails.append(f"nvidia-smi: {line.strip()}")
    for g in gpus:
        b = f"GPU {g['bus_id']}"
        if g.get("persistence_mode") is False:
            warns.append(f"{b}: persistence mode is off (enable nvidia-persistenced)")
        if g.get("ecc_current") is False:
            fails.append(f"{b}: ECC is disabled")
        elif g.get("ecc_pending") is not None and g.get("ecc_pending") != g.get("ecc_current"):
            warns.append(f"{b}: ECC mode change pending until the next GPU reset")
        vu = g.get("ecc_volatile_uncorrectable")
        if vu:
            fails.append(f"{b}: {vu} uncorrectable ECC errors since the driver loaded")
        au = g.get("ecc_aggregate_uncorrectable")
        if au and not vu:
            warns.append(f"{b}: {au} uncorrectable ECC errors in the GPU's lifetime "
                         "(none since the driver loaded)")
        if g.get("remap_pending"):
            fails.append(f"{b}: row remapping pending: the GPU needs a reset to retire the "
                         "failing memory rows")
        if g.get("remap_failure"):
            fails.append(f"{b}: row remapping failed: the GPU has run out of spare rows (RMA)")
        retired = (g.get("retired_sbe") or 0) + (g.get("retired_dbe") or 0)
        within(limits, "health.retired_pages_max", retired, f"{b} retired pages", fails)
        if g.get("retired_pending"):
            fails.append(f"{b}: page retirement pending: the GPU needs a reset")
        reasons = g.get("clock_reasons") or {}
        hw = [label for key, label in HW_REASONS.items() if reasons.get(key)]
        if hw:
            fails.append(f"{b}: clocks held down by {', '.join(hw)} at rest")
        if reasons.get("sw_thermal_slowdown"):
            warns.append(f"{b}: SW Thermal Slowdown active at rest")
        action = g.get("recovery_action")
        if action and action.lower() != "none":
            fails.append(f"{b}: driver asks for GPU recovery action {action!r}")
        if g.get("inforom_image") is None and g.get("name"):
            warns.append(f"{b}: infoROM image version not readable")
    total_vu = sum(g.get("ecc_volatile_uncorrectable") or 0 for g in gpus)
    return judge_findings(
        name, fails, warns,
        f"{len(gpus)} GPUs: ECC on, 0 uncorrectable errors, no pending remap/retirement, "
        "no hardware slowdown",
        value={"gpus": len(gpus), "ecc_volatile_uncorrectable": total_vu,
               "remap_pending": sum(1 for g in gpus if g.get("remap_pending"))},
        thresholds={"ecc_volatile_uncorrectable": Threshold(0, "==", "errors", "nodecert",
                                                            "any uncorrectable ECC error fails"),
                    **limits.pick("health.retired_pages_max")},
        fault_code="NC-GPU-HEALTH" if fails else "",
        remediation="Reset the named GPU (nvidia-smi -r -i <bus>) or reboot to complete "
                    "remapping/retirement; if errors persist or remapping failed, RMA the GPU."
                    if fails else "")


@check("health.gpu", order=20, suites=("quick", "standard", "full"),
       tools=("nvidia-smi",),
       description="ECC, row remapping, retired pages, clock-event reasons, infoROM")
def health_gpu(ctx: Ctx) -> Result:
    header, gpus, ev = nvidia_smi_q(ctx)
    return judge_gpu_health(header, gpus, ev[0].output, ctx.limits).with_(evidence=tuple(ev))


# --- health.xid -------------------------------------------------------------------------

def load_catalog(path: str | None = None) -> dict[int, dict[str, Any]]:
    path = path or os.path.join(os.path.dirname(__file__), "..", "data", "xid-catalog.json")
    with open(path) as f:
        data = json.load(f)
    return {int(e["xid"]): e for e in data["entries"]}


def _gpu_for(pci_addr: str, gpus: list[dict[str, Any]]) -> str:
    for i, g in enumerate(gpus):
        if g["bus_id"].startswith(pci_addr):
            return f"GPU{i} {g['bus_id']}"
    return f"GPU at {pci_addr}"


def judge_xids(events: list[dict[str, Any]], catalog: dict[int, dict[str, Any]],
               gpus: list[dict[str, Any]], *, now: float, window_h: float,
               limits: Limits) -> Result:
    name = "health.xid"
    fails: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    seen: dict[tuple[int, str, bool], int] = {}
    for e in events:
        key = (e["xid"], e["pci"], e["time"] is not None and now - e["time"] <= window_h * 3600)
        seen[key] = seen.get(key, 0) + 1
    classified = []
    for (xid, pci_addr, recent), count in sorted(seen.items()):
        entry = catalog.get(xid, {"severity": "unknown", "name": "not in the catalog",
                                  "action": None})
        sev = entry.get("severity") or "unknown"
        where = _gpu_for(pci_addr, gpus)
        times = f"{count}x" if count > 1 else "once"
        msg = (f"Xid {xid} ({entry.get('name')}) on {where}, {times}"
               f"{f' in the last {window_h:g}h' if recent else ', before the window'}: "
               f"severity {sev}, action {entry.get('action') or 'none given'}")
        classified.append({"xid": xid, "gpu": where, "count": count, "recent": recent,
                           "severity": sev, "action": entry.get("action")})
        if not recent:
            (warns if sev == "fatal" else notes).append(msg)
        elif sev == "fatal":
            fails.append(msg)
        elif sev in ("application", "info"):
            notes.append(msg)
        else:
            warns.append(msg)
    res = judge_findings(
        name, fails, warns,
        f"no hardware Xid in the last {window_h:g} h" + (f" ({len(events)} application/"
                                                         "informational Xid lines)"
                                                         if events else ""),
        value={"events": len(events), "classified": classified},
        thresholds={"window_h": Threshold(window_h, "<=", "h", "options",
                                          "Xids older than the window are reported, not "
                                          "failed"), **limits.pick("xid.window_h")},
        fault_code="NC-XID-FATAL" if fails else "",
        remediation="Follow the catalog action for the named Xid (RESET_GPU: nvidia-smi -r; "
                    "RESTART_BM: power-cycle; CONTACT_SUPPORT / repeated: RMA) and re-run."
                    if fails else "")
    return res.with_(findings=res.findings + tuple(notes))


@check("health.xid", order=21, suites=("quick", "standard", "full"),
       tools=("dmesg",),
       description="NVIDIA Xid errors in the kernel log, judged with the Xid catalog")
def health_xid(ctx: Ctx) -> Result:
    try:  # GPU names only label the events; the kernel log is judged without them too
        _, gpus, ev = nvidia_smi_q(ctx)
    except NoGpu as exc:
        gpus, ev = [], list(exc.evidence)
    except ToolError as exc:  # e.g. nvidia-smi hangs: the kernel log says why, read it
        gpus, ev = [], [exc.evidence] if exc.evidence else []
    try:
        out = run(["dmesg", "--ctime", "--nopager"], timeout=ctx.timeout)
    except ToolError:
        out = run(["dmesg"], timeout=ctx.timeout)
    ev.append(out.evidence)
    boot = None
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    boot = float(line.split()[1])
    except OSError:
        pass
    events = kernel.parse_xids(out.text, boot)
    window = float(ctx.options.get("xid_window_h") or ctx.limits.value("xid.window_h", 24))
    return judge_xids(events, load_catalog(), gpus, now=time.time(), window_h=window,
                      limits=ctx.limits).with_(evidence=tuple(ev))
