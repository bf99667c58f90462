"""health.gpu (ECC, row remapping, retired pages, clocks events, ...) and health.xid."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from nodecert_node import gpu
from nodecert_node.context import Ctx, NoGpu, judge_findings, within
from nodecert_node.contract import Evidence, Limits, Result, Threshold
from nodecert_node.parse import kernel
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

HW_REASONS = {"hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
              "hw_power_brake_slowdown": "HW Power Brake Slowdown"}

# --- health.gpu -------------------------------------------------------------------------


def _mode_findings(b: str, g: dict[str, Any], mig_ordered: bool, fails: list[str],
                   warns: list[str]) -> None:
    """MIG mode against the order, clocks held below their default (NVML: applications
    clocks / locked clocks; see the C5 source), each naming the GPU."""
    mig = (g.get("mig_current") or "").lower()
    if mig in ("enabled", "disabled") and (mig == "enabled") != mig_ordered:
        fails.append(f"{b}: MIG mode is {g['mig_current']}, the order says "
                     f"{'MIG' if mig_ordered else 'whole GPUs (MIG disabled)'}")
    pending = (g.get("mig_pending") or "").lower()
    if mig and pending and pending != mig:
        warns.append(f"{b}: MIG mode change to {g['mig_pending']} pending until a GPU reset")
    app, default = g.get("app_clock_mhz"), g.get("app_clock_default_mhz")
    if app and default and app < default:
        warns.append(f"{b}: applications clock {app} MHz is below its default {default} MHz "
                     "(nvidia-smi -rac restores it)")
    if (g.get("clock_reasons") or {}).get("applications_clocks_setting"):
        warns.append(f"{b}: clocks held by an applications or locked clocks setting at rest "
                     "(nvidia-smi -rgc / -rac restores the defaults)")


def _memory_findings(b: str, g: dict[str, Any], limits: Limits, fails: list[str],
                     warns: list[str]) -> None:
    """ECC on and clean, no row remapping or page retirement pending or failed."""
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


def judge_gpu_health(header: dict[str, str], gpus: list[dict[str, Any]], raw: str,
                     limits: Limits, mig_ordered: bool = False) -> Result:
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
        _memory_findings(b, g, limits, fails, warns)
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
        _mode_findings(b, g, mig_ordered, fails, warns)
    total_vu = sum(g.get("ecc_volatile_uncorrectable") or 0 for g in gpus)
    return judge_findings(
        name, fails, warns,
        f"{len(gpus)} GPUs: ECC on, 0 uncorrectable errors, no pending remap/retirement, "
        "no hardware slowdown",
        value={"gpus": len(gpus), "ecc_volatile_uncorrectable": total_vu,
               "remap_pending": sum(1 for g in gpus if g.get("remap_pending")),
               # per GPU (in nvidia-smi's order), where read: what trends over runs show
               "ecc_corrected_per_gpu": {str(k): g["ecc_aggregate_correctable"]
                                         for k, g in enumerate(gpus)
                                         if g.get("ecc_aggregate_correctable") is not None},
               "temp_c_per_gpu": {str(k): g["temp_gpu"] for k, g in enumerate(gpus)
                                  if g.get("temp_gpu") is not None}},
        thresholds={"ecc_volatile_uncorrectable": Threshold(0, "==", "errors", "nodecert",
                                                            "any uncorrectable ECC error fails"),
                    **limits.pick("health.retired_pages_max")},
        fault_code="NC-GPU-HEALTH" if fails else "",
        remediation="Reset the named GPU (nvidia-smi -r -i <bus>) or reboot to complete "
                    "remapping/retirement; if errors persist or remapping failed, RMA the GPU."
                    if fails else "")


@check("health.gpu", order=20, suites=("quick", "standard", "full", "lab"),
       tools=(gpu.SMI,),
       description="ECC, row remapping, retired pages, clock-event reasons, infoROM, "
                   "persistence and MIG mode against the order, clocks below default")
def health_gpu(ctx: Ctx) -> Result:
    header, gpus, ev = gpu.inventory(ctx)
    return judge_gpu_health(header, gpus, ev[0].output, ctx.limits,
                            bool(ctx.spec.get("mig_enabled"))).with_(evidence=tuple(ev))


# --- health.xid -------------------------------------------------------------------------

def load_catalog(path: str | None = None) -> dict[int, dict[str, Any]]:
    path = path or os.path.join(os.path.dirname(__file__), "..", "data", "xid-catalog.json")
    with open(path) as f:
        data = json.load(f)
    return {int(e["xid"]): e for e in data["entries"]}


def _bus_key(addr: str) -> str:
    """'00000000:9B:00.0' / '0000:9b:00' / '9b:00.0' -> '0000:9b:00' (domain, bus, device)."""
    parts = addr.lower().split(".")[0].split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    return ":".join([parts[0][-4:].rjust(4, "0"), *parts[1:3]])


def _gpu_for(pci_addr: str, gpus: list[dict[str, Any]]) -> str:
    for i, g in enumerate(gpus):
        if _bus_key(str(g["bus_id"])) == _bus_key(pci_addr):
            return f"GPU{i} {g['bus_id']}"
    return f"GPU at {pci_addr}"


def _classify(kind: str, xid: int, evs: list[dict[str, Any]],
              catalog: dict[int, dict[str, Any]], *, where: str,
              when: str) -> tuple[str, str | None, str]:
    """(severity, the catalog's action, the message) of one Xid (or GPU loss) seen on
    one GPU: a GPU lost without an Xid is fatal; an Xid the catalog lacks, or a line
    whose number cannot be read, is of unknown severity (never informational)."""
    count = len(evs)
    times = f"{count}x" if count > 1 else "once"
    if kind == "gpu_lost":
        return "fatal", "RESTART_BM", (f"GPU lost on {where} ({evs[0]['message']}, no Xid), "
                                       f"{times}{when}: {evs[0]['line'][:200]}")
    if xid < 0:
        return "unknown", None, (f"unreadable Xid line on {where}{when}: "
                                 f"{evs[0]['line'][:200]}")
    entry = catalog.get(xid, {"severity": "unknown", "name": "not in the catalog",
                              "action": None})
    sev, action = entry.get("severity") or "unknown", entry.get("action")
    return sev, action, (f"Xid {xid} ({entry.get('name')}) on {where}, {times}{when}: "
                         f"severity {sev}, action {action or 'none given'}")


def judge_xids(events: list[dict[str, Any]], catalog: dict[int, dict[str, Any]],
               gpus: list[dict[str, Any]], *, now: float, window_h: float,
               limits: Limits, covered_from: float | None = None) -> Result:
    """Xids by catalog severity; GPU-loss messages without an Xid are fatal.

    An event whose time cannot be read counts as recent: an unreadable stamp must never
    turn a fatal event into a warning. covered_from: when the readable log starts after
    boot (the ring buffer wrapped and no journal): a gap inside the window is a WARN.
    """
    name = "health.xid"
    fails: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    seen: dict[tuple[str, int, str, bool], list[dict[str, Any]]] = {}
    for e in events:
        recent = e["time"] is None or now - e["time"] <= window_h * 3600
        code = -1 if e.get("xid") is None else int(e["xid"])
        seen.setdefault((e.get("kind", "xid"), code, e["pci"], recent), []).append(e)
    classified = []
    for (kind, xid, pci_addr, recent), evs in sorted(seen.items()):
        count = len(evs)
        where = _gpu_for(pci_addr, gpus)
        when = f" in the last {window_h:g}h" if recent else ", before the window"
        if any(e["time"] is None for e in evs) and recent:
            when += " (time not readable: counted as recent)"
        sev, action, msg = _classify(kind, xid, evs, catalog, where=where, when=when)
        classified.append({"kind": kind, "xid": None if xid < 0 else xid, "gpu": where,
                           "count": count, "recent": recent, "severity": sev,
                           "action": action})
        if not recent:
            (warns if sev == "fatal" else notes).append(msg)
        elif sev == "fatal":
            fails.append(msg)
        elif sev in ("application", "info"):
            notes.append(msg)
        else:
            warns.append(msg)
    if covered_from is not None and now - covered_from < window_h * 3600:
        warns.append(f"the kernel log starts {(now - covered_from) / 3600:.1f} h ago (ring "
                     f"buffer wrapped, no journal): events earlier in the {window_h:g} h "
                     "window cannot be seen")
    res = judge_findings(
        name, fails, warns,
        f"no hardware Xid or GPU loss in the last {window_h:g} h"
        + (f" ({len(events)} application/informational Xid lines)" if events else ""),
        value={"events": len(events), "classified": classified},
        thresholds={"window_h": Threshold(window_h, "<=", "h", "options",
                                          "Xids older than the window are reported, not "
                                          "failed"), **limits.pick("xid.window_h")},
        fault_code="NC-XID-FATAL" if fails else "",
        remediation="Follow the catalog action for the named Xid (RESET_GPU: nvidia-smi -r; "
                    "RESTART_BM: power-cycle; CONTACT_SUPPORT / repeated: RMA) and re-run."
                    if fails else "")
    return res.with_(findings=res.findings + tuple(notes))


def read_kernel_log(timeout: float) -> tuple[str, list[Evidence], bool]:
    """The kernel log text, its evidence, and whether it is complete since boot.

    `dmesg` first; the journal (`journalctl -k -b -o json`) when dmesg is restricted
    (kernel.dmesg_restrict) or its ring buffer no longer reaches back to boot.
    """
    evidence: list[Evidence] = []
    text = ""
    try:
        try:
            out = run(["dmesg", "--ctime", "--nopager"], timeout=timeout)
        except ToolError as exc:
            if exc.kind == "missing":
                raise
            out = run(["dmesg"], timeout=timeout)
        evidence.append(out.evidence)
        text = out.text
        if kernel.starts_at_boot(text):
            return text, evidence, True
    except ToolError as exc:
        if exc.evidence:
            evidence.append(exc.evidence)
    try:
        j = run(["journalctl", "-k", "-b", "0", "-o", "json", "--no-pager"], timeout=timeout)
    except ToolError as exc:
        if exc.evidence:
            evidence.append(exc.evidence)
        if not text.strip():
            raise ToolError("neither dmesg nor journalctl -k could be read (run as root, "
                            "or set kernel.dmesg_restrict=0)",
                            exc.evidence, kind=exc.kind) from exc
        return text, evidence, False
    evidence.append(j.evidence)
    return j.text, evidence, True


@check("health.xid", order=21, suites=("quick", "standard", "full", "lab"),
       tools=("dmesg",),
       description="NVIDIA Xid errors and GPU-loss messages in the kernel log (dmesg or "
                   "the journal), judged with the Xid catalog")
def health_xid(ctx: Ctx) -> Result:
    try:  # GPU names only label the events; the kernel log is judged without them too
        _, gpus, ev = gpu.inventory(ctx)
    except NoGpu as exc:
        gpus, ev = [], list(exc.evidence)
    except ToolError as exc:  # e.g. nvidia-smi hangs: the kernel log says why, read it
        gpus, ev = [], [exc.evidence] if exc.evidence else []
    text, kev, complete = read_kernel_log(ctx.timeout)
    ev.extend(kev)
    boot = None
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    boot = float(line.split()[1])
    except OSError:
        pass
    now = time.time()
    events = kernel.parse_kernel_log(text, boot, now)
    window = float(ctx.options.get("xid_window_h") or ctx.limits.value("xid.window_h", 24))
    return judge_xids(events, load_catalog(), gpus, now=now, window_h=window,
                      limits=ctx.limits,
                      covered_from=None if complete else kernel.coverage_start(text, boot, now)
                      ).with_(evidence=tuple(ev))
