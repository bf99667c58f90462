"""A command reads its inventory once and passes it down: a rack run (its trays' node
runs, the domain's job plan) builds Ansible's inventory exactly once."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodecert.inventory.reader import Inventory, hostvars, load_inventory, resolve
from nodecert.rack.validate import RackRequest, rack_validate
from nodecert_node.contract import Verdict
from support.env import REPO
from support.racklab import running

TRAYS = [f"tray{i:02d}" for i in range(18)]
TRAY = ("nodecert_gpu_model=GB200 nodecert_gpu_count=4 nodecert_cpu_cores=144 "
        "nodecert_ram_gb=960 nodecert_nvme_count=4")


def closed_ports(n: int) -> list[int]:
    """Loopback ports nothing listens on (a connection is refused at once)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time Ansible's inventory is built, and from what."""
    from ansible.inventory.manager import InventoryManager
    made: list[str] = []
    real = InventoryManager.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(str(kwargs.get("sources") or args[1:2]))
        real(self, *args, **kwargs)
    monkeypatch.setattr(InventoryManager, "__init__", counted)
    return made


def test_a_rack_run_reads_its_inventory_once(tmp_path: Path, builds: list[str]) -> None:
    gen = running(tmp_path)
    rack = next(gen)
    try:
        inv = tmp_path / "inv"
        (inv / "group_vars").mkdir(parents=True)
        known = tmp_path / "known_hosts"
        known.touch()
        (inv / "hosts.ini").write_text("[rack_a1]\n" + "\n".join(
            f"{t} ansible_host=127.0.0.1 ansible_port={p} ansible_user=root "
            f"ansible_ssh_common_args='-o UserKnownHostsFile={known}' {TRAY}"
            for t, p in zip(TRAYS, closed_ports(len(TRAYS)), strict=True)) + "\n")
        spec = rack.spec()
        spec.pop("name"), spec.pop("imex")
        (inv / "group_vars" / "rack_a1.yml").write_text(yaml.safe_dump(
            {"nodecert_rack": {"name": "rack-a1", **spec}}))
        said: list[str] = []
        rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                                progress=said.append)
    finally:
        gen.close()
    # the trays were really asked for (through validate), and none answered
    assert rec.verdict is Verdict.ERROR, rec.results
    assert any("tray00" in line for line in said)
    assert len(builds) == 1, builds


def test_an_inventory_read_once_answers_as_a_path_does(builds: list[str]) -> None:
    path = REPO / "inventory" / "sample" / "lab.ini"
    inv = Inventory.read(path)
    assert len(builds) == 1
    assert resolve(inv) is inv and str(inv) == str(path)
    assert load_inventory(inv) == load_inventory(path)
    names = sorted(inv.hosts)
    assert hostvars(inv, names) == hostvars(path, names)
    assert inv.select(("!" + names[0],), names) == names[1:]
    assert inv.select((), names) == names  # a --limit leaves the shared inventory whole
    assert sorted(h.name for h in inv.manager.get_hosts()) == names
