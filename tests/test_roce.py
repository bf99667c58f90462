"""RoCE settings: show_gids and mlnx_qos parsers on real outputs (and what breaks them),
the ECN sysfs, the judge, the fabric spec's `roce`, and net.roce on the lab's simulated
RoCE ports with each settings fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert.inventory.fabric import parse_fabric
from nodecert_node.checks.net import roce_problems
from nodecert_node.contract import Verdict
from nodecert_node.parse import ParseError
from nodecert_node.parse.roce import parse_mlnx_qos, parse_show_gids, read_ecn, routable_v2

ROCE = Path(__file__).resolve().parent / "fixtures" / "real" / "roce"
GIDS = (ROCE / "show_gids-mlx5_0-rdma0-ipv4.txt").read_text()
WANT = {"gid_type": "v2", "pfc_priorities": [3], "trust": "dscp"}


def test_real_show_gids() -> None:
    rows = parse_show_gids(GIDS)
    assert [(r["index"], r["version"], r["ipv4"]) for r in rows] == [
        (0, "v1", None), (1, "v2", None), (2, "v1", "192.168.211.242"),
        (3, "v2", "192.168.211.242")]
    assert {r["ndev"] for r in rows} == {"rdma0"}
    assert [r["index"] for r in routable_v2(rows, "mlx5_0")] == [3]


def test_show_gids_truncated_or_garbled_is_refused() -> None:
    with pytest.raises(ParseError, match="counted 4 GIDs but 3 rows"):
        parse_show_gids("\n".join(ln for ln in GIDS.splitlines() if "\t3\t" not in ln))
    with pytest.raises(ParseError, match="no n_gids_found"):
        parse_show_gids(GIDS.replace("n_gids_found=4\n", ""))
    with pytest.raises(ParseError, match=r"line 3: .* is not a show_gids row"):
        parse_show_gids(GIDS.replace("fe80:0000:0000:0000:0ac0:ebff:fe21:03da\t\t\tv1",
                                     "fe80::0ac0:ebff:fe21:03da\t\t\tv1", 1))


@given(st.sampled_from(["\t", " ", "  ", "\t "]))
def test_show_gids_reads_any_column_spacing(sep: str) -> None:
    text = "\n".join(sep.join(ln.split()) for ln in GIDS.splitlines())
    assert [r["ipv4"] for r in parse_show_gids(text)] == [None, None, "192.168.211.242",
                                                          "192.168.211.242"]


def test_real_mlnx_qos_and_a_truncated_one() -> None:
    q = parse_mlnx_qos((ROCE / "mlnx_qos-eth2-pfc-0-2-6-7.txt").read_text())
    assert q == {"trust": "dscp", "dcbx": "OS controlled", "pfc": [0, 2, 6, 7]}
    cut = parse_mlnx_qos((ROCE / "mlnx_qos-rdma0-truncated-EXCERPT.txt").read_text())
    assert cut["trust"] == "dscp" and cut["pfc"] is None  # never read as "PFC off"
    with pytest.raises(ParseError, match="do not line up"):
        parse_mlnx_qos("PFC configuration:\npriority 0 1 2 3 4 5 6 7\nenabled 0 0 0 1 0 0 0\n")
    with pytest.raises(ParseError, match="not mlnx_qos output"):
        parse_mlnx_qos("Netlink error: interface eth9 not found\n")


def test_ecn_from_the_mlx5_sysfs(tmp_path: Path) -> None:
    for role in ("roce_np", "roce_rp"):
        d = tmp_path / "class/net/ens1f0np0/ecn" / role / "enable"
        d.mkdir(parents=True)
        for prio in range(8):
            (d / str(prio)).write_text("1\n" if prio == 3 and role == "roce_np" else "0\n")
    assert read_ecn("ens1f0np0", str(tmp_path)) == {"roce_np": [3], "roce_rp": []}
    assert read_ecn("ens9", str(tmp_path)) is None
    gids = parse_shown()
    out = roce_problems({"ecn_priorities": [3]}, ["mlx5_0"], gids, {},
                        {"mlx5_0": read_ecn("ens1f0np0", str(tmp_path))})
    assert out == ["mlx5_0: ECN roce_rp off on priorities [3]"]


def parse_shown() -> list[dict[str, Any]]:
    return parse_show_gids(GIDS)


def test_roce_judge_names_each_setting_off_the_sites() -> None:
    gids = parse_shown()
    good = {"mlx5_0": {"trust": "dscp", "pfc": [3]}}
    assert roce_problems(WANT, ["mlx5_0"], gids, good, {}) == []
    v1 = [r for r in gids if r["version"] == "v1"]
    assert roce_problems(WANT, ["mlx5_0"], v1, good, {}) == [
        "mlx5_0: no RoCE v2 GID with an address (has: v1): NCCL cannot route its traffic"]
    assert roce_problems(WANT, ["mlx5_0"], gids, {"mlx5_0": {"trust": "pcp", "pfc": []}},
                         {}) == [
        "mlx5_0: priority trust pcp, the site runs dscp",
        "mlx5_0: PFC on priorities none, the site runs [3] (lossless RoCE needs exactly those)"]
    assert roce_problems(WANT, ["mlx5_0"], None, {"mlx5_0": None}, {}) == [
        "mlx5_0: the GID table could not be read (show_gids)",
        "mlx5_0: its QoS could not be read (mlnx_qos)"]


def test_fabric_spec_roce_settings() -> None:
    spec, why = parse_fabric({"link_layer": "Ethernet", "ports": 2, "rate_gbps": 400,
                              "roce": {"gid_type": "RoCE v2", "pfc_priorities": [3, 3],
                                       "trust": "DSCP", "ecn_priorities": [3]}})
    assert why is None and spec is not None
    assert spec["roce"] == {"gid_type": "v2", "pfc_priorities": [3], "trust": "dscp",
                            "ecn_priorities": [3]}
    for roce, words in (({"gid_type": "v3"}, "is not RoCE v1 or RoCE v2"),
                        ({"pfc_priorities": [8]}, "priorities 0..7"),
                        ({"trust": "vlan"}, "is not dscp or pcp"),
                        ({"pfc": [3]}, "unknown key(s) pfc"), ("v2", "must be a mapping")):
        spec, why = parse_fabric({"link_layer": "Ethernet", "ports": 2, "rate_gbps": 400,
                                  "roce": roce})
        assert spec is None and why is not None and words in why, (roce, why)


@pytest.mark.integration
def test_lab_roce_ports_pass_as_ordered(tmp_path: Path) -> None:
    from support.simnode import SimNode
    node = SimNode(tmp_path, "l40s-pcie-4")
    rows = parse_show_gids(node.tool("show_gids"))
    assert len(rows) == 8 and {r["ndev"] for r in rows} == {"ens1f0np0", "ens2f0np0"}
    assert parse_mlnx_qos(node.tool("mlnx_qos", "-i", "ens1f0np0"))["pfc"] == [3]
    r = node.check("net.roce")
    assert r.verdict is Verdict.PASS, r.findings


@pytest.mark.parametrize(("fault", "words"), [
    ("roce_gid_v1", "mlx5_1: no RoCE v2 GID with an address (has: v1)"),
    ("roce_pfc_off", "mlx5_1: PFC on priorities none, the site runs [3]"),
    ("roce_trust_pcp", "mlx5_1: priority trust pcp, the site runs dscp"),
])
@pytest.mark.integration
def test_lab_roce_settings_faults_fail_net_roce(tmp_path: Path, fault: str, words: str) -> None:
    from support.simnode import SimNode
    r = SimNode(tmp_path, "l40s-pcie-4", faults=[{"kind": fault, "hca": 1}]).check("net.roce")
    assert r.verdict is Verdict.FAIL
    assert any(words in f for f in r.findings) or words in r.summary, (r.summary, r.findings)
