"""The inventory variables that hold a mapping (thresholds, the fabric spec, the
cluster settings): read from YAML or from INI text, checked by their own parsers."""

from __future__ import annotations

import contextlib
from typing import Any

import yaml

from nodecert.inventory.bmc import parse_bmc
from nodecert.inventory.cluster import parse_cluster
from nodecert.inventory.container import parse_container
from nodecert.inventory.fabric import parse_fabric
from nodecert.inventory.rack import parse_rack
from nodecert.inventory.sharedfs import parse_shared_fs

MAPPING_KINDS = ("map", "fabric", "cluster", "sharedfs", "bmc", "container", "rack")
EXAMPLES = {
    "map": "e.g. nodecert_thresholds: {storage.seq_read_mbps_min: 3000} in YAML",
    "fabric": "e.g. nodecert_fabric: {link_layer: InfiniBand, ports: 8, rate_gbps: 400} in "
              "group_vars (docs/inventory.md)",
    "sharedfs": "e.g. nodecert_shared_fs: {mounts: [{path: /mnt/data, type: nfs4}], "
                "aggregate_read_mbps_min: 16000} in group_vars (docs/datapath.md)",
    "bmc": "e.g. nodecert_bmc: {address: 10.10.0.21, cert_sha256: ..., username: nodecert, "
           "password_file: /etc/nodecert/bmc.pass} in host_vars (docs/bmc.md)",
    "container": "e.g. nodecert_container: {engine: podman, image: nvcr.io/nvidia/cuda@sha256:"
                 "...} in group_vars (docs/containers.md)",
    "cluster": "e.g. nodecert_cluster: {engine: slurm, launch_host: login01, partition: gpu} "
               "in group_vars (docs/cluster.md)",
    "rack": "e.g. nodecert_rack: {name: rack-a1, kind: GB200-NVL72, gpus: 72} in the rack's "
            "group_vars (docs/rack.md)"}


def parse_mapping(kind: str, raw: Any) -> tuple[Any, str | None]:
    """(value, None) or (None, what is wrong) for a variable of one of MAPPING_KINDS."""
    if isinstance(raw, str):  # INI [group:vars] values arrive as text
        with contextlib.suppress(yaml.YAMLError):
            raw = yaml.safe_load(raw)
    if kind == "fabric":
        return parse_fabric(raw)
    if kind == "sharedfs":
        return parse_shared_fs(raw)
    if kind == "bmc":
        return parse_bmc(raw)
    if kind == "container":
        return parse_container(raw)
    if kind == "rack":
        return parse_rack(raw)
    if kind == "cluster":
        cfg, why = parse_cluster(raw)
        return (cfg.as_dict() if cfg else None), why
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}, None
    return None, f"must be a mapping of threshold keys to values, got {raw!r}"


__all__ = ["EXAMPLES", "MAPPING_KINDS", "parse_mapping"]
