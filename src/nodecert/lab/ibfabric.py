"""A cluster lab's InfiniBand fabric: Debian's IB fabric simulator (ibsim, ibsim-utils)
wired from a topology file this module writes, discovered on the hosts by the real
infiniband-diags tools (ibnetdiscover, iblinkinfo) through ibsim's umad2sim preload.

The fabric is rail-optimised, as GPU clusters are cabled: HCA r of every host to leaf
switch `leaf-<r>` (port = the host's number), every leaf to one spine (its last port), so
one host discovers the whole subnet. The cable plan the lab's inventory names
(`cabling-plan.csv`) is this wiring as ordered; the cabling faults change only the
simulated wiring, never the plan:

  cable_swapped {hca, with}   the host's two cables exchanged (each lands on the other's
                              leaf port)
  cable_wrong_leaf {hca, leaf} the cable lands on another rail's leaf (a free port there)
  cable_width {hca, width}    the link trains at 2X (or 1X) instead of 4X
  cable_missing {hca}         no cable
  link_flapping {hca}         the link is down while the fabric is read (ibsim holds it
                              down: the moment a flapping link is caught down)

OpenSM (a real subnet manager, run once at the spine after every change) gives the ports
their LIDs and brings them Active, so iblinkinfo reads the fabric as on a real cluster.
ibsim runs in the lab's management namespace (the BMCs' one) at .6 of the lab subnet, in
its remote mode (UDP); nothing of it is reachable from outside the lab's bridge. ibsim
0.10 trains links at HDR at most, so the lab's plan states widths, not speeds.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab.config import LabConfig
from nodecert.lab.hardware import Fault, profile

PORT = 7720  # ibsim's remote (UDP) port; its clients take the next ports
UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
LEAF_PORTS = 64  # a leaf's ports: more for a fabric of more than 31 hosts (ibsim: 255)
SPINE = "spine-00"
WRONG_PORT_BASE = 32  # a wrongly cabled HCA lands on port 32 + its host's number (or
# past the hosts' ports on a larger fabric); the leaf's last port goes to the spine
READY_TIMEOUT_S = 20.0
CABLING_KINDS = ("cable_swapped", "cable_wrong_leaf", "cable_width", "cable_missing",
                 "link_flapping")
_WIDTH_CODES = {"1X": 1, "4X": 2, "2X": 16}  # ibsim's w= (the PortInfo width bits)


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


def fabric_ip(cfg: LabConfig) -> ipaddress.IPv4Address:
    return cfg.subnet.network_address + 6


def state_dir(cfg: LabConfig) -> Path:
    return cfg.state / "ibfabric"


@dataclass(frozen=True)
class Cable:
    host: str
    hca: int
    switch: str
    port: int
    width: str = "4X"


def _ports(hosts: list[tuple[str, int, int]]) -> tuple[int, int]:
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
    wrong_base, _ = _ports(hosts)
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
                if width not in _WIDTH_CODES:
                    raise NodecertError(f"cable_width on {h}: width {width!r} is not one of "
                                        f"{', '.join(sorted(_WIDTH_CODES))}")
                cables[(h, hca)] = Cable(h, hca, c.switch, c.port, width)
            else:  # cable_missing, link_flapping
                del cables[(h, hca)]
    return sorted(cables.values(), key=lambda c: (c.switch, c.port))


def _ca(host: str, hca: int) -> str:
    # The HCA's node description as a real node sets it ("<hostname> mlx5_<n>").
    return f"{host} mlx5_{hca}"


def topology(hosts: list[tuple[str, int, int]], faults: list[Fault]) -> str:
    """ibsim's topology file (ibnetdiscover's format): the spine, one leaf per rail, one
    single-port CA per HCA, each link with its width on both ends."""
    cables = wiring(hosts, faults)
    rails = max((r for _, _, r in hosts), default=0)
    _, leaf_ports = _ports(hosts)
    lines = ["# nodecert lab InfiniBand fabric (SIMULATED: ibsim)", "",
             f'Switch\t{max(LEAF_PORTS, rails)} "{SPINE}"']
    lines += [f'[{r + 1}]\t"{leaf(r)}"[{leaf_ports}]' for r in range(rails)]
    for r in range(rails):
        lines += ["", f'Switch\t{leaf_ports} "{leaf(r)}"']
        lines += [f'[{c.port}]\t"{_ca(c.host, c.hca)}"[1]\tw={_WIDTH_CODES[c.width]}'
                  for c in cables if c.switch == leaf(r)]
        lines.append(f'[{leaf_ports}]\t"{SPINE}"[{r + 1}]')
    for c in sorted(cables, key=lambda c: (c.host, c.hca)):
        lines += ["", f'Hca\t1 "{_ca(c.host, c.hca)}"',
                  f'[1]\t"{c.switch}"[{c.port}]\tw={_WIDTH_CODES[c.width]}']
    return "\n".join(lines) + "\n"


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


def attachment(host: str, hosts: list[tuple[str, int, int]], faults: list[Fault]
               ) -> str | None:
    """The HCA a host's tools attach to: its first one still cabled (a real
    ibnetdiscover uses the first active port), None when none is."""
    cabled = sorted(c.hca for c in wiring(hosts, faults) if c.host == host)
    return _ca(host, cabled[0]) if cabled else None


def env_file(cfg: LabConfig, host: str, hosts: list[tuple[str, int, int]],
             faults: list[Fault]) -> str:
    """What the host's ibnetdiscover/iblinkinfo wrappers read (/etc/nodecert-lab)."""
    at = attachment(host, hosts, faults)
    lines = [f"IBSIM_SERVER_NAME={fabric_ip(cfg)}", f"IBSIM_SERVER_PORT={PORT}"]
    if at:
        lines.append(f"SIM_HOST='{at}'")
    return "\n".join(lines) + "\n"


def tool(name: str) -> str | None:
    """A fabric tool of this machine: on PATH, or beside nodecert's Python (where a
    checkout's setup puts the binaries it takes from Debian's packages)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else None


def preflight() -> None:
    missing = [pkg for name, pkg in (("ibsim", "ibsim-utils"), ("opensm", "opensm"))
               if tool(name) is None]
    if missing:
        raise NodecertError("a cluster lab's InfiniBand fabric needs Debian's IB fabric "
                            "simulator and a subnet manager: "
                            f"{', '.join(missing)} missing",
                            hint=f"apt-get install {' '.join(missing)}")


def sm_command(log: Path) -> list[str]:
    """OpenSM configuring the subnet once (LIDs, routes, every cabled port Active), then
    exiting: a real subnet manager, attached at the spine as a managed switch's SM."""
    return [str(tool("opensm")), "--once", "-f", str(log)]


def sm_env(cache: Path) -> dict[str, str]:
    return {"SIM_HOST": SPINE, "OSM_CACHE_DIR": str(cache), "LD_PRELOAD": UMAD2SIM}


def read_locally(hosts: list[tuple[str, int, int]], faults: list[Fault], argv: list[str],
                 work: Path, *, at: str = "h1") -> str:
    """The fabric read without the lab: ibsim in its local mode (abstract unix sockets of
    a name of this call's own, no network), OpenSM once, then the tool (`argv`: its name
    and arguments) attached at host `at`'s first cabled HCA; its output."""
    missing = [n for n in ("ibsim", "opensm", argv[0]) if tool(n) is None]
    if missing:
        raise NodecertError(f"{', '.join(missing)} not installed",
                            hint="apt-get install ibsim-utils opensm infiniband-diags")
    env = dict(os.environ, IBSIM_SOCKNAME=f"nodecert-{os.getpid()}-{secrets.token_hex(6)}")
    net = work / "net"
    net.write_text(topology(hosts, faults))
    log = work / "ibsim.log"
    with log.open("wb") as out:
        sim = subprocess.Popen([str(tool("ibsim")), "-s", "-n", str(net)],
                               stdin=subprocess.DEVNULL, stdout=out,
                               stderr=subprocess.STDOUT, env=env, cwd=work)
    try:
        _wait_ready(log, sim)
        (work / "sm").mkdir(exist_ok=True)
        sm = subprocess.run(sm_command(work / "opensm.log"),
                            env=dict(env, **sm_env(work / "sm")), cwd=work / "sm",
                            capture_output=True, text=True, timeout=60, check=False)
        if sm.returncode != 0:
            raise NodecertError(f"OpenSM exited {sm.returncode}: {sm.stdout[-300:]}")
        attach = attachment(at, hosts, faults)
        if attach is None:
            raise NodecertError(f"{at} has no cabled HCA to read the fabric from")
        p = subprocess.run([str(tool(argv[0])), *argv[1:]],
                           env=dict(env, SIM_HOST=attach, LD_PRELOAD=UMAD2SIM),
                           capture_output=True, text=True, timeout=120, cwd=work, check=False)
        if p.returncode != 0:
            raise NodecertError(f"{argv[0]} exited {p.returncode}: {p.stderr[-300:]}")
        return p.stdout
    finally:
        sim.terminate()
        sim.wait(timeout=10)


def _ns_address(cfg: LabConfig) -> None:
    ns = labbmc.netns_name(cfg)
    labbmc.ns_up(cfg, [])
    have = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"], timeout=15).stdout
    if f" {fabric_ip(cfg)}/" not in have:
        run(["ip", "-n", ns, "addr", "add", f"{fabric_ip(cfg)}/{cfg.subnet.prefixlen}",
             "dev", "eth0"], timeout=15)


def stop(cfg: LabConfig) -> None:
    """Stop the lab's ibsim (the one it recorded, while it still runs ibsim)."""
    pidfile = state_dir(cfg) / "ibsim.pid"
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    try:
        if b"ibsim" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, 15)
            labbmc.wait_gone([pid], 5.0)
    except (OSError, ProcessLookupError):
        pass
    pidfile.unlink(missing_ok=True)


def _wait_ready(log: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.is_file() else ""
        if "simulator ready" in text:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)  # ibsim says nothing else when it is ready
    tail = " ".join((log.read_text(errors="replace") if log.is_file() else "").split()[-40:])
    raise NodecertError(f"the lab's InfiniBand fabric simulator (ibsim) did not start: {tail}",
                        hint=f"see {log}")


def up(cfg: LabConfig, hosts: list[tuple[str, int, int]], faults: list[Fault],
       host_root: dict[str, Path]) -> None:
    """(Re)start ibsim on the fabric the faults leave and point every host at it."""
    if not any(rails for _, _, rails in hosts):
        return
    d = state_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    stop(cfg)
    (d / "net").write_text(topology(hosts, faults))
    _ns_address(cfg)
    log = d / "ibsim.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", labbmc.netns_name(cfg), str(tool("ibsim")), "-s", "-n", "-r",
             "-l", str(PORT), str(d / "net")], stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=d)
    (d / "ibsim.pid").write_text(str(proc.pid))
    _wait_ready(log, proc)
    (d / "opensm").mkdir(exist_ok=True)
    # OpenSM reaches ibsim at the fabric's own address, not loopback: ibsim reuses a
    # finished client's socket for the next client, and one connected over loopback
    # cannot reach a host (ibsim then stops with EINVAL).
    env = dict(os.environ, **sm_env(d / "opensm"), IBSIM_SERVER_NAME=str(fabric_ip(cfg)),
               IBSIM_SERVER_PORT=str(PORT))
    sm = subprocess.run(["ip", "netns", "exec", labbmc.netns_name(cfg),
                         *sm_command(d / "opensm.log")], env=env, cwd=d / "opensm",
                        capture_output=True, text=True, timeout=60, check=False)
    if sm.returncode != 0:
        raise NodecertError(f"OpenSM did not bring the lab's InfiniBand subnet up (exit "
                            f"{sm.returncode}): {' '.join(sm.stdout.split()[-30:])}",
                            hint=f"see {d / 'opensm.log'}")
    for name, _, _ in hosts:
        etc = host_root[name] / "etc/nodecert-lab"
        etc.mkdir(parents=True, exist_ok=True)
        tmp = etc / "ibfabric.env.tmp"
        tmp.write_text(env_file(cfg, name, hosts, faults))
        tmp.replace(etc / "ibfabric.env")


__all__ = [
    "CABLING_KINDS",
    "UMAD2SIM",
    "Cable",
    "attachment",
    "env_file",
    "fabric_hosts",
    "fabric_ip",
    "plan_csv",
    "preflight",
    "read_locally",
    "sm_command",
    "sm_env",
    "stop",
    "tool",
    "topology",
    "up",
    "wiring",
]
