"""A cluster lab's Ethernet (RoCE) fabric as LLDP shows it: each Ethernet HCA's port of a
host is a veth whose far end is a leaf switch's port in the lab's management namespace,
where the lab's switches announce themselves (lab/lldpsim.py, real 802.1AB frames); each
host runs Debian's lldpd on those ports, so `lldpctl -f json` on the host is the real
tool's reading of where its cables go.

Wired as the InfiniBand fabric (lab/fabricplan.py): port r of host N on port
`swpN` of `leaf-0r`. The cabling faults rewire what the switches announce or pull the
cable (the link down): cable_swapped, cable_wrong_leaf, cable_missing, link_flapping;
cable_width is InfiniBand's (LLDP does not carry a link's width).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab.config import LabConfig
from nodecert.lab.fabricplan import fabric_hosts as layer_hosts
from nodecert.lab.fabricplan import plan_csv as fabric_plan_csv
from nodecert.lab.fabricplan import wiring
from nodecert.lab.hardware import Fault
from nodecert.lab.lldpsim import INTERVAL_S, TTL_S

LLDPD_CONF = "/etc/lldpd.d/nodecert-lab.conf"
# How long a rewired fabric takes to read as rewired: lldpd forgets a neighbour that
# stopped announcing after the frames' TTL, and hears a new one at the next frame.
SETTLE_S = TTL_S + 2 * INTERVAL_S


def netdev(hca: int) -> str:
    """The host-side name of HCA `hca`'s Ethernet port (as the lab's simulated RoCE tools
    name it)."""
    return f"ens{hca + 1}f0np0"


def peer(n: int, hca: int) -> str:
    """The switch-side end of host n's HCA port, in the management namespace."""
    return f"sw{n}p{hca}"


def fabric_hosts(hosts: Sequence[Any]) -> list[tuple[str, int, int]]:
    """(name, number, Ethernet ports) of lab hosts whose profile's fabric is Ethernet."""
    return layer_hosts(hosts, "Ethernet")


def state_dir(cfg: LabConfig) -> Path:
    return cfg.state / "ethfabric"


def _switch_mac(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])  # locally administered


def announcements(hosts: list[tuple[str, int, int]], faults: list[Fault]) -> dict[str, Any]:
    """Switch-side interface -> what its switch announces, as the faults leave the
    wiring (a cable missing or caught down: no entry)."""
    number = {name: n for name, n, _ in hosts}
    return {peer(number[c.host], c.hca): {"system": c.switch, "port": f"swp{c.port}",
                                          "mac": _switch_mac(c.switch)}
            for c in wiring(hosts, faults)}


def plan_csv(hosts: list[tuple[str, int, int]]) -> str:
    """The Ethernet fabric as ordered: the plan names each host's interface and each
    switch's (LLDP carries no width)."""
    return fabric_plan_csv(hosts, fabric="Ethernet", port=netdev,
                       switch_port=lambda p: f"swp{p}", width=False)


def lldpd_conf(ports: int) -> str:
    # lldpd listens on physical interfaces only, unless named exactly: the lab's ports
    # are veths
    return ("# Written by `nodecert lab up`: lldpd on the lab host's fabric ports\n"
            "configure system interface pattern "
            + ",".join(netdev(r) for r in range(ports)) + "\n")


def _links(cfg: LabConfig, hosts: list[tuple[str, int, int]], down: set[str]) -> None:
    ns = labbmc.netns_name(cfg)
    have = run(["ip", "-n", ns, "-o", "link", "show"], timeout=15).stdout
    for _, n, ports in hosts:
        for r in range(ports):
            if f": {peer(n, r)}@" not in have:
                run(["ip", "-n", cfg.netns(n), "link", "add", netdev(r), "type", "veth",
                     "peer", "name", peer(n, r), "netns", ns], timeout=15)
                run(["ip", "-n", cfg.netns(n), "link", "set", netdev(r), "up"], timeout=15)
            run(["ip", "-n", ns, "link", "set", peer(n, r),
                 "down" if peer(n, r) in down else "up"], timeout=15)


def _emitter(cfg: LabConfig) -> None:
    d = state_dir(cfg)
    pidfile = d / "lldpsim.pid"
    try:
        pid = int(pidfile.read_text())
        if b"nodecert.lab.lldpsim" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return  # running: it re-reads its configuration every second
    except (OSError, ValueError):
        pass
    with (d / "lldpsim.log").open("ab") as out:
        p = subprocess.Popen(["ip", "netns", "exec", labbmc.netns_name(cfg), sys.executable,
                              "-m", "nodecert.lab.lldpsim", "--config", str(d / "lldp.json")],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    pidfile.write_text(str(p.pid))


def up(cfg: LabConfig, hosts: list[tuple[str, int, int]], faults: list[Fault],
       host_root: dict[str, Path]) -> list[str]:
    """The Ethernet fabric wired as the faults leave it; the hosts whose lldpd must
    (re)read its configuration (written into their roots)."""
    mine = [h for h in hosts if h[2]]
    if not mine:
        return []
    d = state_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    labbmc.ns_up(cfg, [])
    said = announcements(mine, faults)
    _links(cfg, mine, {peer(n, r) for _, n, ports in mine for r in range(ports)} - set(said))
    tmp = d / "lldp.json.tmp"
    tmp.write_text(json.dumps(said, indent=1, sort_keys=True))
    os.replace(tmp, d / "lldp.json")
    _emitter(cfg)
    for name, _, ports in mine:
        conf = host_root[name] / LLDPD_CONF.lstrip("/")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(lldpd_conf(ports))
    return [name for name, _, _ in mine]


__all__ = ["LLDPD_CONF", "SETTLE_S", "announcements", "fabric_hosts", "lldpd_conf", "netdev",
           "peer", "plan_csv", "state_dir", "up"]
