"""The cluster lab's Ethernet fabric: what its switches announce over LLDP as the faults
leave the wiring, the plan it was ordered by, and the frames themselves (IEEE 802.1AB)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from nodecert.inventory.cableplan import read_plan
from nodecert.lab import ethfabric, lldpsim
from nodecert.lab.hardware import Fault

pytestmark = pytest.mark.unit
HOSTS = [("h1", 1, 2), ("h2", 2, 2)]


def _tlvs(frame: bytes) -> list[tuple[int, bytes]]:
    assert frame[:6] == bytes.fromhex("0180c200000e")
    assert struct.unpack("!H", frame[12:14])[0] == 0x88CC
    out, at = [], 14
    while True:
        head = struct.unpack("!H", frame[at:at + 2])[0]
        kind, length = head >> 9, head & 0x1FF
        out.append((kind, frame[at + 2:at + 2 + length]))
        at += 2 + length
        if kind == 0:
            return out


def test_an_lldp_frame_carries_the_switch_and_its_port() -> None:
    tlvs = dict(_tlvs(lldpsim.frame("02:00:00:00:00:01", "leaf-01", "swp7")))
    assert tlvs[1] == b"\x04" + bytes.fromhex("020000000001")  # chassis: its MAC
    assert tlvs[2] == b"\x05swp7"  # port ID: the interface name
    assert struct.unpack("!H", tlvs[3])[0] == lldpsim.TTL_S
    assert tlvs[5] == b"leaf-01" and b"SIMULATED" in tlvs[6]
    assert list(dict(_tlvs(lldpsim.frame("02:00:00:00:00:01", "a", "b")))) == [
        1, 2, 3, 4, 5, 6, 0]  # the mandatory TLVs first, End last
    with pytest.raises(ValueError, match="not a MAC"):
        lldpsim.frame("02:00", "leaf-01", "swp7")


def test_the_switches_announce_the_wiring_the_faults_leave(tmp_path: Path) -> None:
    said = ethfabric.announcements(HOSTS, [])
    assert said[ethfabric.peer(2, 1)]["system"] == "leaf-01"
    assert said[ethfabric.peer(2, 1)]["port"] == "swp2"
    faulty = ethfabric.announcements(HOSTS, [
        Fault("h2", "cable_swapped", {"hca": 0, "with": 1}),
        Fault("h1", "cable_missing", {"hca": 1})])
    assert (faulty["sw2p0"]["system"], faulty["sw2p1"]["system"]) == ("leaf-01", "leaf-00")
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
