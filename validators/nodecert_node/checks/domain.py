"""domain.fabric and domain.imex: a compute tray's place in its rack's NVLink domain.

Planned only for a host whose order names a rack (`nodecert_rack`), and domain.imex only
where the rack expects an IMEX domain: an HGX server is never judged on either.
"""

from __future__ import annotations

from typing import Any

from nodecert_node import gpu
from nodecert_node.context import Ctx, judge_findings
from nodecert_node.contract import COMPUTE_DOMAINS, Result, Verdict
from nodecert_node.parse.imex import MEANING, parse_imex_status
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
# Health entries whose value names a fault when it is not one of these (nvidia-smi
# prints False/None/N/A for "no fault"; anything else is the fault itself).
_NO_FAULT = ("False", "None", "N/A", "No", "")


def _domain(g: dict[str, Any]) -> tuple[str | None, str | None]:
    clique, uuid = g.get("fabric_clique_id"), g.get("fabric_cluster_uuid")
    return (None if clique in (None, "0") else str(clique),
            None if uuid in (None, ZERO_UUID) else str(uuid).lower())


def judge_fabric(name: str, gpus: list[dict[str, Any]], rack: dict[str, Any]) -> Result:
    """Every GPU registered in the NVLink fabric (Completed/Success), healthy, at full
    bandwidth, in a clique of a cluster, and all of the tray's GPUs in the same one. Pure."""
    fails: list[str] = []
    # A named reason (the health mask's incorrect configuration, an unhealthy route, the
    # bandwidth) says what to fix; it leads the findings, and a GPU's generic "Unhealthy"
    # summary rides on its first reason instead of standing before it.
    reasons: list[str] = []
    warns: list[str] = []
    seen: dict[tuple[str | None, str | None], list[str]] = {}
    for g in gpus:
        who = f"GPU {g.get('bus_id')}"
        state, status = g.get("fabric_state"), g.get("fabric_status")
        if state != "Completed" or status not in (None, "Success"):
            fails.append(f"{who}: fabric registration {state or 'not reported'}/"
                         f"{status or '-'}, expected Completed/Success")
        clique, uuid = _domain(g)
        if clique is None or uuid is None:
            fails.append(f"{who}: in no NVLink clique (clique {g.get('fabric_clique_id')}, "
                         f"cluster {g.get('fabric_cluster_uuid')}): the tray has not joined "
                         "the rack's NVLink domain")
        seen.setdefault((clique, uuid), []).append(who)
        health = g.get("fabric_health") or {}
        own: list[str] = []
        for key in ("incorrect_configuration", "route_unhealthy"):
            if str(health.get(key, "N/A")) not in _NO_FAULT:
                own.append(f"{who}: fabric {key.replace('_', ' ')}: {health[key]}")
        if health.get("bandwidth") not in (None, "Full"):
            own.append(f"{who}: NVLink fabric bandwidth {health['bandwidth']} (degraded: "
                       "links down or insufficient NVLinks)")
        if health.get("summary") not in (None, "Healthy"):
            if own:
                own[0] += f"; fabric health {health['summary']}"
            else:
                fails.append(f"{who}: fabric health {health['summary']}")
        reasons += own
        for key in ("route_recovery_in_progress", "access_timeout_recovery"):
            if str(health.get(key, "N/A")) not in _NO_FAULT:
                warns.append(f"{who}: fabric {key.replace('_', ' ')}: {health[key]}")
    if len([k for k in seen if k != (None, None)]) > 1:
        fails.append("the tray's GPUs are in different NVLink domains: " + "; ".join(
            f"clique {c} cluster {u}: {', '.join(w)}" for (c, u), w in sorted(
                seen.items(), key=lambda kv: str(kv[0]))))
    clique, uuid = next(iter(seen), (None, None))
    fails = reasons + fails
    return judge_findings(
        name, fails, warns,
        f"{len(gpus)} GPUs registered in NVLink clique {clique} of cluster {uuid} "
        f"(rack {rack.get('name')}), fabric healthy",
        value={"gpus": len(gpus), "clique_id": clique, "cluster_uuid": uuid},
        facts={"clique_id": clique, "cluster_uuid": uuid, "rack": rack.get("name"),
               "gpus": [{k: g.get(k) for k in ("bus_id", "uuid", "fabric_state",
                                               "fabric_status", "fabric_clique_id",
                                               "fabric_cluster_uuid", "fabric_health")}
                        for g in gpus]},
        fault_code="NC-NVL-DOMAIN" if fails else "",
        remediation="A GPU outside the rack's NVLink domain needs the rack's NVLink switch "
                    "trays and their NVLink Subnet Manager checked, then the tray reseated "
                    "or its cable cartridge inspected." if fails else "")


@check("domain.fabric", order=13, suites=("quick", "standard", "full", "lab"),
       tools=(gpu.SMI,), needs=("rack",),
       description="each GPU registered in the rack's NVLink domain: clique, cluster, health")
def domain_fabric(ctx: Ctx) -> Result:
    _, gpus, ev = gpu.inventory(ctx)
    return judge_fabric("domain.fabric", gpus, ctx.spec.get("rack") or {}).with_(
        evidence=tuple(ev))


def _imex_membership(nodes: list[dict[str, Any]], rack: dict[str, Any]) -> list[str]:
    """The trays the IMEX domain lacks and the nodes it lists that are no tray of the rack,
    each by host and address (the inventory's address of each tray against the
    addresses IMEX lists). Where no IMEX address is any tray's (IMEX on a network of its
    own), only the counts can be compared, and the finding says why."""
    trays = list(rack.get("trays") or [])
    if not trays:
        return []
    where = {str(h): str(a) for h, a in (rack.get("tray_addresses") or {}).items()}
    listed = {str(n["address"]) for n in nodes}
    name = rack.get("name")
    if not (listed & set(where.values())):
        if len(nodes) == len(trays):
            return []
        return [f"the IMEX domain lists {len(nodes)} nodes; rack {name} has {len(trays)} "
                "compute trays" + (" (no IMEX address is a tray's inventory address, so "
                                   "the trays cannot be named)" if where else "")]
    out = []
    missing = [f"{h} ({where[h]})" if h in where else f"{h} (no inventory address)"
               for h in trays if where.get(h) not in listed]
    if missing:
        out.append(f"the IMEX domain lacks {len(missing)} of rack {name}'s {len(trays)} "
                   f"compute trays: {', '.join(missing)}")
    by_address = {a: h for h, a in where.items()}
    extra = [f"#{n['index']} ({n['address']})" for n in nodes
             if str(n["address"]) not in by_address]
    if extra:
        out.append(f"the IMEX domain lists {len(extra)} node(s) that are no compute tray of "
                   f"rack {name}: {', '.join(extra)}")
    seen: dict[str, int] = {}
    for n in nodes:
        seen[str(n["address"])] = seen.get(str(n["address"]), 0) + 1
    twice = [f"{by_address.get(a, a)} ({a})" for a, k in sorted(seen.items()) if k > 1]
    if twice:
        out.append(f"the IMEX domain lists a tray more than once: {', '.join(twice)}")
    return out


def judge_imex(name: str, status: dict[str, Any], rack: dict[str, Any],
               service: str | None) -> Result:
    """The IMEX domain: the service running, the domain UP, one READY node per compute
    tray of the rack, every pair of nodes Connected, one version. Pure."""
    fails: list[str] = []
    warns: list[str] = []
    if service is not None and service != "active":
        fails.append(f"nvidia-imex service is {service}, expected active")
    nodes = status["nodes"]
    # the node that is not READY first: it is what the operator goes to fix
    for n in nodes:
        if n["state"] != "READY":
            fails.append(f"IMEX node #{n['index']} ({n['address']}) is {n['state']}, "
                         "expected READY")
    if status["domain_state"] != "UP":
        fails.append(f"IMEX domain state {status['domain_state']}, expected UP")
    fails += _imex_membership(nodes, rack)
    for src, row in sorted(status["matrix"].items()):
        for dst, code in sorted(row.items()):
            if code != "C":
                fails.append(f"IMEX node #{src} -> #{dst}: {code} "
                             f"({MEANING.get(code, 'unknown state')})")
    versions = sorted({str(n["version"]) for n in nodes if n["version"]})
    if len(versions) > 1:
        fails.append(f"IMEX nodes run different versions: {', '.join(versions)}")
    return judge_findings(
        name, fails, warns,
        f"IMEX domain UP: {len(nodes)} nodes READY and connected"
        + (f", version {versions[0]}" if versions else ""),
        value={"nodes": len(nodes), "ready": sum(n["state"] == "READY" for n in nodes)},
        facts={"imex": status, "service": service},
        fault_code="NC-IMEX" if fails else "",
        remediation="Check nvidia-imex on the named trays (journalctl -u nvidia-imex, "
                    "/etc/nvidia-imex/nodes_config.cfg lists every tray's address) before "
                    "any multi-node job: workloads cannot share memory across trays "
                    "without it." if fails else "")


def judge_imex_off(name: str, active: str | None, enabled: str | None) -> Result:
    """A tray whose IMEX the customer's ComputeDomains run: the host's nvidia-imex service
    stopped, disabled and masked, as NVIDIA's DRA driver guide asks (a running host
    service and ComputeDomains exclude each other: ComputeDomain workloads hang). A state
    that could not be read is no pass. Pure."""
    if active in (None, "unknown") or enabled in (None, "unknown"):  # printed nothing
        return Result(name, Verdict.ERROR, "the state of the host's nvidia-imex service "
                      "could not be read (systemctl)", fault_code="NC-IMEX")
    fails = ([f"the host's nvidia-imex service is {active}: ComputeDomains run IMEX on "
              "this rack, and a host service beside them makes their workloads hang"]
             if active not in ("inactive", "failed") else [])
    warns = ([f"the host's nvidia-imex service is {enabled}, not masked: a reboot or a "
              "package upgrade can start it beside the ComputeDomains"]
             if not fails and enabled not in ("masked", "masked-runtime") else [])
    if enabled in ("enabled", "enabled-runtime") and not fails:
        fails, warns = ["the host's nvidia-imex service is enabled: it starts at the next "
                        "boot beside the ComputeDomains"], []
    return judge_findings(
        name, fails, warns,
        "host nvidia-imex stopped and masked: the rack's IMEX is the customer's "
        "ComputeDomains", value={"active": active, "enabled": enabled},
        fault_code="NC-IMEX" if fails else "",
        remediation="systemctl disable --now nvidia-imex.service && systemctl mask "
                    "nvidia-imex.service on the tray (or provision it again: the imex role "
                    "does that for a compute-domains rack)" if fails or warns else "")


def _unit(words: list[str], ctx: Ctx, ev: list[Any]) -> str | None:
    """`systemctl <words> nvidia-imex`'s one word ("unknown" when it printed none; None
    when systemctl could not be run)."""
    try:
        out = run(["systemctl", *words, "nvidia-imex"], timeout=ctx.timeout,
                  ok_codes=(0, 1, 3, 4))
    except ToolError as exc:
        if exc.evidence:
            ev.append(exc.evidence)
        return None
    ev.append(out.evidence)
    return out.text.strip().split("\n")[0].strip() or "unknown"


@check("domain.imex", order=13, suites=("quick", "standard", "full", "lab"),
       tools=("nvidia-imex-ctl", "systemctl"), needs=("rack", "rack-imex"),
       description="the rack's IMEX domain: every tray READY and connected (or, where "
                   "ComputeDomains run it, the host service off)")
def domain_imex(ctx: Ctx) -> Result:
    ev: list[Any] = []
    rack = ctx.spec.get("rack") or {}
    if rack.get("imex") == COMPUTE_DOMAINS:
        return judge_imex_off("domain.imex", _unit(["is-active"], ctx, ev),
                              _unit(["is-enabled"], ctx, ev)).with_(evidence=tuple(ev))
    service = _unit(["is-active"], ctx, ev)
    # A hung query is the tool's timeout: ERROR with what it printed, never a pass.
    out = run(["nvidia-imex-ctl", "-N"], timeout=ctx.timeout)
    ev.append(out.evidence)
    return judge_imex("domain.imex", parse_imex_status(out.text), ctx.spec.get("rack") or {},
                      service).with_(evidence=tuple(ev))
