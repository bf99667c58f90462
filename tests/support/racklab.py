"""A rack's management endpoints on loopback for tests: the lab's switch tray, power
shelf and CDU emulators (nodecert.lab.racksim), each at its own 127.0.0.x address on one
port, with the lab's CA and password; faults written into a running endpoint."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nodecert.lab import bmc as labbmc
from nodecert.lab import rackparts
from support.labbmc import lab_with_ca

PARTS = [("switch_tray", "nvsw-01"), ("switch_tray", "nvsw-02"), ("power_shelf", "ps-01"),
         ("cdu", "cdu-01")]


class Rack:
    def __init__(self, tmp: Path) -> None:
        self.cfg = lab_with_ca(tmp)
        with socket.socket() as s:  # one port on every loopback address, as on a rack
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.dirs: dict[str, Path] = {}
        self.ips: dict[str, str] = {}
        for k, (kind, name) in enumerate(PARTS):
            ip = f"127.0.0.{41 + k}"
            d = rackparts.part_dir(self.cfg, name)
            rackparts.prepare(self.cfg, d, {"kind": kind, "name": name, "faults": {},
                                            "ports": 8}, ip)
            self.dirs[name], self.ips[name] = d, ip
            self.procs[name] = rackparts.start(d, ip, self.port, None)
        for name, d in self.dirs.items():
            rackparts.wait_ready(d, self.ips[name], self.port)
        self.password = (labbmc.root(self.cfg) / "password").read_text().strip()

    def spec(self, **over: Any) -> dict[str, Any]:
        parts = [{"name": n, "address": self.ips[n]} for _, n in PARTS]
        return {"name": "rack-l1", "kind": "GB200-NVL72", "gpus": 72, "imex": True,
                "switch_trays": parts[:2], "power_shelves": [parts[2]], "cdu": parts[3],
                "redfish": {"username": "nodecert", "port": self.port, "timeout_s": 5,
                            "password_file": str(labbmc.root(self.cfg) / "password"),
                            "ca_file": str(labbmc.root(self.cfg) / "ca.pem")},
                "firmware": {}, "samples": 2, "sample_s": 1, **over}

    def fault(self, name: str, **faults: Any) -> None:
        kind = {n: k for k, n in PARTS}[name]
        d = self.dirs[name]
        written = time.monotonic_ns()
        rackparts.set_component(d, {"kind": kind, "name": name, "faults": faults,
                                    "ports": 8})
        # Served once a tree rendered after the write is the one the endpoint links to
        # (its trees are named by the monotonic clock at the start of their render); it
        # renders when asked and its tree is a tick old, so ask until it has.
        deadline = time.monotonic() + 10
        while int(os.readlink(d / "mockup").rsplit(".", 1)[1]) <= written:
            assert time.monotonic() < deadline, f"{name} never rendered its new faults"
            self.ask(name)
            time.sleep(0.05)

    def ask(self, name: str) -> None:
        """One authenticated GET of the endpoint's service root."""
        ca = ssl.create_default_context(cafile=str(labbmc.root(self.cfg) / "ca.pem"))
        token = base64.b64encode(f"nodecert:{self.password}".encode()).decode()
        req = urllib.request.Request(f"https://{self.ips[name]}:{self.port}/redfish/v1/",
                                     headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(req, context=ca, timeout=5) as r:
            r.read()


def running(tmp_path: Path) -> Iterator[Rack]:
    """A test fixture's body: the endpoints up, and stopped after the test."""
    r = Rack(tmp_path)
    try:
        yield r
    finally:
        for p in r.procs.values():
            p.terminate()
            p.wait(timeout=10)


