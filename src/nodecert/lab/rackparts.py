"""A lab rack's management endpoints (`nodecert lab up --rack`): its NVLink switch trays,
power shelves and CDU, each a Redfish endpoint (nodecert.lab.racksim) at its own address
in the lab's BMC namespace, beside the trays' BMCs: component k at .190+k of the lab
subnet, its TLS certificate signed by the lab's BMC CA, one password with the BMCs.

SIMULATED -- NOT REAL HARDWARE.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodecert.lab import bmc as labbmc
from nodecert.lab.config import LabConfig

FIRST = 190
MAX_PARTS = 20


def part_ip(cfg: LabConfig, k: int) -> ipaddress.IPv4Address:
    return cfg.subnet.network_address + FIRST + k


def part_dir(cfg: LabConfig, name: str) -> Path:
    return labbmc.root(cfg) / "rack" / name


def prepare(cfg: LabConfig, d: Path, component: dict[str, Any], ip: str) -> None:
    """The component's directory: its state, the lab's password, a certificate for ip."""
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    labbmc.host_cert(cfg, d, ip)
    pw = labbmc.root(cfg) / "password"
    fd = os.open(d / "password", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(pw.read_text())
    set_component(d, component)


def set_component(d: Path, component: dict[str, Any]) -> None:
    """Write the component's state (kind, name, faults): the endpoint serves it once its
    tree is a tick old (at the latest a tick after the write)."""
    tmp = d / "component.json.tmp"
    tmp.write_text(json.dumps(component))
    tmp.replace(d / "component.json")


def start(d: Path, ip: str, port: int, netns: str | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "nodecert.lab.racksim", "--dir", str(d), "--address", ip,
            "--port", str(port)]
    with (d / "redfish.log").open("ab") as out:
        p = subprocess.Popen((["ip", "netns", "exec", netns] if netns else []) + argv,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
    (d / "pid").write_text(str(p.pid))
    return p


def wait_ready(d: Path, ip: str, port: int) -> None:
    labbmc.wait_listening(d, ip, port, f"the lab's rack endpoint {d.name}")


def stop(d: Path) -> None:
    """Stop the component's process (the one it recorded, when it still serves d)."""
    try:
        pid = int((d / "pid").read_text())
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if str(d).encode() in cmd:
        os.killpg(pid, signal.SIGTERM)
        labbmc.wait_gone([pid], 5.0)
    (d / "pid").unlink(missing_ok=True)


__all__ = ["MAX_PARTS", "part_dir", "part_ip", "prepare", "set_component", "start", "stop",
           "wait_ready"]
