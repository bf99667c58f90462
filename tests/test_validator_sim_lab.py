"""Raw block devices in the storage check, on loop devices (root): a device is measured
only when it is listed, proven empty and held by nobody else; everything refused is
left exactly as it was."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodecert_node.contract import Verdict
from support.env import require_root, require_tool
from support.simnode import SimNode

pytestmark = pytest.mark.lab  # root: loop devices

LOW_FLOORS = {"storage.seq_read_mbps_min": 1, "storage.seq_write_mbps_min": 1,
              "storage.rand_read_iops_min": 1, "storage.checkpoint_mbps_min": 1}


def _loop(image: Path) -> str:
    out = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True,
                         text=True, timeout=30, check=True)
    return out.stdout.strip()


def test_raw_devices_need_permission_and_proof_of_emptiness(tmp_path: Path) -> None:
    require_root()
    require_tool("losetup")
    node = SimNode(tmp_path)
    image = tmp_path / "disk.img"
    image.write_bytes(b"\0" * (64 << 20))
    dev = _loop(image)
    try:
        def storage(allowed: list[str]) -> Any:
            return node.check("storage.fio", scratch=dev, cli_thresholds=LOW_FLOORS,
                              validation={"allow_raw_devices": allowed})
        refused = storage([])
        assert refused.verdict is Verdict.ERROR and refused.fault_code == "NC-STORAGE-REFUSED"
        assert "not listed in allow_raw_devices" in refused.summary
        # An allowed device carrying an ext4 superblock is refused, and left intact.
        with open(dev, "r+b") as f:
            f.seek(1080)
            f.write(b"\x53\xef")
        before = image.read_bytes()[:4096]
        r = storage([dev])
        assert r.verdict is Verdict.ERROR and "carries ext2/3/4 filesystem" in r.summary
        assert image.read_bytes()[:4096] == before
        # Data without any known signature is still data.
        with open(dev, "r+b") as f:
            f.seek(1080)
            f.write(b"\0\0")
            f.seek(5000)
            f.write(b"precious")
        r = storage([dev])
        assert r.verdict is Verdict.ERROR and "holds data" in r.summary
        assert b"precious" in image.read_bytes()[:8192]
        # Allowed and proven empty: measured.
        with open(dev, "r+b") as f:
            f.seek(5000)
            f.write(b"\0" * 8)
        # ... unless someone else holds it exclusively (as a mount would): refused
        other = os.open(dev, os.O_RDONLY | os.O_EXCL)
        try:
            busy = storage([dev])
        finally:
            os.close(other)
        assert busy.verdict is Verdict.ERROR and "is in use" in busy.summary
        node_plan = node.plan(["storage.fio"], scratch=dev, cli_thresholds=LOW_FLOORS,
                              validation={"allow_raw_devices": [dev]})
        node_plan["options"]["storage"]["size_mb"] = 32
        ok = node.check("storage.fio", plan=node_plan)
        assert ok.verdict is Verdict.PASS, ok.summary
        assert ok.value[dev]["seq_read_mbps"] > 0
    finally:
        subprocess.run(["losetup", "-d", dev], timeout=30, check=False)
