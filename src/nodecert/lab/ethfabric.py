"""A cluster lab's Ethernet (RoCE) fabric as LLDP shows it: each Ethernet HCA's port of a
host is a veth whose far end is a leaf switch's port in the lab's management namespace,
where each of the lab's leaf switches is an instance of Debian's lldpd on its ports
(lab/leafswitch.py); each host runs Debian's lldpd on its own ports, so `lldpctl -f json`
on the host is the real tool's reading of where its cables go.

Wired as the InfiniBand fabric (lab/fabricplan.py): port r of host N on port `swpN` of
`leaf-0r`. The cabling faults move a cable to another switch's port (the switch-side
interface joins that switch, under that port's name) or pull it (the link down):
cable_swapped, cable_wrong_leaf, cable_missing, link_flapping; cable_width is
InfiniBand's (LLDP does not carry a link's width).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab import leafswitch
from nodecert.lab.config import LabConfig
from nodecert.lab.fabricplan import fabric_hosts as layer_hosts
from nodecert.lab.fabricplan import plan_csv as fabric_plan_csv
from nodecert.lab.fabricplan import wiring
from nodecert.lab.hardware import Fault

LLDPD_CONF = "/etc/lldpd.d/nodecert-lab.conf"
# How long a rewired fabric takes to read as rewired: a host's lldpd forgets a switch
# that stopped announcing after its frames' TTL (a switch stopped says goodbye at once),
# and hears a new one at its next frame.
SETTLE_S = leafswitch.TTL_S + 2 * leafswitch.INTERVAL_S


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


def announcements(hosts: list[tuple[str, int, int]], faults: list[Fault]
                  ) -> dict[str, tuple[str, str]]:
    """Switch-side interface -> (the switch it is a port of, the port's name), as the
    faults leave the wiring (a cable missing or caught down: no entry)."""
    number = {name: n for name, n, _ in hosts}
    return {peer(number[c.host], c.hca): (c.switch, f"swp{c.port}")
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


def up(cfg: LabConfig, hosts: list[tuple[str, int, int]], faults: list[Fault],
       host_root: dict[str, Path], mirror: Path) -> list[str]:
    """The Ethernet fabric wired as the faults leave it, its leaf switches (re)started;
    the hosts whose lldpd must (re)read its configuration (written into their roots)."""
    mine = [h for h in hosts if h[2]]
    if not mine:
        return []
    state_dir(cfg).mkdir(parents=True, exist_ok=True)
    labbmc.ns_up(cfg, [])
    said = announcements(mine, faults)
    _links(cfg, mine, {peer(n, r) for _, n, ports in mine for r in range(ports)} - set(said))
    leafswitch.start(cfg, mirror, said)
    for name, _, ports in mine:
        conf = host_root[name] / LLDPD_CONF.lstrip("/")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(lldpd_conf(ports))
    return [name for name, _, _ in mine]


__all__ = ["LLDPD_CONF", "SETTLE_S", "announcements", "fabric_hosts", "lldpd_conf", "netdev",
           "peer", "plan_csv", "state_dir", "up"]
