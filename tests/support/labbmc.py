"""A lab BMC emulator (nodecert.lab.bmcsim) on loopback for tests: its own CA and
certificate, the canary password, a host directory with an H200 hardware description."""

from __future__ import annotations

import hashlib
import json
import selectors
import ssl
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nodecert.inventory.bmc import BmcSpec
from nodecert.lab import bmc as labbmc
from nodecert.lab.bmcsim import TICK_S
from nodecert.lab.config import LabConfig
from nodecert.lab.hardware import Fault, hardware_description
from nodecert.transport.become import Secret
from support.env import require_tool

PASSWORD = "canary-" + "5b1e9c0d"


def lab_with_ca(tmp: Path) -> LabConfig:
    """A lab state under tmp holding only the lab's CA: what the BMC and rack endpoint
    emulators need to serve TLS as the lab's own do."""
    require_tool("openssl")
    cfg = LabConfig(root=tmp / "lab", subnet=LabConfig().subnet)
    cfg.state.mkdir(parents=True)
    labbmc.ensure_ca(cfg)
    return cfg


class Bmc:
    def __init__(self, tmp: Path) -> None:
        self.cfg = lab_with_ca(tmp)
        self.dir = tmp / "bmc"
        self.dir.mkdir(mode=0o700)
        labbmc.host_cert(self.cfg, self.dir, "127.0.0.1")
        (self.dir / "password").write_text(PASSWORD + "\n")
        (self.dir / "bmc.json").write_text(json.dumps({
            "username": "nodecert", "firmware": "1.18", "fans": 8, "sel": []}))
        self.host = tmp / "host"
        (self.host / "run").mkdir(parents=True)
        self.set_faults([])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nodecert.lab.bmcsim", "--dir", str(self.dir),
             "--host-dir", str(self.host), "--address", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=30):
            self.proc.kill()
            pytest.fail(f"the BMC emulator did not start: {self.proc.stderr.read()}")
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"], line
        self.port = int(line[1])

    def set_faults(self, faults: list[Fault]) -> None:
        hw = hardware_description(lab_seed="t", host="h1", profile_name="h200-sxm-8",
                                  mac="02:6e:63:00:00:01", faults=faults, boot_time=0.0)
        etc = self.host / "root/etc/nodecert-lab"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hardware.json").write_text(json.dumps(hw))
        if hasattr(self, "proc"):
            # Wait until the emulator itself has rendered the new description (its renders
            # read and write under one lock, so none shows the old one after that).
            want = (etc / "hardware.json").stat().st_mtime_ns
            deadline = time.monotonic() + 10 * TICK_S
            while json.loads((self.dir / "rendered.json").read_text())[
                    "hardware_mtime_ns"] < want:
                assert time.monotonic() < deadline, "the BMC emulator renders nothing"
                time.sleep(0.05)

    def spec(self, **kw: Any) -> BmcSpec:
        base = BmcSpec("h1", "127.0.0.1", "redfish", self.port, "nodecert", Secret(PASSWORD),
                       ca_file=str(self.cfg.state / "bmc" / "ca.pem"), sample_s=1,
                       timeout_s=5)
        return replace(base, **kw)

    def cert_sha256(self) -> str:
        pem = (self.dir / "bmc.pem").read_text()
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()


