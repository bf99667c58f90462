"""A cluster lab's InfiniBand fabric: Debian's IB fabric simulator (ibsim, ibsim-utils)
wired from a topology file this module writes, discovered on the hosts by the real
infiniband-diags tools (ibnetdiscover, iblinkinfo) through ibsim's umad2sim preload.

The fabric is wired as nodecert.lab.fabricplan says (rail-optimised, every leaf to one
spine, so one host discovers the whole subnet), the cabling faults included; a link
caught flapping is one ibsim holds down while the fabric is read.

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
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab.config import LabConfig
from nodecert.lab.fabricplan import LEAF_PORTS, SPINE, leaf, switch_ports, wiring
from nodecert.lab.hardware import Fault

PORT = 7720  # ibsim's remote (UDP) port; its clients take the next ports
UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
READY_TIMEOUT_S = 20.0
_WIDTH_CODES = {"1X": 1, "4X": 2, "2X": 16}  # ibsim's w= (the PortInfo width bits)


def fabric_ip(cfg: LabConfig) -> ipaddress.IPv4Address:
    return cfg.subnet.network_address + 6


def state_dir(cfg: LabConfig) -> Path:
    return cfg.state / "ibfabric"


def _ca(host: str, hca: int) -> str:
    # The HCA's node description as a real node sets it ("<hostname> mlx5_<n>").
    return f"{host} mlx5_{hca}"


def topology(hosts: list[tuple[str, int, int]], faults: list[Fault]) -> str:
    """ibsim's topology file (ibnetdiscover's format): the spine, one leaf per rail, one
    single-port CA per HCA, each link with its width on both ends."""
    cables = wiring(hosts, faults)
    rails = max((r for _, _, r in hosts), default=0)
    _, leaf_ports = switch_ports(hosts)
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
    exiting: a real subnet manager, attached at the spine as a managed switch's SM.
    OpenSM's own transaction timeout and retries: with a longer timeout (-t 1000) a
    fabric with a port down made OpenSM 3.3.23 exit 255 after warning that its
    long_transaction_timeout (500 ms) was shorter."""
    return [str(tool("opensm")), "--once", "-f", str(log)]


# OpenSM's one sweep of the lab's fabric takes seconds; under a loaded machine, much
# longer: a CI rehearsal saw one pass 60 s (nodecert policy: three minutes, then it is
# reported as stuck).
SM_TIMEOUT_S = 180


def _run_sm(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
    try:
        sm = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=SM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise NodecertError(f"OpenSM did not finish configuring the lab's InfiniBand subnet "
                            f"within {SM_TIMEOUT_S} s", hint=f"see {log}") from None
    if sm.returncode != 0:
        raise NodecertError(f"OpenSM did not bring the lab's InfiniBand subnet up (exit "
                            f"{sm.returncode}): {' '.join(sm.stdout.split()[-30:])}",
                            hint=f"see {log}")


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
        _run_sm(sm_command(work / "opensm.log"), dict(env, **sm_env(work / "sm")),
                work / "sm", work / "opensm.log")
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
    _run_sm(["ip", "netns", "exec", labbmc.netns_name(cfg), *sm_command(d / "opensm.log")],
            env, d / "opensm", d / "opensm.log")
    for name, _, _ in hosts:
        etc = host_root[name] / "etc/nodecert-lab"
        etc.mkdir(parents=True, exist_ok=True)
        tmp = etc / "ibfabric.env.tmp"
        tmp.write_text(env_file(cfg, name, hosts, faults))
        tmp.replace(etc / "ibfabric.env")


__all__ = ["UMAD2SIM", "attachment", "env_file", "fabric_ip", "preflight", "read_locally",
           "sm_command", "sm_env", "stop", "tool", "topology", "up"]
