"""A lab rack (`nodecert lab up --rack`): every host a GB200 (or, with --profile
gb300-nvl-4, a GB300) compute tray of one NVLink domain, `rack-l1`, with the rack's
management endpoints beside the trays' BMCs.

* The trays' simulated hardware carries the rack (its NVLink clique and cluster UUID,
  drawn from the lab's seed, and the trays' addresses): their `nvidia-smi` reports the
  fabric registration, their `nvidia-imex-ctl -N` the IMEX domain.
* Each tray gets what provisioning leaves on a real one: the stack's pinned driver from
  the lab's NVIDIA repository, and `nvidia-imex` from the same mirror (the simulated
  daemon, its unit and `nvidia-imex-ctl`, the simulated query) with its node list written
  from the rack (/etc/nvidia-imex/nodes_config.cfg), as the imex role leaves a tray.
* The rack's 9 NVLink switch trays, 2 power shelves and CDU answer Redfish at .190+k of
  the lab subnet, in the BMC namespace (nodecert.lab.rackparts); faults stop one or
  change what it reports. Each switch tray's ports name the trays' GPUs behind them
  (one link from every GPU to every switch chip), read from the trays' hardware.
* The inventory names the rack for every host (`nodecert_rack`).

SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab import rackparts
from nodecert.lab.cluster import JOB_OS, JOB_STACK
from nodecert.lab.config import LabConfig
from nodecert.lab.hardware import Fault
from nodecert.lab.simhw.nodecert_simhw.faults import Faults
from nodecert.stack.manifest import find_stack

NAME = "rack-l1"
KIND = "GB200-NVL72"
PROFILE = "gb200-nvl-4"
# The tray profiles a lab rack can be built of, and the rack kind each makes.
KINDS_BY_PROFILE = {PROFILE: KIND, "gb300-nvl-4": "GB300-NVL72"}
MAX_TRAYS = 18
SWITCH_TRAYS = 9
PARTS = ([("switch_tray", f"nvsw-{k:02d}") for k in range(1, SWITCH_TRAYS + 1)]
         + [("power_shelf", "ps-01"), ("power_shelf", "ps-02"), ("cdu", "cdu-01")])


def check(nodes: int, profiles: tuple[str, ...]) -> None:
    """A rack of at most 18 trays, all of one tray profile (GB200 or GB300)."""
    if not 1 <= nodes <= MAX_TRAYS:
        raise NodecertError(f"a {KIND} rack holds 1..{MAX_TRAYS} compute trays, not {nodes}",
                            hint="use --nodes 18 for a full rack")
    if len(set(profiles)) != 1 or profiles[0] not in KINDS_BY_PROFILE:
        raise NodecertError(f"a lab rack's trays are all {PROFILE} or all gb300-nvl-4, not "
                            f"{', '.join(profiles)}",
                            hint=f"drop --profile, or pass --profile {PROFILE} (or "
                                 "gb300-nvl-4)")


def kind_of(profile_name: str) -> str:
    """The rack kind a lab rack of these trays is."""
    return KINDS_BY_PROFILE.get(profile_name, KIND)


def hardware_rack(cfg: LabConfig, seed: str, hosts: list[tuple[str, int]]) -> dict[str, Any]:
    """The rack as each tray's hardware description carries it."""
    digest = hashlib.sha256(f"{seed}/{NAME}".encode()).digest()
    return {"name": NAME, "clique_id": str(1 + int.from_bytes(digest[:2], "big") % 32766),
            "cluster_uuid": str(uuid.UUID(bytes=digest[:16])),
            "trays": [{"name": name, "ip": str(cfg.host_ip(n))} for name, n in hosts]}


def inventory_rack(cfg: LabConfig, trays: int, tray_profile: str = PROFILE
                   ) -> dict[str, Any]:
    """The rack as the lab's inventory describes it (nodecert_rack)."""
    parts = {kind: [{"name": name, "address": str(rackparts.part_ip(cfg, k))}
                    for k, (kd, name) in enumerate(PARTS) if kd == kind]
             for kind in ("switch_tray", "power_shelf", "cdu")}
    root = labbmc.root(cfg)
    return {"name": NAME, "kind": kind_of(tray_profile), "gpus": 4 * trays, "imex": True,
            "switch_trays": parts["switch_tray"], "power_shelves": parts["power_shelf"],
            "cdu": parts["cdu"][0],
            "redfish": {"username": "nodecert", "password_file": str(root / "password"),
                        "ca_file": str(root / "ca.pem"), "timeout_s": 5},
            "samples": 3, "sample_s": 1}


def tray_script(rack: dict[str, Any]) -> str:
    """What a tray carries once provisioned, as the driver and imex roles leave it: the
    pinned driver and nvidia-imex from the lab's mirror, held, IMEX's node list (the
    rack's trays in order) and its service enabled and running."""
    stack = find_stack(JOB_STACK)
    pins = [f"{p.name}={p.version}" for p in stack.os[JOB_OS].packages
            if p.component in ("driver", "imex") and not p.name.endswith("-dev")]
    names = [pin.split("=", 1)[0] for pin in pins]
    nodes = "\\n".join(t["ip"] for t in rack["trays"])
    return ("set -e\n"
            "echo 'deb [trusted=yes] file:/srv/nodecert-mirror/nvidia ./' > "
            "/etc/apt/sources.list.d/nodecert-lab-nvidia.list && apt-get update -qq && "
            f"apt-get install -y -qq {' '.join(pins)} >/dev/null && "
            f"apt-mark hold {' '.join(names)} >/dev/null && "
            f"printf '{nodes}\\n' > /etc/nvidia-imex/nodes_config.cfg && "
            "systemctl enable --now nvidia-imex.service >/dev/null 2>&1 && "
            "systemctl is-active nvidia-imex.service >/dev/null")


def part_faults(faults: list[Fault]) -> dict[str, dict[str, Any]]:
    """part -> its endpoint's faults; NodecertError naming a part the rack does not have
    (a fault that would silently do nothing)."""
    per_part = Faults({"faults": [f.as_dict() for f in faults]}).rack_parts()
    unknown = sorted(set(per_part) - {name for _, name in PARTS})
    if unknown:
        raise NodecertError(f"the lab rack has no part named {', '.join(unknown)}",
                            hint=f"parts are: {', '.join(n for _, n in PARTS)}")
    return per_part


def rack_gpus(hardware_files: list[Path]) -> tuple[str, ...]:
    """The GPU UUIDs of the rack's trays in tray order, as each tray's simulated hardware
    reports them (a swapped board included): what the switch trays' ports are wired to."""
    out: list[str] = []
    for f in hardware_files:
        hw = json.loads(f.read_text())
        out += [str(Faults(hw).gpu_identity(g, i)["uuid"])
                for i, g in enumerate(hw["identity"]["gpus"])]
    return tuple(out)


def parts_up(cfg: LabConfig, faults: list[Fault], gpus: tuple[str, ...] = ()) -> None:
    """The rack's management endpoints, (re)started for the given faults: a part that is
    down is stopped and not started again. gpus: the trays' GPU UUIDs in tray order
    (rack_gpus), behind every switch chip's ports."""
    labbmc.preflight()
    labbmc.ensure_ca(cfg)
    labbmc.ns_up(cfg, [])
    ns = labbmc.netns_name(cfg)
    have = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"], timeout=15).stdout
    per_part = part_faults(faults)
    started = []
    for k, (kind, name) in enumerate(PARTS):
        ip = str(rackparts.part_ip(cfg, k))
        if f" {ip}/" not in have:
            run(["ip", "-n", ns, "addr", "add", f"{ip}/{cfg.subnet.prefixlen}", "dev",
                 "eth0"], timeout=15)
        d = rackparts.part_dir(cfg, name)
        rackparts.stop(d)
        mine = dict(per_part.get(name) or {})
        if mine.pop("down", False):
            continue
        rackparts.prepare(cfg, d, {"kind": kind, "name": name, "faults": mine,
                                   **({"gpus": list(gpus)} if kind == "switch_tray" else {})},
                          ip)
        rackparts.start(d, ip, labbmc.REDFISH_PORT, ns)
        started.append((d, ip))
    for d, ip in started:
        rackparts.wait_ready(d, ip, labbmc.REDFISH_PORT)


__all__ = ["KIND", "KINDS_BY_PROFILE", "MAX_TRAYS", "NAME", "PARTS", "PROFILE", "check",
           "hardware_rack", "inventory_rack", "kind_of", "part_faults", "parts_up",
           "rack_gpus", "tray_script"]
