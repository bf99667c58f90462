"""Back-pressure from the controller's own load: a failed handshake is retried only
when the controller itself was late, never for a refused key or login; the limits on a
node's silence count the node's clock, which leaves out the controller's own lateness."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest

from nodecert.inventory.reader import load_inventory
from nodecert.profiles import thresholds
from nodecert.runs.store import HostLink, HostRun
from nodecert.transport.events import LineReader
from nodecert.transport.loadgate import OVERLOAD_LAG_S, TICK_S, LoadGate
from nodecert.transport.silence import UNREAD_GRACE, NodeLimit
from nodecert.transport.ssh import Endpoint
from nodecert.transport.sshfail import JumpHostFailed, LoginNotAnswered
from nodecert.validation import session as nodesession
from nodecert.validation.plan import build_plan
from nodecert.validation.session import SshRunner
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


def _sessions(hr: HostRun, gate: LoadGate) -> tuple[SshRunner, list[str]]:
    said: list[str] = []
    links = {hr.host: HostLink(Endpoint.from_hostvars(hr.host, {}))}
    return SshRunner({hr.host: hr}, links, said.append, threading.Event(), (b"", "0" * 64),
                        gate=gate), said


def _through_jump(cause: Exception) -> JumpHostFailed:
    exc = JumpHostFailed(f"through the jump host b: {cause}")
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(("saturated", "exc", "attempts"), [
    (True, TimeoutError("timed out"), 3),              # the controller's fault: again
    (False, TimeoutError("timed out"), 1),             # the host's: reported at once
    (True, paramiko.AuthenticationException("no"), 1),  # a refused login: never again
    (True, paramiko.SSHException("Server 'x' not found in known_hosts"), 1),
    (False, LoginNotAnswered("the login as root on x was not finished"), 3),  # a busy host
    (True, _through_jump(paramiko.AuthenticationException("no")), 1),  # the bastion refused
    (False, _through_jump(LoginNotAnswered("not finished")), 3),  # a busy bastion
])
def test_a_handshake_is_retried_for_the_controllers_load_or_a_busy_login(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saturated: bool,
        exc: Exception, attempts: int) -> None:
    hr = _host(tmp_path)
    calls: list[str] = []

    def failing(ep: Endpoint, **_: object) -> paramiko.SSHClient:
        calls.append(ep.host)
        raise exc
    monkeypatch.setattr(nodesession, "connect", failing)
    ns, said = _sessions(hr, FakeGate(saturated))
    ns.run_host(hr)
    assert len(calls) == attempts
    assert hr.status == "unreachable" and hr.verdict.name == "ERROR"
    assert any("UNREACHABLE" in line for line in said)
    assert sum("trying again" in line for line in said) == attempts - 1


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


# --- the node's clock: the controller's lateness is not a node's silence --------------------

class Now:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_node_clock_leaves_out_what_the_controller_lost() -> None:
    now = Now()
    gate = LoadGate(now=now)
    assert gate.clock() == 1000.0  # not watching: plain time
    gate._last_wake = now.t  # as start() does, without the thread
    seen = [gate.clock()]
    # On time: the clock runs with the wall.
    for _ in range(4):
        slept = now.t
        now.t += TICK_S
        gate.record_wake(slept, now.t)
        seen.append(gate.clock())
    assert seen[-1] - seen[0] == pytest.approx(4 * TICK_S)
    # Starved: the watcher's wake-up is 30 s overdue. While it is, the clock stands
    # still; once it wakes, it has advanced one tick for the 30 s of wall time.
    slept = now.t
    for _ in range(30):
        now.t += 1.0
        seen.append(gate.clock())
    gate.record_wake(slept, now.t)
    seen.append(gate.clock())
    assert seen == sorted(seen)  # never runs backwards
    assert seen[-1] - seen[4] == pytest.approx(TICK_S)
    assert gate.late_s == pytest.approx(30 - TICK_S) and gate.worst_lag_s == gate.late_s
    mark = (1000.0, seen[0])  # what gate.mark() gave before the first tick
    assert gate.late_since(mark) == pytest.approx(30 - TICK_S)
    gate.stop()
    assert gate.clock() == now.t  # nobody measures any more


class Chan:
    """A channel with `ready` bytes the reader has not taken yet."""

    def __init__(self, ready: bytes = b"", socket_unread: bool = False) -> None:
        self.ready = ready
        self.socket_unread = socket_unread
        self.timeouts: list[float] = []

    def recv_ready(self) -> bool:
        return bool(self.ready)

    def recv_stderr_ready(self) -> bool:
        return False

    def get_transport(self) -> Any:
        unread = self.socket_unread

        class Sock(paramiko.Channel):
            def __init__(self) -> None:
                pass

            def recv_ready(self) -> bool:
                return unread

        class T:
            sock = Sock()
        return T()

    def settimeout(self, t: float) -> None:
        self.timeouts.append(t)

    def recv(self, n: int) -> bytes:
        chunk, self.ready = self.ready[:n], self.ready[n:]
        if not chunk:
            raise TimeoutError
        return chunk


def test_a_late_reader_reads_what_the_node_sent_before_calling_it_silent() -> None:
    """The limit ran out while the node's line sat unread (the reader was starved): the
    line is read, not the host lost."""
    now = Now()
    chan = Chan(b'{"event": "start", "check": "health.gpu"}\n')
    limit = NodeLimit(60, now)
    now.t += 61  # the reader comes back too late
    line = LineReader(chan).line((limit,), threading.Event())  # type: ignore[arg-type]
    assert line == b'{"event": "start", "check": "health.gpu"}'


@pytest.mark.parametrize(("chan", "grace"), [
    (Chan(), 0),                            # nothing sent: silent at the limit
    (Chan(socket_unread=True), UNREAD_GRACE),  # bytes not yet taken off the connection
])
def test_a_silent_node_is_silent_and_unread_bytes_earn_a_bounded_grace(
        chan: Chan, grace: int) -> None:
    now = Now()
    limit = NodeLimit(60, now)
    now.t += 59
    assert not limit.expired(chan)  # type: ignore[arg-type]
    now.t += 1
    reader = LineReader(chan)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        reader.line((limit,), threading.Event())
    # each grace was one more read of up to a second; then the node is silent
    assert len(chan.timeouts) == grace and set(chan.timeouts) <= {1.0}
    limit.reset()
    assert not limit.expired(chan)  # type: ignore[arg-type]  # it spoke: a full limit again
