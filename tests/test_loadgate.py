"""Back-pressure from the controller's own load: a failed handshake is retried once
only when the controller itself was saturated, never for a refused key or login."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest

from nodecert.inventory.reader import load_inventory
from nodecert.profiles import thresholds
from nodecert.runs.store import HostLink, HostRun
from nodecert.transport.loadgate import OVERLOAD_LAG_S, LoadGate
from nodecert.transport.ssh import Endpoint
from nodecert.validation import session as nodesession
from nodecert.validation.plan import build_plan
from nodecert.validation.session import NodeSessions
from support.env import REPO


class FakeGate(LoadGate):
    def __init__(self, saturated: bool) -> None:
        super().__init__()
        self.saturated = saturated

    def overloaded_since(self, t0: float) -> bool:
        return self.saturated


def _host(tmp_path: Path) -> HostRun:
    spec = next(iter(load_inventory(REPO / "inventory" / "sample" / "lab.ini").values()))
    plan = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                      scratch=None, checks=("health.gpu",))
    return HostRun(spec.name, spec, plan, None, tmp_path / spec.name)


def _sessions(hr: HostRun, gate: LoadGate) -> tuple[NodeSessions, list[str]]:
    said: list[str] = []
    links = {hr.host: HostLink(Endpoint.from_hostvars(hr.host, {}))}
    return NodeSessions({hr.host: hr}, links, said.append, threading.Event(), (b"", "0" * 64),
                        gate=gate), said


@pytest.mark.parametrize(("saturated", "exc", "attempts"), [
    (True, TimeoutError("timed out"), 2),              # the controller's fault: once more
    (False, TimeoutError("timed out"), 1),             # the host's: reported at once
    (True, paramiko.AuthenticationException("no"), 1),  # a refused login: never again
    (True, paramiko.SSHException("Server 'x' not found in known_hosts"), 1),
])
def test_a_handshake_is_retried_only_for_the_controllers_own_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saturated: bool,
        exc: Exception, attempts: int) -> None:
    hr = _host(tmp_path)
    calls: list[str] = []

    def failing(ep: Endpoint) -> paramiko.SSHClient:
        calls.append(ep.host)
        raise exc
    monkeypatch.setattr(nodesession, "connect", failing)
    ns, said = _sessions(hr, FakeGate(saturated))
    ns.run_host(hr)
    assert len(calls) == attempts
    assert hr.status == "unreachable" and hr.verdict.name == "ERROR"
    assert any("UNREACHABLE" in line for line in said)
    assert any("trying once more" in line for line in said) == (attempts == 2)


def test_the_gate_measures_its_own_lateness() -> None:
    gate = LoadGate().start()
    try:
        t0 = time.monotonic()
        stop = threading.Event()
        gate.admit(stop)  # an idle controller is never held back
        assert time.monotonic() - t0 < 1.0
        assert not gate.overloaded_since(t0)
        # Hold the interpreter (no forced switch for 10 s) longer than the threshold:
        # the monitor wakes that much too late.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(10)
        try:
            end = time.monotonic() + OVERLOAD_LAG_S + 0.8
            while time.monotonic() < end:
                sum(range(1000))
        finally:
            sys.setswitchinterval(switch)
        assert gate.overload_seen.wait(5)  # the monitor's next wake-up records it
        assert gate.overloaded_since(t0)
    finally:
        gate.stop()
