"""A cluster lab's Ethernet (RoCE) fabric read over LLDP: Debian's lldpd on each host
hears the lab's leaf switches (each one Debian's lldpd on its ports in the management
namespace), and nodecert's discovery (`lldpctl -f json` on every host, over SSH) judged against the
lab's cable plan names each cabling fault by link, node and port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodecert.cluster.cabling_discover import cabling_check
from nodecert.cluster.validate import cable_plan, context
from nodecert.lab import bmc as labbmc
from nodecert.lab import leafswitch
from nodecert.lab.hosts import Lab
from nodecert_node.contract import Result, Verdict
from support.env import require_root
from support.lab import lab_config

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def roce_lab() -> Iterator[Lab]:
    require_root()
    lab = Lab(lab_config("rf", 12), log=lambda m: None)
    try:
        # (no NFS share: the fabric's LLDP is what this lab is for)
        lab.up(nodes=2, profiles=("l40s-pcie-4",), as_cluster=True, shared_fs=False)
        yield lab
    finally:
        lab.down()


def _faults(lab: Lab, tmp_path: Path, *items: str) -> None:
    f = tmp_path / "faults.yml"
    f.write_text("faults:\n" + "".join(f"  - {i}\n" for i in items) if items
                 else "faults: []\n")
    lab.apply_faults(f)


def _cabling(lab: Lab) -> Result:
    """What `cluster validate` judges as fabric.cabling on this lab."""
    ctx = context(lab.cfg.state / "inventory.ini")
    plan = cable_plan(ctx)
    assert plan is not None and ctx.exp.link_layer == "Ethernet"
    return cabling_check(plan, ctx.exp.link_layer, ctx.endpoints)


def test_lldp_reads_the_fabric_as_wired_and_names_each_fault(
        roce_lab: Lab, tmp_path: Path) -> None:
    _faults(roce_lab, tmp_path)
    doc = json.loads(roce_lab.ssh("h1", "lldpctl -f json").stdout)  # the real tool
    text = json.dumps(doc)
    assert "leaf-00" in text and "leaf-01" in text and "swp1" in text
    # what a switch's lldpd sends: the port ID as the switch names it, and the system
    # description saying what the switch is
    assert '"type": "local", "value": "swp1"' in text and leafswitch.DESCRIPTION in text
    _switches_are_lldpd(roce_lab, 2)
    r = _cabling(roce_lab)
    assert r.verdict is Verdict.PASS, r.findings
    assert r.summary == "all 4 planned links where the plan says, at its width and speed"
    # h2's two cables swapped at the leaves, h1's second cable pulled
    _faults(roce_lab, tmp_path, "{host: h2, kind: cable_swapped, hca: 0, with: 1}",
            "{host: h1, kind: cable_missing, hca: 1}")
    r = _cabling(roce_lab)
    assert r.verdict is Verdict.FAIL
    assert sorted(f["kind"] for f in r.facts["findings"]) == ["missing", "swapped"], r
    assert any(t.startswith("h1 ens2f0np0: no link; the plan cables it to leaf-01 port "
                            "swp1") for t in r.findings), r.findings
    swap = next(t for t in r.findings if "swap" in t)
    assert "h2 ens1f0np0" in swap and "h2 ens2f0np0" in swap
    # wired again: as planned again
    _faults(roce_lab, tmp_path)
    assert _cabling(roce_lab).verdict is Verdict.PASS
    _switches_are_lldpd(roce_lab, 2)  # restarted with each rewiring, never piling up


def _switches_are_lldpd(lab: Lab, count: int) -> None:
    """The switches this lab runs: that many, each a live lldpd of the unpacked binary
    in the lab's management namespace."""
    d = leafswitch.state_dir(lab.cfg)
    pids = [int(p.read_text()) for p in sorted(d.glob("*.pid"))]
    assert len(pids) == count
    lldpd = d / "lldpd/usr/sbin/lldpd"
    netns = Path(f"/run/netns/{labbmc.netns_name(lab.cfg)}").stat().st_ino
    for pid in pids:
        assert Path(f"/proc/{pid}/exe").resolve() == lldpd
        assert Path(f"/proc/{pid}/ns/net").stat().st_ino == netns
