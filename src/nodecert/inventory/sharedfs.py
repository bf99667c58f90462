"""The order's shared file system (`nodecert_shared_fs` in the inventory): where the
training data and checkpoints live, and what every node (and the cluster at once) must
get from it. Read once on the control side and sent to the node in the plan's spec.

    nodecert_shared_fs:
      mounts:                          # one or more mount points every node has
        - {path: /mnt/data, type: nfs4}     # type optional: judged against /proc/mounts
      read_mbps_min: 2000              # sequential read, per node
      aggregate_read_mbps_min: 16000   # every node reading at once, in total
      checkpoint_mbps_min: 1000        # a checkpoint written and fsync'ed, per node
      small_files_per_s_min: 5000      # 128 KiB files opened and read, per node
      gds_read_mbps_min: 5000          # GPUDirect Storage read (gdsio), where installed
      checkpoint_mb: 4096              # optional: the checkpoint's size (default: the
                                       # reference model's weights and optimizer state)
      size_mb: 4096                    # optional: the sequential file's size per node
      aggregate_read_s: 10             # optional: how long every node reads at once

nodecert writes only in a fresh directory of its own under each mount point
(nodecert-<run>-<host>) and removes it afterwards.
"""

from __future__ import annotations

import re
from typing import Any

from nodecert.core.yamldoc import keyed

KEYS = {"mounts", "read_mbps_min", "aggregate_read_mbps_min", "checkpoint_mbps_min",
        "small_files_per_s_min", "gds_read_mbps_min", "checkpoint_mb", "size_mb",
        "aggregate_read_s"}
FS_TYPES = ("nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "cephfs", "fuse.weka")
_PATH = re.compile(r"^/[A-Za-z0-9_.@/+-]*$")


def parse_shared_fs(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(spec, None) or (None, what is wrong)."""
    raw, why = keyed(raw, KEYS)
    if raw is None:
        return None, why
    mounts = raw.get("mounts")
    if not isinstance(mounts, list) or not mounts:
        return None, "mounts must be a non-empty list of {path, type}"
    out_mounts = []
    for item in mounts:
        m = {"path": item} if isinstance(item, str) else item
        if not isinstance(m, dict) or set(map(str, m)) - {"path", "type"}:
            return None, f"each mount is {{path, type}}, got {m!r}"
        path = str(m.get("path", ""))
        # written into commands and directory names on the node: a plain absolute path
        if not _PATH.match(path) or ".." in path.split("/") or path == "/":
            return None, f"mount path {path!r} is not a plain absolute path"
        fstype = m.get("type")
        if fstype is not None and fstype not in FS_TYPES:
            return None, f"mount type {fstype!r} is not one of {', '.join(FS_TYPES)}"
        out_mounts.append({"path": path.rstrip("/"), **({"type": fstype} if fstype else {})})
    out: dict[str, Any] = {"mounts": out_mounts}
    for key in sorted(KEYS - {"mounts"}):
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                return None, f"{key} must be a positive number, got {v!r}"
            out[key] = v
    return out, None


__all__ = ["FS_TYPES", "KEYS", "parse_shared_fs"]
