"""A cluster's hosts as its engine and the controller reach them: each host's name for
Slurm or mpirun, its SSH endpoint (with its sudo password where it needs one), and the
launch host's endpoint; the inventory's Slurm launcher. Shared by the cluster run, the
rack's domain jobs, the Slurm re-validation jobs and the Slurm runner."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError
from nodecert.inventory.cluster import ClusterConfig, inventory_cluster
from nodecert.inventory.reader import Inventory, resolve
from nodecert.transport.become import BecomeSource
from nodecert.transport.engines import launcher
from nodecert.transport.jobs import Launcher
from nodecert.transport.ssh import Endpoint

_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class ClusterHosts:
    engine_names: dict[str, str]  # inventory name -> the engine's name for it
    endpoints: dict[str, Endpoint]  # inventory name -> SSH endpoint
    launch: Endpoint


def cluster_hosts(inventory: Path | Inventory, names: list[str], hv_all: dict[str, dict[str, Any]],
                  cfg: ClusterConfig, become: BecomeSource | None) -> ClusterHosts:
    """InventoryError on a name the engine cannot take or a launch host not in the
    inventory; nothing is contacted."""
    engine_names = {n: str(hv_all[n].get("nodecert_engine_name") or n) for n in names}
    bad = [v for v in engine_names.values() if not _PLAIN.match(v)]
    if bad:
        raise InventoryError(f"{inventory}: {', '.join(bad)} is not a plain host name",
                             hint="set nodecert_engine_name to the name Slurm/mpirun use")
    launch_name = cfg.launch_host or names[0]
    inventory = resolve(inventory)
    if launch_name not in inventory.hosts:
        raise InventoryError(f"launch host {launch_name!r} is not in {inventory}",
                             hint="add it (its SSH settings come from the inventory), or "
                                  "name one of its hosts with --launch-host")
    launch_hv = inventory.hostvars([launch_name])[launch_name]
    passwords = (become or BecomeSource.from_env()).passwords(
        {n: hv_all[n] for n in names if Endpoint.from_hostvars(n, hv_all[n]).become})
    endpoints = {n: dataclasses.replace(Endpoint.from_hostvars(n, hv_all[n]),
                                        become_password=passwords.get(n)) for n in names}
    return ClusterHosts(engine_names, endpoints, Endpoint.from_hostvars(launch_name, launch_hv))


def slurm_launcher(inventory: Path | Inventory, limit: tuple[str, ...] = (),
                   become: BecomeSource | None = None, *, partition: str | None = None,
                   reservation: str | None = None) -> tuple[Launcher, dict[str, str]]:
    """The inventory's Slurm launch host and each host's Slurm name: the launcher of the
    scheduled re-validation's jobs and of the Slurm runner's node runs. InventoryError on
    bad input, before any connection."""
    inventory = resolve(inventory)
    specs = inventory.hosts
    names = sorted(inventory.select(limit, list(specs)) if limit else specs)
    if not names:
        raise InventoryError(f"{inventory} selects no host", hint="check --limit")
    hv_all = inventory.hostvars(names)
    cfg = inventory_cluster(inventory, hv_all[names[0]].get("nodecert_cluster"))
    if cfg is None or cfg.engine != "slurm":
        raise InventoryError(f"{inventory}: running the nodes through Slurm needs "
                             "nodecert_cluster with engine slurm (the cluster's Slurm and "
                             "its launch host)",
                             hint="nodecert_cluster: {engine: slurm, launch_host: login01} "
                                  "in group_vars (docs/cluster.md)")
    if partition or reservation:  # an idle check's own partition or reservation
        cfg = replace(cfg, partition=partition or cfg.partition,
                      reservation=reservation or cfg.reservation)
    hosts = cluster_hosts(inventory, names, hv_all, cfg, become)
    by_engine = {hosts.engine_names[n]: hosts.endpoints[n] for n in names}
    launch = launcher(cfg, hosts.launch, by_engine)
    launch.launch_name = hosts.engine_names.get(hosts.launch.host, hosts.launch.host)
    return launch, hosts.engine_names


__all__ = ["ClusterHosts", "cluster_hosts", "slurm_launcher"]
