"""The runner seam: `nodecert validate` starts each host's node run through a registered
Runner (SSH today). A throwaway runner written here (the node's run as a local process
on the simulator) plugs in without touching any other module: its hosts are planned,
judged, saved and summed up exactly as an SSH run's."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from nodecert.core.errors import NodecertError
from nodecert.lab.hardware import spec_vars
from nodecert.runs.store import HostRun
from nodecert.transport.events import decode_event
from nodecert.validation.run import ValidateRequest, validate
from nodecert.validation.runner import RUNNERS, Fetched, Runner, register
from nodecert_node.contract import Result, Verdict
from support.simnode import VALIDATORS, SimNode

CHECKS = ("hardware.inventory", "health.gpu", "health.xid")


class LocalSim(Runner):
    """The node's run as a process here, on a simulated node: no SSH at all."""

    name = "local-sim"
    node: ClassVar[SimNode]
    history: ClassVar[Path]
    fetched: ClassVar[list[str]] = []

    def fetch(self, hr: HostRun, command: str, *, limit: int, timeout: float,
              recorded_stack: bool = False) -> Fetched:
        """The node's history read here: the command as a local shell would run it, its
        history directory being the simulated node's."""
        self.fetched.append(command)
        p = subprocess.run(["sh", "-c", command.replace("/var/lib/nodecert/history",
                                                        str(self.history))],
                           capture_output=True, timeout=timeout, check=False)
        return Fetched(p.stdout[:limit])

    def execute(self, hr: HostRun) -> None:
        proc = subprocess.Popen([sys.executable, "-m", "nodecert_node", "run"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=self.node.env(),
                                cwd=VALIDATORS)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            # the node reads its plan, then watches its input: EOF means "stop"
            proc.stdin.write((json.dumps(hr.plan.as_dict()) + "\n").encode())
            proc.stdin.flush()
            for raw in proc.stdout:
                self._on_event(hr, decode_event(raw.rstrip(b"\n"), hr.checks))
                if hr.status != "running":
                    break
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
        self._close(hr)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[type[LocalSim]]:
    LocalSim.node = SimNode(tmp_path / "node")
    register(LocalSim)
    yield LocalSim
    RUNNERS.pop(LocalSim.name, None)


def _inventory(tmp: Path) -> Path:
    with socket.socket() as s:  # a port nothing listens on: SSH would find no one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sv = spec_vars("h200-sxm-8")
    inv = tmp / "inv"
    (inv / "host_vars").mkdir(parents=True)
    (inv / "hosts.ini").write_text(f"[gpu_nodes]\nh1 ansible_host=127.0.0.1 "
                                   f"ansible_port={port} ansible_user=root\n")
    (inv / "host_vars" / "h1.yml").write_text(json.dumps(
        {k: v for k, v in sv.items() if k != "nodecert_fabric"}))
    return inv


def test_a_throwaway_runner_plugs_in_without_touching_another_module(
        local: type[LocalSim], tmp_path: Path) -> None:
    said: list[str] = []
    run = validate(ValidateRequest(_inventory(tmp_path), checks=CHECKS, runner=local.name,
                                   runs_dir=tmp_path / "runs"), progress=said.append)
    hr = run.hosts["h1"]
    assert hr.status == "done", (hr.error, said)
    assert [r.check for r in hr.results] == list(CHECKS)
    assert {r.verdict for r in hr.results} == {Verdict.PASS}, [r.summary for r in hr.results]
    assert hr.simulated  # the node said so in its hello
    saved = json.loads((run.run_dir / "h1" / "results.json").read_text())
    assert [r["check"] for r in saved["results"]] == list(CHECKS)
    assert any("health.gpu PASS (SIMULATED)" in line for line in said)


def test_the_same_runner_collects_a_nodes_own_run(local: type[LocalSim],
                                                  tmp_path: Path) -> None:
    """`revalidate --collect` reads the node's history through the runner too: the
    throwaway runner's fetch, no SSH."""
    from nodecert.revalidate.collect import collect
    from support.nodeclient import record
    local.history = tmp_path / "history"
    local.history.mkdir()
    (local.history / "20261206T000000Z-timer-1.json").write_text(json.dumps(
        record(host="h1", reason="timer", results=[
            Result(c, Verdict.PASS, "ok").as_dict() for c in CHECKS])))
    run = collect(_inventory(tmp_path), checks=CHECKS, runs_dir=tmp_path / "runs",
                  runner_name=local.name)
    hr = run.hosts["h1"]
    assert hr.status == "done", hr.error
    assert [r.check for r in hr.results] == list(CHECKS)
    assert hr.node["collected_from"].endswith("20261206T000000Z-timer-1.json")
    assert local.fetched and "history" in local.fetched[-1]


def test_an_unknown_runner_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(NodecertError, match="no runner named 'kubernetes'") as caught:
        validate(ValidateRequest(_inventory(tmp_path), checks=CHECKS, runner="kubernetes",
                                 runs_dir=tmp_path / "runs"), progress=lambda line: None)
    assert "ssh" in (caught.value.hint or "")
    assert not (tmp_path / "runs").exists()


def test_a_runner_is_registered_once() -> None:
    class Other(Runner):
        name = "ssh"
    with pytest.raises(RuntimeError, match="declared twice"):
        register(Other)
    assert RUNNERS["ssh"].__name__ == "SshRunner"
