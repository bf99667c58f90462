"""A lab base build killed half-way: what mmdebstrap left mounted under its temporary
directory (proc, sys, dev) is unmounted before the directory goes, so the next
`lab up` starts clean instead of failing on a read-only file system."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodecert.lab.rootfs import mounts_under, remove_build_dir
from support.env import require_root

MOUNTINFO = (
    "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
    "100 30 0:50 / /var/tmp/nodecert-lab/base.tmp/proc rw - proc proc rw\n"
    "101 30 0:51 / /var/tmp/nodecert-lab/base.tmp/sys rw - sysfs sysfs rw\n"
    "102 101 0:52 / /var/tmp/nodecert-lab/base.tmp/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    "103 30 0:53 / /var/tmp/nodecert-lab/base.tmpx/proc rw - proc proc rw\n"
    "104 30 0:54 / /var/tmp/my\\040lab/base.tmp/dev rw - devtmpfs udev rw\n")


@pytest.mark.unit
def test_mounts_under_a_directory_deepest_first() -> None:
    assert mounts_under(MOUNTINFO, Path("/var/tmp/nodecert-lab/base.tmp")) == [
        "/var/tmp/nodecert-lab/base.tmp/sys/fs/cgroup",
        "/var/tmp/nodecert-lab/base.tmp/proc", "/var/tmp/nodecert-lab/base.tmp/sys"]
    # an escaped space is read; a sibling whose name only starts alike is not under it
    assert mounts_under(MOUNTINFO, Path("/var/tmp/my lab/base.tmp")) == [
        "/var/tmp/my lab/base.tmp/dev"]
    assert mounts_under(MOUNTINFO, Path("/srv")) == []


@pytest.mark.lab
def test_a_killed_builds_mounts_are_undone_before_it_is_removed(tmp_path: Path) -> None:
    require_root()
    build = tmp_path / "base.tmp"
    (build / "proc").mkdir(parents=True)
    (build / "sys").mkdir()
    subprocess.run(["mount", "-t", "proc", "proc", str(build / "proc")], check=True,
                   timeout=30)
    subprocess.run(["mount", "-t", "sysfs", "sysfs", str(build / "sys")], check=True,
                   timeout=30)
    try:
        info = Path("/proc/self/mountinfo").read_text()
        assert len(mounts_under(info, build)) == 2
        remove_build_dir(build)
        assert not build.exists()
        assert mounts_under(Path("/proc/self/mountinfo").read_text(), build) == []
    finally:
        for sub in ("sys", "proc"):
            subprocess.run(["umount", "-l", str(build / sub)], check=False, timeout=30,
                           capture_output=True)
