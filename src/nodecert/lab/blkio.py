"""Per-host block-I/O cgroups (cgroup v1 blkio), used to make a lab host's storage slow.

Each host's supervisor joins `/sys/fs/cgroup/blkio/nodecert-lab/<netns>` before it
starts systemd-nspawn, so the whole host inherits it. An `nvme_slow` fault sets
real throttles there: real fio in the host then measures a really slow disk.
Where the machine has no cgroup-v1 blkio hierarchy, `ensure` returns None and
an `nvme_slow` fault is refused with a clear error instead of being ignored.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.lab.config import LabConfig

ROOT = Path("/sys/fs/cgroup/blkio")
PARENT = "nodecert-lab"


def _group(name: str) -> Path:
    return ROOT / PARENT / name


def available() -> bool:
    return (ROOT / "blkio.throttle.write_bps_device").exists()


def ensure(cfg: LabConfig, name: str) -> Path | None:
    if not available():
        return None
    g = _group(name)
    g.mkdir(parents=True, exist_ok=True)
    return g


def owned(cfg: LabConfig) -> list[str]:
    parent = ROOT / PARENT
    if not parent.is_dir():
        return []
    return sorted(p.name for p in parent.iterdir()
                  if p.is_dir() and p.name.startswith(f"{cfg.prefix}-h"))


def remove(cfg: LabConfig, name: str) -> None:
    g = _group(name)
    if g.is_dir():
        # A cgroup directory is removed with rmdir once empty; if a process is still
        # in it, it stays (and `owned` lists it for the next `down`).
        with contextlib.suppress(OSError):
            g.rmdir()
    with contextlib.suppress(OSError):  # the parent goes once no lab uses it
        (ROOT / PARENT).rmdir()


def _device_of(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def throttle(cfg: LabConfig, name: str, data_path: Path, *, read_bps: int = 0,
             write_bps: int = 0, iops: int = 0) -> None:
    """Set (or with zeros, clear) the host's I/O limits on the disk holding data_path."""
    g = _group(name)
    wants = read_bps or write_bps or iops
    if not g.is_dir():
        if wants:
            raise NodecertError("nvme_slow needs the cgroup-v1 blkio controller, which this "
                                "machine does not have", hint="remove the nvme_slow fault")
        return
    dev = _device_of(data_path)
    for knob, value in (("read_bps_device", read_bps), ("write_bps_device", write_bps),
                        ("read_iops_device", iops), ("write_iops_device", iops)):
        (g / f"blkio.throttle.{knob}").write_text(f"{dev} {value}\n")
