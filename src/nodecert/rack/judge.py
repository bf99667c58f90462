"""The rack's verdicts, one Result per rule, from what the trays' node checks and the
Redfish walks recorded. Pure: no I/O, no clock.

  rack.trays         every compute tray measured, and its domain checks passed
  rack.domain        every tray in the same NVLink clique of the same cluster, and the
                     domain holds the GPUs the rack was ordered with
  rack.switch_trays  every NVLink switch tray reachable and healthy, every port up
  rack.power         every power shelf healthy: supplies, input, redundancy
  rack.cooling       no leak, the CDU and its pumps healthy, the coolant's temperatures,
                     flow and pressures inside the CDU's own thresholds over the samples
  rack.firmware      one version per component across the domain (and the rack's
                     recipe, where it gives one)

A rule with nothing to judge (a rack that names no switch trays, shelves or CDU) gives
no Result: the record lists it as not judged, never as passed. A component that was not
read is never a pass: a switch tray, shelf or CDU that cannot
be read FAILs naming it; a tray whose node checks did not run is ERROR (not measured).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from nodecert_node.contract import Result, Verdict

BAD_HEALTH = {"Critical"}
DOMAIN_CHECKS = ("domain.fabric", "domain.imex")


def judge_findings(name: str, fails: list[str], warns: list[str], ok_summary: str,
                   **kw: Any) -> Result:
    """FAIL with any fail finding, WARN with only warnings, else PASS (the node checks'
    rule, for the rack's)."""
    if fails or warns:
        first = (fails or warns)[0]
        n = len(fails or warns)
        return Result(name, Verdict.FAIL if fails else Verdict.WARN,
                      first if n == 1 else f"{first} (+{n - 1} more)",
                      findings=tuple(fails + warns), **kw)
    return Result(name, Verdict.PASS, ok_summary, **kw)


def _who(c: dict[str, Any]) -> str:
    return f"{c['kind'].replace('_', ' ')} {c['name']} ({c['address']})"


def _last(c: dict[str, Any]) -> dict[str, Any] | None:
    good = [s for s in c["samples"] if s is not None]
    return good[-1] if good else None


def _unread(c: dict[str, Any]) -> str | None:
    if _last(c) is None:
        return (f"{_who(c)} cannot be read: "
                f"{c['errors'][-1] if c['errors'] else 'no answer'}")
    return None


def _read(comps: list[dict[str, Any]], kind: str, fails: list[str]
          ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(component, its last good sample) for each of a kind that was read; one that was
    not is a FAIL naming it."""
    out = []
    for c in comps:
        if c["kind"] != kind:
            continue
        why = _unread(c)
        if why:
            fails.append(why)
        else:
            out.append((c, _last(c) or {}))
    return out


def _health(who: str, health: Any, state: Any, fails: list[str], warns: list[str],
            *, absent_ok: bool = False) -> None:
    if state in ("Absent", "Disabled", "UnavailableOffline") and not absent_ok:
        fails.append(f"{who}: {state}")
    if health in BAD_HEALTH:
        fails.append(f"{who}: health {health}")
    elif health == "Warning":
        warns.append(f"{who}: health Warning")


# --- trays ------------------------------------------------------------------------------

def judge_trays(rack: dict[str, Any], trays: dict[str, dict[str, Any]]) -> Result:
    """trays: host -> {"error": str} or {"results": [Result as dict]} (its node run)."""
    errors: list[str] = []
    fails: list[str] = []
    warns: list[str] = []
    wanted = ["hardware.inventory", "domain.fabric"] + (["domain.imex"] if rack.get("imex")
                                                        else [])
    for host in rack["trays"]:
        t = trays.get(host) or {"error": "not run"}
        if t.get("error"):
            errors.append(f"tray {host}: not measured ({t['error']})")
            continue
        got = {r["check"]: r for r in t.get("results") or []}
        for check in wanted:
            r = got.get(check)
            if r is None:
                errors.append(f"tray {host}: {check} did not run")
            elif r["verdict"] in ("ERROR", "SKIP"):
                errors.append(f"tray {host}: {check} {r['verdict']}: {r['summary']}")
            elif r["verdict"] == "FAIL":
                fails.append(f"tray {host}: {check}: {r['summary']}")
            elif r["verdict"] == "WARN":
                warns.append(f"tray {host}: {check}: {r['summary']}")
    if errors:
        return Result("rack.trays", Verdict.ERROR, errors[0] if len(errors) == 1 else
                      f"{errors[0]} (+{len(errors) - 1} more)",
                      findings=tuple(errors + fails + warns), fault_code="NC-NOT-MEASURED",
                      remediation="A tray that was not measured leaves the rack unproven: "
                                  "bring it back and validate the rack again.")
    return judge_findings("rack.trays", fails, warns,
                          f"{len(rack['trays'])} compute trays measured: "
                          f"{', '.join(wanted)} passed on each",
                          value={"trays": len(rack["trays"])})


# --- the NVLink domain across trays ---------------------------------------------------------

def judge_domain(rack: dict[str, Any], fabric: dict[str, dict[str, Any] | None]) -> Result:
    """fabric: host -> domain.fabric's facts (clique_id, cluster_uuid, gpus), None where
    the tray gave none. Every tray in one (clique, cluster); the domain's GPUs counted."""
    where: dict[tuple[Any, Any], list[str]] = {}
    missing = []
    gpus = 0
    for host in rack["trays"]:
        f = fabric.get(host)
        if not f or not f.get("clique_id") or not f.get("cluster_uuid"):
            missing.append(host)
            continue
        where.setdefault((f["clique_id"], f["cluster_uuid"]), []).append(host)
        gpus += sum(1 for g in f.get("gpus") or []
                    if g.get("fabric_clique_id") == f["clique_id"])
    if not where:
        return Result("rack.domain", Verdict.ERROR, f"no tray of rack {rack['name']} "
                      "reported its NVLink clique: the domain was not measured",
                      fault_code="NC-NOT-MEASURED")
    fails: list[str] = []
    ranked = sorted(where.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))
    (clique, cluster), main = ranked[0]
    if len(ranked) > 1 and len(ranked[1][1]) == len(main):
        fails.append("the trays split evenly between NVLink domains: " + "; ".join(
            f"clique {c} of cluster {u}: {', '.join(h)}" for (c, u), h in ranked))
    else:
        for (c, u), hosts in ranked[1:]:
            for h in hosts:
                fails.append(f"tray {h}: in clique {c} of cluster {u}; the rack's other "
                             f"{len(main)} trays are in clique {clique} of cluster {cluster}")
    if missing:
        fails.append(f"{', '.join(missing)}: no NVLink clique reported (see rack.trays)")
    if not fails and gpus < int(rack["gpus"]):
        fails.append(f"the NVLink domain holds {gpus} GPUs; rack {rack['name']} was ordered "
                     f"with {rack['gpus']}")
    return judge_findings(
        "rack.domain", fails, [],
        f"all {len(main)} trays in NVLink clique {clique} of cluster {cluster}: "
        f"{gpus} GPUs in one domain",
        value={"clique_id": clique, "cluster_uuid": cluster, "gpus": gpus,
               "trays": len(main)},
        facts={"domains": [{"clique_id": c, "cluster_uuid": u, "trays": h}
                           for (c, u), h in ranked]},
        fault_code="NC-NVL-DOMAIN" if fails else "",
        remediation="A tray in another clique or cluster is not part of the rack's NVLink "
                    "domain: check its NVLink cable cartridge and the switch trays' "
                    "NVLink Subnet Manager, then validate the rack again." if fails else "")


# --- switch trays, power, cooling -------------------------------------------------------

def judge_switch_trays(rack: dict[str, Any], comps: list[dict[str, Any]]
                       ) -> Result | None:
    fails: list[str] = []
    warns: list[str] = []
    ports_up = ports = 0
    trays = [c for c in comps if c["kind"] == "switch_tray"]
    for c, s in _read(comps, "switch_tray", fails):
        _health(f"switch tray {c['name']}", s.get("health"), s.get("state"), fails, warns)
        if not s.get("switches"):
            warns.append(f"switch tray {c['name']}: reports no NVLink switch (no Fabrics "
                         "resource): its ports cannot be judged")
        for sw in s.get("switches") or []:
            _health(f"switch tray {c['name']} switch {sw['id']}", sw.get("health"),
                    sw.get("state"), fails, warns)
            for p in sw["ports"]:
                ports += 1
                who = f"switch tray {c['name']} switch {sw['id']} port {p['id']}"
                if p.get("link") != "LinkUp":
                    fails.append(f"{who}: link {p.get('link') or 'not reported'}")
                else:
                    ports_up += 1
                if p.get("health") in BAD_HEALTH:
                    fails.append(f"{who}: health {p['health']}")
    if not trays:
        return None  # not judged: the record says so
    return judge_findings("rack.switch_trays", fails, warns,
                          f"{len(trays)} switch trays healthy, {ports_up}/{ports} NVLink "
                          "ports up", value={"switch_trays": len(trays), "ports": ports,
                                             "ports_up": ports_up},
                          fault_code="NC-RACK-SWITCH" if fails else "")


def judge_power(rack: dict[str, Any], comps: list[dict[str, Any]]) -> Result | None:
    fails: list[str] = []
    warns: list[str] = []
    shelves = [c for c in comps if c["kind"] == "power_shelf"]
    supplies = 0
    for c, last in _read(comps, "power_shelf", fails):
        if not last["shelves"]:
            fails.append(f"power shelf {c['name']}: its Redfish service lists no power shelf")
        for s in last["shelves"]:
            if not s.get("supplies"):
                warns.append(f"power shelf {c['name']}: reports no supplies: they were not "
                             "checked")
            who = f"power shelf {c['name']}" + (f" ({s['id']})" if s["id"] != "1" else "")
            _health(who, s.get("health"), s.get("state"), fails, warns)
            for cond in s.get("conditions") or []:
                if cond.get("severity") == "Critical":
                    fails.append(f"{who}: {cond.get('message')}")
            for r in s.get("redundancy") or []:
                if r.get("health") in BAD_HEALTH or r.get("health") == "Warning":
                    fails.append(f"{who}: supply redundancy {r.get('type')} health "
                                 f"{r.get('health')}")
            for p in s.get("supplies") or []:
                supplies += 1
                pw = f"{who} supply {p['id']}"
                if p.get("state") == "Absent":
                    warns.append(f"{pw}: bay empty")
                    continue
                _health(pw, p.get("health"), p.get("state"), fails, warns)
                if p.get("line_input") not in (None, "Normal"):
                    fails.append(f"{pw}: input {p['line_input']}")
    pdus = [c for c in comps if c["kind"] == "rack_pdu"]
    circuits = _judge_pdus(comps, fails, warns)
    if not shelves and not pdus:
        return None  # not judged: the record says so
    return judge_findings("rack.power", fails, warns,
                          f"{len(shelves)} power shelves healthy, {supplies} supplies OK"
                          + (f"; {len(pdus)} rack PDU endpoint(s) healthy, {circuits} mains "
                             "circuits closed" if pdus else ""),
                          value={"shelves": len(shelves), "supplies": supplies,
                                 "pdus": len(pdus), "mains": circuits},
                          fault_code="NC-RACK-POWER" if fails else "")


def _judge_pdus(comps: list[dict[str, Any]], fails: list[str], warns: list[str]) -> int:
    """Each rack PDU healthy and enabled, each of its mains circuits with its breaker
    Normal (a tripped or off breaker cuts the trays it feeds); the circuits judged."""
    circuits = 0
    for c, last in _read(comps, "rack_pdu", fails):
        if not last["pdus"]:
            fails.append(f"rack PDU {c['name']}: its Redfish service lists no rack PDU")
        for pdu in last["pdus"]:
            who = f"rack PDU {c['name']}" + (f" ({pdu['id']})" if pdu["id"] != "1" else "")
            _health(who, pdu.get("health"), pdu.get("state"), fails, warns)
            for cond in pdu.get("conditions") or []:
                if cond.get("severity") == "Critical":
                    fails.append(f"{who}: {cond.get('message')}")
            if not pdu["mains"]:
                warns.append(f"{who}: reports no mains circuit: its breakers were not checked")
            for m in pdu["mains"]:
                circuits += 1
                mw = f"{who} mains {m['id']}"
                _health(mw, m.get("health"), m.get("state"), fails, warns)
                if m.get("breaker") not in (None, "Normal"):
                    fails.append(f"{mw}: breaker {m['breaker']}")
    return circuits


def _level(v: float, t: dict[str, float]) -> int:
    """2 beyond a critical threshold, 1 beyond a caution one, 0 inside."""
    if ("upper_critical" in t and v > t["upper_critical"]) or \
            ("lower_critical" in t and v < t["lower_critical"]):
        return 2
    if ("upper_caution" in t and v > t["upper_caution"]) or \
            ("lower_caution" in t and v < t["lower_caution"]):
        return 1
    return 0


def sustained(values: list[float | None], thresholds: dict[str, float]
              ) -> tuple[int, int, str]:
    """(level held over every sample read, worst level seen, what it was) over consecutive
    samples: a level counts only when every sample holds it -- a single spike is a
    transient (GB trays and their coolant move tens of degrees in seconds), reported but
    not a verdict on its own. Pure."""
    read = [v for v in values if v is not None]
    if not read or not thresholds:
        return 0, 0, ""
    levels = [_level(v, thresholds) for v in read]
    shown = ", ".join(f"{v:g}" for v in read)
    return min(levels), max(levels), shown


def _value(sample: dict[str, Any], unit: str, key: str) -> float | None:
    for u in sample["units"]:
        if u["id"] == unit:
            return next((r["value"] for r in u["readings"] if r["key"] == key), None)
    return None


def judge_cooling(rack: dict[str, Any], comps: list[dict[str, Any]]) -> Result | None:
    fails: list[str] = []
    warns: list[str] = []
    units = [c for c in comps if c["kind"] == "cdu"]
    judged = 0
    for c, _ in _read(comps, "cdu", fails):
        good = [s for s in c["samples"] if s is not None]
        if len(good) < len(c["samples"]):
            warns.append(f"CDU {c['name']}: {len(c['samples']) - len(good)} of "
                         f"{len(c['samples'])} samples could not be read")
        leaks: dict[str, set[str]] = {}
        for s in good:  # a leak in any sample is a leak
            for u in s["units"]:
                for d in u["leaks"]:
                    if d.get("state") not in ("OK", None):
                        leaks.setdefault(f"{u['id']}:{d['name']}", set()).add(d["state"])
        for u in good[-1]["units"]:
            for d in u["leaks"]:  # a detector that does not watch is no "no leak"
                kind = f" ({d['type']})" if d.get("type") else ""
                if d.get("status_state") in ("Absent", "Disabled", "UnavailableOffline",
                                             "StandbyOffline"):
                    warns.append(f"CDU {c['name']}: leak detector {d['name']}{kind} is "
                                 f"{d['status_state']}: it watches nothing")
                elif d.get("health") in BAD_HEALTH and d.get("state") in ("OK", None):
                    fails.append(f"CDU {c['name']}: leak detector {d['name']}{kind} health "
                                 f"{d['health']}: its reading cannot be trusted")
        if not any(u["leaks"] for u in good[-1]["units"]):
            warns.append(f"CDU {c['name']}: reports no leak detector: leaks were not checked")
        if not any(u["readings"] for u in good[-1]["units"]):
            warns.append(f"CDU {c['name']}: reports no coolant readings (temperatures, flow, "
                         "pressure): the loop was not checked")
        for name, states in sorted(leaks.items()):
            fails.append(f"CDU {c['name']}: LEAK detected by {name.split(':', 1)[1]} "
                         f"({', '.join(sorted(states))})")
        for u in good[-1]["units"]:
            who = f"CDU {c['name']}"
            _health(who, u.get("health"), u.get("state"), fails, warns)
            for cond in u.get("conditions") or []:
                if cond.get("severity") == "Critical":
                    fails.append(f"{who}: {cond.get('message')}")
            for p in u["pumps"]:
                _health(f"{who} pump {p['id']}", p.get("health"), p.get("state"), fails,
                        warns)
            for r in u["readings"]:
                series = [_value(s2, u["id"], r["key"]) for s2 in good]
                if all(v is None for v in series):
                    warns.append(f"{who} {r['label']}: no reading")
                    continue
                judged += 1
                held, peak, shown = sustained(series, r["thresholds"])
                limits = ", ".join(f"{k.replace('_', ' ')} {v:g}"
                                   for k, v in sorted(r["thresholds"].items()))
                what = (f"{who} {r['label']} {shown} {r['unit']} over {len(series)} "
                        f"samples ({limits})")
                if held == 2:
                    fails.append(f"{what}: beyond its critical threshold in every sample")
                elif held == 1 or peak == 2:
                    warns.append(f"{what}: " + ("beyond its caution threshold in every "
                                                "sample" if held == 1 else
                                                "beyond its critical threshold in some "
                                                "samples only (transient)"))
                elif peak == 1:
                    warns.append(f"{what}: beyond its caution threshold in some samples")
    if not units:
        return None  # not judged: the record says so
    return judge_findings("rack.cooling", fails, warns,
                          f"no leak; CDU healthy, {judged} coolant readings inside their "
                          f"thresholds over {rack.get('samples', 3)} samples",
                          value={"cdus": len(units), "readings": judged},
                          fault_code="NC-RACK-COOLING" if fails else "",
                          remediation="A leak or a failed pump stops the rack: isolate the "
                                      "loop as the CDU's service manual says before any "
                                      "load." if fails else "")


# --- firmware across the domain ---------------------------------------------------------

def firmware_table(trays: dict[str, dict[str, Any] | None], comps: list[dict[str, Any]]
                   ) -> dict[str, dict[str, str | None]]:
    """component -> {where: version} over the domain: each tray's driver and GPU VBIOS,
    each NVLink switch's firmware, each shelf's and CDU's, each switch tray's firmware
    inventory item (by its Id)."""
    out: dict[str, dict[str, str | None]] = {}
    for host, inv in sorted(trays.items()):
        if not inv:
            continue
        out.setdefault("driver", {})[f"tray {host}"] = inv.get("driver")
        for g in inv.get("gpus") or []:
            out.setdefault("gpu_vbios", {})[f"tray {host} GPU {g.get('bus_id')}"] = \
                g.get("vbios")
    for c in comps:
        s = _last(c)
        if s is None:
            continue
        if c["kind"] == "switch_tray":
            for sw in s.get("switches") or []:
                out.setdefault("switch_tray", {})[
                    f"switch tray {c['name']} switch {sw['id']}"] = sw.get("firmware")
            for item, ver in sorted((s.get("firmware") or {}).items()):
                out.setdefault(f"switch_tray:{item}", {})[f"switch tray {c['name']}"] = ver
        elif c["kind"] == "power_shelf":
            for sh in s["shelves"]:
                out.setdefault("power_shelf", {})[f"power shelf {c['name']}"] = \
                    sh.get("firmware")
        elif c["kind"] == "cdu":
            for u in s["units"]:
                out.setdefault("cdu", {})[f"CDU {c['name']}"] = u.get("firmware")
    return out


def judge_firmware(rack: dict[str, Any], table: dict[str, dict[str, str | None]]) -> Result:
    """Against the rack's recipe where it names the component; otherwise one version
    across the domain, the odd ones named against what the others run."""
    recipe = rack.get("firmware") or {}
    fails: list[str] = []
    warns: list[str] = []
    for comp, where in sorted(table.items()):
        want = recipe.get(comp)
        unreported = sorted(w for w, v in where.items() if v is None)
        if unreported:
            (fails if want else warns).append(
                f"{comp}: not reported by {', '.join(unreported)}"
                + (f" (cannot be shown to be the recipe's {want})" if want else ""))
        versions = Counter(v for v in where.values() if v is not None)
        if want:
            for w, v in sorted(where.items()):
                if v is not None and v != want:
                    fails.append(f"{w}: {comp} {v}, the rack's recipe says {want}")
        elif len(versions) > 1:
            common, n = versions.most_common(1)[0]
            if list(versions.values()).count(n) > 1:
                fails.append(f"{comp}: the domain runs {len(versions)} versions: " + ", ".join(
                    f"{v} ({c})" for v, c in sorted(versions.items())))
            else:
                for w, v in sorted(where.items()):
                    if v is not None and v != common:
                        fails.append(f"{w}: {comp} {v}; the rest of the domain ({n}) runs "
                                     f"{common}")
    for comp in sorted(set(recipe) - {k.split(':')[0] for k in table}):
        fails.append(f"{comp}: the recipe names {recipe[comp]} but nothing in the rack "
                     "reported it")
    return judge_findings("rack.firmware", fails, warns,
                          f"one version per component across the domain "
                          f"({len(table)} components"
                          + (f", {len(recipe)} as the recipe says)" if recipe else ")"),
                          value={"components": len(table)},
                          facts={"firmware": table, "recipe": recipe},
                          fault_code="NC-RACK-FIRMWARE" if fails else "")


__all__ = ["DOMAIN_CHECKS", "firmware_table", "judge_cooling", "judge_domain",
           "judge_firmware", "judge_power", "judge_switch_trays", "judge_trays",
           "sustained"]
