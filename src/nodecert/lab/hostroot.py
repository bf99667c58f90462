"""A lab host's root file system before it boots: the overlay on the shared base, the
host's identity and access, and its simulated hardware (the description its tools and
its BMC read, the simulator and the tools that stand in for the hardware's own)."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from nodecert.core.shell import run
from nodecert.lab import cluster
from nodecert.lab.config import LabConfig
from nodecert.lab.containerfaults import CONTAINER_CONFIG
from nodecert.lab.hardware import Fault, hardware_description

SIMHW = Path(__file__).parent / "simhw" / "simhw.py"  # the launcher
SIMHW_PACKAGE = SIMHW.parent / "nodecert_simhw"  # the emulators, one module per tool


def prepare(cfg: LabConfig, n: int, name: str, profile_name: str, faults: list[Fault], *,
            seed: str, total: int, as_cluster: bool = False,
            rack: dict[str, Any] | None = None) -> None:
    """Host n's root file system before its boot: the overlay on the shared base, its
    identity (host key kept across resets, machine-id, hostname, hosts), the lab's apt
    source and SSH key, its simulated hardware, the container configuration; a cluster
    host's own pieces too."""
    d = cfg.host_dir(n)
    root = d / "root"
    for sub in ("upper", "work", "root", "keys"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", cfg.netns(n), "-o",
         f"lowerdir={cfg.base},upperdir={d / 'upper'},workdir={d / 'work'}",
         str(root)], timeout=30)
    hostkey = d / "keys" / "ssh_host_ed25519_key"
    if not hostkey.exists():  # kept across resets: the host stays the same machine
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
             str(hostkey)], timeout=30)
    (root / "etc/hostname").write_text(name + "\n")
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{cfg.gateway}\tcontrol"]
    lines += [f"{cfg.host_ip(k)}\th{k}" for k in range(1, total + 1)]
    (root / "etc/hosts").write_text("\n".join(lines) + "\n")
    (root / "etc/machine-id").write_text(secrets.token_hex(16) + "\n")
    shutil.copy2(hostkey, root / "etc/ssh/ssh_host_ed25519_key")
    shutil.copy2(hostkey.with_suffix(".pub"), root / "etc/ssh/ssh_host_ed25519_key.pub")
    (root / "etc/ssh/ssh_host_ed25519_key").chmod(0o600)
    # The distribution archive of a lab host is the mirror's debian/ repository;
    # NVIDIA's repository (mirror's nvidia/) is added by provisioning, as on a
    # real server.
    (root / "etc/apt/sources.list").write_text(
        "deb [trusted=yes] file:/srv/nodecert-mirror/debian ./\n")
    auth = root / "root/.ssh/authorized_keys"
    auth.write_text((cfg.state / "id_ed25519.pub").read_text())
    auth.chmod(0o600)
    install_hardware(cfg, n, name, profile_name, faults, seed=seed, rack=rack)
    for rel, text in CONTAINER_CONFIG.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if as_cluster:
        cluster.prepare_host(cfg, root, total)


def install_hardware(cfg: LabConfig, n: int, name: str, profile_name: str,
                     faults: list[Fault], *, seed: str, rack: dict[str, Any] | None = None,
                     keep_boot: bool = False) -> None:
    """The host's simulated hardware (hardware.json), written whole. `keep_boot`:
    the host did not reboot (new faults on a running host), so its boot time, and
    with it its uptime and the kernel log's times, stay as they were."""
    root = cfg.host_dir(n) / "root"
    etc = cfg.hardware_file(n).parent
    boot = time.time()
    if keep_boot:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            boot = float(json.loads((etc / "hardware.json").read_text())["boot_time"])
    hw = hardware_description(lab_seed=seed, host=name, profile_name=profile_name,
                              mac=cfg.mac(n), faults=faults, boot_time=boot,
                              rack=rack)
    etc.mkdir(parents=True, exist_ok=True)
    tmp = etc / "hardware.json.tmp"
    tmp.write_text(json.dumps(hw, indent=1))
    tmp.replace(etc / "hardware.json")
    (etc / "SIMULATED").write_text(
        "This host is a nodecert lab host. Its NVIDIA hardware is SIMULATED: every result "
        "measured here must be stamped SIMULATED.\n")
    lib = root / "usr/lib/nodecert-lab"
    lib.mkdir(parents=True, exist_ok=True)
    shutil.copy2(SIMHW, lib / "simhw.py")
    shutil.copy2(SIMHW.parent / "nfsfuse.py", lib / "nfsfuse.py")
    shutil.rmtree(lib / "nodecert_simhw", ignore_errors=True)
    shutil.copytree(SIMHW_PACKAGE, lib / "nodecert_simhw",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for tool in ("lspci", "dmesg", "dmidecode", "lscpu", "lsblk", "lsmod", "sysctl",
                 "cpupower", "modprobe"):
        w = root / "usr/local/bin" / tool
        w.write_text(f"#!/bin/sh\n# SIMULATED {tool} of a nodecert lab host\n"
                     f'exec /usr/bin/python3 /usr/lib/nodecert-lab/simhw.py {tool} "$@"\n')
        w.chmod(0o755)


__all__ = ["SIMHW", "SIMHW_PACKAGE", "install_hardware", "prepare"]
