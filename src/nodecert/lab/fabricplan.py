"""The lab's scale-out fabric as ordered and as the cabling faults rewire it: which
host port goes to which leaf switch port, and the cable plan the lab's inventory names.
Rail-optimised, as GPU clusters are cabled: HCA r of host N on port N of leaf `leaf-0r`,
every leaf's last port to the spine. The InfiniBand fabric (ibfabric: ibsim) and the
Ethernet one (ethfabric: LLDP) are both wired from it; the faults change only the
wiring, never the plan:

  cable_swapped {hca, with}    the host's two cables exchanged (each lands on the
                               other's leaf port)
  cable_wrong_leaf {hca, leaf} the cable lands on another rail's leaf (a free port there)
  cable_width {hca, width}     the link trains at 2X (or 1X) instead of 4X
  cable_missing {hca}          no cable
  link_flapping {hca}          the link is down while the fabric is read

SIMULATED -- the lab's switches are not real hardware.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.lab.hardware import Fault, profile

LEAF_PORTS = 64  # a leaf's ports: more for a fabric of more than 31 hosts (ibsim: 255)
SPINE = "spine-00"
WRONG_PORT_BASE = 32  # a wrongly cabled HCA lands on port 32 + its host's number (or
# past the hosts' ports on a larger fabric); the leaf's last port goes to the spine

CABLING_KINDS = ("cable_swapped", "cable_wrong_leaf", "cable_width", "cable_missing",
                 "link_flapping")
WIDTHS = ("1X", "2X", "4X")  # what a lab cable may train at


def fabric_hosts(hosts: Sequence[Any], layer: str = "InfiniBand"
                 ) -> list[tuple[str, int, int]]:
    """(name, number, rails) of lab hosts (anything with name, n and profile): the
    rails are the profile's HCAs of that link layer (none on a profile of another)."""
    out = []
    for h in hosts:
        hcas = profile(h.profile).get("hcas") or {}
        mine = hcas.get("link_layer") == layer
        out.append((h.name, h.n, int(hcas.get("count", 0)) if mine else 0))
    return out


def leaf(rail: int) -> str:
    return f"leaf-{rail:02d}"


@dataclass(frozen=True)
class Cable:
    host: str
    hca: int
    switch: str
    port: int
    width: str = "4X"


def switch_ports(hosts: list[tuple[str, int, int]]) -> tuple[int, int]:
    """(the first port a wrongly cabled HCA may land on, a leaf's port count)."""
    last = max((n for _, n, _ in hosts), default=0)
    wrong = max(WRONG_PORT_BASE, last + 1)
    ports = max(LEAF_PORTS, wrong + last + 1)
    if ports > 255:
        raise NodecertError(f"a lab fabric of host numbers up to {last} needs {ports} ports "
                            "a leaf; ibsim's switches have at most 255")
    return wrong, ports


def wiring(hosts: list[tuple[str, int, int]], faults: list[Fault]) -> list[Cable]:
    """The cables as the lab's faults leave them. hosts: (name, number, rails)."""
    wrong_base, _ = switch_ports(hosts)
    cables: dict[tuple[str, int], Cable] = {
        (name, r): Cable(name, r, leaf(r), n) for name, n, rails in hosts for r in range(rails)}
    number = {name: n for name, n, _ in hosts}
    rails_of = {name: rails for name, _, rails in hosts}
    for f in faults:
        if f.kind not in CABLING_KINDS:
            continue
        targets = [name for name, _, _ in hosts] if f.host == "*" else [f.host]
        for h in targets:
            hca = int(f.params["hca"])
            if (h, hca) not in cables:
                continue  # the cable is already gone (another fault)
            c = cables[(h, hca)]
            if f.kind == "cable_swapped":
                other = int(f.params["with"])
                if (h, other) not in cables:
                    raise NodecertError(f"cable_swapped on {h}: HCA {other} has no cable",
                                        hint="name two HCAs that are cabled")
                o = cables[(h, other)]
                cables[(h, hca)] = Cable(h, hca, o.switch, o.port, c.width)
                cables[(h, other)] = Cable(h, other, c.switch, c.port, o.width)
            elif f.kind == "cable_wrong_leaf":
                to = int(f.params.get("leaf", (hca + 1) % max(1, rails_of[h])))
                cables[(h, hca)] = Cable(h, hca, leaf(to), wrong_base + number[h],
                                         c.width)
            elif f.kind == "cable_width":
                width = str(f.params.get("width", "2X")).upper()
                if width not in WIDTHS:
                    raise NodecertError(f"cable_width on {h}: width {width!r} is not one of "
                                        f"{', '.join(WIDTHS)}")
                cables[(h, hca)] = Cable(h, hca, c.switch, c.port, width)
            else:  # cable_missing, link_flapping
                del cables[(h, hca)]
    return sorted(cables.values(), key=lambda c: (c.switch, c.port))


def plan_csv(hosts: list[tuple[str, int, int]], *, fabric: str = "InfiniBand",
             port: Callable[[int], str] = lambda hca: f"mlx5_{hca}",
             switch_port: Callable[[int], str] = str, width: bool = True) -> str:
    """The lab's cable plan: the fabric as ordered (no fault changes it); each host port
    and switch port named as the fabric's tools name them."""
    rows = [f"# The nodecert lab's cable plan (its {fabric} fabric as ordered)",
            "node,port,rail,switch,switch_port,cable_type" + (",width" if width else "")]
    rows += [f"{c.host},{port(c.hca)},{c.hca},{c.switch},{switch_port(c.port)},DAC"
             + (f",{c.width}" if width else "")
             for c in sorted(wiring(hosts, []), key=lambda c: (c.host, c.hca))]
    return "\n".join(rows) + "\n"


__all__ = ["CABLING_KINDS", "LEAF_PORTS", "SPINE", "WIDTHS", "Cable", "fabric_hosts", "leaf",
           "plan_csv", "switch_ports", "wiring"]
