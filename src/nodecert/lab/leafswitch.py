"""The lab's Ethernet leaf switches as LLDP sees them: Debian's lldpd, one instance per
switch, in the lab's management namespace on that switch's ports (the far ends of the
hosts' fabric veths), announcing the switch's name and each port's name as a switch's
LLDP agent does. The hosts run Debian's lldpd too, so `lldpctl -f json` on a host is the
real tool's reading of what a real agent sent.

The binary is Debian's, unpacked from the lab's mirror (never installed on this machine:
no service, nothing in /etc). Each instance runs in a mount namespace of its own, where
lldpd's privilege-separation user `_lldpd` exists (mapped to nobody) and /run is a
private tmpfs (its chroot, its pid file), and limited to its own ports by exact name, so
it never speaks on the management namespace's bridge port. SIMULATED SWITCHES: the
system description says so.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab import bmc as labbmc
from nodecert.lab.config import LabConfig

DESCRIPTION = "nodecert lab leaf switch (SIMULATED)"
INTERVAL_S = 1  # lldpd's tx-interval: a frame per port per second
HOLD = 4  # tx-hold: a neighbour is forgotten HOLD intervals after its last frame
TTL_S = INTERVAL_S * HOLD
STOP_TIMEOUT_S = 5.0
# What `sh -c` does in the switch's own mount namespace: /run private (lldpd's chroot
# and pid file), its privilege-separation user known, then lldpd itself.
_START = ('mount -t tmpfs -o mode=0755 nodecert-leaf /run && mkdir -m 0755 /run/lldpd && '
          'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && '
          'exec env LD_LIBRARY_PATH="$3" "$4" -d -u "$5" -O "$6" -L "$7" -C "$8"')


def state_dir(cfg: LabConfig) -> Path:
    return cfg.state / "ethfabric" / "switches"


def switch_conf(system: str, ports: Mapping[str, str]) -> str:
    """lldpd's configuration for one switch: its name and description, its ports by
    exact name (lldpd skips veths it is not told of), each port's ID as the switch
    names it, a frame a second."""
    lines = ["# Written by `nodecert lab up`: a lab leaf switch (SIMULATED)",
             f"configure system hostname {system}",
             f'configure system description "{DESCRIPTION}"',
             "configure system capabilities enabled bridge",
             "configure system interface pattern " + ",".join(sorted(ports)),
             f"configure lldp tx-interval {INTERVAL_S}",
             f"configure lldp tx-hold {HOLD}"]
    lines += [f"configure ports {iface} lldp portidsubtype local {name} description {name}"
              for iface, name in sorted(ports.items())]
    return "\n".join(lines) + "\n"


def unpack(cfg: LabConfig, mirror: Path) -> Path:
    """Debian's lldpd from the lab's mirror, unpacked once into the lab's state; the
    directory holding usr/sbin/lldpd. NodecertError if it or a library it needs is
    missing."""
    root = state_dir(cfg) / "lldpd"
    lldpd = root / "usr/sbin/lldpd"
    if not lldpd.is_file():
        debs = sorted((mirror / "debian").glob("lldpd_*.deb"))
        if not debs:
            raise NodecertError(f"Debian's lldpd is not in the lab's mirror ({mirror})",
                                hint="run `nodecert lab up` again: the mirror is rebuilt "
                                     "with it")
        tmp = root.with_name("lldpd.tmp")
        shutil.rmtree(tmp, ignore_errors=True)  # an unpacking cut short
        tmp.mkdir(parents=True)
        run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], timeout=60)
        tmp.rename(root)
    libs = root / "usr/lib/x86_64-linux-gnu"
    for binary in (lldpd, root / "usr/sbin/lldpcli"):
        out = run(["ldd", str(binary)], timeout=15, check=False,
                  env={**os.environ, "LD_LIBRARY_PATH": str(libs)}).stdout
        missing = [line.split()[0] for line in out.splitlines() if "not found" in line]
        if missing:
            raise NodecertError(f"the lab's leaf switches run Debian's lldpd, which needs "
                                f"{', '.join(missing)} on this machine",
                                hint="install lldpd's libraries (apt-get install "
                                     "libevent-2.1-7 libsnmp40), or run the lab on Debian 12")
    return root


def _identity(d: Path) -> tuple[Path, Path]:
    """passwd and group as this machine's, with lldpd's user (nobody's ids) added."""
    out = []
    for name, entry in (("passwd", "_lldpd:x:65534:65534:lldpd:/nonexistent:"
                                   "/usr/sbin/nologin"), ("group", "_lldpd:x:65534:")):
        lines = [line for line in Path(f"/etc/{name}").read_text().splitlines()
                 if not line.startswith("_lldpd:")]
        path = d / name
        path.write_text("\n".join([*lines, entry]) + "\n")
        path.chmod(0o644)
        out.append(path)
    return out[0], out[1]


def _ours(pid: int, root: Path) -> bool:
    """pid is still an lldpd this lab started (lldpd rewrites its process title, so the
    executable decides, not the command line)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")) == root / "usr/sbin/lldpd"
    except OSError:
        return False


def stop(cfg: LabConfig) -> None:
    """Every leaf switch this lab started, stopped (each says goodbye to its neighbours:
    a TTL-0 frame on its ports); nothing else is ever signalled."""
    d = state_dir(cfg)
    root = d / "lldpd"
    for pidfile in sorted(d.glob("*.pid")):
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            pid = 0
        if pid:
            _stop_one(pid, root)
        pidfile.unlink(missing_ok=True)


def _stop_one(pid: int, root: Path) -> None:
    """SIGTERM, and SIGKILL if it has not exited within STOP_TIMEOUT_S. The switch was
    started by an earlier command, so it is not our child to wait on: its pidfd says
    when it exits (opened before the check, so a reused PID is never signalled)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # gone already
    try:
        if not _ours(pid, root):
            return
        signal.pidfd_send_signal(fd, signal.SIGTERM)
        if not select.select([fd], [], [], STOP_TIMEOUT_S)[0]:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it exited between the check and the signal
    finally:
        os.close(fd)


def start(cfg: LabConfig, mirror: Path, ports: Mapping[str, tuple[str, str]]) -> list[str]:
    """The leaf switches as wired: ports maps a switch-side interface to (switch, the
    port's name); the switches that run. Any running before are stopped first."""
    root = unpack(cfg, mirror)
    d = state_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    stop(cfg)
    passwd, group = _identity(d)
    per_switch: dict[str, dict[str, str]] = {}
    for iface, (system, name) in ports.items():
        per_switch.setdefault(system, {})[iface] = name
    for system, mine in sorted(per_switch.items()):
        conf = d / f"{system}.conf"
        conf.write_text(switch_conf(system, mine))
        with (d / f"{system}.log").open("ab") as log:
            p = subprocess.Popen(
                ["ip", "netns", "exec", labbmc.netns_name(cfg), "unshare", "--mount",
                 "--propagation", "private", "sh", "-c", _START, "leaf", str(passwd),
                 str(group), str(root / "usr/lib/x86_64-linux-gnu"),
                 str(root / "usr/sbin/lldpd"), str(d / f"{system}.sock"), str(conf),
                 str(root / "usr/sbin/lldpcli"),
                 # its chassis ID from its own ports: every switch in the namespace would
                 # otherwise take the same one (the namespace's first interface), and a
                 # host's lldpd takes two neighbours of one chassis ID for one switch
                 ",".join(sorted(mine))],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        (d / f"{system}.pid").write_text(f"{p.pid}\n")
    return sorted(per_switch)


__all__ = ["DESCRIPTION", "TTL_S", "start", "state_dir", "stop", "switch_conf", "unpack"]
