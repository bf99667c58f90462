"""Stopping lab hosts: whether a recorded PID is still the boot loop this lab started
(a PID may be reused by anything), SIGTERM and waiting for it, killing what still runs
in the lab's own namespace, unmounting and removing what the lab made for the host.
Nothing that the lab's records and tags do not prove its own is ever touched."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
from pathlib import Path

from nodecert.core.shell import CommandError, run
from nodecert.lab import blkio, net
from nodecert.lab.config import LabConfig

STOP_TIMEOUT_S = 15.0


def alive(pid: int | None) -> bool:
    """True while pid runs; a zombie (exited, not yet reaped) counts as gone."""
    if not pid:
        return False
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child: reap it
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Field 3 (after the parenthesised command name) is the state; Z = zombie.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ours(cfg: LabConfig, pid: int | None, netns: str) -> bool:
    """pid is alive and still the boot loop this lab started for netns (a recorded
    PID may have been reused by any other process since)."""
    if not alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    n = int(netns.rsplit("-h", 1)[1])
    return (b"nodecert-lab-boot" in argv and netns.encode() in argv
            and str(cfg.host_dir(n) / "root").encode() in argv)

def signal_host(cfg: LabConfig, netns: str, pid: int | None) -> None:
    if ours(cfg, pid, netns):
        assert pid is not None
        # nspawn --boot powers the container off on SIGTERM (~1.5-2 s).
        os.kill(pid, signal.SIGTERM)

def stop_host(cfg: LabConfig, netns: str, pid: int | None) -> None:
    signal_host(cfg, netns, pid)
    finish_stop(cfg, netns, pid)

def wait_exit(pid: int, timeout: float) -> None:
    """Block until pid exits (a pidfd becomes readable), at most timeout seconds."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # already gone
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    alive(pid)  # reaps it when it is our own child

def finish_stop(cfg: LabConfig, netns: str, pid: int | None) -> None:
    if not ours(cfg, pid, netns):
        pid = None  # gone, or no longer the host's: never waited on, never killed
    if pid:
        wait_exit(pid, STOP_TIMEOUT_S)
    # Whatever still runs inside the lab's own namespace was started by the lab; a
    # namespace its records do not prove its own is left alone, name or not.
    owned = netns in net.owned_netns(cfg)
    if owned:
        for p in net.netns_pids(netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    if pid and alive(pid):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(f"/run/systemd/nspawn/propagate/{netns}", ignore_errors=True)
    n = int(netns.rsplit("-h", 1)[1])
    root = cfg.host_dir(n) / "root"
    for m in net.owned_mounts(cfg):
        if m == root or root in m.parents:
            umount(m)
    if owned:
        net.netns_del(cfg, netns)
    blkio.remove(cfg, netns)

def umount(path: Path) -> None:
    try:
        run(["umount", str(path)], timeout=30)
    except CommandError:
        run(["umount", "-l", str(path)], timeout=30)


__all__ = ["STOP_TIMEOUT_S", "alive", "finish_stop", "ours", "signal_host", "stop_host",
           "umount", "wait_exit"]
