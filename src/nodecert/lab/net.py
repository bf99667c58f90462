"""The lab network: one private bridge, a blackhole guard route, a netns per host.

Safety rules, enforced here:
* the lab's subnet is refused if anything else on this machine uses it;
* a ``blackhole <subnet>`` route (metric 4000) stays in place, so if the bridge is
  ever gone, traffic for the lab range is dropped locally instead of following
  the default route off the machine;
* host namespaces get no default route and no DNS: they reach the bridge only;
* only objects carrying the lab's tags (bridge alias, name prefix) are touched.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab.config import BRIDGE_ALIAS, LabConfig

GUARD_METRIC = "4000"


def _ip_json(*args: str) -> list[dict[str, Any]]:
    out = run(["ip", "-j", *args], timeout=15).stdout.strip()
    return json.loads(out) if out else []


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], timeout=15, check=False).returncode == 0


def link_alias(name: str) -> str | None:
    links = _ip_json("-d", "link", "show", "dev", name)
    return links[0].get("ifalias") if links else None


def subnet_conflict(cfg: LabConfig) -> str | None:
    """Describe any use of the lab subnet on this machine that is not the lab's own."""
    for link in _ip_json("-4", "addr", "show"):
        for a in link.get("addr_info", []):
            iface = ipaddress.IPv4Interface(f"{a['local']}/{a['prefixlen']}")
            if iface.network.overlaps(cfg.subnet) and link["ifname"] != cfg.bridge:
                return f"address {iface} on {link['ifname']}"
    for table in ("main", "local"):
        for r in _ip_json("-4", "route", "show", "table", table):
            dst = r.get("dst", "")
            if dst in ("default", "") or r.get("type") in ("local", "broadcast"):
                continue
            net = ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False)
            ours = r.get("dev") == cfg.bridge or (
                r.get("type") == "blackhole" and net == cfg.subnet)
            if net.overlaps(cfg.subnet) and not ours:
                return f"route {dst} via {r.get('dev') or r.get('type')}"
    return None


def guard_present(cfg: LabConfig) -> bool:
    return any(r.get("dst") == str(cfg.subnet)
               for r in _ip_json("-4", "route", "show", "type", "blackhole"))


def ensure_guard(cfg: LabConfig) -> None:
    if not guard_present(cfg):
        run(["ip", "route", "add", "blackhole", str(cfg.subnet), "metric", GUARD_METRIC],
            timeout=15)


def drop_guard(cfg: LabConfig) -> None:
    if guard_present(cfg):
        run(["ip", "route", "del", "blackhole", str(cfg.subnet), "metric", GUARD_METRIC],
            timeout=15)


def bridge_up(cfg: LabConfig) -> None:
    if link_exists(cfg.bridge):
        refuse_foreign_bridge(cfg)
    else:
        conflict = subnet_conflict(cfg)
        if conflict:
            raise NodecertError(
                f"the lab subnet {cfg.subnet} is already in use on this machine ({conflict})",
                hint="choose a free private /24 with --subnet or NODECERT_LAB_SUBNET")
        run(["ip", "link", "add", cfg.bridge, "type", "bridge"], timeout=15)
        run(["ip", "link", "set", "dev", cfg.bridge, "alias", cfg.alias], timeout=15)
        run(["ip", "addr", "add", f"{cfg.gateway}/{cfg.subnet.prefixlen}", "dev", cfg.bridge],
            timeout=15)
        run(["ip", "link", "set", cfg.bridge, "up"], timeout=15)
    ensure_guard(cfg)


def refuse_foreign_bridge(cfg: LabConfig, *, other_labs_only: bool = False) -> None:
    """NodecertError when an interface has the lab's bridge name but this lab did not
    create it: another lab's (whose hosts then share the names this lab would give its
    own: nothing of them may be taken for leftovers), or, unless other_labs_only,
    another program's (`down` leaves such an interface alone and goes on)."""
    if not link_exists(cfg.bridge):
        return
    alias = link_alias(cfg.bridge) or ""
    if alias in (cfg.alias, BRIDGE_ALIAS):  # this lab's, or one made before labs had ids
        return
    if alias.startswith(BRIDGE_ALIAS):
        raise NodecertError(
            f"the bridge {cfg.bridge} belongs to another lab on this machine (alias "
            f"{alias!r}, not this lab's {cfg.alias!r}): its hosts carry the names this lab "
            "would use", hint="give this lab its own subnet (NODECERT_LAB_SUBNET) or "
                              "directory (NODECERT_LAB_DIR), or stop the other lab with its "
                              "own settings")
    if other_labs_only:
        return
    raise NodecertError(
        f"an interface named {cfg.bridge} exists but was not created by the lab",
        hint="remove it yourself or set another bridge name; the lab never touches "
             "what it did not create")


def bridge_down(cfg: LabConfig) -> None:
    if link_exists(cfg.bridge) and link_alias(cfg.bridge) in (cfg.alias, BRIDGE_ALIAS):
        run(["ip", "link", "del", cfg.bridge], timeout=15)


def _netns_identity(name: str) -> str | None:
    """The namespace behind /run/netns/NAME (device and inode of its nsfs file), or None."""
    try:
        st = os.stat(f"/run/netns/{name}")
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


def _netns_record(cfg: LabConfig, name: str) -> Path:
    return cfg.state / "netns" / name


def owned_netns(cfg: LabConfig) -> list[str]:
    """The network namespaces this lab created: its names, and the very namespace its
    own record (written when it was created) names. A namespace that merely carries
    this lab's name (another lab's, or one somebody made by hand) is not its."""
    out = run(["ip", "netns", "list"], timeout=15).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    mine = []
    for n in names:
        if not (n.startswith(f"{cfg.prefix}-h") and n[len(cfg.prefix) + 2:].isdigit()):
            continue
        try:
            recorded = _netns_record(cfg, n).read_text().strip()
        except OSError:
            continue
        if recorded and recorded == _netns_identity(n):
            mine.append(n)
    return sorted(mine)


def netns_pids(name: str) -> list[int]:
    out = run(["ip", "netns", "pids", name], timeout=15, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def netns_add(cfg: LabConfig, n: int) -> None:
    ns, veth = cfg.netns(n), cfg.veth(n)
    run(["ip", "netns", "add", ns], timeout=15)
    ident = _netns_identity(ns)
    if ident is None:
        raise NodecertError(f"ip netns add {ns} made no /run/netns/{ns}")
    record = _netns_record(cfg, ns)
    record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record.write_text(ident + "\n")
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
        timeout=15)
    run(["ip", "link", "set", veth, "master", cfg.bridge, "up"], timeout=15)
    run(["ip", "-n", ns, "link", "set", "lo", "up"], timeout=15)
    run(["ip", "-n", ns, "link", "set", "eth0", "address", cfg.mac(n)], timeout=15)
    run(["ip", "-n", ns, "addr", "add", f"{cfg.host_ip(n)}/{cfg.subnet.prefixlen}", "dev",
         "eth0"], timeout=15)
    run(["ip", "-n", ns, "link", "set", "eth0", "up"], timeout=15)
    # The subnet's route acknowledges at once (quickack). A host's shared file system is a
    # synchronous NFS client, one call at a time: TCP takes that for interactive traffic
    # and delays its ACKs, the tail of every READ reply then waits on the server's Nagle
    # for them, and a host so caught read at 0.4 of its peers' rate (the server measuring
    # its round trip at 5 ms instead of 0.02) until its connection was reopened.
    run(["ip", "-n", ns, "route", "replace", str(cfg.subnet), "dev", "eth0", "proto", "kernel",
         "scope", "link", "src", str(cfg.host_ip(n)), "quickack", "1"], timeout=15)
    # Deliberately no default route: a host can reach only the lab subnet.


def shape(cfg: LabConfig, n: int, mbps: float) -> None:
    """Limit what host n receives to mbps MB/s (a token bucket on its link, on the
    bridge's side), or with 0 lift the limit."""
    dev = cfg.veth(n)
    run(["tc", "qdisc", "del", "dev", dev, "root"], timeout=15, check=False)
    if mbps > 0:
        run(["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
             f"{int(mbps * 8000)}kbit", "burst", "256kb", "latency", "200ms"], timeout=15)


def netns_del(cfg: LabConfig, name: str) -> None:
    run(["ip", "netns", "del", name], timeout=15, check=False)
    _netns_record(cfg, name).unlink(missing_ok=True)
    n = name.rsplit("-h", 1)[-1]
    if n.isdigit() and link_exists(cfg.veth(int(n))):
        run(["ip", "link", "del", cfg.veth(int(n))], timeout=15, check=False)
    if link_exists(cfg.bridge):
        run(["ip", "neigh", "del", str(cfg.host_ip(int(n))), "dev", cfg.bridge], timeout=15,
            check=False)


def owned_mounts(cfg: LabConfig) -> list[Path]:
    """Overlay mounts whose source is one of the lab's host names (from mountinfo)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = right.split()
        if len(fields) >= 2 and fields[0] == "overlay" and fields[1].startswith(
                f"{cfg.prefix}-h"):
            found.append(Path(left.split()[4]))
    # Deepest first, so nested mounts go before their parents.
    return sorted(found, key=lambda p: len(p.parts), reverse=True)
