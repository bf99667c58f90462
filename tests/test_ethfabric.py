"""The cluster lab's Ethernet fabric: what its switches announce over LLDP as the faults
leave the wiring, how each switch's lldpd is told to announce it, and the plan it was
ordered by."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecert.inventory.cableplan import read_plan
from nodecert.lab import ethfabric, leafswitch
from nodecert.lab.hardware import Fault

pytestmark = pytest.mark.unit
HOSTS = [("h1", 1, 2), ("h2", 2, 2)]


def test_each_leaf_switch_is_configured_as_a_switch_names_itself_and_its_ports() -> None:
    conf = leafswitch.switch_conf("leaf-01", {"sw2p1": "swp2", "sw1p1": "swp1"}).splitlines()
    assert conf[1:] == [
        "configure system hostname leaf-01",
        'configure system description "nodecert lab leaf switch (SIMULATED)"',
        "configure system capabilities enabled bridge",  # a switch, not a station
        # only its own ports, by exact name: never the namespace's bridge port
        "configure system interface pattern sw1p1,sw2p1",
        "configure lldp tx-interval 1", "configure lldp tx-hold 4",
        "configure ports sw1p1 lldp portidsubtype local swp1 description swp1",
        "configure ports sw2p1 lldp portidsubtype local swp2 description swp2"]
    assert leafswitch.TTL_S == 4


def test_the_switches_announce_the_wiring_the_faults_leave(tmp_path: Path) -> None:
    said = ethfabric.announcements(HOSTS, [])
    assert said[ethfabric.peer(2, 1)] == ("leaf-01", "swp2")
    faulty = ethfabric.announcements(HOSTS, [
        Fault("h2", "cable_swapped", {"hca": 0, "with": 1}),
        Fault("h1", "cable_missing", {"hca": 1})])
    assert (faulty["sw2p0"], faulty["sw2p1"]) == (("leaf-01", "swp2"), ("leaf-00", "swp2"))
    assert "sw1p1" not in faulty  # pulled: the switch port is silent (and down)
    plan = tmp_path / "plan.csv"
    plan.write_text(ethfabric.plan_csv(HOSTS))
    lines = read_plan(plan, {"h1", "h2"}).links
    assert [(p.node, p.port, p.switch, p.switch_port) for p in lines][:2] == [
        ("h1", "ens1f0np0", "leaf-00", "swp1"), ("h1", "ens2f0np0", "leaf-01", "swp1")]
    # lldpd listens on the named veths (it skips virtual interfaces otherwise)
    assert ethfabric.lldpd_conf(2).splitlines()[-1] == (
        "configure system interface pattern ens1f0np0,ens2f0np0")


def test_the_real_lldpd_output_reads_as_the_links_it_shows() -> None:
    """`lldpctl -f json` as Debian's lldpd 1.0.16 printed it on a lab host: a list of
    interfaces, each neighbour keyed by its system name, the port id an ifname."""
    from nodecert.cluster.cabling_links import parse_lldpctl_json
    from support.env import REPO
    text = (REPO / "tests/fixtures/recorded/lab-lldpd/lldpctl-f-json-h1.json").read_text()
    links = parse_lldpctl_json(text, "h1")
    assert [(x.node, x.port, x.switch, x.switch_port) for x in links] == [
        ("h1", "ens1f0np0", "leaf-00", "swp1"), ("h1", "ens2f0np0", "leaf-01", "swp1")]


def test_the_real_lldpd_output_from_lldpd_switches_reads_alike() -> None:
    """The same host's `lldpctl -f json` once the lab's switches are Debian's lldpd: each
    switch a bridge of its own chassis, the port ID of subtype `local` as the switch
    names its port."""
    from nodecert.cluster.cabling_links import parse_lldpctl_json
    from support.env import REPO
    text = (REPO / "tests/fixtures/recorded/lab-lldpd/lldpctl-f-json-h1-lldpd-leaves.json"
            ).read_text()
    assert '"type": "local"' in text and leafswitch.DESCRIPTION in text
    links = parse_lldpctl_json(text, "h1")
    assert [(x.node, x.port, x.switch, x.switch_port) for x in links] == [
        ("h1", "ens1f0np0", "leaf-00", "swp1"), ("h1", "ens2f0np0", "leaf-01", "swp1")]
