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

from nodecert.rack.judge_common import (
    BAD_HEALTH,
    first_of,
    judge_findings,
    last_sample,
    note_health,
    read_of_kind,
)
from nodecert.rack.judge_equipment import judge_cooling, judge_power, sustained
from nodecert_node.contract import Result, Verdict

DOMAIN_CHECKS = ("domain.fabric", "domain.imex")


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
        return Result("rack.trays", Verdict.ERROR, first_of(errors),
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


# --- switch trays (power and cooling: judge_equipment) ---------------------------------

def judge_switch_trays(rack: dict[str, Any], comps: list[dict[str, Any]]
                       ) -> Result | None:
    fails: list[str] = []
    warns: list[str] = []
    ports_up = ports = 0
    trays = [c for c in comps if c["kind"] == "switch_tray"]
    for c, s in read_of_kind(comps, "switch_tray", fails):
        note_health(f"switch tray {c['name']}", s.get("health"), s.get("state"), fails, warns)
        if not s.get("switches"):
            warns.append(f"switch tray {c['name']}: reports no NVLink switch (no Fabrics "
                         "resource): its ports cannot be judged")
        for sw in s.get("switches") or []:
            note_health(f"switch tray {c['name']} switch {sw['id']}", sw.get("health"),
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
        s = last_sample(c)
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
