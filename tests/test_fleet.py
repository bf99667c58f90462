"""validate against an emulated fleet: every host at once over real SSH on loopback,
each node's fate as its kind says, progress readable (alarms, a summary, per-host logs)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodecert.lab.fleet import FleetSpec, address, node_result, recorded_results
from nodecert.runs.store import HostRun
from nodecert.validation import runner as noderunner
from nodecert.validation.progress import RunProgress, Snapshot
from nodecert.validation.run import ValidateRequest, validate
from nodecert.validation.session import SshRunner
from support.emulated import emulated_fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with emulated_fleet(tmp_path_factory.mktemp("fleet"), 43, 40, "--slow", "2",
                        "--failing", "2", "--dropped", "2", "--unreachable", "2",
                        "--time-scale", "0.02", "--seed", "7", listening=38) as work:
        yield work


@pytest.mark.integration
def test_every_host_at_once_and_each_kind_ends_as_it_should(fleet: Path,
                                                            tmp_path: Path) -> None:
    said: list[str] = []
    run = validate(ValidateRequest(fleet / "inventory.ini", runs_dir=tmp_path),
                   progress=said.append)
    kinds = json.loads((fleet / "kinds.json").read_text())
    assert len(run.hosts) == 40
    for host, kind in kinds.items():
        hr = run.hosts[host]
        assert hr.simulated, host
        failed = sorted(r.check for r in hr.results if r.verdict.name == "FAIL")
        if kind in ("ok", "slow"):
            assert (hr.status, hr.verdict.name, failed) == ("done", "WARN", []), host
            # the conformance facts are judged on the control side, for real
            conf = next(r for r in hr.results if r.check == "stack.conformance")
            assert conf.verdict.name == "PASS", conf.summary
        elif kind == "failing":
            assert (hr.status, failed) == ("done", ["health.gpu"]), host
        elif kind == "dropped":
            assert hr.status == "lost" and hr.verdict.name == "ERROR", host
            assert 0 < sum(r.verdict.name != "ERROR" for r in hr.results) < 10
        else:
            assert hr.status == "unreachable" and "cannot reach" in hr.error, host
    # 40 hosts: no line per host and check on screen, but every alarm as it happened
    # and the summary; each host's own lines are in its progress.log.
    alarms = [line for line in said if line.startswith("n0")]
    bad = {h for h, k in kinds.items() if k in ("failing", "dropped", "unreachable")}
    assert {line.split()[0] for line in alarms} == bad
    assert all(any(w in line for w in (" FAIL ", "ERROR:", "UNREACHABLE:")) for line in alarms)
    assert any(line.startswith("hosts 40/40 finished") for line in said), said[-3:]
    for host in kinds:
        log = (run.run_dir / host / "progress.log").read_text()
        assert host not in log.split("\n", 1)[0][:9]  # lines hold the text, timestamped
        assert ("UNREACHABLE" in log) == (kinds[host] == "unreachable"), host


@pytest.mark.integration
def test_forks_bounds_the_hosts_at_once_and_lines_mode_prints_all(fleet: Path,
                                                                   tmp_path: Path) -> None:
    said: list[str] = []
    snaps: list[Snapshot] = []
    run = validate(ValidateRequest(fleet / "inventory.ini", runs_dir=tmp_path, forks=4,
                   limit=tuple(f"n{i:05d}" for i in range(12)), detail=True), progress=said.append,
                   status=snaps.append)
    assert len(run.hosts) == 12
    assert max(s.states.get("running", 0) + s.states.get("connecting", 0)
               for s in snaps) <= 4
    assert snaps[-1].states.get("finished") == 12
    # detail: every host's check lines reach the operator
    assert sum(" storage.fio " in line for line in said) >= 6


def test_the_emulator_answers_what_it_recorded() -> None:
    rec = recorded_results()
    assert {"hardware.inventory", "health.gpu", "stack.conformance"} <= set(rec)
    ok = node_result("health.gpu", "ok", rec, 0.5)
    assert ok["simulated"] is True and ok["verdict"] == rec["health.gpu"]["verdict"]
    bad = node_result("health.gpu", "failing", rec, 0.5)
    assert bad["verdict"] == "FAIL" and bad["simulated"] is True
    assert node_result("storage.fio", "ok", rec, 1)["verdict"] == "PASS"
    assert address(0) == "127.42.0.1" and address(250) == "127.42.1.1"
    with pytest.raises(ValueError, match="at most"):
        address(250 * 256)
    with pytest.raises(ValueError, match="do not fit"):
        FleetSpec(3, slow=2, failing=2).kinds()
    kinds = FleetSpec(100, slow=3, dropped=1, seed=5).kinds()
    assert kinds == FleetSpec(100, slow=3, dropped=1, seed=5).kinds()
    assert kinds.count("slow") == 3 and kinds.count("ok") == 96


def test_summary_lines_and_live_feed(tmp_path: Path) -> None:
    """RunProgress alone: alarms and the summary line never deadlock, never repeat
    within the interval, and a status feed replaces the printed summary."""
    from nodecert.runs.store import HostRun

    class _Host:
        def __init__(self, name: str) -> None:
            self.host, self.status, self.results = name, "pending", []
            self.out_dir, self.finished = tmp_path / name, 0.0
    runs = {f"h{i}": _Host(f"h{i}") for i in range(3)}
    said: list[str] = []
    p = RunProgress(runs, said.append, detail=False)  # type: ignore[arg-type]
    p.emit(runs["h1"], "[1/9] health.gpu PASS", alarm=False)  # type: ignore[arg-type]
    p.emit(runs["h2"], "UNREACHABLE: cannot reach", alarm=True)  # type: ignore[arg-type]
    assert said == ["h2             UNREACHABLE: cannot reach"]
    p.tick()
    p.tick()  # within SUMMARY_EVERY_S: once
    assert len(said) == 2 and said[1].startswith("hosts 0/3 finished")
    assert "3 waiting" in said[1]
    p.tick(final=True)
    assert len(said) == 3
    assert (tmp_path / "h1" / "progress.log").read_text().endswith("health.gpu PASS\n")
    fed: list[Snapshot] = []
    q = RunProgress(runs, said.append, detail=False, status=fed.append)  # type: ignore[arg-type]
    q.tick()
    assert len(fed) == 1 and len(said) == 3 and fed[0].total == 3
    assert HostRun  # the real type the fakes stand in for


def test_the_live_view_shows_node_text_literally() -> None:
    """A host's text may carry rich markup or terminal escapes: shown, never obeyed."""
    import io

    from rich.console import Console

    from nodecert.cli.liveview import LiveView

    view = LiveView()
    buf = io.StringIO()
    view.console = Console(file=buf, force_terminal=True, width=200, highlight=False)
    view.say("n00001         UNREACHABLE: [bold red]pwned[/] \x1b]0;title\x07 \x1b[2J")
    out = buf.getvalue()
    assert "[bold red]pwned[/]" in out
    assert "\x1b]0;" not in out and "\x1b[2J" not in out
    snap = Snapshot(3, {"finished": 1}, {"FAIL": 1}, {"FAIL": 1}, 2.0,
                    ("n00002 [link=http://x]click[/link]",))
    view.status(snap)  # Text objects: no markup parsing
    rendered = Console(file=io.StringIO(), width=200)
    with rendered.capture() as cap:
        rendered.print(view.live.renderable)
    assert "[link=http://x]click[/link]" in cap.get()


@pytest.mark.integration
def test_a_stopped_run_keeps_what_finished_and_starts_no_more_hosts(fleet: Path,
                                                                    tmp_path: Path) -> None:
    stop = threading.Event()
    said: list[str] = []

    def progress(line: str) -> None:
        said.append(line)
        if "[3/" in line:  # the first host is three checks in: the operator stops
            stop.set()
    hosts = tuple(f"n{i:05d}" for i in range(6))
    run = validate(ValidateRequest(fleet / "inventory.ini", runs_dir=tmp_path, forks=2, limit=hosts,
                   detail=True), progress=progress, stop=stop)
    assert run.interrupted
    statuses = sorted(hr.status for hr in run.hosts.values())
    assert statuses.count("interrupted") == 6, statuses  # two stopped, four never started
    never = [hr for hr in run.hosts.values() if "before the host started" in hr.error]
    assert len(never) >= 3 and all(not hr.started for hr in never)
    stopped = [hr for hr in run.hosts.values() if hr.started]
    assert any(r.verdict.name != "ERROR" for hr in stopped for r in hr.results)
    assert all(hr.verdict.name == "ERROR" for hr in run.hosts.values())


@pytest.mark.integration
def test_connections_prefer_aes_gcm_and_check_the_host_key(fleet: Path) -> None:
    """GCM's tag is checked in C (the CTR modes' HMAC byte by byte in Python); the
    emulated node's key must still be the one known_hosts lists."""
    import paramiko

    from nodecert.transport.ssh import Endpoint, connect
    inv = (fleet / "inventory.ini").read_text()
    port = int(inv.split("ansible_port=")[1].split()[0])
    ep = Endpoint("n00000", "127.43.0.1", port, "root", str(fleet / "client_key"),
                  (str(fleet / "known_hosts"),), "python3")
    client = connect(ep)
    try:
        t = client.get_transport()
        assert t is not None and t.local_cipher == "aes128-gcm@openssh.com"
    finally:
        client.close()
    other = fleet / "other_known_hosts"
    other.write_text((fleet / "known_hosts").read_text().replace("[127.43.0.1]", "[x]", 1)
                     .replace("[127.43.0.2]", "[127.43.0.1]", 1))
    with pytest.raises(paramiko.BadHostKeyException):
        connect(Endpoint("n00000", "127.43.0.1", port, "root", str(fleet / "client_key"),
                         (str(other),), "python3"))


@pytest.mark.integration
def test_a_key_marked_revoked_is_refused_though_listed(fleet: Path, tmp_path: Path) -> None:
    """OpenSSH's @revoked marker: the node's real key, listed as known, is still
    refused once a @revoked line names it for that host (or every host)."""
    import paramiko

    from nodecert.transport import knownhosts
    from nodecert.transport.ssh import Endpoint, connect
    from nodecert.transport.sshfail import RevokedHostKey, describe_error
    inv = (fleet / "inventory.ini").read_text()
    port = int(inv.split("ansible_port=")[1].split()[0])
    listed = (fleet / "known_hosts").read_text()
    line = next(x for x in listed.splitlines() if x.startswith("[127.43.0.1]:"))
    _, kind, b64 = line.split()[:3]
    for names in ("*", f"[127.43.0.1]:{port}", "[127.43.0.?]:*"):
        kh = tmp_path / "kh"
        kh.write_text(listed + f"@revoked {names} {kind} {b64}\n")
        knownhosts.forget()
        ep = Endpoint("n00000", "127.43.0.1", port, "root", str(fleet / "client_key"),
                      (str(kh),), "python3")
        with pytest.raises(RevokedHostKey) as caught:
            connect(ep)
        assert "@revoked" in describe_error(caught.value, ep)
    # A revoked line for other hosts (or negated for this one) leaves it accepted.
    for names in ("[127.43.0.2]:*", f"*,![127.43.0.1]:{port}"):
        kh.write_text(listed + f"@revoked {names} {kind} {b64}\n")
        knownhosts.forget()
        connect(Endpoint("n00000", "127.43.0.1", port, "root", str(fleet / "client_key"),
                         (str(kh),), "python3")).close()
    assert isinstance(RevokedHostKey("x"), paramiko.SSHException)


@pytest.mark.integration
def test_a_starved_controller_calls_no_healthy_node_silent(
        fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-run, one thread of the controller holds the interpreter (no thread switch)
    for longer than a node may stay silent: every other thread, the SSH transports
    too, waits. The nodes kept sending meanwhile; that the controller read them late is
    its own lateness, not their silence: every healthy node ends done, and the run says
    what the controller lost."""
    silent_s, hold_s = 3.0, 8.0
    kinds = json.loads((fleet / "kinds.json").read_text())
    hosts = tuple(h for h, k in kinds.items() if k == "ok")[:4]
    on_event = SshRunner._on_event

    def short(self: SshRunner, hr: HostRun, ev: dict[str, Any]) -> float | None:
        quiet = on_event(self, hr, ev)
        return None if quiet is None else silent_s  # every silence limit: 3 s
    monkeypatch.setattr(SshRunner, "_on_event", short)
    monkeypatch.setattr(noderunner, "EVENT_SILENCE_S", silent_s)
    held = threading.Event()

    def hold() -> None:
        switch = sys.getswitchinterval()
        sys.setswitchinterval(hold_s + 5)
        try:
            end = time.monotonic() + hold_s
            while time.monotonic() < end:
                sum(range(1000))
        finally:
            sys.setswitchinterval(switch)
            held.set()
    said: list[str] = []

    def progress(line: str) -> None:
        said.append(line)
        if "[2/" in line and not any("[2/" in s for s in said[:-1]):
            threading.Thread(target=hold, daemon=True).start()
    run = validate(ValidateRequest(fleet / "inventory.ini", runs_dir=tmp_path, limit=hosts,
                                   detail=True), progress=progress)
    assert held.is_set()
    assert {h: hr.status for h, hr in run.hosts.items()} == dict.fromkeys(hosts, "done"), \
        [hr.error for hr in run.hosts.values()]
    assert any("lost" in line and "to its own load" in line for line in said), said[-3:]
