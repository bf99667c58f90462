"""How a site runs multi-node jobs: the inventory's `nodecert_cluster` mapping.

    nodecert_cluster:
      engine: slurm            # or mpirun (OpenMPI over SSH with a hostfile)
      launch_host: login01     # inventory host the jobs are started from (srun/mpirun run there)
      partition: gpu           # Slurm only: partition, account, reservation
      account: acme
      reservation: acceptance
      bootstrap_port: 29500    # NCCL_COMM_ID port base on the first node of each job
      port_slots: 200          # 20-port blocks above it the jobs' ports are drawn from
      job_timeout_s: 300       # every job's limit: a hang past it is ERROR with its logs
      max_bytes: 8G            # all_reduce_perf -e
      gpudirect: true          # ib_write_bw --use_cuda on the rail's GPU (1 NIC per GPU)
      partners: 2              # different partners each node is paired with
      collectives: [all_gather, alltoall]   # also run over all nodes: reported, not judged
      scaling: true            # the reference training job per node and over all nodes
      storage: true            # the order's shared file system read by every node at once

Each key can be given on the command line too (which wins).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError
from nodecert.core.yamldoc import keyed

ENGINES = ("slurm", "mpirun")
EXTRA_COLLECTIVES = ("all_gather", "alltoall")


@dataclass(frozen=True)
class ClusterConfig:
    engine: str = "mpirun"
    launch_host: str | None = None
    partition: str | None = None
    account: str | None = None
    reservation: str | None = None
    bootstrap_port: int = 29500
    # Each job takes a block of PORT_BLOCK ports; where a run's blocks start is drawn at
    # random among port_slots blocks from bootstrap_port (default 29500..33499).
    port_slots: int = 200
    job_timeout_s: float = 300.0
    max_bytes: str = "8G"
    gpudirect: bool = True
    partners: int = 2
    collectives: tuple[str, ...] = ()
    scaling: bool = True
    storage: bool = True

    def with_(self, **changes: Any) -> ClusterConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


KEYS = {f.name for f in fields(ClusterConfig)}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")


def inventory_cluster(inventory: Path | Any, raw: Any) -> ClusterConfig | None:
    """The nodecert_cluster a host's variables give (None: none given). Quoted JSON in an
    INI inventory is read as JSON. InventoryError naming the inventory on bad input."""
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InventoryError(f"{inventory}: nodecert_cluster is not a mapping: {exc}",
                                 hint="write it in YAML group_vars, or as quoted JSON in "
                                      "INI") from exc
    cfg, why = parse_cluster(raw)
    if cfg is None:
        raise InventoryError(f"{inventory}: nodecert_cluster {why}",
                             hint="see docs/cluster.md for its keys")
    return cfg


def parse_cluster(raw: Any) -> tuple[ClusterConfig | None, str | None]:
    """(config, None) or (None, what is wrong)."""
    if raw is None:
        return ClusterConfig(), None
    raw, why = keyed(raw, KEYS)
    if raw is None:
        return None, why
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "engine":
            if value not in ENGINES:
                return None, f"engine {value!r} is not one of {', '.join(ENGINES)}"
            out[key] = value
        elif key in ("launch_host", "partition", "account", "reservation"):
            # Written into srun's and mpirun's command lines: names only, nothing a shell
            # could read as more.
            if not _NAME.match(str(value)):
                return None, f"{key} {value!r} is not a plain name"
            out[key] = str(value)
        elif key == "port_slots":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 3000:
                return None, f"port_slots must be an integer 1..3000, got {value!r}"
            out[key] = value
        elif key in ("bootstrap_port", "partners"):
            ok = isinstance(value, int) and not isinstance(value, bool) and (
                1024 <= value <= 65000 if key == "bootstrap_port" else 1 <= value <= 8)
            if not ok:
                return None, (f"{key} must be an integer "
                              f"{'1024..65000' if key == 'bootstrap_port' else '1..8'}, "
                              f"got {value!r}")
            out[key] = value
        elif key == "job_timeout_s":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                return None, f"job_timeout_s must be a positive number, got {value!r}"
            out[key] = float(value)
        elif key == "max_bytes":
            if not re.fullmatch(r"\d+[KMG]?", str(value)):
                return None, f"max_bytes {value!r} is not a size like 8G or 512M"
            out[key] = str(value)
        elif key == "collectives":
            if not isinstance(value, list) or any(c not in EXTRA_COLLECTIVES for c in value):
                return None, (f"collectives must be a list of {', '.join(EXTRA_COLLECTIVES)}, "
                              f"got {value!r}")
            out[key] = tuple(dict.fromkeys(value))
        elif key in ("gpudirect", "scaling", "storage"):
            if not isinstance(value, bool):
                return None, f"{key} must be true or false, got {value!r}"
            out[key] = value
    cfg = ClusterConfig(**out)
    top = cfg.bootstrap_port + PORT_BLOCK * cfg.port_slots - 1
    if top > 65535:
        return None, (f"bootstrap_port {cfg.bootstrap_port} with port_slots "
                      f"{cfg.port_slots} reaches port {top}, past 65535: lower either")
    return cfg, None


PORT_BLOCK = 20  # ports one job may use above its base (NCCL's bootstrap, perftest's)


__all__ = ["ENGINES", "EXTRA_COLLECTIVES", "KEYS", "PORT_BLOCK", "ClusterConfig",
           "parse_cluster"]
