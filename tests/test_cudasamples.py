"""The CUDA samples users already run (bandwidthTest, p2pBandwidthLatencyTest), read from
real outputs (tests/fixtures/real/cuda-samples, SOURCES.md) and generated variants, and
`nodecert parse` over them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.cli import main
from nodecert_node.parse import ParseError
from nodecert_node.parse.cudasamples import parse_bandwidth_test, parse_p2p
from support.env import REPO

CS = REPO / "tests" / "fixtures" / "real" / "cuda-samples"
H100 = CS / "h100-sxm-8gpu-p2pBandwidthLatencyTest.txt"
A100 = CS / "a100-sxm4-80gb-8gpu-p2pBandwidthLatencyTest-p2p-over-pcie-only.txt"


def test_bandwidth_test_quick_mode() -> None:
    d = parse_bandwidth_test((CS / "rtx2080ti-bandwidthTest-quick-mode.txt").read_text())
    assert d["devices"] == ["NVIDIA GeForce RTX 2080 Ti"] and d["mode"] == "Quick"
    assert (d["h2d"], d["d2h"], d["d2d"]) == ([(32000000, 12.2)], [(32000000, 13.2)],
                                              [(32000000, 518.9)])
    assert d["memory"] == "PINNED" and d["result"] == "PASS"


def test_bandwidth_test_cut_short_or_glued_is_refused() -> None:
    text = (CS / "rtx2080ti-bandwidthTest-quick-mode.txt").read_text()
    with pytest.raises(ParseError, match="the d2d table has no rows"):
        parse_bandwidth_test(text.split("   32000000                     518.9")[0])
    with pytest.raises(ParseError, match="line 10: expected transfer size and GB/s"):
        parse_bandwidth_test(text.replace("32000000                     12.2", "3200000012.2 x"))


def test_p2p_h100_over_nvlink_and_a100_over_pcie() -> None:
    h = parse_p2p(H100.read_text())
    assert [x["pci_bus"] for x in h["devices"]] == ["19", "3b", "4c", "5d", "9b", "bb", "cb",
                                                    "db"]
    assert h["peer_access"][0] == [1, 2, 3, 4, 5, 6, 7]
    assert h["bidir_p2p_on_gbs"]["gpu"][1][0] == 774.45
    assert h["unidir_p2p_off_gbs"]["gpu"][0][1] == 37.53
    assert h["latency_p2p_on_us"]["cpu"][7][7] == 2.09
    assert h["connectivity"] == [[1] * 8] * 8
    # the real sample's own whitespace (tabs, trailing spaces): P2P only at PCIe speed
    a = parse_p2p(A100.read_text())
    off_diag = [v for i, row in enumerate(a["unidir_p2p_on_gbs"]["gpu"])
                for j, v in enumerate(row) if i != j]
    assert len(off_diag) == 56 and max(off_diag) < 30


def test_p2p_cut_short_or_shifted_is_refused() -> None:
    text = H100.read_text()
    with pytest.raises(ParseError, match=r"latency_p2p_on_us \(cpu\) has 3 of 8 rows"):
        parse_p2p(text.split("     3   1.95")[0])
    row = "     2  45.83  46.03 2951.33  45.48  52.55  52.68  51.86  53.03"
    with pytest.raises(ParseError, match="expected a row index and 8 figures"):
        parse_p2p(text.replace(row, row.replace("  46.03 ", " ")))
    with pytest.raises(ParseError, match="a matrix this parser does not know"):
        parse_p2p(text.replace("P2P=Disabled Latency Matrix (us)",
                               "P2P=Disabled Read Latency Matrix (us)"))
    with pytest.raises(ParseError, match="not p2pBandwidthLatencyTest output"):
        parse_p2p("Device: 0, x, pciBusID: 1,\n")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.lists(st.floats(0, 3000, allow_nan=False).map(
        lambda v: round(v, 2)), min_size=n, max_size=n), min_size=n, max_size=n))),
    st.sampled_from(["\t", " "]))
def test_p2p_matrices_read_back_as_printed(nm: tuple[int, list[list[float]]], sep: str) -> None:
    n, m = nm
    head = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n" + "".join(
        f"Device: {i}, NVIDIA H200, pciBusID: {16 + i:x}, pciDeviceID: 0, pciDomainID:0\n"
        for i in range(n))
    body = "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D" + "".join(
        f"{i:6d} " for i in range(n)) + "\n" + "".join(
        f"{i:6d}{sep}" + " ".join(f"{v:6.2f}" for v in row) + " \n" for i, row in enumerate(m))
    assert parse_p2p(head + body)["bidir_p2p_on_gbs"]["gpu"] == m


def test_nodecert_parse_prints_json_or_refuses_with_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["parse", "p2pBandwidthLatencyTest", str(H100)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["bidir_p2p_on_gbs"]["gpu"][1][0] == 774.45
    r = CliRunner().invoke(main, ["parse", "bandwidthTest", str(H100)])
    assert r.exit_code == 2 and "not the CUDA samples' bandwidthTest output" in r.output
    assert str(H100) in r.output
    r = CliRunner().invoke(main, ["parse", "nvidia-smi-q-x", str(
        REPO / "tests/fixtures/real/nvidia-smi/b200-8gpu-580.105.08-q-x-v13.xml")])
    assert r.exit_code == 0 and len(json.loads(r.output)["gpus"]) == 8
    r = CliRunner().invoke(main, ["parse", "lspci", str(H100)])
    assert r.exit_code == 2 and "'lspci' is not one of" in r.output
    r = CliRunner().invoke(main, ["parse", "dmesg", str(tmp_path / "absent.txt")])
    assert r.exit_code == 2 and "cannot read the file" in r.output
