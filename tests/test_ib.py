"""The RDMA fabric of one node: ibstat, ibstatus, ibv_devinfo and perfquery parsed from
real outputs (and their indentation and truncation variants), and net.ib / net.roce
judged against the order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert.inventory.fabric import parse_fabric
from nodecert_node.checks.net import judge_ports
from nodecert_node.contract import Limits, Verdict
from nodecert_node.parse import ParseError, ib

REAL = Path(__file__).parent / "fixtures" / "real"
IB = REAL / "ibstat"
NDR = "h100-node-8x-cx7-ndr-bf3-bond-all-active-ibstat-space-indent.txt"
ROCE = "h100-roce-8x-cx7-400g-4x-cx6dx-100g-all-active-ibstat.txt"
ROCE_DOWN = "h100-roce-8x-cx7-400g-2-ports-down-disabled-rate40-ibstat.txt"
HDR_2X = "a100-brev-8x-cx6-hdr-rate-100-width-2x-ibstat-tabs.txt"
LIMITS = Limits({"net.error_counter_growth_max": {"value": 0, "op": "<=", "unit": "errors"},
                 "net.post_fec_ber_max": {"value": 1e-12, "op": "<=", "unit": "BER"}})


def _ports(name: str) -> list[dict[str, Any]]:
    return ib.parse_ibstat((IB / name).read_text())


def test_real_ibstat_outputs() -> None:
    ndr = _ports(NDR)
    ibp = [p for p in ndr if p["link_layer"] == "InfiniBand"]
    assert len(ndr) == 9 and len(ibp) == 8
    assert {(p["state"], p["phys_state"], p["rate_gbps"], p["firmware"]) for p in ibp} == {
        ("Active", "LinkUp", 400.0, "28.41.1000")}
    assert ndr[0]["ca"] == "mlx5_0" and ndr[0]["ca_type"] == "MT4129" and ndr[0]["lid"] == 128
    down = [p for p in _ports(ROCE_DOWN) if p["state"] != "Active"]
    assert [(p["state"], p["phys_state"], p["rate_gbps"]) for p in down] == [
        ("Down", "Disabled", 40.0)] * 2
    assert {p["rate_gbps"] for p in _ports(HDR_2X)} == {100.0}  # HDR trained at 2X


def test_real_ibstatus_and_ibv_devinfo() -> None:
    st_ports = ib.parse_ibstatus((IB / "a100-azure-8x-hdr-ibstatus.txt").read_text())
    hdr = [p for p in st_ports if p["link_layer"] == "InfiniBand"]
    assert len(hdr) == 8 and {(p["rate_gbps"], p["width"], p["speed"]) for p in hdr} == {
        (200.0, "4X", "HDR")}
    dev = ib.parse_ibv_devinfo((IB / "h200-azure-ndv5-ibv_devinfo-cx7-ndr.txt").read_text())
    ibd = [p for p in dev if p["link_layer"] == "InfiniBand"]
    assert len(ibd) == 8 and {(p["state"], p["firmware"]) for p in ibd} == {
        ("Active", "28.40.1702")}


def test_real_perfquery_outputs() -> None:
    (basic,) = ib.parse_perfquery((REAL / "perfquery" /
                                   "a100-brev-cx6-perfquery-C-mlx5_0-port1-basic-counters-relay-"
                                   "errors.txt").read_text())
    assert basic["kind"] == "Port" and basic["counters"]["PortRcvSwitchRelayErrors"] == 6
    two = ib.parse_perfquery((REAL / "perfquery" / "edr-switch-lid1719-2-ports-perfquery-l-x-"
                              "extended.txt").read_text())
    assert [(b["lid"], b["port"]) for b in two] == [(1719, 1), (1719, 2)]
    assert two[0]["counters"]["PortXmitData"] == 36298026860928  # 64-bit counters
    with pytest.raises(ParseError, match="before any"):
        ib.parse_perfquery("SymbolErrorCounter:......0\n")


@given(st.sampled_from(["\t", "  ", "    ", " \t", "        "]), st.sampled_from(["\t\t", "    ",
                                                                                   "\t    "]))
def test_indentation_never_changes_what_is_read(one: str, two: str) -> None:
    text = (IB / NDR).read_text()
    lines = []
    for line in text.splitlines():
        body = line.strip()
        depth = len(line) - len(line.lstrip())
        lines.append(body if depth == 0 else (one if depth <= 8 else two) + body)
    assert ib.parse_ibstat("\n".join(lines)) == _ports(NDR)


@given(st.integers(min_value=1, max_value=len((IB / NDR).read_text()) - 1))
def test_a_cut_output_is_refused_or_read_right(cut: int) -> None:
    full = _ports(NDR)
    try:
        got = ib.parse_ibstat((IB / NDR).read_text()[:cut])
    except ParseError:
        return
    # what is returned is a prefix of the full reading, each port whole
    for p in got:
        q = next(x for x in full if (x["ca"], x["port"]) == (p["ca"], p["port"]))
        assert {k: q[k] for k in ("state", "phys_state", "link_layer")} == {
            k: p[k] for k in ("state", "phys_state", "link_layer")}
        assert p["rate_gbps"] == q["rate_gbps"] and p["firmware"] == q["firmware"]


def test_a_value_in_the_wrong_form_is_refused() -> None:
    text = (IB / NDR).read_text().replace("Rate: 400", "Rate: fast", 1)
    with pytest.raises(ParseError, match="cannot read the link rate 'fast'"):
        ib.parse_ibstat(text)
    with pytest.raises(ParseError, match="not ibstat output"):
        ib.parse_ibstat("Port 1:\n  State: Active\n")


# --- the judge ------------------------------------------------------------------------------

SPEC = {"link_layer": "InfiniBand", "ports": 8, "rate_gbps": 400.0}


def _judge(ports: list[dict[str, Any]], spec: dict[str, Any] | None = SPEC,
           layer: str = "InfiniBand", **kw: Any) -> Any:
    return judge_ports("net.ib", layer, spec, ports, before=kw.get("before", {}),
                       after=kw.get("after", {}), window_s=3, limits=LIMITS,
                       affinity=kw.get("affinity"))


def test_a_healthy_ndr_node_passes_and_each_fault_is_named() -> None:
    ports = _ports(NDR)
    assert _judge(ports).verdict is Verdict.PASS
    down = [dict(p, state="Down", phys_state="Polling") if p["ca"] == "mlx5_6" else p
            for p in ports]
    r = _judge(down)
    assert r.verdict is Verdict.FAIL
    assert "mlx5_6 port 1: Down/Polling, expected Active/LinkUp" in r.findings
    slow = [dict(p, rate_gbps=200.0) if p["ca"] == "mlx5_5" else p for p in ports]
    assert "mlx5_5 port 1: 200 Gb/s, the order says 400" in _judge(slow).findings
    fw = _judge(ports, dict(SPEC, firmware="28.43.1014"))
    assert fw.verdict is Verdict.FAIL and "firmware 28.41.1000, the site's golden version " \
        "is 28.43.1014" in fw.summary
    missing = _judge([p for p in ports if p["ca"] != "mlx5_7"])
    assert "7 InfiniBand ports, the order has 8" in missing.findings


def test_growing_error_counters_fail_and_old_ones_are_only_noted() -> None:
    ports = [p for p in _ports(NDR) if p["link_layer"] == "InfiniBand"]
    zero = {f"{p['ca']}/1": dict.fromkeys(ib.ERROR_COUNTERS, 0) for p in ports}
    old = {k: dict(v, SymbolErrorCounter=12) for k, v in zero.items()}
    r = _judge(ports, before=old, after=old)
    assert r.verdict is Verdict.PASS
    assert any("SymbolErrorCounter 12 since the counters were last cleared" in f
               for f in r.findings)
    grown = dict(old, **{"mlx5_4/1": dict(old["mlx5_4/1"], SymbolErrorCounter=40)})
    r = _judge(ports, before=old, after=grown)
    assert r.verdict is Verdict.FAIL
    assert "mlx5_4 port 1 SymbolErrorCounter over 3 s: needs <= 0 errors, measured 28" in \
        r.summary


def test_the_order_decides_which_ports_are_judged() -> None:
    roce = _ports(ROCE)
    spec = {"link_layer": "Ethernet", "ports": 8, "rate_gbps": 400.0}
    # the four 100 GbE front-end ports are not compute ports: name the compute HCAs
    assert _judge(roce, spec, "Ethernet").verdict is Verdict.FAIL
    compute = sorted({p["ca"] for p in roce if p["rate_gbps"] == 400.0})
    assert _judge(roce, dict(spec, devices=compute), "Ethernet").verdict is Verdict.PASS
    gone = _judge([p for p in roce if p["ca"] != compute[0]], dict(spec, devices=compute),
                  "Ethernet")
    assert f"HCA {compute[0]} of the order not found" in gone.findings
    # InfiniBand ordered: the RoCE check does not judge; no order: WARN, never a pass
    assert _judge(roce, SPEC, "Ethernet").verdict is Verdict.PASS
    assert _judge(_ports(NDR), None).verdict is Verdict.WARN
    assert _judge([], None).verdict is Verdict.PASS


def test_fabric_specs_are_read_or_refused() -> None:
    ok, why = parse_fabric({"link_layer": "InfiniBand", "ports": 8, "rate_gbps": 400,
                            "width": "4x", "devices": ["mlx5_0"]})
    assert why is None and ok == {"link_layer": "InfiniBand", "ports": 8, "rate_gbps": 400.0,
                                  "width": "4X", "devices": ["mlx5_0"]}
    for raw, msg in (({"link_layer": "IB", "ports": 8, "rate_gbps": 400}, "is not one of"),
                     ({"link_layer": "InfiniBand", "ports": 8}, "lacks rate_gbps"),
                     ({"link_layer": "InfiniBand", "ports": 8, "rate_gbps": 400, "rate": 1},
                      "unknown key(s) rate"),
                     ({"link_layer": "InfiniBand", "ports": 2.5, "rate_gbps": 400},
                      "positive integer"), ("8x NDR", "must be a mapping")):
        spec, why = parse_fabric(raw)
        assert spec is None and why is not None and msg in why, (raw, why)


# --- the simulated HCAs of the lab ------------------------------------------------------------

@pytest.mark.parametrize(("fault", "words"), [
    ({"kind": "port_down", "hca": 2}, "mlx5_2 port 1: Down/Polling, expected Active/LinkUp"),
    ({"kind": "width_degraded", "hca": 5}, "mlx5_5 port 1: 200 Gb/s, the order says 400"),
    ({"kind": "speed_degraded", "hca": 1}, "mlx5_1 port 1: 200 Gb/s, the order says 400"),
    ({"kind": "hca_missing", "hca": 7}, "7 InfiniBand ports, the order has 8"),
    ({"kind": "hca_firmware", "hca": 6},
     "mlx5_6 port 1: firmware 28.39.1002, the site's golden version is 28.41.1000"),
    ({"kind": "symbol_errors", "hca": 3, "per_s": 50},
     "mlx5_3 port 1 SymbolErrorCounter over 0.5 s: needs <= 0 errors"),
])
@pytest.mark.integration
def test_lab_hca_faults_fail_net_ib(tmp_path: Path, fault: dict[str, Any], words: str) -> None:
    from support.simnode import SimNode, failing
    got = failing(SimNode(tmp_path, "h200-sxm-8", faults=[fault]))
    assert list(got) == ["net.ib"], got
    assert words in got["net.ib"], got["net.ib"]


@pytest.mark.integration
def test_lab_hcas_read_like_real_ones(tmp_path: Path) -> None:
    from support.simnode import SimNode
    node = SimNode(tmp_path, "h200-sxm-8", faults=[{"kind": "width_degraded", "hca": 0}])
    ports = ib.parse_ibstat(node.tool("ibstat"))
    assert len(ports) == 10 and ports[0]["rate_gbps"] == 200.0
    # 8 compute rails and 2 front-end Ethernet ports, which net.ib leaves alone
    assert [p["link_layer"] for p in ports].count("Ethernet") == 2
    ok = SimNode(tmp_path / "ok", "h200-sxm-8").check("net.ib")
    assert ok.verdict is Verdict.PASS and ok.summary.startswith("8 InfiniBand ports"), ok.summary
    status = ib.parse_ibstatus(node.tool("ibstatus"))
    assert (status[0]["width"], status[1]["width"], status[1]["speed"]) == ("2X", "4X", "NDR")
    (block,) = ib.parse_perfquery(node.tool("perfquery", "-x", "-C", "mlx5_4", "-P", "1"))
    assert block["counters"]["SymbolErrorCounter"] == 0
    roce = SimNode(tmp_path / "roce", "l40s-pcie-4")
    assert {p["link_layer"] for p in ib.parse_ibstat(roce.tool("ibstat"))} == {"Ethernet"}


def test_real_mlxlink_outputs() -> None:
    ber = ib.parse_mlxlink((REAL / "mlxlink" / "a100-brev-8x-cx6-hdr-mlxlink-show-counters-"
                            "grep-ber-fec.txt").read_text())
    assert len(ber) == 8 and ber[0]["device"] == "mlx5_0"
    assert ber[0]["effective_ber"] == 1.5e-254 and ber[0]["raw_ber"] == 1e-8
    assert ber[0]["symbol_errors"] == 0 and ber[2]["raw_ber"] == 3e-8
    info = ib.parse_mlxlink((REAL / "mlxlink" / "a100-brev-8x-cx6-hdr-width-2x-mlxlink-loop-"
                             "show-ber-monitor-unsupported.txt").read_text())
    assert {(d["state"], d["speed"], d["width"], d["firmware"]) for d in info} == {
        ("Active", "IB-HDR", "2x", "20.36.1010")}
    assert info[0]["recommendation"] == "No issue was observed"
    assert info[0]["errors"] == ['"--show_ber_monitor" option is not supported for HCA']
    with pytest.raises(ParseError, match="is not a BER"):
        ib.parse_mlxlink("===== mlx5_0 =====\nRaw Physical BER : high\n")


def test_a_post_fec_bit_error_rate_above_ibdiagnets_threshold_fails_the_port() -> None:
    """The real HDR output (symbol and effective BER printed as 15E-255, raw BER up to
    1E-7, which the FEC corrects) passes; a symbol BER above 1e-12 fails naming the port;
    an output without post-FEC figures is not judged on them."""
    real = ib.parse_mlxlink((REAL / "mlxlink" / "a100-brev-8x-cx6-hdr-mlxlink-show-counters-"
                             "grep-ber-fec.txt").read_text())
    assert max(d["raw_ber"] for d in real) == 1e-7
    ports = _ports(NDR)
    healthy = [dict(p, mlxlink=real[k % len(real)]) for k, p in enumerate(ports)]
    assert _judge(healthy).verdict is Verdict.PASS
    bad = [dict(p, mlxlink=dict(real[0], symbol_ber=4e-11)) if p["ca"] == "mlx5_4" else p
           for p in healthy]
    r = _judge(bad)
    assert r.verdict is Verdict.FAIL
    assert r.summary == ("mlx5_4 port 1 symbol BER (mlxlink): needs <= 1e-12 BER, measured "
                         "4e-11 BER")
    assert "net.post_fec_ber_max" in r.thresholds
    # EDR: the effective BER is the one judged (no symbol BER printed)
    edr = dict(real[0], effective_ber=3e-12)
    del edr["symbol_ber"]
    r = _judge([dict(p, mlxlink=edr) if p["ca"] == "mlx5_0" else p for p in ports])
    assert r.summary.startswith("mlx5_0 port 1 effective BER (mlxlink): needs <= 1e-12")
    # mlxlink without BER lines (the module/state view): nothing judged on BER
    info = {"recommendation": "No issue was observed", "raw_ber": 1e-5}
    assert _judge([dict(p, mlxlink=info) for p in ports]).verdict is Verdict.PASS


def test_mlxlinks_own_diagnosis_is_a_warning() -> None:
    ports = _ports(NDR)
    ports[0] = dict(ports[0], mlxlink={"recommendation": "Bad signal integrity: check the "
                                                         "cable and its connectors"})
    r = _judge(ports)
    assert r.verdict is Verdict.WARN
    assert r.summary == ("mlx5_0 port 1: mlxlink recommends: Bad signal integrity: check the "
                         "cable and its connectors")


@pytest.mark.integration
def test_an_ordered_fabric_without_ibstat_is_an_error(tmp_path: Path) -> None:
    from support.simnode import SimNode
    node = SimNode(tmp_path, "h200-sxm-8")
    (node.bin / "ibstat").unlink()
    r = node.check("net.ib")
    assert r.verdict is Verdict.ERROR and "ibstat is not installed" in r.summary
    assert "infiniband-diags" in r.remediation


def test_gpu_nic_affinity_on_real_topologies() -> None:
    from nodecert_node.checks.net import affinity_problems
    from nodecert_node.parse import topo

    def read(name: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        text = (REAL / "topo" / name).read_text()
        return topo.parse_topo_matrix(text), topo.nic_legend(text)

    b200 = read("b200-gke-a4-8gpu-8nic-topo-m-tabs-expanded.txt")
    assert affinity_problems(*b200, "PIX", None) == []  # one NIC pair per PCIe switch
    # leave out the NICs of GPU0/GPU1's switch: their nearest is then NODE
    far = affinity_problems(*b200, "PIX", [f"mlx5_{i}" for i in range(2, 8)])
    assert far == [f"GPU{g}: nearest fabric NIC mlx5_2 is NODE, the order wants PIX or "
                   "nearer (traffic crosses the CPU)" for g in (0, 1)]
    assert affinity_problems(*b200, "NODE", [f"mlx5_{i}" for i in range(2, 8)]) == []
    assert "lists none of the order's NICs (mlx5_99)" in affinity_problems(
        *b200, "PIX", ["mlx5_99"])[0]
    r = _judge(_ports(NDR), dict(SPEC, gpu_nic_affinity="PIX"), affinity=far)
    assert r.verdict is Verdict.FAIL and "GPU0: nearest fabric NIC mlx5_2 is NODE" in r.summary


def test_gpu_nic_affinity_on_the_old_layout_without_a_nic_legend() -> None:
    """Older drivers name the NIC columns by device (mlx5_N) and print no NIC legend."""
    from nodecert_node.checks.net import affinity_problems
    from nodecert_node.parse import topo
    text = (REAL / "topo" / "dgx-a100-8gpu-12nic-topo-m-nv12-old-format.txt").read_text()
    matrix, legend = topo.parse_topo_matrix(text), topo.nic_legend(text)
    assert legend == {} and "mlx5_11" in matrix["GPU0"]
    compute = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert affinity_problems(matrix, legend, "PXB", compute) == []
    assert affinity_problems(matrix, legend, "PXB", None) == []
    # a GPU pair whose NICs are left out of the order is named, with its nearest
    far = affinity_problems(matrix, legend, "PXB", ["mlx5_0", "mlx5_1"])
    assert far[0] == ("GPU2: nearest fabric NIC mlx5_0 is SYS, the order wants PXB or "
                      "nearer (traffic crosses the CPU)")
    assert len(far) == 6


@pytest.mark.integration
def test_a_missing_hca_leaves_its_gpu_without_a_near_nic(tmp_path: Path) -> None:
    from support.simnode import SimNode
    r = SimNode(tmp_path, "h200-sxm-8", faults=[{"kind": "hca_missing", "hca": 3}]).check(
        "net.ib")
    assert r.verdict is Verdict.FAIL
    assert r.findings[:2] == ("7 InfiniBand ports, the order has 8",
                              "GPU3: nearest fabric NIC mlx5_0 is NODE, the order wants PIX or "
                              "nearer (traffic crosses the CPU)")


def test_what_ibstat_does_not_print_is_refused_not_skipped() -> None:
    """ibstat aborting after the last adapter it could read (`ibpanic`) leaves a listing
    that looks whole: it is refused, naming the line, and so is any field ibstat does
    not print (another tool's text glued in), at the CA level and at the port level."""
    text = (IB / NDR).read_text()
    assert len(ib.parse_ibstat(text)) == 9
    panic = ("ibpanic: [2917] main: stat of IB device 'mlx5_9' failed: No such file or "
             "directory")
    with pytest.raises(ParseError, match=r"line \d+: ibstat reported an error, so its "
                                         r"listing is not complete: .ibpanic: \[2917\]"):
        ib.parse_ibstat(text + "\n" + panic + "\n")
    with pytest.raises(ParseError, match="ibstat reported an error"):
        ib.parse_ibstat(text.replace("CA 'mlx5_1'", "ibwarn: [77] umad_init: failed\nCA 'mlx5_1'",
                                     1))
    for old, new, where in (("Hardware version", "Transport", "CA"),
                            ("Capability mask", "Capabilities", "port")):
        with pytest.raises(ParseError, match=f"is not a {where} field ibstat prints"):
            ib.parse_ibstat(text.replace(old, new, 1))


@given(st.sampled_from(["ibpanic: [1] main: stat of IB device 'mlx5_4' failed: No such "
                        "file or directory", "ibwarn: [9] mad_rpc: _do_madrpc failed",
                        "Error: something: else", "Transport type: InfiniBand"]),
       st.integers(min_value=0, max_value=200))
def test_a_foreign_line_anywhere_is_refused(line: str, at: int) -> None:
    lines = (IB / NDR).read_text().splitlines()
    k = 1 + at % (len(lines) - 1)  # after the first CA line
    if lines[k].strip() and not lines[k].strip().startswith(("CA '", "Port ")):
        lines.insert(k, "\t" + line)
    else:
        lines.insert(k + 1, "\t" + line)
    with pytest.raises(ParseError):
        ib.parse_ibstat("\n".join(lines))
