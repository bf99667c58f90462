"""Cabling against the plan: the plan read (errors with file and line), the links read
from real ibnetdiscover, iblinkinfo and lldpctl outputs, and each cabling fault named by
link, node, port and the plan's expectation."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.cluster.cabling import compare, judge_cabling
from nodecert.cluster.cabling_links import (
    DiscoverError,
    Link,
    parse_iblinkinfo,
    parse_ibnetdiscover_ports,
    parse_lldpctl_json,
)
from nodecert.inventory.cableplan import PlanError, read_plan
from nodecert_node.contract import Verdict
from support.env import REPO

pytestmark = pytest.mark.unit
REAL = REPO / "tests" / "fixtures" / "real"
IBND = REAL / "ibnetdiscover" / \
    "edr-fabric-ibnetdiscover-p-ports-ca-sw-links-one-port-down-question-marks-sdr.txt"
IBLI = REAL / "iblinkinfo" / "edr-sb7700-3-node-hpl-cluster-iblinkinfo-grep-up-6-links-25.78125.txt"
HEADER = "node,port,rail,switch,switch_port,width,speed_gbps\n"


def plan_file(tmp: Path, rows: list[str], header: str = HEADER) -> Path:
    p = tmp / "plan.csv"
    p.write_text(header + "".join(r + "\n" for r in rows))
    return p


def rail_plan(nodes: int = 4, rails: int = 4) -> list[str]:
    """A rail-optimised plan: rail k of every node to leaf k, node n on port n."""
    return [f"gpu-{n:02d},mlx5_{k},{k},leaf-{k:02d},{n},4X,400"
            for n in range(1, nodes + 1) for k in range(rails)]


def as_built(rows: list[str]) -> list[Link]:
    """The fabric exactly as a plan says (NDR: 4 lanes of 106.25 Gb/s)."""
    out = []
    for r in rows:
        node, port, _, sw, swp, _, _ = r.split(",")
        out.append(Link(node, port, sw, swp, "4X", 106.25))
    return out


# --- the plan -----------------------------------------------------------------------------

def test_a_plan_is_read_with_its_digest(tmp_path: Path) -> None:
    p = read_plan(plan_file(tmp_path, rail_plan()), hosts={f"gpu-{n:02d}" for n in range(1, 5)})
    assert len(p.links) == 16 and p.links[0].line == 2
    assert p.rails() == {str(k): {f"leaf-{k:02d}"} for k in range(4)}
    assert len(p.digest) == 64


@pytest.mark.parametrize(("rows", "header", "why"), [
    (["gpu-01,mlx5_0,0,leaf-00,1,4X,400", "gpu-01,mlx5_0,1,leaf-01,1,4X,400"], HEADER,
     "plan.csv:3: gpu-01 mlx5_0 is cabled twice (first on line 2)"),
    (["gpu-01,mlx5_0,0,leaf-00,1,4X,400", "gpu-02,mlx5_0,0,leaf-00,1,4X,400"], HEADER,
     "plan.csv:3: leaf-00 port 1 is used twice (first on line 2)"),
    (["gpu-09,mlx5_0,0,leaf-00,1,4X,400"], HEADER,
     "plan.csv:2: node gpu-09 is not a host of the inventory"),
    (["gpu-01,mlx5_0,0,,1,4X,400"], HEADER, "plan.csv:2: switch is empty"),
    (["gpu-01,mlx5_0,0,leaf-00,1,3X,400"], HEADER, "plan.csv:2: width '3X' is not"),
    (["gpu-01,mlx5_0,0,leaf-00,1,4X,fast"], HEADER, "plan.csv:2: speed_gbps 'fast' is not a"),
    (["gpu-01,mlx5_0,0,leaf-00"], HEADER, "plan.csv:2: 4 cells where the header names 7"),
    (["gpu-01,mlx5_0,leaf-00,1"], "node,port,switch,port_on_switch\n",
     "plan.csv:1: unknown column(s) port_on_switch; missing column(s) switch_port"),
])
def test_a_plan_with_errors_is_refused_with_file_and_line(tmp_path: Path, rows: list[str],
                                                          header: str, why: str) -> None:
    with pytest.raises(PlanError, match=why.replace("(", r"\(").replace(")", r"\)")):
        read_plan(plan_file(tmp_path, rows, header), hosts={"gpu-01", "gpu-02"})


def test_a_plan_in_another_column_order_with_comments_reads_alike(tmp_path: Path) -> None:
    p = plan_file(tmp_path, ["# rack A", "leaf-00,1,gpu-01,mlx5_0", "",
                             "leaf-00,2,gpu-02,mlx5_0"], "switch,switch_port,node,port\n")
    plan = read_plan(p)
    assert [(x.node, x.switch_port, x.line) for x in plan.links] == [
        ("gpu-01", "1", 3), ("gpu-02", "2", 5)]


# --- the real tools' outputs ----------------------------------------------------------------

def test_real_ibnetdiscover_gives_each_ca_link_and_skips_down_ports() -> None:
    links = parse_ibnetdiscover_ports(IBND.read_text())
    assert [(x.node, x.port, x.switch, x.switch_port, x.width) for x in links] == [
        ("o0001", "HCA-1", "ib-i1l1s01", "10", "4X"),
        ("o0002", "HCA-1", "ib-i1l1s01", "11", "4X"),
        ("p0001", "HCA-1", "ib-i4l1s01", "35", "4X")]
    assert links[0].speed_gbps == pytest.approx(103.125)
    qdr = (REAL / "ibnetdiscover" / "qdr-switch-ibnetdiscover-p-unquoted-name-single-line.txt")
    assert parse_ibnetdiscover_ports(qdr.read_text()) == []  # one port, no far end
    # a node-name map names the switch (GUID -> name)
    named = parse_ibnetdiscover_ports(IBND.read_text(), {"0x7cfe9003009ce5b0": "leaf-a1"})
    assert named[0].switch == "leaf-a1"
    with pytest.raises(DiscoverError, match="ibnetdiscover line 1: not a port line"):
        parse_ibnetdiscover_ports("Switch 36 \"S-0002c90200\"\n")


def test_real_filtered_iblinkinfo_pairs_cas_and_switch_by_the_far_ends_names() -> None:
    links = parse_iblinkinfo(IBLI.read_text())
    got = sorted((x.node, x.port, x.switch, x.switch_port) for x in links)
    assert got == [("mgt", "mlx5_0", "MF0;SB7700:MSB7700/U1", "36"),
                   ("n01", "HCA-1", "MF0;SB7700:MSB7700/U1", "18"),
                   ("n02", "HCA-1", "MF0;SB7700:MSB7700/U1", "17")]
    assert all(x.speed_gbps == pytest.approx(103.125) for x in links)
    with pytest.raises(DiscoverError, match="iblinkinfo line 1"):
        parse_iblinkinfo("2 17 up to n02\n")


def test_lldpctl_json_in_both_shapes() -> None:
    one = {"lldp": {"interface": {"eth2": {
        "chassis": {"am4-t0-g1-leaf07": {"id": {"type": "mac", "value": "aa:bb"}}},
        "port": {"id": {"type": "ifname", "value": "Ethernet1/7"}, "descr": "gpu"}}}}}
    many = {"lldp": {"interface": [
        {"eth2": one["lldp"]["interface"]["eth2"]},
        {"eth3": {"chassis": {"am4-t0-g1-leaf04": {}},
                  "port": {"id": {"type": "mac", "value": "0c:42"}, "descr": "Eth1/4"}}}]}}
    assert parse_lldpctl_json(json.dumps(one), "gpu-01") == [
        Link("gpu-01", "eth2", "am4-t0-g1-leaf07", "Ethernet1/7", source="lldp")]
    assert [(x.port, x.switch, x.switch_port)
            for x in parse_lldpctl_json(json.dumps(many), "gpu-01")] == [
        ("eth2", "am4-t0-g1-leaf07", "Ethernet1/7"), ("eth3", "am4-t0-g1-leaf04", "Eth1/4")]
    with pytest.raises(DiscoverError, match="no 'lldp' object"):
        parse_lldpctl_json("{}", "gpu-01")


# --- the judgement ------------------------------------------------------------------------

def _judge(tmp: Path, rows: list[str], links: list[Link]) -> list[str]:
    res = judge_cabling(read_plan(plan_file(tmp, rows)), links)
    return list(res.findings)


def test_a_fabric_wired_to_plan_passes(tmp_path: Path) -> None:
    rows = rail_plan()
    res = judge_cabling(read_plan(plan_file(tmp_path, rows)), as_built(rows))
    assert res.verdict is Verdict.PASS and res.value == {"planned": 16, "wrong": 0}


def test_each_cabling_fault_is_named_by_link_node_port_and_plan(tmp_path: Path) -> None:
    rows = rail_plan()
    built = as_built(rows)

    def edit(node: str, port: str, **change: object) -> list[Link]:
        return [Link(**{**x.__dict__, **change})  # type: ignore[arg-type]
                if (x.node, x.port) == (node, port) else x for x in built]

    # two cables swapped on one leaf: one swap, naming both
    a, b = ("gpu-01", "mlx5_2"), ("gpu-02", "mlx5_2")
    swapped = edit(*a, switch_port="2")
    swapped = [Link(**{**x.__dict__, "switch_port": "1"}) if (x.node, x.port) == b else x
               for x in swapped]
    got = _judge(tmp_path, rows, swapped)
    assert got == ["gpu-01 mlx5_2 and gpu-02 mlx5_2 are swapped: gpu-01 mlx5_2 reaches leaf-02 "
                   "port 2 (planned for gpu-02 mlx5_2, line 8) and gpu-02 mlx5_2 reaches "
                   "leaf-02 port 1 (planned for gpu-01 mlx5_2, line 4)"]
    # a rail on the wrong leaf: named with both rails
    got = _judge(tmp_path, rows, edit("gpu-03", "mlx5_1", switch="leaf-03", switch_port="9"))
    assert got == ["gpu-03 mlx5_1 reaches leaf-03 port 9, the plan cables it to leaf-01 port 3 "
                   "(plan line 11): on rail 3, the plan's rail 1"]
    # a port at 2x instead of 4x
    got = _judge(tmp_path, rows, edit("gpu-04", "mlx5_0", width="2X"))
    assert got == ["gpu-04 mlx5_0 -> leaf-00 port 4: trained at width 2X, the plan's 4X; "
                   "212.5 Gb/s, the plan's 400 Gb/s (plan line 14)"]
    # a missing cable, and a link that is down (flapping, caught down)
    got = _judge(tmp_path, rows, [x for x in built if (x.node, x.port) != ("gpu-02", "mlx5_3")])
    assert got == ["gpu-02 mlx5_3: no link; the plan cables it to leaf-03 port 2 (plan line 9)"]
    assert _judge(tmp_path, rows, edit("gpu-02", "mlx5_3", state="Down")) == [
        "gpu-02 mlx5_3: its link to leaf-03 port 2 is Down, not Active; the plan cables it "
        "to leaf-03 port 2 (plan line 9)"]
    # the wrong port of the right switch, and an extra cable
    extra = Link("gpu-01", "mlx5_9", "leaf-00", "40", "4X", 106.25)
    got = _judge(tmp_path, rows, [*edit("gpu-01", "mlx5_0", switch_port="33"), extra])
    assert got == ["gpu-01 mlx5_0 reaches leaf-00 port 33, the plan cables it to port 1 "
                   "(plan line 2)",
                   "gpu-01 mlx5_9 reaches leaf-00 port 40: no plan line names it"]


def test_a_fabric_that_could_not_be_read_is_error(tmp_path: Path) -> None:
    res = judge_cabling(read_plan(plan_file(tmp_path, rail_plan())), None,
                        tool_error="ibnetdiscover: can't open MAD port")
    assert res.verdict is Verdict.ERROR and "can't open MAD port" in res.summary


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2 ** 32))
def test_a_random_swap_of_two_planned_cables_is_named_as_that_swap(seed: int) -> None:
    rows = rail_plan(nodes=6, rails=4)
    rng = random.Random(seed)
    i, j = rng.sample(range(len(rows)), 2)
    built = as_built(rows)
    x, y = built[i], built[j]
    built[i] = Link(x.node, x.port, y.switch, y.switch_port, x.width, x.lane_gbps)
    built[j] = Link(y.node, y.port, x.switch, x.switch_port, y.width, y.lane_gbps)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        c = compare(read_plan(plan_file(Path(d), rows)), built)
    assert [k for k, _ in c.findings] == ["swapped"]
    assert f"{x.node} {x.port}" in c.findings[0][1] and f"{y.node} {y.port}" in c.findings[0][1]


def test_inventory_check_reads_the_plan_against_its_hosts(tmp_path: Path) -> None:
    """The inventory names the plan; a plan naming a host the inventory lacks is refused
    with the plan's file and line."""
    from nodecert.inventory.reader import check_inventory
    plan = plan_file(tmp_path, ["gpu-01,mlx5_0,0,leaf-00,1,4X,400",
                                "gpu-07,mlx5_0,0,leaf-00,2,4X,400"])
    inv = tmp_path / "hosts.ini"
    spec = ("nodecert_gpu_model=H200-SXM nodecert_gpu_count=8 nodecert_cpu_cores=112 "
            "nodecert_ram_gb=2048 nodecert_nvme_count=8")
    inv.write_text(f"[gpu]\ngpu-01 ansible_host=10.0.0.1 {spec}\n"
                   f"gpu-02 ansible_host=10.0.0.2 {spec}\n"
                   f"[gpu:vars]\nnodecert_cabling_plan={plan}\n")
    report = check_inventory(inv)
    assert [(p.where, p.what) for p in report.problems] == [
        (f"{plan}:3", "node gpu-07 is not a host of the inventory")]
    plan.write_text(HEADER + "gpu-01,mlx5_0,0,leaf-00,1,4X,400\n")
    assert check_inventory(inv).ok



# --- discovery over SSH -------------------------------------------------------------------

class _Stream:
    def __init__(self, text: str, rc: int = 0) -> None:
        self.text, self.channel = text, self
        self.rc = rc

    def read(self) -> bytes:
        return self.text.encode()

    def recv_exit_status(self) -> int:
        return self.rc


class _Client:
    """An SSH client whose node answers each command from `answers[host]`:
    (rc, stdout, stderr), or an OSError for a node that cannot be reached."""

    def __init__(self, host: str, answers: dict[str, object], seen: list[str]) -> None:
        self.host, self.answers, self.seen = host, answers, seen

    def exec_command(self, command: str, timeout: float) -> tuple[None, _Stream, _Stream]:
        assert timeout and "timeout " in command  # every command bounded
        self.seen.append(f"{self.host}: {command}")
        got = self.answers[self.host]
        assert isinstance(got, tuple)
        rc, out, err = got
        return None, _Stream(out, rc), _Stream(err)

    def close(self) -> None:
        pass


def _eps(*names: str) -> dict[str, object]:
    from nodecert.transport.ssh import Endpoint
    return {n: Endpoint(n, "127.0.0.1", 22, "root", None, (), "python3") for n in names}


def _connector(answers: dict[str, object], seen: list[str]):  # type: ignore[no-untyped-def]
    def connect(ep):  # type: ignore[no-untyped-def]
        got = answers[ep.host]
        if isinstance(got, OSError):
            raise got
        return _Client(ep.host, answers, seen)
    return connect


def _lldp(node_rows: list[str]) -> str:
    return json.dumps({"lldp": {"interface": [
        {port: {"chassis": {sw: {}}, "port": {"id": {"type": "ifname", "value": swp}}}}
        for _, port, _, sw, swp, *_ in (r.split(",") for r in node_rows)]}})


def test_lldp_discovery_reads_every_node_and_judges_the_plan(tmp_path: Path) -> None:
    from nodecert.cluster.cabling_discover import cabling_check
    rows = [r.replace(",4X,400", ",,") for r in rail_plan(nodes=3, rails=2)]
    plan = read_plan(plan_file(tmp_path, rows))
    by_node = {n: [r for r in rows if r.startswith(n + ",")] for n in ("gpu-01", "gpu-02",
                                                                         "gpu-03")}
    answers: dict[str, object] = {n: (0, _lldp(rs), "") for n, rs in by_node.items()}
    seen: list[str] = []
    res = cabling_check(plan, "Ethernet", _eps(*by_node), _connector(answers, seen))  # type: ignore[arg-type]
    assert res.verdict is Verdict.PASS, res.summary
    assert res.facts["plan_sha256"] == plan.digest and len(seen) == 3
    # gpu-02's two rails crossed: named as a swap
    crossed = [r.replace("leaf-00", "X").replace("leaf-01", "leaf-00").replace("X", "leaf-01")
               for r in by_node["gpu-02"]]
    answers["gpu-02"] = (0, _lldp(crossed), "")
    res = cabling_check(plan, "Ethernet", _eps(*by_node), _connector(answers, seen))  # type: ignore[arg-type]
    assert res.verdict is Verdict.FAIL and all("gpu-02" in f for f in res.findings)
    # a node that cannot be read leaves its lines unjudged: ERROR naming it and why
    answers["gpu-02"] = (1, "", "unable to connect to socket /run/lldpd.socket")
    answers["gpu-03"] = OSError("No route to host")
    res = cabling_check(plan, "Ethernet", _eps(*by_node), _connector(answers, seen))  # type: ignore[arg-type]
    assert res.verdict is Verdict.ERROR
    assert "gpu-02, gpu-03 not read" in res.summary and "lldpd.socket" in res.summary \
        and "No route to host" in res.summary


def test_ib_discovery_asks_the_next_node_when_one_cannot_run_it(tmp_path: Path) -> None:
    from nodecert.cluster.cabling_discover import cabling_check
    plan = read_plan(plan_file(tmp_path, [
        "o0001,HCA-1,1,ib-i1l1s01,10,4X,100", "o0002,HCA-1,1,ib-i1l1s01,11,4X,100"]))
    seen: list[str] = []
    answers: dict[str, object] = {"o0001": (124, "", ""), "o0002": (0, IBND.read_text(), "")}
    res = cabling_check(plan, "InfiniBand", _eps("o0001", "o0002"),  # type: ignore[arg-type]
                        _connector(answers, seen))
    assert res.verdict is Verdict.PASS, res.summary
    assert [s.split(":")[0] for s in seen] == ["o0001", "o0002"]
    answers["o0002"] = (0, "Switch 36 \"S-0002c90200\"\n", "")
    res = cabling_check(plan, "InfiniBand", _eps("o0001", "o0002"),  # type: ignore[arg-type]
                        _connector(answers, seen))
    assert res.verdict is Verdict.ERROR
    assert "o0001: ibnetdiscover timed out" in res.summary and "not a port line" in res.summary


def test_the_cluster_certificate_holds_the_plan_digest_and_each_finding(
        tmp_path: Path) -> None:
    from nodecert.certs.cluster import cabling_of
    rows = rail_plan()
    plan = read_plan(plan_file(tmp_path, rows))
    built = [x for x in as_built(rows) if (x.node, x.port) != ("gpu-02", "mlx5_3")]
    res = judge_cabling(plan, built)
    got = cabling_of([res])
    assert got is not None and got["plan_sha256"] == plan.digest
    assert got["verdict"] == "FAIL" and got["plan_lines"] == 16 and got["as_planned"] == 15
    assert got["findings"] == [{"kind": "missing", "text": "gpu-02 mlx5_3: no link; the plan "
                                "cables it to leaf-03 port 2 (plan line 9)"}]
    assert cabling_of([]) is None


def test_the_cluster_reads_one_plan_for_its_nodes_before_any_job(tmp_path: Path) -> None:
    import dataclasses
    from types import SimpleNamespace

    from nodecert.cluster.validate import cable_plan
    from nodecert.core.errors import InventoryError
    from support.cluster import context
    good = plan_file(tmp_path, rail_plan(nodes=3, rails=2))
    ctx = context(3)

    def named(*plans: str | None) -> object:
        specs = {f"h{k}": SimpleNamespace(validation={"cabling_plan": p} if p else {})
                 for k, p in enumerate(plans, 1)}
        return dataclasses.replace(ctx, specs=specs)  # type: ignore[arg-type]
    assert cable_plan(named(None, None, None)) is None  # type: ignore[arg-type]
    # the plan names gpu-NN, not h1..h3: refused naming the file and line
    with pytest.raises(InventoryError) as bad:
        cable_plan(named(str(good), str(good), str(good)))  # type: ignore[arg-type]
    assert bad.value.where == f"{good}:2" and "gpu-01 is not a host" in bad.value.what
    with pytest.raises(InventoryError, match="different cable plans"):
        cable_plan(named(str(good), None, str(good)))  # type: ignore[arg-type]
    ours = tmp_path / "ours.csv"
    ours.write_text("node,port,switch,switch_port\nh1,mlx5_0,leaf-0,1\nh2,mlx5_0,leaf-0,2\n")
    got = cable_plan(named(str(ours), str(ours), str(ours)))  # type: ignore[arg-type]
    assert got is not None and len(got.links) == 2
