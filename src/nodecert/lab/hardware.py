"""Simulated hardware: profiles, fault files, and each host's hardware description.

A host's description (written to /etc/nodecert-lab/hardware.json inside it) is
the profile, the faults that apply to that host, and a stable identity (DMI
serials, GPU serials/UUIDs, NIC MAC, NVMe serials) derived from the lab's seed
and the host name, so a reset host is the same machine and a swapped GPU is a
deliberate change.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.core.errors import ManifestError, UnknownNameError
from nodecert.lab.simhw.nodecert_simhw.faults import FAULT_KINDS, FaultKind
from nodecert.stack.bios import find_profile
from nodecert.stack.compat import default_matrix
from nodecert.stack.firmware import find_recipe

PROFILES_FILE = Path(__file__).with_name("profiles.yml")

# The one table of lab faults (schema, effect, the check that must fail) lives with
# the simulator that plays them: nodecert_simhw/faults.py.


@dataclass(frozen=True)
class Fault:
    host: str  # a host name, or "*" for every host
    kind: str
    params: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.params}


@cache
def load_profiles() -> dict[str, dict[str, Any]]:
    root = yamldoc.load(PROFILES_FILE).mapping({"schema", "profiles"})
    out: dict[str, dict[str, Any]] = {}
    matrix = default_matrix()
    for name, node in root["profiles"].items():
        f = node.mapping({"gpu_model", "gpu_count", "pci_buses", "gpu", "nvswitch", "fabric",
                          "host"}, {"hcas", "firmware_recipe", "bios_profile",
                                    "gpus_per_board"})
        matrix.gpu(f["gpu_model"].text())  # the model must be one the gate knows
        if "firmware_recipe" in f:
            find_recipe(f["firmware_recipe"].text())  # a recipe stacks/firmware/ holds
        if "bios_profile" in f:
            find_profile(f["bios_profile"].text())
        if len(f["pci_buses"].text_list()) != f["gpu_count"].integer():
            raise f["pci_buses"].error("needs one PCI bus per GPU")
        out[name] = node.value
    return out


def profile(name: str) -> dict[str, Any]:
    profiles = load_profiles()
    if name not in profiles:
        raise UnknownNameError(f"unknown lab profile {name!r}",
                               hint=f"use one of: {', '.join(profiles)}")
    return profiles[name]


def load_faults(path: Path, host_names: list[str], profiles: dict[str, str]) -> list[Fault]:
    """Parse and check a fault file against the hosts it will be applied to."""
    root = yamldoc.load(path).mapping({"faults"})
    faults: list[Fault] = []
    for node in root["faults"].seq():
        raw = node.value if isinstance(node.value, dict) else {}
        kind_node = node.child("kind", raw.get("kind"))
        kind = kind_node.choice(tuple(FAULT_KINDS))
        required, optional = FAULT_KINDS[kind].required, FAULT_KINDS[kind].optional
        f = node.mapping({"kind", *required}, {"host", *optional})
        host = f["host"].text() if "host" in f else "*"
        if host != "*" and host not in host_names:
            raise f["host"].error(f"no lab host named {host!r}",
                                  hint=f"hosts are: {', '.join(host_names)} (or '*' for all)")
        params: dict[str, Any] = {}
        for key in sorted(set(f) - {"kind", "host"}):
            params[key] = f[key].value
        gpus: list[int] = []
        if "gpu" in params:
            gpus.append(f["gpu"].integer())
        if "gpus" in params:
            gpus.extend(n.integer() for n in f["gpus"].seq())
            del params["gpus"]
        targets = host_names if host == "*" else [host]
        for h in targets:
            count = int(profile(profiles[h])["gpu_count"])
            for g in gpus:
                if not 0 <= g < count:
                    raise node.error(f"GPU {g} does not exist on {h} ({count} GPUs, 0-{count - 1})")
            hcas = int((profile(profiles[h]).get("hcas") or {}).get("count", 0))
            for key in ("hca", "with"):
                if key in params and not 0 <= f[key].integer() < hcas:
                    raise f[key].error(f"HCA {params[key]} does not exist on {h} ({hcas} "
                                       "HCAs, mlx5_0 on)")
        if kind == "nvlink_down" and not gpus:
            raise node.error("nvlink_down needs gpu or gpus")
        for g in gpus or [None]:  # type: ignore[list-item]
            p = dict(params)
            if g is not None:
                p["gpu"] = g
            faults.append(Fault(host, kind, p))
    return faults


def _digits(seed: str, n: int) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return str(int(h, 16))[:n]


def identity(lab_seed: str, host: str, prof: dict[str, Any], mac: str) -> dict[str, Any]:
    per_board = int(prof.get("gpus_per_board", 1))

    def u(kind: str) -> str:
        return str(uuid.UUID(hashlib.sha256(f"{lab_seed}/{host}/{kind}".encode())
                             .hexdigest()[:32]))
    return {
        "system_serial": "SIM" + _digits(f"{lab_seed}/{host}/system", 9),
        "baseboard_serial": "SIMBB" + _digits(f"{lab_seed}/{host}/board", 10),
        "system_uuid": u("system"),
        "nic_macs": [mac],
        # One serial per board: a board carrying several GPUs (GB200/GB300: two) gives
        # each of them its serial, as the real trays report; every GPU its own UUID.
        "gpus": [{"serial": _digits(f"{lab_seed}/{host}/gpu{i}" if per_board == 1 else
                                    f"{lab_seed}/{host}/board{i // per_board}", 13),
                  "uuid": "GPU-" + u(f"gpu{i}")} for i in range(int(prof["gpu_count"]))],
        "nvme": [{"serial": "SIMNVME" + _digits(f"{lab_seed}/{host}/nvme{i}", 8),
                  "size_gb": prof["host"]["nvme_size_gb"]}
                 for i in range(int(prof["host"]["nvme_count"]))],
    }


def hardware_description(*, lab_seed: str, host: str, profile_name: str, mac: str,
                         faults: list[Fault], boot_time: float,
                         rack: dict[str, Any] | None = None) -> dict[str, Any]:
    """rack: for a rack's compute tray, {name, clique_id, cluster_uuid, trays: [{name,
    ip}]}: its GPUs register in that NVLink clique, its IMEX domain lists those trays."""
    prof = profile(profile_name)
    return {
        **({"rack": rack} if rack else {}),
        "simulated": True,
        "warning": "SIMULATED hardware of a nodecert lab host: nothing measured here is real",
        "host": host,
        "profile_name": profile_name,
        "profile": prof,
        "identity": identity(lab_seed, host, prof, mac),
        "faults": [f.as_dict() for f in faults if f.host in ("*", host)],
        "boot_time": boot_time,
    }


def _affinity(prof: dict[str, Any]) -> dict[str, str]:
    """The GPU-NIC nearness the platform is built for (as the simulator wires it)."""
    gpus, nics = int(prof["gpu_count"]), int(prof["hcas"]["count"])
    near = "PIX" if nics == gpus else "PXB" if nics * 2 == gpus else None
    return {"gpu_nic_affinity": near} if near else {}


def spec_vars(profile_name: str) -> dict[str, Any]:
    """The order-spec inventory variables that describe a profile's hardware."""
    prof = profile(profile_name)
    host = prof["host"]
    return {
        "nodecert_gpu_model": prof["gpu_model"],
        "nodecert_gpu_count": prof["gpu_count"],
        "nodecert_cpu_cores": host["sockets"] * host["cores_per_socket"],
        "nodecert_ram_gb": host["ram_gb"],
        "nodecert_nvme_count": host["nvme_count"],
        "nodecert_nvme_min_gb": host["nvme_size_gb"],
        **({"nodecert_fabric": {
            "link_layer": prof["hcas"]["link_layer"], "ports": prof["hcas"]["count"],
            "rate_gbps": prof["hcas"]["rate_gbps"], "width": prof["hcas"]["width"],
            "firmware": prof["hcas"]["firmware"],
            # A RoCE fabric is judged with the lossless settings the lab's ports run.
            **({"roce": {"gid_type": "v2", "pfc_priorities": [3], "trust": "dscp"}}
               if prof["hcas"]["link_layer"] == "Ethernet" else {}),
            **_affinity(prof)}} if prof.get("hcas") else {}),
    }


__all__ = ["FAULT_KINDS", "Fault", "FaultKind", "ManifestError", "hardware_description",
           "load_faults", "load_profiles", "profile", "spec_vars"]
