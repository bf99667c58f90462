"""The BMC checks' judges: pure functions from what the BMC reported (normalised by the
Redfish and ipmitool parsers) to Results.

    bmc.sensors    temperatures, fans and voltages against the BMC's own thresholds
    bmc.sel        event log entries since the node's last certification (critical: FAIL)
    bmc.power      supplies healthy and redundant; the peak draw while the node's checks
                   ran (the burn-in included) against what the supplies deliver with the
                   site's spares failed
    bmc.inventory  BMC firmware against the site's golden version; the GPUs and network
                   adapters the BMC sees against those the OS sees
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.profiles.datafiles import validators_dir
from nodecert_node.contract import Evidence, Limits, Result, Verdict

BMC_CHECKS = ("bmc.sensors", "bmc.sel", "bmc.power", "bmc.inventory")
_SHOWN = 8  # findings listed in a summary's tail


def findings_result(name: str, fails: list[str], warns: list[str], ok: str,
                    **kw: Any) -> Result:
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return Result(name, Verdict.FAIL, fails[0] + more, findings=tuple(fails + warns), **kw)
    if warns:
        more = f" (+{len(warns) - 1} more)" if len(warns) > 1 else ""
        return Result(name, Verdict.WARN, warns[0] + more, findings=tuple(warns), **kw)
    return Result(name, Verdict.PASS, ok, **kw)


# --- sensors -------------------------------------------------------------------------------

def _fmt(v: float, unit: str) -> str:
    return f"{v:g} {unit}".strip()


# A sensor's thresholds by severity: (key, IPMI's name for it, an upper bound?).
CRITICAL_BOUNDS = (("upper_fatal", "upper non-recoverable", True),
                   ("upper_critical", "upper critical", True),
                   ("lower_fatal", "lower non-recoverable", False),
                   ("lower_critical", "lower critical", False))
WARNING_BOUNDS = (("upper_noncritical", "upper non-critical", True),
                  ("lower_noncritical", "lower non-critical", False))


def _beyond(s: dict[str, Any], reading: float | None, unit: str,
            bounds: tuple[tuple[str, str, bool], ...]) -> str:
    """The first of bounds the reading reaches, said; "" when none (or no reading). A
    threshold of 0 is how many BMCs print "not set": never judged against."""
    if reading is None:
        return ""
    for key, label, high in bounds:
        t = s.get(key)
        if t and (reading >= t if high else reading <= t):
            return (f"{s['name']} {_fmt(reading, unit)} {'>=' if high else '<='} {label} "
                    f"{_fmt(t, unit)}")
    return ""


def sensor_state(s: dict[str, Any]) -> tuple[str, str]:
    """('critical' | 'warning' | 'ok' | 'absent', why) for one sensor."""
    reading, unit = s.get("reading"), str(s.get("unit") or "")
    if s.get("state") == "Absent" or (reading is None and s.get("health") in ("", None)):
        return "absent", ""
    beyond = _beyond(s, reading, unit, CRITICAL_BOUNDS)
    if beyond:
        return "critical", beyond
    if s.get("health") == "Critical":
        shown = _fmt(reading, unit) if reading is not None else "no reading"
        return "critical", f"{s['name']} {shown}: the BMC reports it Critical"
    beyond = _beyond(s, reading, unit, WARNING_BOUNDS)
    if beyond:
        return "warning", beyond
    if s.get("health") == "Warning":
        return "warning", f"{s['name']}: the BMC reports it Warning"
    return "ok", ""


# `ipmitool chassis status` (IPMI Get Chassis Status, section 28.2): a fault flag that is
# set now fails; an active intrusion or interlock, or a last power event that was a
# failure, is worth a look.
_CHASSIS_FAULTS = ("Power Overload", "Main Power Fault", "Power Control Fault", "Drive Fault",
                   "Cooling/Fan Fault")
_CHASSIS_ACTIVE = ("Chassis Intrusion", "Power Interlock")
_LAST_EVENTS_BAD = ("ac-failed", "overload", "fault", "interlock")


def judge_chassis(status: dict[str, str]) -> tuple[list[str], list[str]]:
    """(fails, warns) from `ipmitool chassis status`."""
    fails = [f"chassis status: {k} is set" for k in _CHASSIS_FAULTS
             if status.get(k, "").lower() == "true"]
    warns = [f"chassis status: {k} {status[k]}" for k in _CHASSIS_ACTIVE
             if status.get(k, "").lower() == "active"]
    last = [e.strip() for e in status.get("Last Power Event", "").split(",") if e.strip()]
    bad = [e for e in last if e.lower() in _LAST_EVENTS_BAD]
    if bad:
        warns.append(f"chassis status: the last power event was {', '.join(bad)}")
    return fails, warns


def judge_discrete(rows: list[dict[str, Any]], rules: EventRules
                   ) -> tuple[list[str], list[str]]:
    """(fails, warns) from discrete sensors' states asserted now (`ipmitool sdr elist`),
    classed by the same rules as the event log; power supplies are bmc.power's."""
    fails: list[str] = []
    warns: list[str] = []
    for row in rows:
        if str(row.get("entity", "")).startswith("10.") or row.get("status") == "ns":
            continue
        for state in row.get("states") or ():
            # The state alone is classed: a sensor's name ("CPU Fail") is not an event.
            cls, _ = rules.classify({"message": state})
            if cls != "info":
                (fails if cls == "critical" else warns).append(
                    f"{row['name']}: {state} (asserted now)")
    return fails, warns


def judge_sensors(sensors: list[dict[str, Any]], *, evidence: tuple[Evidence, ...] = (),
                  simulated: bool = False, discrete: list[dict[str, Any]] | None = None,
                  chassis: dict[str, str] | None = None,
                  rules: EventRules | None = None) -> Result:
    fails: list[str] = []
    warns: list[str] = []
    judged = 0
    if discrete and rules is not None:
        f, w = judge_discrete(discrete, rules)
        fails += f
        warns += w
    if chassis:
        f, w = judge_chassis(chassis)
        fails += f
        warns += w
    for s in sensors:
        if s.get("kind") in ("discrete", "power", "other"):
            continue  # supplies and power are bmc.power's; discrete bits have no threshold
        state, why = sensor_state(s)
        if state == "absent":
            continue
        judged += 1
        (fails if state == "critical" else warns if state == "warning" else []).append(why)
    kinds = sorted({str(s.get("kind")) for s in sensors if s.get("reading") is not None})
    if judged == 0:
        return Result("bmc.sensors", Verdict.ERROR, "the BMC reported no readable "
                      "temperature, fan or voltage sensor", evidence=evidence,
                      fault_code="NC-BMC-NO-SENSORS", simulated=simulated,
                      remediation="Check the BMC's sensor configuration (its SDR repository "
                                  "or its Redfish Thermal and Power resources).")
    hottest = max((s for s in sensors if s.get("kind") == "temperature"
                   and s.get("reading") is not None), key=lambda s: s["reading"], default=None)
    return findings_result(
        "bmc.sensors", fails, warns,
        f"{judged} sensors ({', '.join(kinds)}) within the BMC's thresholds"
        + (f"; hottest {hottest['name']} {hottest['reading']:g} C" if hottest else ""),
        value=judged, evidence=evidence, simulated=simulated,
        facts={"sensors": [{k: s.get(k) for k in ("name", "kind", "reading", "unit",
                                                  "health", "upper_critical",
                                                  "lower_critical")} for s in sensors],
               "chassis_status": chassis,
               "discrete_states": None if discrete is None else {
                   r["name"]: r["states"] for r in discrete if r.get("states")}},
        fault_code="NC-BMC-SENSOR" if fails else "",
        remediation="Find the part the sensor watches (a failed fan, a blocked inlet, a "
                    "failing regulator) and fix it before the node ships; then re-run "
                    "`nodecert validate`." if fails else "")


# --- the event log -------------------------------------------------------------------------

@dataclass(frozen=True)
class EventRules:
    critical: tuple[tuple[re.Pattern[str], str], ...]
    warning: tuple[tuple[re.Pattern[str], str], ...]
    sources: dict[str, str]

    def classify(self, entry: dict[str, Any]) -> tuple[str, str]:
        """('critical' | 'warning' | 'info', the source of the class)."""
        if str(entry.get("direction") or "Asserted").lower().startswith("deasserted"):
            return "info", ""
        sev = str(entry.get("severity") or "")
        if sev in ("Critical", "Warning", "OK"):
            return {"Critical": "critical", "Warning": "warning", "OK": "info"}[sev], \
                "REDFISH"
        text = " ".join(str(entry.get(k) or "") for k in ("sensor", "message", "entry_code"))
        for cls, rules in (("critical", self.critical), ("warning", self.warning)):
            for pattern, source in rules:
                if pattern.search(text):
                    return cls, source
        return "info", ""


@cache
def event_rules(path: Path | None = None) -> EventRules:
    path = path or validators_dir() / "bmc-events.yml"
    root = yamldoc.load(path).mapping({"schema", "sources", "critical", "warning"})
    if root["schema"].text() != "nodecert.bmc-events/v1":
        raise root["schema"].error("expected schema nodecert.bmc-events/v1")
    sources = {str(k): str(v.value) for k, v in root["sources"].items()}
    out: dict[str, list[tuple[re.Pattern[str], str]]] = {"critical": [], "warning": []}
    for cls, rules in out.items():
        for item in root[cls].seq():
            m = item.mapping({"pattern", "source"})
            if m["source"].text() not in sources:
                raise m["source"].error(f"source {m['source'].text()!r} is not under sources:")
            try:
                rules.append((re.compile(m["pattern"].text(), re.IGNORECASE),
                              m["source"].text()))
            except re.error as exc:
                raise m["pattern"].error(f"not a regular expression: {exc}") from None
    return EventRules(tuple(out["critical"]), tuple(out["warning"]), sources)


def _entry_text(e: dict[str, Any]) -> str:
    parts = [e.get("created") or "undated", e.get("sensor") or "", e.get("message") or "",
             e.get("direction") or ""]
    return f"#{e.get('id')} " + " | ".join(str(p) for p in parts if p)


def judge_sel(entries: list[dict[str, Any]], *, since: float | None, since_what: str,
              rules: EventRules, evidence: tuple[Evidence, ...] = (),
              simulated: bool = False) -> Result:
    """Critical entries logged since `since` (the last certification; None: the whole
    log) FAIL, warnings WARN; an entry that cannot be placed in time counts as recent
    when it is critical (it cannot be shown to be old)."""
    fails: list[str] = []
    warns: list[str] = []
    older = 0
    for e in entries:
        cls, _ = rules.classify(e)
        if cls == "info":
            continue
        when = e.get("time")
        if since is not None and when is not None and when < since:
            older += 1
            continue
        text = _entry_text(e)
        if when is None and e.get("time_note"):
            text += f" ({e['time_note']})"
        (fails if cls == "critical" else warns).append(text)
    scope = f"since {since_what}" if since is not None else "in the whole log"
    note = f"; {older} older entr{'y' if older == 1 else 'ies'} before {since_what}" \
        if older else ""
    return findings_result(
        "bmc.sel", [f"critical event {scope}: {t}" for t in fails],
        [f"warning event {scope}: {t}" for t in warns],
        f"{len(entries)} entries, none critical {scope}{note}",
        value=len(fails), evidence=evidence, simulated=simulated,
        facts={"entries": len(entries), "since": since, "critical": fails[:_SHOWN * 4]},
        fault_code="NC-BMC-SEL-CRITICAL" if fails else "",
        remediation="Read the entry, find and fix its cause (a supply, a fan, a DIMM, a "
                    "CPU), then clear the log on the BMC (`ipmitool sel clear`, or the "
                    "Redfish LogService ClearLog action) and re-run `nodecert validate`."
                    if fails else "")


# --- power ---------------------------------------------------------------------------------

def _supplies(power: dict[str, Any] | None, psus: list[dict[str, Any]], fails: list[str],
              warns: list[str]) -> list[dict[str, Any]]:
    """The supplies that still deliver (a Warning one counts, and is said), each failed
    supply and each degraded redundancy set added to `fails`."""
    healthy = []
    for p in psus:
        if p.get("health") == "Critical" or p.get("state") in ("UnavailableOffline",
                                                                "Disabled"):
            fails.append(f"power supply {p['name']} failed (state {p.get('state') or '?'}, "
                         f"health {p.get('health') or '?'})")
        elif p.get("health") == "Warning":
            warns.append(f"power supply {p['name']}: the BMC reports it Warning")
            healthy.append(p)
        else:
            healthy.append(p)
    for r in (power or {}).get("redundancy", []):
        if r.get("health") in ("Critical", "Warning") and r.get("state") != "Absent":
            fails.append(f"{r['name']}: redundancy {r.get('health')} (mode {r.get('mode')})")
    return healthy


def judge_power(power: dict[str, Any] | None, samples: list[dict[str, Any]], *,
                spares: int, limits: Limits, loaded_checks: list[str],
                evidence: tuple[Evidence, ...] = (), simulated: bool = False) -> Result:
    fails: list[str] = []
    warns: list[str] = []
    psus = [p for p in (power or {}).get("psus", []) if p.get("state") != "Absent"]
    healthy = _supplies(power, psus, fails, warns)
    draws = [float(s["power_w"]) for s in samples if s.get("power_w") is not None]
    if power and power.get("consumed_w") is not None:
        draws.append(float(power["consumed_w"]))
    peak = max(draws) if draws else None
    caps = [float(p["capacity_w"]) for p in healthy if p.get("capacity_w")]
    thresholds = limits.pick("bmc.power_capacity_fraction_max")
    fraction = None
    if not psus:
        warns.append("the BMC reports no power supplies: redundancy and headroom not judged")
    elif len(caps) < len(healthy):
        warns.append("the BMC does not report every supply's capacity: headroom not judged "
                     "(set nodecert_bmc.psu_capacity_w)")
    else:
        kept = sorted(caps)[:max(len(caps) - spares, 0)]  # the largest ones fail first
        if not kept:
            fails.append(f"{len(healthy)} healthy supplies cannot keep {spares} spare(s): "
                         "the node has no redundancy")
        elif peak is not None:
            fraction = round(peak / sum(kept), 4)
            t = limits.opt("bmc.power_capacity_fraction_max")
            if t is not None:
                out = t.check(fraction)
                if not out:
                    fails.append(f"peak draw {peak:.0f} W is {fraction:.0%} of the "
                                 f"{sum(kept):.0f} W that {len(kept)} supplies deliver with "
                                 f"{spares} failed: {out.message}")
    if peak is None:
        warns.append("the BMC gave no power reading: draw not judged")
    during = f" during {', '.join(loaded_checks)}" if loaded_checks else \
        " (no load check ran: idle draw)"
    ok = (f"{len(healthy)} supplies healthy, peak {peak:.0f} W{during}"
          + (f" = {fraction:.0%} of capacity with {spares} spare(s)" if fraction is not None
             else "")) if peak is not None else f"{len(healthy)} supplies healthy"
    return findings_result(
        "bmc.power", fails, warns, ok, value=fraction, unit="ratio" if fraction else "",
        thresholds=thresholds, evidence=evidence, simulated=simulated,
        facts={"peak_w": peak, "samples": samples[-720:], "psus": psus,
               "loaded_checks": loaded_checks, "spares": spares},
        fault_code="NC-BMC-POWER" if fails else "",
        remediation="Replace the failed supply or restore its feed; where the draw is too "
                    "high for the supplies, fit larger ones or cap the GPUs' power; then "
                    "re-run `nodecert validate --suite standard`." if fails else "")


# --- inventory -----------------------------------------------------------------------------

def judge_inventory(firmware: str | None, golden: tuple[str, ...], *,
                    bmc_gpus: list[dict[str, Any]] | None, os_gpus: list[dict[str, Any]] | None,
                    bmc_nics: list[dict[str, Any]] | None, os_nics: int | None,
                    evidence: tuple[Evidence, ...] = (), simulated: bool = False) -> Result:
    fails: list[str] = []
    warns: list[str] = []
    if firmware is None:
        warns.append("the BMC did not report its firmware version")
    elif golden and firmware not in golden:
        fails.append(f"BMC firmware {firmware}, the site's golden version is "
                     f"{' or '.join(golden)}")
    if bmc_gpus is not None and os_gpus is not None:
        if len(bmc_gpus) != len(os_gpus):
            fails.append(f"the BMC sees {len(bmc_gpus)} GPUs, the OS {len(os_gpus)}")
        else:
            os_serials = {str(g["serial"]) for g in os_gpus if g.get("serial")}
            bmc_serials = {str(g["serial"]) for g in bmc_gpus if g.get("serial")}
            if os_serials and bmc_serials and os_serials != bmc_serials:
                diff = sorted(os_serials ^ bmc_serials)
                fails.append(f"GPU serials differ between the BMC and the OS: "
                             f"{', '.join(map(str, diff[:_SHOWN]))}")
    elif bmc_gpus is None:
        warns.append("the BMC lists no GPUs: the BMC's view of them not compared")
    if bmc_nics is not None and os_nics is not None and len(bmc_nics) < os_nics:
        fails.append(f"the BMC sees {len(bmc_nics)} network adapters, the OS {os_nics} "
                     "RDMA ports")
    seen = (f"; BMC sees {len(bmc_gpus)} GPUs" if bmc_gpus is not None else "") + \
        (f", {len(bmc_nics)} network adapters" if bmc_nics is not None else "")
    fw = firmware or "unknown"
    return findings_result(
        "bmc.inventory", fails, warns,
        f"BMC firmware {fw}" + (" (the golden version)" if golden else
                                " (no golden version set)") + seen,
        value=firmware, evidence=evidence, simulated=simulated,
        facts={"firmware": firmware, "golden": list(golden),
               "bmc_gpus": bmc_gpus, "bmc_nics": bmc_nics},
        fault_code="NC-BMC-INVENTORY" if fails else "",
        remediation="Update the BMC to the site's golden firmware; where the BMC and the OS "
                    "disagree on the parts, reseat the part or reset the BMC, then re-run "
                    "`nodecert validate`." if fails else "")


__all__ = ["BMC_CHECKS", "EventRules", "event_rules", "judge_chassis", "judge_discrete",
           "judge_inventory", "judge_power", "judge_sel", "judge_sensors", "sensor_state"]
