"""An emulated fleet inside a cluster lab, for controllers that run as the lab's Slurm
jobs: the lab's hosts run this machine's nodecert (its Python, virtual environment and
source, bound read-only into each host at the same paths), and the emulator
(nodecert.lab.fleet) serves every node at one address of the lab's own namespace, on the
lab's bridge, each node on its own port. Its keys, known_hosts and inventory are written
into the cluster's shared file system, named as the hosts see it.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nodecert
from nodecert.core.errors import NodecertError
from nodecert.core.paths import data_root
from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab import cluster
from nodecert.lab.config import LabConfig
from nodecert.transport.bundle import node_code_dir

# The emulator's first port (node i on FIRST_PORT + i): above the hosts' own services.
FIRST_PORT = 20000
READY_TIMEOUT_S = 600.0  # ten thousand nodes' keys are made before any listens


def controller_binds() -> list[str]:
    """The directories a lab host needs to run this machine's nodecert at the same paths:
    the virtual environment, the source an editable install points at, the data (stacks,
    a clone's root) and the Python it was made from when that is not the host's own
    /usr. Nested ones are left out."""
    paths = {Path(sys.prefix).resolve(), Path(nodecert.__file__).resolve().parents[1],
             node_code_dir().parent, data_root().resolve()}
    base = Path(sys.base_prefix).resolve()
    if not str(base).startswith("/usr"):
        paths.add(base)
    kept: list[Path] = []
    for p in sorted(paths, key=lambda p: len(p.parts)):
        if not any(p.is_relative_to(k) for k in kept):
            kept.append(p)
    return [str(p) for p in sorted(kept)]


def fleet_ip(cfg: LabConfig) -> ipaddress.IPv4Address:
    """The emulated fleet's address on the lab's bridge (in the lab's own namespace)."""
    return cfg.subnet.network_address + 7


def export_dir(cfg: LabConfig) -> Path:
    """The cluster's shared directory on this machine (the head host exports it; every
    host mounts it at cluster.SHARED_MOUNT)."""
    return cfg.state / "nfs-export"


@contextmanager
def served_fleet(cfg: LabConfig, nodes: int, *args: str, name: str = "fleet"
                 ) -> Iterator[Path]:
    """Serve `nodes` emulated nodes (extra emulator options in args) in the lab's
    namespace until the block ends; yields the fleet's directory on this machine, whose
    inventory.ini the hosts read at cluster.SHARED_MOUNT/<name>/inventory.ini."""
    ns = labbmc.netns_name(cfg)
    labbmc.ns_up(cfg, [])
    ip = fleet_ip(cfg)
    have = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"], timeout=15).stdout
    if f" {ip}/" not in have:
        run(["ip", "-n", ns, "addr", "add", f"{ip}/{cfg.subnet.prefixlen}", "dev", "eth0"],
            timeout=15)
    work = export_dir(cfg) / name
    work.mkdir(mode=0o755, parents=True, exist_ok=True)
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "nodecert.lab.fleet",
         "--nodes", str(nodes), "--dir", str(work), "--listen", str(ip),
         "--port", str(FIRST_PORT), "--seen-as", f"{cluster.SHARED_MOUNT}/{name}", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdin is not None
    timer = threading.Timer(READY_TIMEOUT_S, proc.kill)
    timer.start()
    ready = proc.stdout.readline()
    timer.cancel()
    try:
        if not ready.startswith("ready "):
            err = proc.stderr.read()[-500:] if proc.stderr else ""
            raise NodecertError(f"the lab's emulated fleet did not start: {ready!r} {err}")
        yield work
    finally:
        proc.stdin.close()  # the emulator serves until its standard input closes
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


__all__ = ["FIRST_PORT", "controller_binds", "export_dir", "fleet_ip", "served_fleet"]
