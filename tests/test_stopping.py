"""Ctrl-C ends connections and the controller's own commands at once, and each has a
deadline in all: a node that accepts TCP and never speaks, or answers a byte at a time
for ever, no longer holds an interrupted run for its time limits."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecert.transport.ssh import Endpoint, connect
from nodecert.transport.sshfail import Stopped, describe_error
from nodecert.validation.nodecmd import exec_command
from nodecert.validation.run import ValidateRequest, validate
from support.nodeclient import Exited


@pytest.fixture
def tarpit() -> Iterator[Port]:
    """A loopback port that accepts connections and never says a word (no SSH banner)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()
    port = Port(srv.getsockname()[1])

    def accept() -> None:
        srv.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(srv.accept()[0])
                port.accepted.set()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield port
    done.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def _ep(port: int, tmp_path: Path) -> Endpoint:
    known = tmp_path / "known_hosts"
    known.touch()
    return Endpoint("h1", "127.0.0.1", int(port), "root", None, (str(known),), "python3")


class Port(int):
    """The tarpit's port, and whether a client has connected to it yet."""

    accepted: threading.Event

    def __new__(cls, value: int) -> Port:
        port = super().__new__(cls, value)
        port.accepted = threading.Event()
        return port


def _stop_once(started: threading.Event, seconds: float
               ) -> tuple[threading.Event, list[float]]:
    """Set `seconds` after `started` is (a busy machine may take a while to get there);
    and when it was set."""
    stop, at = threading.Event(), []

    def wait() -> None:
        if started.wait(120):
            time.sleep(seconds)
        at.append(time.monotonic())
        stop.set()
    threading.Thread(target=wait, daemon=True).start()
    return stop, at


def _stop_after(seconds: float) -> threading.Event:
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    return stop


def test_ctrl_c_ends_a_connection_waiting_for_the_banner(tarpit: int, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(Stopped) as caught:
        connect(_ep(tarpit, tmp_path), stop=_stop_after(0.5))  # the banner's limit: 15 s
    assert time.monotonic() - t0 < 3
    assert describe_error(caught.value, _ep(tarpit, tmp_path)) == (
        f"interrupted by the operator (Ctrl-C) while reaching 127.0.0.1:{tarpit}")


def test_a_connection_has_a_deadline_in_all(tarpit: int, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="longer than the connection's deadline"):
        connect(_ep(tarpit, tmp_path), deadline_s=1.0)
    assert time.monotonic() - t0 < 4


def test_a_stop_already_set_connects_to_nothing(tarpit: int, tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    t0 = time.monotonic()
    with pytest.raises(Stopped, match=r"stopped while connecting to 127\.0\.0\.1"):
        connect(_ep(tarpit, tmp_path), stop=stop)
    assert time.monotonic() - t0 < 1.5


class Trickle(Exited):
    """A channel whose command answers one byte every `every` seconds and never ends
    (never silent for long, never done); or, with every=None, never answers at all."""

    def __init__(self, every: float | None) -> None:
        self.every, self.timeout, self.sent = every, 1.0, 0

    @property
    def status_event(self) -> threading.Event:
        return threading.Event()  # never set: no exit status

    def get_transport(self) -> Trickle:
        return self

    def open_session(self, timeout: float | None = None) -> Trickle:
        return self

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout

    def recv(self, n: int) -> bytes:
        if self.every is None or self.every > self.timeout:
            time.sleep(self.timeout)
            raise TimeoutError
        time.sleep(self.every)
        self.sent += 1
        return b"."

    def recv_ready(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_ctrl_c_ends_a_command_the_node_never_answers(tmp_path: Path) -> None:
    ep = _ep(22, tmp_path)
    t0 = time.monotonic()
    with pytest.raises(Stopped, match="stopped while the node ran 'install'"):
        exec_command(Trickle(None), ep, "install x", b"bundle", 60,  # silence: 60 s
                     stop=_stop_after(0.4))
    assert time.monotonic() - t0 < 2


def test_a_command_trickling_for_ever_ends_at_its_total(tmp_path: Path) -> None:
    chan = Trickle(0.05)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="had not finished 'install' after 1 s"):
        exec_command(chan, _ep(22, tmp_path), "install x", None, 60, total_s=1.0)
    assert time.monotonic() - t0 < 3 and chan.sent >= 5  # it did speak, all along


def test_ctrl_c_during_the_handshake_ends_the_run_at_once(tarpit: Port,
                                                          tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.touch()
    inv = tmp_path / "lab.ini"
    inv.write_text(
        "[gpu_nodes]\n"
        f"h1 ansible_host=127.0.0.1 ansible_port={tarpit} ansible_user=root "
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known}'\n"
        "[gpu_nodes:vars]\nnodecert_gpu_model=H200-SXM\nnodecert_gpu_count=8\n"
        "nodecert_cpu_cores=112\nnodecert_ram_gb=2048\nnodecert_nvme_count=8\n")
    said: list[str] = []
    stop, at = _stop_once(tarpit.accepted, 1.0)  # Ctrl-C one second into the handshake
    run = validate(ValidateRequest(inv, runs_dir=tmp_path / "runs", detail=True),
                   progress=said.append, stop=stop)
    took = time.monotonic() - at[0]
    hr = run.hosts["h1"]
    assert took < 5, said  # the handshake's limit alone is 15 s
    assert run.interrupted and hr.status == "interrupted", (hr.status, hr.error)
    assert hr.error.startswith("interrupted by the operator (Ctrl-C) while reaching")
    assert {r.fault_code for r in hr.results} == {"NC-NOT-RUN-INTERRUPTED"}
    assert hr.verdict.name == "ERROR"  # nothing measured is never a pass
