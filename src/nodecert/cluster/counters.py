"""Every node's InfiniBand error counters read before the cluster's jobs and after them:
what the links gained under the real load (a marginal cable shows itself under traffic),
judged like the per-node check's window (net.error_counter_growth_max).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import paramiko

from nodecert.transport.ssh import Endpoint, connect
from nodecert_node.parse import ParseError, marked_sections
from nodecert_node.parse.ib import ERROR_COUNTERS, parse_perfquery

MARK = "=== nodecert hca "
Counters = dict[str, dict[str, int]]  # device -> counter -> value


def script(devices: tuple[str, ...]) -> str:
    return "; ".join(f"echo {shlex.quote(MARK + d)}; timeout 20 perfquery -x -C "
                     f"{shlex.quote(d)} -P 1" for d in devices)


def parse_dump(text: str) -> Counters:
    """Each device's error counters from the script's output (devices whose perfquery
    failed are left out: never read as zero)."""
    out: Counters = {}
    for dev, body in marked_sections(text, MARK).items():
        try:
            blocks = parse_perfquery(body)
        except ParseError:
            continue
        if blocks:
            c = blocks[0]["counters"]
            out[dev] = {k: int(c[k]) for k in ERROR_COUNTERS if k in c}
    return out


def read_node(ep: Endpoint, devices: tuple[str, ...],
              connector: Callable[[Endpoint], paramiko.SSHClient] = connect) -> Counters | None:
    """One node's counters over SSH (as root), None when the node cannot be read."""
    try:
        client = connector(ep)
    except (paramiko.SSHException, OSError):
        return None
    try:
        _, stdout, _ = client.exec_command(ep.as_root(script(devices)), timeout=120)
        return parse_dump(stdout.read().decode(errors="replace"))
    except (paramiko.SSHException, OSError):
        return None
    finally:
        client.close()


def read_all(endpoints: dict[str, Endpoint], devices: tuple[str, ...],
             connector: Callable[[Endpoint], paramiko.SSHClient] = connect
             ) -> dict[str, Counters | None]:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(endpoints)))) as pool:
        got = pool.map(lambda n: (n, read_node(endpoints[n], devices, connector)),
                       sorted(endpoints))
        return dict(got)


def growth(before: dict[str, Counters | None], after: dict[str, Counters | None]
           ) -> dict[str, dict[str, dict[str, int]]]:
    """node -> device -> counter -> what it gained (only counters that grew)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for node, b in before.items():
        a = after.get(node)
        if not a or not b:
            continue
        for dev, cb in b.items():
            grew = {k: a[dev][k] - v for k, v in cb.items()
                    if dev in a and k in a[dev] and a[dev][k] > v}
            if grew:
                out.setdefault(node, {})[dev] = grew
    return out


__all__ = ["Counters", "growth", "parse_dump", "read_all", "read_node", "script"]
