"""rack.nvlink_map: the NVLink domain wired as its kind says, from what the switch trays
report behind their ports. Pure.

Every GPU of the rack's trays has one NVLink link to each NVLink switch chip of the
domain (rack-kinds.yml: one link from each GPU to each chip). A switch tray names the GPU
behind each port (Redfish: the Port's Links.AssociatedEndpoints, a fabric Endpoint that
holds the GPU's UUID), and the trays' own runs name their GPUs by UUID; so each finding
names the switch tray, its chip and port, and the GPU by tray and bus id:

  * a GPU with no link to a chip (its cable is missing, or crossed onto another GPU);
  * a GPU with two or more links to one chip (the ports named);
  * a port whose GPU is none of the rack's trays' GPUs;
  * a switch tray with another number of chips than its kind's.

Links that could not be mapped are never a pass: a switch tray that was not read, or a
tray whose GPUs are not known (its run did not measure them), gives ERROR, or joins the
findings of a FAIL. Whether a link is up is rack.switch_trays' to judge, not this one's.
Not judged (None): the rack names no switch trays, or those read report no GPU behind
their ports (a wiring nobody reported is listed as not judged, never passed).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from nodecert.rack.infra import gpu_uuid
from nodecert.rack.judge_common import first_of, last_sample, unread
from nodecert_node.contract import Result, Verdict

CHECK = "rack.nvlink_map"


def _rack_gpus(rack: dict[str, Any], gpus_of: dict[str, list[dict[str, Any]] | None],
               errors: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """For every GPU the trays' runs reported: uuid -> "tray H GPU BUS", uuid -> H."""
    where: dict[str, str] = {}
    tray_of: dict[str, str] = {}
    for host in rack["trays"]:
        gpus = gpus_of.get(host)
        if not gpus:
            errors.append(f"tray {host}: its GPUs are not known (not measured): their "
                          "links are not mapped")
            continue
        for g in gpus:
            if g.get("uuid"):
                u = gpu_uuid(str(g["uuid"]))
                where[u], tray_of[u] = f"tray {host} GPU {g.get('bus_id')}", host
    return where, tray_of


def _judge_chip(who: str, chip: dict[str, Any], where: dict[str, str], fails: list[str],
                errors: list[str], *, all_known: bool) -> list[str]:
    """One switch chip's ports against the rack's GPUs; the GPUs linked as planned.
    all_known: every tray's GPUs are known (else a GPU not among them may be one of an
    unmeasured tray's, never called foreign)."""
    seen: dict[str, list[str]] = {}
    for p in chip.get("ports") or []:
        for u in p.get("gpus") or []:
            seen.setdefault(u, []).append(str(p["id"]))
        for path in p.get("unnamed") or []:
            errors.append(f"{who} port {p['id']}: its endpoint {path} names no GPU UUID: "
                          "the link is not mapped")
    good = []
    for u, ports in seen.items():
        if u not in where and not all_known:
            continue
        if u not in where:
            fails.append(f"{who} port {', '.join(ports)}: GPU {u} is none of the rack's "
                         "trays' GPUs")
        elif len(ports) > 1:
            fails.append(f"{who} ports {', '.join(ports)}: all to {where[u]} (each GPU has "
                         "one link to each switch chip)")
        else:
            good.append(u)
    fails.extend(f"{name}: no NVLink to {who}" for u, name in where.items() if u not in seen)
    return good


def judge_nvlink_map(rack: dict[str, Any], gpus_of: dict[str, list[dict[str, Any]] | None],
                     comps: list[dict[str, Any]], chips_per_tray: int) -> Result | None:
    """gpus_of: tray host -> its GPUs ({"bus_id", "uuid"}, from its hardware identity),
    None where its run did not report them. comps: the rack's walked components."""
    trays = [c for c in comps if c["kind"] == "switch_tray"]
    read = [(c, last_sample(c)) for c in trays]
    if not trays or (any(s is not None for _, s in read) and
                     not any(s and s.get("endpoints") for _, s in read)):
        return None  # not judged: the record says why
    errors: list[str] = []
    fails: list[str] = []
    where, tray_of = _rack_gpus(rack, gpus_of, errors)
    all_known = not errors
    chips = links = 0
    # tray -> switch chip -> its GPUs linked there as planned: the page's grid
    grid: dict[str, dict[str, int]] = {h: {} for h in rack["trays"]}
    for c, s in read:
        if s is None:
            errors.append(f"{unread(c)}: its switch chips' links are not mapped")
            continue
        if not s.get("endpoints"):
            errors.append(f"switch tray {c['name']}: reports no GPU behind its ports: its "
                          "links are not mapped")
            continue
        if len(s.get("switches") or []) != chips_per_tray:
            fails.append(f"switch tray {c['name']}: reports {len(s.get('switches') or [])} "
                         f"NVLink switch chips; a {rack['kind']} switch tray has "
                         f"{chips_per_tray}")
        for chip in s.get("switches") or []:
            chips += 1
            good = _judge_chip(f"switch tray {c['name']} switch {chip['id']}", chip, where,
                               fails, errors, all_known=all_known)
            links += len(good)
            label = f"{c['name']}/{chip['id']}"
            per_tray = Counter(tray_of[u] for u in good)
            for h, row in grid.items():
                row[label] = per_tray[h]
    value = {"switch_chips": chips, "gpus": len(where), "links": links, "grid": grid,
             "gpus_per_tray": max((len(g or []) for g in gpus_of.values()), default=0)}
    if fails:
        return Result(CHECK, Verdict.FAIL, first_of(fails), findings=tuple(fails + errors),
                      value=value, fault_code="NC-RACK-NVLINK-MAP",
                      remediation="Reseat or replace the NVLink cable cartridge between the "
                                  "named GPU's tray and the switch tray (the port named "
                                  "carries the wrong GPU, or none), then validate the rack "
                                  "again.")
    if errors:
        return Result(CHECK, Verdict.ERROR, first_of(errors), findings=tuple(errors),
                      value=value, fault_code="NC-NOT-MEASURED",
                      remediation="Links that were not mapped leave the domain's wiring "
                                  "unproven: bring the named switch tray or tray back and "
                                  "validate the rack again.")
    return Result(CHECK, Verdict.PASS,
                  f"{len(where)} GPUs each linked once to each of {chips} NVLink switch "
                  f"chips ({links} links as the {rack['kind']} is wired)", value=value)


__all__ = ["CHECK", "judge_nvlink_map"]
