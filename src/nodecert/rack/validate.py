"""The library function behind `nodecert rack validate`: read the rack from the
inventory, run the domain checks on every compute tray (through validate, as the node
checks run anywhere), read the switch trays, power shelves and CDU over Redfish at the
same time, judge the rules across all of it, and save the rack run.

    runs/rack-<run id>/results.json   the rack's record (nodecert.rack-run/v1)
    runs/rack-<run id>/trays/<id>/    the trays' own validation run
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.cluster.cabling_discover import cabling_check
from nodecert.cluster.validate import plan_of
from nodecert.core.errors import InventoryError
from nodecert.inventory.cluster import ClusterConfig
from nodecert.inventory.engine import cluster_hosts
from nodecert.inventory.rack import kinds
from nodecert.inventory.reader import HostSpec, Inventory, resolve
from nodecert.rack import judge
from nodecert.rack.gather import read_rack
from nodecert.rack.gather import specs as endpoint_specs
from nodecert.rack.judge_nvlink import judge_nvlink_map
from nodecert.rack.load import DomainLoad, LoadPlan, load_plan
from nodecert.runs.layout import RunDir
from nodecert.runs.records import RACK_SCHEMA as SCHEMA
from nodecert.runs.records import GroupRecord
from nodecert.runs.store import write_json
from nodecert.transport.become import BecomeSource
from nodecert.validation.run import ValidateRequest, validate
from nodecert_node.contract import Result, Verdict, worst

Progress = Callable[[str], None]
# What the record keeps of the rack's spec (never its credentials' file names).
PUBLIC = ("name", "kind", "gpus", "imex", "trays", "switch_trays", "power_shelves", "pdus",
          "cdu",
          "firmware", "samples", "sample_s")
TrayRuns = Callable[[Path | Inventory, dict[str, Any], Path, Progress],
                   dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class RackRequest:
    """What `nodecert rack validate` is asked to do: the inventory, which rack (the only
    one when it names one), where runs go and the become password source."""

    inventory: Path
    rack: str | None = None
    runs_dir: Path = Path("runs")
    become: BecomeSource | None = None
    load: bool = True  # the NVLink domain under load (where the trays name a job engine)


def rack_of(specs: dict[str, HostSpec], name: str | None, where: Path
            ) -> dict[str, Any]:
    """The rack's spec (with its trays) from the order; InventoryError naming the racks
    there are when `name` is not one of them, or is not given and there are several."""
    racks: dict[str, dict[str, Any]] = {}
    for s in specs.values():
        r = s.validation.get("rack")
        if r:
            racks.setdefault(r["name"], r)
    if not racks:
        raise InventoryError(f"{where}: no host is a compute tray of a rack (nodecert_rack)",
                             hint="describe the rack in the trays' group_vars "
                                  "(docs/rack.md)")
    if name is None and len(racks) > 1:
        raise InventoryError(f"{where} describes {len(racks)} racks: "
                             f"{', '.join(sorted(racks))}", hint="choose one with --rack NAME")
    rack = racks.get(name) if name else next(iter(racks.values()))
    if rack is None:
        raise InventoryError(f"{where}: no rack named {name!r}; the inventory has "
                             f"{', '.join(sorted(racks))}", hint="pass one of these to --rack")
    return rack


def tray_runs(inventory: Path | Inventory, rack: dict[str, Any], run_dir: Path, say: Progress,
              become: BecomeSource | None = None) -> dict[str, dict[str, Any]]:
    """Every tray's domain checks and identity, through validate: host -> {"results",
    "identity", "inventory", "fabric", "simulated"} or {"error"}."""
    checks = ("hardware.inventory", "domain.fabric",
              *(("domain.imex",) if rack.get("imex") else ()))
    vr = validate(ValidateRequest(inventory, suite="quick", limit=tuple(rack["trays"]),
                                  checks=checks, runs_dir=run_dir / "trays", become=become),
                  progress=say)
    out: dict[str, dict[str, Any]] = {}
    for host in rack["trays"]:
        hr = vr.hosts.get(host)
        if hr is None or (hr.error and not hr.results):
            out[host] = {"error": (hr.error or hr.status) if hr else "not run"}
            continue
        by = {r.check: r for r in hr.results}
        inv = by.get("hardware.inventory")
        out[host] = {"results": [r.as_dict() for r in hr.results],
                     "identity": inv.facts.get("identity") if inv else None,
                     "inventory": {"driver": inv.facts.get("driver"),
                                   "gpus": [{"bus_id": bus, "vbios": v} for bus, v in
                                            sorted((inv.facts.get("vbios") or {}).items())]}
                     if inv else None,
                     "fabric": by["domain.fabric"].facts if "domain.fabric" in by else None,
                     "simulated": hr.simulated,
                     "run": str(hr.out_dir)}
    return out


def judge_rack(rack: dict[str, Any], trays: dict[str, dict[str, Any]],
               comps: list[dict[str, Any]]) -> tuple[list[Result], list[str]]:
    """Every rule's Result, and what was not judged (and why). Pure."""
    results = [judge.judge_trays(rack, trays),
               judge.judge_domain(rack, {h: t.get("fabric") for h, t in trays.items()})]
    not_judged = []
    gpus_of = {h: (t.get("identity") or {}).get("gpus") for h, t in trays.items()}
    unreported = ("the switch trays report no GPU behind their NVLink ports (Redfish Port "
                  "Links.AssociatedEndpoints)")
    for rule, judged, why in (
            ("rack.switch_trays", judge.judge_switch_trays(rack, comps), _names_no("switch_trays")),
            ("rack.nvlink_map", judge_nvlink_map(rack, gpus_of, comps,
                                                 kinds()[rack["kind"]].switch_chips_per_tray),
             unreported if rack.get("switch_trays") else _names_no("switch_trays")),
            ("rack.power", judge.judge_power(rack, comps), _names_no("power_shelves or pdus")),
            ("rack.cooling", judge.judge_cooling(rack, comps), _names_no("cdu"))):
        if judged is None:
            not_judged.append(f"{rule}: {why}")
        else:
            results.append(judged)
    results.append(judge.judge_firmware(rack, judge.firmware_table(
        {h: t.get("inventory") for h, t in trays.items()}, comps)))
    return results, not_judged


def _names_no(key: str) -> str:
    """Why a rule over the rack's management endpoints was not judged: none named."""
    return (f"the rack names no {key.replace('_', ' ')} "
            f"(nodecert_rack.{key.replace(' or ', ', ')})")


def _interrupted(run_dir: Path, rack: dict[str, Any]) -> None:
    """The record of a run stopped by Ctrl-C: an ERROR saying so, never a verdict on
    what did not finish."""
    write_json(RunDir(run_dir).cluster_results, {
        "schema": SCHEMA, "run_id": run_dir.name, "verdict": "ERROR",
        "interrupted": True, "rack": {k: rack.get(k) for k in PUBLIC},
        "results": [], "problems": ["interrupted: the trays' checks or the domain's "
                                    "jobs were stopped (running jobs cancelled)"]})


def _tray_record(t: dict[str, Any]) -> dict[str, Any]:
    """What the rack's record keeps of a tray's run: its readings, and each check's
    verdict and summary (the tray's own record holds the rest)."""
    return {k: v for k, v in t.items() if k != "results"} | {
        "checks": {r["check"]: {k: r[k] for k in ("verdict", "summary")}
                   for r in t.get("results") or []}}


def _not_loaded(loaded: list[Result] | None, plan: LoadPlan | None, *,
                asked: bool) -> list[str]:
    """What of the domain under load was not judged, and why."""
    if loaded is not None:
        return list(plan.not_judged) if plan else []
    return ["rack.allreduce, rack.sweep: " + (
        "not asked for (--no-load)" if not asked else
        "the trays name no job engine (nodecert_cluster): the NVLink domain was not "
        "measured under load")]


def rack_cabling(inventory: Inventory, rack: dict[str, Any], become: BecomeSource | None
                 ) -> Callable[[], Result] | None:
    """fabric.cabling over the trays' scale-out fabric when they name a cable plan
    (nodecert_cabling_plan): the plan read now (InventoryError for one with errors), the
    fabric discovered on the trays' own tools when called; None without a plan."""
    trays = list(rack["trays"])
    plan = plan_of(inventory.hosts, trays)
    if plan is None:
        return None
    layers = {str((inventory.hosts[t].validation.get("fabric") or {}).get("link_layer") or "")
              for t in trays}
    if len(layers) != 1 or layers == {""}:
        raise InventoryError(f"{inventory.path}: the trays name a cable plan but not one "
                             "fabric (nodecert_fabric's link_layer): "
                             + ", ".join(sorted(x or "none" for x in layers)),
                             hint="state the trays' scale-out fabric in group_vars "
                                  "(docs/inventory.md)")
    eps = cluster_hosts(inventory, trays, inventory.hostvars(trays), ClusterConfig(),
                        become).endpoints
    layer = layers.pop()
    return lambda: cabling_check(plan, layer, eps)


def rack_validate(request: RackRequest, *, progress: Progress | None = None,
                  trays_fn: TrayRuns | None = None,
                  stop: threading.Event | None = None,
                  load_fn: Callable[[], list[Result]] | None = None,
                  cabling_fn: Callable[[], Result] | None = None
                  ) -> GroupRecord:
    """Validate the rack; its saved record (`run_dir` is the run's directory).
    InventoryError on bad input, before anything runs or is written. `trays_fn`,
    `load_fn` and `cabling_fn` stand in for the trays' node runs, the domain's jobs and
    the fabric's discovery (tests)."""
    say: Progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    inventory = resolve(request.inventory)  # read once: the trays' runs and the jobs too
    rack = rack_of(inventory.hosts, request.rack, inventory.path)
    endpoint_specs(rack)  # the credentials readable, before anything runs or is written
    plan = load_plan(inventory, rack, request.become) if request.load else None
    cabling = cabling_fn or rack_cabling(inventory, rack, request.become)
    run_dir = RunDir.new(request.runs_dir, "rack").make().path
    started = time.time()
    say(_what(rack))
    run_trays = trays_fn or (lambda inv, r, d, s: tray_runs(inv, r, d, s, request.become))
    t0 = time.monotonic()

    def timed_read() -> tuple[list[Any], float]:
        comps = read_rack(rack, stop=stop, say=say)
        return comps, time.monotonic() - t0

    stop = stop or threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rack") as pool:
        infra = pool.submit(timed_read)  # the endpoints are read while the trays run
        try:
            trays = run_trays(inventory, rack, run_dir, say)
            trays_s = time.monotonic() - t0
            loaded = (load_fn() if load_fn else
                      _under_load(plan, run_dir, say, stop) if plan else None)
        except KeyboardInterrupt:
            stop.set()  # the endpoints' sampling ends at its next wait
            _interrupted(run_dir, rack)
            raise
        load_s = time.monotonic() - t0 - trays_s
        found, infra_s = infra.result()
        comps = [c.as_dict() for c in found]
    results, not_judged = judge_rack(rack, trays, comps)
    results += loaded or []
    if cabling is not None and not stop.is_set():
        say("fabric.cabling: the trays' discovered links against the cable plan")
        results.append(cabling())
    not_judged += _not_loaded(loaded, plan, asked=request.load)
    # wall times: the trays' checks and the endpoints' reading ran at once
    seconds = {"trays": round(trays_s, 1), "load": round(load_s, 1),
               "infrastructure": round(infra_s, 1), "total": round(time.monotonic() - t0, 1)}
    data = _record(run_dir, rack, results, not_judged=not_judged, trays=trays, comps=comps,
                   seconds=seconds, started=started)
    write_json(RunDir(run_dir).cluster_results, data)
    return GroupRecord(RunDir(run_dir).cluster_results, data)


def _what(rack: dict[str, Any]) -> str:
    return (f"rack {rack['name']} ({rack['kind']}): {len(rack['trays'])} compute trays, "
            f"{len(rack.get('switch_trays') or [])} switch trays, "
            f"{len(rack.get('power_shelves') or [])} power shelves"
            + (", a CDU" if rack.get("cdu") else ""))


def _record(run_dir: Path, rack: dict[str, Any], results: list[Result], *,
            not_judged: list[str], trays: dict[str, dict[str, Any]],
            comps: list[dict[str, Any]], seconds: dict[str, float], started: float
            ) -> dict[str, Any]:
    """The rack run's record (nodecert.rack-run/v1)."""
    verdict = worst(r.verdict for r in results) if results else Verdict.ERROR
    return {"schema": SCHEMA, "run_id": run_dir.name,
            "rack": {k: rack.get(k) for k in PUBLIC},
            "verdict": verdict.name, "results": [r.as_dict() for r in results],
            "not_judged": not_judged,
            "trays": {h: _tray_record(t) for h, t in trays.items()},
            "components": comps,
            "simulated": any(t.get("simulated") for t in trays.values()),
            "seconds": seconds,
            "started": round(started, 3), "finished": round(time.time(), 3)}


def _under_load(plan: LoadPlan, run_dir: Path, say: Progress, stop: threading.Event
                ) -> list[Result]:
    """rack.allreduce and rack.sweep, through the trays' job engine; an engine that
    cannot run jobs is an ERROR of both, naming why."""
    domain = DomainLoad(plan, run_dir, say)
    domain.runner.stop = stop
    try:
        problems = domain.preflight()
        if problems:
            why = (f"{plan.ctx.cfg.engine} on {plan.ctx.launch.host} cannot run the domain's "
                   "jobs: " + "; ".join(problems))[:600]
            return [Result(name, Verdict.ERROR, why, simulated=plan.ctx.simulated)
                    for name in ("rack.allreduce", "rack.sweep")]
        out = [domain.allreduce()]
        if not stop.is_set():
            out.append(domain.sweep()[0])
        return out
    finally:
        domain.close()


__all__ = ["SCHEMA", "RackRequest", "judge_rack", "rack_cabling", "rack_of", "rack_validate",
           "tray_runs"]
