"""A node's recorded scheduled run as `revalidate --collect` fetches it, and an SSH client
that answers the fetch command with it."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

from nodecert.inventory.reader import load_inventory
from nodecert.profiles import thresholds
from nodecert.runs.store import HostRun
from nodecert.transport.ssh import Endpoint
from nodecert.validation.plan import build_plan
from nodecert_node.contract import Result, Verdict
from support.env import REPO

CHECKS = ["health.gpu", "health.xid"]


def record(**over: Any) -> dict[str, Any]:
    rec = {"schema": "nodecert.local-run/v1", "suite": "quick", "reason": "after-update",
           "host": "h1", "started": 1795995981.0, "finished": 1795996100.0, "simulated": True,
           "verdict": "PASS", "results": [Result(c, Verdict.PASS, "ok").as_dict()
                                          for c in CHECKS]}
    rec.update(over)
    return rec


def raw(rec: dict[str, Any] | str, path: str = "/var/lib/nodecert/history/x.json") -> bytes:
    body = rec if isinstance(rec, str) else json.dumps(rec)
    return f"{path}\n{body}".encode()


class Exited:
    """A paramiko channel stand-in whose command has ended (its status_event is set) and
    exited 0; what nodecert calls on a channel that needs no answer does nothing.
    Subclasses say what the command printed (`recv`)."""

    @property
    def status_event(self) -> threading.Event:
        done = threading.Event()
        done.set()
        return done

    def exec_command(self, cmd: str) -> None:
        pass

    def settimeout(self, timeout: float) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        pass

    def recv_exit_status(self) -> int:
        return 0

    def recv_stderr_ready(self) -> bool:
        return False


class Client(Exited):
    """An SSH client whose one session answers the fetch command with `data`."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)
        self.commands: list[str] = []

    def get_transport(self) -> Client:
        return self

    def open_session(self, timeout: float | None = None) -> Client:
        return self

    def exec_command(self, cmd: str) -> None:
        self.commands.append(cmd)

    def recv(self, n: int) -> bytes:
        return self.data.read(n)


def host(tmp_path: Path) -> HostRun:
    spec = next(iter(load_inventory(REPO / "inventory" / "sample" / "lab.ini").values()))
    plan = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                      scratch=None, checks=tuple(CHECKS))
    return HostRun(spec.name, spec, plan, None, tmp_path)


def ep(hr: HostRun) -> Endpoint:
    return Endpoint.from_hostvars(hr.host, {})



def runner(hr: HostRun, endpoint: Endpoint | None = None) -> Any:
    """The SSH runner `revalidate --collect` reads a host's history through, for hr alone
    (at `endpoint`, by default the host's own)."""
    from nodecert.runs.store import HostLink
    from nodecert.validation.session import SshRunner
    return SshRunner({hr.host: hr}, {hr.host: HostLink(endpoint or ep(hr))}, lambda _: None,
                     threading.Event(), bundle=(b"", ""))
