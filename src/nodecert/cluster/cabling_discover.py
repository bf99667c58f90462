"""Discovering the fabric's links for `fabric.cabling`, on the fabric's own tools over
SSH (as root), every command under a timeout:

* InfiniBand: `ibnetdiscover -p` from one node sees the whole subnet (the next node is
  asked when one cannot run it); every node's ports are then read.
* Ethernet/RoCE: `lldpctl -f json` on every node, each naming its own neighbours. A node
  that cannot be read leaves its plan lines unjudged, so the result is ERROR naming it
  (never a pass for what was not seen).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import paramiko

from nodecert.cluster.cabling import judge_cabling
from nodecert.cluster.cabling_links import (
    DiscoverError,
    Link,
    parse_ibnetdiscover_ports,
    parse_lldpctl_json,
)
from nodecert.inventory.cableplan import Plan
from nodecert.transport.ssh import Endpoint, connect
from nodecert_node.contract import Result

IB_COMMAND = "timeout 60 ibnetdiscover -p"
LLDP_COMMAND = "timeout 20 lldpctl -f json"
IB_TRIES = 3  # nodes asked in turn before the subnet counts as unreadable
Connector = Callable[[Endpoint], paramiko.SSHClient]


@dataclass(frozen=True)
class Discovery:
    """What the tools showed: the links (None: nothing could be read), the nodes whose
    ports were seen, and the tools' words for what could not be read."""

    links: list[Link] | None
    nodes: set[str]
    problems: tuple[str, ...] = ()


def _run(ep: Endpoint, command: str, connector: Connector) -> tuple[int, str, str]:
    client = connector(ep)
    try:
        _, stdout, stderr = client.exec_command(ep.as_root(command), timeout=90)
        out = stdout.read().decode(errors="replace")
        err = stderr.read().decode(errors="replace")
        return stdout.channel.recv_exit_status(), out, err
    finally:
        client.close()


def _words(rc: int, err: str) -> str:
    text = " ".join(err.split())[:200]
    if rc == 124:
        return "timed out"
    return f"exit {rc}" + (f": {text}" if text else "")


def discover_ib(endpoints: dict[str, Endpoint], connector: Connector = connect,
                names: dict[str, str] | None = None) -> Discovery:
    problems: list[str] = []
    for node in sorted(endpoints)[:IB_TRIES]:
        try:
            rc, out, err = _run(endpoints[node], IB_COMMAND, connector)
        except (paramiko.SSHException, OSError) as exc:
            problems.append(f"{node}: {exc}")
            continue
        if rc != 0:
            problems.append(f"{node}: ibnetdiscover {_words(rc, err)}")
            continue
        try:
            return Discovery(parse_ibnetdiscover_ports(out, names), set(endpoints))
        except DiscoverError as exc:
            problems.append(f"{node}: {exc}")
    return Discovery(None, set(), tuple(problems))


def discover_lldp(endpoints: dict[str, Endpoint], connector: Connector = connect
                  ) -> Discovery:
    def one(node: str) -> tuple[str, list[Link] | None, str]:
        try:
            rc, out, err = _run(endpoints[node], LLDP_COMMAND, connector)
        except (paramiko.SSHException, OSError) as exc:
            return node, None, str(exc)
        if rc != 0:
            return node, None, f"lldpctl {_words(rc, err)}"
        try:
            return node, parse_lldpctl_json(out, node), ""
        except DiscoverError as exc:
            return node, None, str(exc)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(endpoints)))) as pool:
        got = list(pool.map(one, sorted(endpoints)))
    links = [link for _, ls, _ in got if ls for link in ls]
    read = {n for n, ls, _ in got if ls is not None}
    problems = tuple(f"{n}: {why}" for n, ls, why in got if ls is None)
    return Discovery(links if read else None, read, problems)


def judge_discovered(plan: Plan, found: Discovery, within: set[str]) -> Result:
    """fabric.cabling over what was discovered on the nodes `within` (the run's): ERROR
    when nothing could be read, or when one of them that the plan names could not be
    (its lines would go unjudged)."""
    unread_planned = sorted(({p.node for p in plan.links} & within) - found.nodes)
    if found.links is None or unread_planned:
        why = "; ".join(found.problems) or "no tool output"
        if found.links is not None:
            why = f"{', '.join(unread_planned)} not read ({why})"
        return judge_cabling(plan, None, tool_error=why)
    return judge_cabling(plan, found.links, nodes=found.nodes & within)


def cabling_check(plan: Plan, link_layer: str, endpoints: dict[str, Endpoint],
                  connector: Connector = connect) -> Result:
    found = (discover_ib(endpoints, connector) if link_layer == "InfiniBand"
             else discover_lldp(endpoints, connector))
    return judge_discovered(plan, found, set(endpoints))


__all__ = ["IB_COMMAND", "LLDP_COMMAND", "Discovery", "cabling_check", "discover_ib",
           "discover_lldp", "judge_discovered"]
