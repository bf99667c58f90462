"""What this machine must have before a lab is made on it: root, the host tools, and
enough inotify instances for every host's systemd (checked before anything is created)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from nodecert.core.errors import NodecertError

REQUIRED_TOOLS = {"systemd-nspawn": "systemd-container", "mmdebstrap": "mmdebstrap",
                  "ip": "iproute2", "ssh": "openssh-client", "ssh-keygen": "openssh-client",
                  "dpkg-deb": "dpkg", "apt-ftparchive": "apt-utils"}

# systemd in each host holds about 7 inotify instances (measured: 28 for 4 hosts).
INOTIFY_PER_HOST = 8
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_in_use() -> int:
    n = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            n += sum(1 for fd in fd_dir.iterdir() if os.readlink(fd) == "anon_inode:inotify")
    return n


def check_inotify(nodes: int) -> None:
    """Refuse (before creating anything) a lab whose hosts' systemd would run out of
    inotify instances and die while booting ("Too many open files")."""
    limit = int(INOTIFY_LIMIT.read_text())
    need = inotify_in_use() + INOTIFY_PER_HOST * nodes
    if need > limit:
        raise NodecertError(
            f"{nodes} lab hosts need about {need} inotify instances, the machine allows "
            f"{limit} (fs.inotify.max_user_instances)",
            hint=f"raise it: sysctl -w fs.inotify.max_user_instances={max(512, need * 2)} "
                 "(or start fewer hosts)")


def preflight_tools() -> None:
    if os.geteuid() != 0:
        raise NodecertError("the lab needs root (network namespaces, overlay mounts, nspawn)",
                            hint="run it with sudo, or as root")
    missing = sorted({pkg for tool, pkg in REQUIRED_TOOLS.items() if not shutil.which(tool)})
    if missing:
        raise NodecertError(f"host tools missing: {', '.join(missing)}",
                            hint=f"apt-get install {' '.join(missing)}")


__all__ = ["INOTIFY_LIMIT", "INOTIFY_PER_HOST", "REQUIRED_TOOLS", "check_inotify",
           "inotify_in_use", "preflight_tools"]
