"""The cluster lab's InfiniBand fabric: the topology ibsim is wired from, the cable plan
the lab's inventory names, and -- end to end without the lab -- Debian's ibsim serving
the real ibnetdiscover and iblinkinfo (through umad2sim), read by nodecert's parsers and
judged against the plan: each cabling fault named, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodecert.cluster.cabling import judge_cabling
from nodecert.cluster.cabling_links import parse_iblinkinfo, parse_ibnetdiscover_ports
from nodecert.core.errors import NodecertError
from nodecert.inventory.cableplan import read_plan
from nodecert.lab import fabricplan, ibfabric
from nodecert.lab.hardware import Fault, load_faults
from nodecert_node.contract import Verdict
from support.env import require

HOSTS = [("h1", 1, 8), ("h2", 2, 8), ("h3", 3, 8), ("h4", 4, 8)]
# One of each cabling fault, on hosts other than the one the tools run from (h1).
FAULTS = [Fault("h2", "cable_swapped", {"hca": 0, "with": 1}),
          Fault("h3", "cable_wrong_leaf", {"hca": 2, "leaf": 5}),
          Fault("h4", "cable_width", {"hca": 3}),
          Fault("h2", "cable_missing", {"hca": 5}),
          Fault("h3", "link_flapping", {"hca": 6})]


def _plan(tmp_path: Path) -> Path:
    p = tmp_path / "plan.csv"
    p.write_text(fabricplan.plan_csv(HOSTS))
    return p


@pytest.mark.unit
def test_the_plan_is_the_healthy_wiring_and_reads_clean(tmp_path: Path) -> None:
    plan = read_plan(_plan(tmp_path), {"h1", "h2", "h3", "h4"})
    assert len(plan.links) == 32
    first = next(p for p in plan.links if (p.node, p.port) == ("h3", "mlx5_2"))
    assert (first.switch, first.switch_port, first.rail) == ("leaf-02", "3", "2")
    # the topology of a healthy fabric cables exactly the plan's lines, at 4X
    topo = ibfabric.topology(HOSTS, [])
    assert '[3]\t"h3 mlx5_2"[1]\tw=2' in topo and 'Hca\t1 "h3 mlx5_2"' in topo
    assert topo.count('"spine-00"[') == 8  # every leaf's uplink


@pytest.mark.unit
def test_each_fault_changes_only_its_cable() -> None:
    healthy = {(c.host, c.hca): c for c in fabricplan.wiring(HOSTS, [])}
    faulty = {(c.host, c.hca): c for c in fabricplan.wiring(HOSTS, FAULTS)}
    changed = {k for k in healthy if faulty.get(k) != healthy[k]}
    assert changed == {("h2", 0), ("h2", 1), ("h3", 2), ("h4", 3), ("h2", 5), ("h3", 6)}
    assert (faulty[("h2", 0)].switch, faulty[("h2", 1)].switch) == ("leaf-01", "leaf-00")
    assert (faulty[("h3", 2)].switch, faulty[("h3", 2)].port) == ("leaf-05", 35)
    assert faulty[("h4", 3)].width == "2X"
    assert ("h2", 5) not in faulty and ("h3", 6) not in faulty
    # a 2X link is 2X on both ends (ibsim refuses a link whose ends disagree)
    assert ibfabric.topology(HOSTS, FAULTS).count("w=16") == 2


@pytest.mark.unit
def test_a_host_attaches_through_its_first_cabled_hca(tmp_path: Path) -> None:
    cut = [Fault("h2", "cable_missing", {"hca": 0}), Fault("h2", "cable_missing", {"hca": 1})]
    assert ibfabric.attachment("h2", HOSTS, cut) == "h2 mlx5_2"
    assert ibfabric.attachment("h1", HOSTS, cut) == "h1 mlx5_0"
    every = [Fault("h4", "cable_missing", {"hca": n}) for n in range(8)]
    assert ibfabric.attachment("h4", HOSTS, every) is None
    with pytest.raises(NodecertError, match="HCA 1 has no cable"):
        fabricplan.wiring(HOSTS, [Fault("h2", "cable_missing", {"hca": 1}),
                                Fault("h2", "cable_swapped", {"hca": 0, "with": 1})])
    with pytest.raises(NodecertError, match="width '3X'"):
        fabricplan.wiring(HOSTS, [Fault("h2", "cable_width", {"hca": 1, "width": "3x"})])


@pytest.mark.unit
def test_a_fault_file_naming_an_hca_that_is_not_there_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "faults.yml"
    f.write_text("faults:\n  - {host: h2, kind: cable_swapped, hca: 0, with: 9}\n")
    with pytest.raises(NodecertError, match=r"HCA 9 does not exist on h2") as e:
        load_faults(f, ["h1", "h2"], {"h1": "h200-sxm-8", "h2": "h200-sxm-8"})
    assert "faults.yml:2: faults[0].with" in str(e.value)


@pytest.fixture
def fabric(tmp_path: Path) -> Path:
    """A work directory for the real tools on ibsim (local mode: no network)."""
    for name in ("ibsim", "opensm", "ibnetdiscover", "iblinkinfo"):
        require(ibfabric.tool(name), f"{name} is not installed (.ci/run installs ibsim-utils "
                                     "and takes the others from Debian's packages)")
    (tmp_path / "fabric").mkdir()
    return tmp_path / "fabric"


@pytest.mark.integration
def test_the_real_tools_find_a_fabric_wired_to_plan(
        fabric: Path, tmp_path: Path) -> None:
    plan = read_plan(_plan(tmp_path))
    out = ibfabric.read_locally(HOSTS, [], ["ibnetdiscover", "-p"], fabric)
    links = parse_ibnetdiscover_ports(out)
    assert len(links) == 32
    r = judge_cabling(plan, links, nodes={"h1", "h2", "h3", "h4"})
    assert r.verdict is Verdict.PASS, r.summary
    assert r.summary == "all 32 planned links where the plan says, at its width and speed"
    assert list(fabric.glob("sys-*")) == []  # umad2sim cleaned its stand-in sysfs


@pytest.mark.integration
def test_each_cabling_fault_is_named_by_link_and_nothing_else(
        fabric: Path, tmp_path: Path) -> None:
    plan = read_plan(_plan(tmp_path))
    out = ibfabric.read_locally(HOSTS, FAULTS, ["ibnetdiscover", "-p"], fabric)
    r = judge_cabling(plan, parse_ibnetdiscover_ports(out), nodes={"h1", "h2", "h3", "h4"})
    assert r.verdict is Verdict.FAIL
    kinds = sorted(f["kind"] for f in r.facts["findings"])
    assert kinds == ["below", "missing", "missing", "swapped", "wrong rail"], r
    text = "\n".join(r.findings)
    assert "h2 mlx5_5: no link; the plan cables it to leaf-05 port 2 (plan line 16)" in text
    assert "h3 mlx5_6: no link; the plan cables it to leaf-06 port 3 (plan line 25)" in text
    assert ("h4 mlx5_3 -> leaf-03 port 4: trained at width 2X, the plan's 4X (plan line 30)"
            in text)
    swap = next(t for t in r.findings if "swap" in t)
    assert "h2 mlx5_0" in swap and "h2 mlx5_1" in swap
    assert ("h3 mlx5_2 reaches leaf-05 port 35, the plan cables it to leaf-02 port 3 "
            "(plan line 21): on rail 5, the plan's rail 2") in text
    status = {(x["node"], x["port"]): x["status"] for x in r.facts["links"]}
    assert {k: v for k, v in status.items() if v != "ok"} == {
        ("h2", "mlx5_0"): "swapped", ("h2", "mlx5_1"): "swapped",
        ("h3", "mlx5_2"): "wrong rail", ("h4", "mlx5_3"): "below",
        ("h2", "mlx5_5"): "missing", ("h3", "mlx5_6"): "missing"}
    assert len(status) == 32


@pytest.mark.integration
def test_iblinkinfo_reads_the_same_fabric_with_each_links_state(
        fabric: Path, tmp_path: Path) -> None:
    """iblinkinfo keys its lines by LID (OpenSM's) and adds each link's state: the same
    findings as ibnetdiscover, every cabled port Active."""
    plan = read_plan(_plan(tmp_path))
    links = parse_iblinkinfo(ibfabric.read_locally(HOSTS, FAULTS, ["iblinkinfo"], fabric))
    assert len(links) == 30 and {link.state for link in links} == {"Active"}
    assert {(link.node, link.port): (link.switch, link.width) for link in links}[
        ("h4", "mlx5_3")] == ("leaf-03", "2X")
    r = judge_cabling(plan, links, nodes={"h1", "h2", "h3", "h4"})
    assert sorted(f["kind"] for f in r.facts["findings"]) == [
        "below", "missing", "missing", "swapped", "wrong rail"], r
