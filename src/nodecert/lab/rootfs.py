"""The shared Debian base root filesystem and each host's overlay on it."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.shell import run
from nodecert.lab.config import (
    BASE_PACKAGES,
    BASE_RECIPE,
    CLUSTER_PACKAGES,
    CLUSTER_UNITS,
    LabConfig,
)

STAMP = ".nodecert-lab-base"
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
                "e2scrub_all.timer", "fstrim.timer", "apt-daily.service",
                "apt-daily-upgrade.service", "getty@tty1.service", "console-getty.service",
                # podman runs daemonless: its API socket, restart and auto-update units
                # would only cost every host's boot
                "podman.socket", "podman.service", "podman-restart.service",
                "podman-auto-update.timer", "podman-auto-update.service")


def debian_mirror() -> str:
    """The Debian mirror this machine's apt already uses (never any other host)."""
    env = os.environ.get("NODECERT_LAB_MIRROR")
    if env:
        return env
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^(?:URIs:|deb(?:\s+\[[^\]]*\])?)\s+(https?://\S+/debian/?)(?:\s|$)",
                             text, re.MULTILINE):
            return m.group(1)
    raise NodecertError("no Debian mirror found in this machine's apt sources",
                        hint="set NODECERT_LAB_MIRROR=http://<your mirror>/debian")


def mounts_under(mountinfo: str, path: Path) -> list[str]:
    """The mount points at or below `path` in /proc/self/mountinfo's text, deepest first
    (the order they must be unmounted in). Mount points are octal-escaped there."""
    root = os.path.normpath(str(path))
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if point == root or point.startswith(root + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def remove_build_dir(path: Path) -> None:
    """Remove a build directory a killed build left, after unmounting what it left
    mounted there (mmdebstrap's proc, sys and dev): removing through a mounted /sys or
    /proc fails (EROFS) or reaches into the live system."""
    if not path.exists():
        return
    try:
        info = Path("/proc/self/mountinfo").read_text()
    except OSError:
        info = ""
    for point in mounts_under(info, path.resolve()):
        # lazy: a mount still busy is detached now and released when its user goes
        run(["umount", "-l", point], timeout=60)
    left = mounts_under(Path("/proc/self/mountinfo").read_text(), path.resolve()) \
        if info else []
    if left:
        raise NodecertError(f"{path}: {left[0]} is still mounted after umount",
                            hint=f"unmount it (umount -l {left[0]}) and run again")
    shutil.rmtree(path)


def base_ready(cfg: LabConfig) -> bool:
    stamp = cfg.base / STAMP
    return stamp.is_file() and stamp.read_text().split()[0] == BASE_RECIPE


def build_base(cfg: LabConfig, *, log: Callable[[str], None] = print) -> float:
    """Bootstrap the base with mmdebstrap (idempotent); returns seconds spent (0 if reused)."""
    if base_ready(cfg):
        return 0.0
    t0 = time.monotonic()
    tmp = cfg.root / "base.tmp"
    # a build killed before it finished: its mounts undone, then rebuilt from scratch
    remove_build_dir(tmp)
    remove_build_dir(cfg.base)  # an older recipe: rebuilt from scratch
    cfg.root.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    log(f"building the lab base rootfs ({cfg.suite} minbase) from {mirror} ...")
    packages = ",".join(BASE_PACKAGES + CLUSTER_PACKAGES)
    run(["mmdebstrap", "--variant=minbase", "--mode=root",
         "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
         f"--include={packages}", cfg.suite, str(tmp), mirror], timeout=900)
    _finalize(tmp)
    (tmp / STAMP).write_text(f"{BASE_RECIPE} {cfg.suite} from {mirror}\n")
    tmp.rename(cfg.base)
    return time.monotonic() - t0


def _finalize(b: Path) -> None:
    """Make the base neutral: hosts get identity (keys, machine-id, name) at start."""
    for deb in (b / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    lists = b / "var/lib/apt/lists"
    shutil.rmtree(lists, ignore_errors=True)
    (lists / "partial").mkdir(parents=True)
    for key in (b / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (b / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    (b / "srv/nodecert-mirror").mkdir(parents=True, exist_ok=True)
    # Only the lab mirror: hosts have no route off the bridge and no DNS anyway.
    (b / "etc/apt/sources.list").write_text("deb [trusted=yes] file:/srv/nodecert-mirror ./\n")
    for extra in (b / "etc/apt/sources.list.d").glob("*"):
        extra.unlink()
    (b / "etc/resolv.conf").unlink(missing_ok=True)
    (b / "etc/resolv.conf").write_text("")
    (b / "etc/machine-id").write_text("")
    (b / "etc/ssh/sshd_config.d/nodecert-lab.conf").write_text(
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nUseDNS no\n")
    jd = b / "etc/systemd/journald.conf.d"
    jd.mkdir(parents=True, exist_ok=True)
    (jd / "nodecert-lab.conf").write_text("[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n")
    for unit in MASKED_UNITS:
        link = b / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    # Slurm and munge start only on a lab that asks for a cluster (with its own key).
    for unit in CLUSTER_UNITS:
        (b / "etc/systemd/system/multi-user.target.wants" / unit).unlink(missing_ok=True)
    (b / "etc/munge/munge.key").unlink(missing_ok=True)
    for t in ("apt-daily", "apt-daily-upgrade", "dpkg-db-backup", "e2scrub_all", "fstrim"):
        (b / f"etc/systemd/system/timers.target.wants/{t}.timer").unlink(missing_ok=True)
    # dpkg in the hosts must never wait on interactive prompts.
    (b / "etc/apt/apt.conf.d/90nodecert-lab").write_text(
        'Dpkg::Options { "--force-confdef"; "--force-confold"; };\n'
        'APT::Install-Recommends "false";\n')
