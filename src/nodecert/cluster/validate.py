"""The library function behind `nodecert cluster validate`: read the inventory, refuse
bad input before any job, check every node's own fabric (validate), then run the
cluster stages (clusterrun) and save the run directory.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nodecert.cluster.cabling_discover import cabling_check
from nodecert.cluster.context import ClusterContext
from nodecert.cluster.counters import read_all
from nodecert.cluster.judge import expectation
from nodecert.cluster.run import (
    ClusterRun,
    Progress,
    model_limits,
    new_run_dir,
    save,
)
from nodecert.core.errors import InventoryError, NodecertError
from nodecert.inventory.cableplan import Plan, PlanError, read_plan
from nodecert.inventory.cluster import ClusterConfig, inventory_cluster
from nodecert.inventory.engine import cluster_hosts
from nodecert.inventory.reader import HostSpec, Inventory, resolve
from nodecert.profiles.thresholds import suite
from nodecert.runs.layout import RunDir
from nodecert.runs.records import GroupRecord
from nodecert.runs.store import ValidationRun
from nodecert.transport.become import BecomeSource
from nodecert.transport.jobs import Launcher
from nodecert.validation.run import ValidateRequest, validate
from nodecert_node.contract import Threshold, Verdict

FABRIC_CHECK = {"InfiniBand": "net.ib", "Ethernet": "net.roce"}
SUITE = "standard"  # the node runs' settings and limits when they include load.scaling


def context(inventory: Path | Inventory, *, limit: tuple[str, ...] = (),
            overrides: dict[str, Any] | None = None,
            become: BecomeSource | None = None) -> ClusterContext:
    """Everything the run needs; InventoryError on bad input, before any connection."""
    inventory = resolve(inventory)
    specs = inventory.hosts
    if limit:
        specs = {h: specs[h] for h in inventory.select(limit, list(specs))}
    if len(specs) < 2:
        raise InventoryError(f"a cluster needs at least 2 nodes, {inventory} gives "
                             f"{len(specs)}", hint="list the cluster's nodes (or widen --limit)")
    names = sorted(specs)
    hv_all = inventory.hostvars(names)
    cfg = inventory_cluster(inventory, hv_all[names[0]].get("nodecert_cluster")) \
        or ClusterConfig()
    cfg = cfg.with_(**(overrides or {}))
    missing = [n for n in names if not specs[n].validation.get("fabric")]
    if missing:
        raise InventoryError(
            f"{inventory}: no fabric spec (nodecert_fabric) for {', '.join(missing)}: the "
            "cluster's bandwidth cannot be judged without the ordered NICs and their rate",
            hint="e.g. nodecert_fabric: {link_layer: InfiniBand, ports: 8, rate_gbps: 400} "
                 "in group_vars (docs/inventory.md)")
    for key, what in (("fabric", "fabric"), ("shared_fs", "shared file system")):
        if len({json.dumps(specs[n].validation.get(key), sort_keys=True) for n in names}) != 1:
            raise InventoryError(f"{inventory}: the nodes' {what} specs differ",
                                 hint=f"validate one {what}'s nodes at a time (--limit)")
    hosts = cluster_hosts(inventory, names, hv_all, cfg, become)
    first = specs[names[0]]
    limits = model_limits(specs)
    exp = expectation(first.validation["fabric"], first.gpu_count, limits)
    return ClusterContext(names, hosts.engine_names, specs, hosts.endpoints, hosts.launch,
                          cfg, exp,
                          simulated=all(s.simulated for s in specs.values()),
                          counter_limit=Threshold.from_dict(
                              limits["net.error_counter_growth_max"]),
                          limits={k: Threshold.from_dict(v) for k, v in limits.items()
                                  if k.startswith(("scaling.", "storage.shared"))},
                          scaling_steps=_scaling_steps(),
                          shared_fs=first.validation.get("shared_fs") if cfg.storage
                          else None)


def _scaling_steps() -> tuple[int, int]:
    load = suite(SUITE).load
    return int(load.get("scaling_steps", 30)), int(load.get("scaling_warmup", 10))


def node_fabric(inventory: Path | Inventory, ctx: ClusterContext, run_dir: Path,
                say: Progress, become: BecomeSource | None) -> dict[str, dict[str, Any]]:
    """Every node's own fabric check and identity (and, with scaling, its own training
    run: load.scaling), through validate."""
    check = FABRIC_CHECK[ctx.exp.link_layer]
    checks = ("hardware.inventory", check, *(("load.scaling",) if ctx.cfg.scaling else ()),
              *(("storage.shared",) if ctx.shared_fs else ()))
    request = ValidateRequest(inventory, suite=SUITE if ctx.cfg.scaling or ctx.shared_fs
                              else "quick", limit=tuple(ctx.nodes), checks=checks,
                              runs_dir=run_dir / "nodes", become=become)
    vr = validate(request, progress=say)
    alone = (_storage_alone(request, vr, say) if ctx.shared_fs and len(ctx.nodes) > 1
             else {})
    out: dict[str, dict[str, Any]] = {}
    for name, hr in vr.hosts.items():
        r = next((x for x in hr.results if x.check == check), None)
        ident = next((x.facts.get("identity") for x in hr.results
                      if x.check == "hardware.inventory" and x.facts.get("identity")), None)
        out[name] = {"check": check, "verdict": r.verdict.name if r else "ERROR",
                     "summary": r.summary if r else (hr.error or "not run"),
                     "findings": list(r.findings) if r else [], "identity": ident,
                     "run": str(RunDir(hr.out_dir.parent).results(hr.host))}
        for check_name, key, wanted in (("load.scaling", "scaling", ctx.cfg.scaling),
                                        ("storage.shared", "storage", bool(ctx.shared_fs))):
            got = next((x for x in hr.results if x.check == check_name), None)
            if wanted:
                out[name][key] = got.as_dict() if got else {
                    "verdict": "ERROR", "summary": hr.error or f"{check_name} did not run"}
        if name in alone:
            out[name]["storage"] = alone[name]
    return out


def _storage_alone(request: ValidateRequest, vr: ValidationRun, say: Progress
                   ) -> dict[str, dict[str, Any]]:
    """Every node's storage.shared ran at the same moment against one server, so each
    figure is a share of what the server gave all of them, while the order's floors are
    what one node must get. A node below its floor then is measured again alone, one
    node after another, and judged by that: concurrency only lowers a figure, so a node
    that passed at once passes alone, and one that is slow alone is slow for itself.
    node -> its storage.shared as measured alone, saying so."""
    below = {name: r for name, hr in vr.hosts.items()
             for r in hr.results if r.check == "storage.shared" and r.verdict == Verdict.FAIL}
    if not below:
        return {}
    say(f"{', '.join(sorted(below))}: below the shared file system's floor with "
        f"{len(vr.hosts)} nodes reading at once; measuring each alone")
    again = validate(replace(request, limit=tuple(sorted(below)), forks=1,
                             checks=("storage.shared",)), progress=say)
    out: dict[str, dict[str, Any]] = {}
    for name, first in below.items():
        hr = again.hosts.get(name)
        got = next((x for x in hr.results if x.check == "storage.shared"), None) if hr \
            else None
        was = (f"with all {len(vr.hosts)} nodes at once: {first.summary}")
        if got is None:
            out[name] = {**first.as_dict(), "measured": f"at once ({len(vr.hosts)} nodes); "
                         "measuring it alone did not give a result: "
                         + ((hr.error if hr else "") or "not run")}
            continue
        out[name] = {**got.as_dict(), "measured": f"alone ({was})"}
    return out


def cable_plan(ctx: ClusterContext) -> Plan | None:
    """The nodes' cable plan (nodecert_cabling_plan), read before any job; None when the
    inventory names none. InventoryError for a plan with errors, or nodes naming two."""
    return plan_of(ctx.specs, ctx.nodes)


def plan_of(specs: Mapping[str, HostSpec], nodes: list[str]) -> Plan | None:
    """The cable plan `nodes` name (a cluster's nodes, a rack's trays); None when they
    name none; InventoryError for a plan with errors, or nodes naming two."""
    named = {str(specs[n].validation.get("cabling_plan") or "") for n in nodes}
    if named == {""}:
        return None
    if len(named) != 1:
        raise InventoryError("the nodes name different cable plans (nodecert_cabling_plan): "
                             + ", ".join(sorted(p or "none" for p in named)),
                             hint="name one plan for the cluster's nodes, in group_vars")
    try:
        return read_plan(Path(named.pop()).expanduser(), hosts=set(specs))
    except PlanError as exc:
        raise InventoryError(exc.what, where=exc.where,
                             hint=exc.hint or "fix the cable plan where named") from exc


@dataclass(frozen=True)
class ClusterRequest:
    """What `nodecert cluster validate` is asked to do: the hosts (limited), the command
    line's overrides of the inventory's nodecert_cluster, where runs go and the become
    password source."""

    inventory: Path
    limit: tuple[str, ...] = ()
    overrides: Mapping[str, Any] | None = None
    runs_dir: Path = Path("runs")
    become: BecomeSource | None = None


def cluster_validate(request: ClusterRequest, *, progress: Progress | None = None,
                     launch: Launcher | None = None,
                     stop: threading.Event | None = None) -> GroupRecord:
    """Validate the cluster; its saved record (`run_dir` is the run's directory).
    NodecertError on bad input or an
    engine that cannot run jobs at all (nothing half-done is left: the run directory
    records what was found)."""
    say: Progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    inventory, become = resolve(request.inventory), request.become  # read once
    ctx = context(inventory, limit=request.limit, overrides=dict(request.overrides or {}),
                  become=become)
    run_dir = new_run_dir(request.runs_dir)
    # InfiniBand error counters before and after the jobs (perfquery on every node).
    counters = ((lambda: read_all(ctx.endpoints, ctx.exp.devices))
                if ctx.exp.link_layer == "InfiniBand" else None)
    plan = cable_plan(ctx)
    cabling = ((lambda: cabling_check(plan, ctx.exp.link_layer, ctx.endpoints))
               if plan is not None else None)
    runner = ClusterRun(ctx, run_dir, say, launch, counters, cabling=cabling)
    if stop is not None:
        runner.stop = stop
    try:
        problems = runner.launcher.preflight([ctx.engine_names[n] for n in ctx.nodes])
        if problems:
            save(run_dir, {"schema": "nodecert.cluster-run/v1", "run_id": run_dir.name,
                           "verdict": "ERROR", "problems": problems, "nodes": ctx.nodes})
            raise NodecertError(f"{ctx.cfg.engine} on {ctx.launch.host} cannot run the "
                                f"cluster's jobs: " + "; ".join(problems),
                                hint="fix the engine or the node list, then run again "
                                     f"(recorded in {run_dir})")
        say(f"cluster of {len(ctx.nodes)} nodes via {ctx.cfg.engine} from {ctx.launch.host}; "
            f"expecting all-reduce {ctx.exp.busbw.describe()}, rails {ctx.exp.rail.describe()}")
        started = time.time()  # the measurement: the nodes' own checks, then the jobs
        fabric = node_fabric(inventory, ctx, run_dir, say, become)
        try:
            data = runner.run(fabric)  # Ctrl-C: the running jobs are cancelled and swept
        except KeyboardInterrupt:
            save(run_dir, {"schema": "nodecert.cluster-run/v1", "run_id": run_dir.name,
                           "verdict": "ERROR", "interrupted": True, "nodes": ctx.nodes,
                           "problems": ["interrupted: the running jobs were cancelled"],
                           "jobs": [{"name": j.job.name, "nodes": list(j.job.nodes),
                                     "returncode": j.returncode, "leftovers": j.leftovers}
                                    for j in runner.jobs]})
            raise
        # The nodes' own checks were part of the measurement.
        data = {**data, "started": round(started, 3)}
        save(run_dir, data)
        return GroupRecord(RunDir(run_dir).cluster_results, data)
    finally:
        runner.launcher.close()


__all__ = ["ClusterConfig", "cluster_validate", "context", "node_fabric"]
