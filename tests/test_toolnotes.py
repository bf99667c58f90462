"""What NCCL and perftest say beside their figures reaches the result's message, on real
logs and on generated variants; the verdict stays the figures'."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.contract import Verdict
from nodecert_node.parse import bench, toolnotes
from support.env import REPO

pytestmark = pytest.mark.unit
REAL = REPO / "tests" / "fixtures" / "real"


def real(rel: str) -> str:
    return (REAL / rel).read_text(encoding="utf-8")


def test_real_nccl_logs() -> None:
    good = toolnotes.nccl_notes(
        real("nccl-debug/roce-2node-nccl-debug-info-channels-via-net-ib-gdrdma-good-EXCERPT"
             ".log"))
    # no "Using network" line in the excerpt: the channels ("via NET/IB/1/GDRDMA") say IB
    assert good == {"nccl_version": None, "network": "IB", "gdrdma": True, "notes": []}
    gb = toolnotes.nccl_notes(real(
        "nccl-debug/gb200-nvl72-1-tray-4rank-nccl-2.30.7-debug-init-mnnvl-cliqueid-fabric-"
        "uuid-EXCERPT.log"))
    # "NCCL_CUMEM_ENABLE set by environment" and the MNNVL lines are settings, not causes.
    assert gb["nccl_version"] == "2.30.7+cuda13.3" and gb["network"] == "IB"
    assert gb["notes"] == []
    hang = toolnotes.nccl_notes(real(
        "nccl-debug/roce-400g-2node-nccl-warn-net-ib-got-completion-status-5-12-vendor-err-"
        "proxy.log"))
    assert hang["notes"] == [
        "the IB transport failed a transfer with peer 10.46.70.21<50854>: status 5 "
        "(IBV_WC_WR_FLUSH_ERR: the queue pair was already in error)",
        "the IB transport failed a transfer with peer 10.46.70.22<39226>: status 12 "
        "(IBV_WC_RETRY_EXC_ERR: transport retries exceeded, a link or the remote side did "
        "not answer)"]


def test_channels_without_gdrdma_are_said_without_a_using_network_line() -> None:
    """The real RoCE log with its channels' "/GDRDMA" taken away (NCCL fell back to host
    memory staging) and no "Using network" line: said, with the transport from the
    channels."""
    text = real("nccl-debug/roce-2node-nccl-debug-info-channels-via-net-ib-gdrdma-good-"
                "EXCERPT.log").replace("/GDRDMA", "")
    got = toolnotes.nccl_notes(text)
    assert got["gdrdma"] is False and got["network"] == "IB"
    assert got["notes"] == ["no NCCL network channel used GPUDirect RDMA (no \"/GDRDMA\" on "
                            "any \"via NET\" line): traffic was staged through host memory"]


# NCCL's own lines (net_ib.cc, net_socket.cc, socket.cc), as NCCL_DEBUG=INFO prints them.
SOCKET_FALLBACK = [
    "NCCL INFO NCCL version 2.22.3+cuda12.6",
    "NCCL INFO NET/IB : No device found.",
    "NCCL INFO NET/Socket : Using [0]eth0:10.140.0.7<0>",
    "NCCL INFO Using network Socket",
    "NCCL INFO NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'",
    "NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0",
]
PREFIXES = ["", "gpu-01:31842:31905 [0] ", "[1,0]<stdout>:gpu-01:31842:31905 [3] ",
            "0: gpu-01:1:2 [0] "]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(PREFIXES), st.lists(st.sampled_from(
    ["# nccl-tests noise", "UCX  WARN  some transport warning", "", "[gpu-02] ssh: ok"]),
    max_size=4))
def test_socket_fallback_behind_any_prefix(prefix: str, noise: list[str]) -> None:
    text = "\n".join(noise + [prefix + ln for ln in SOCKET_FALLBACK] + noise)
    got = toolnotes.nccl_notes(text)
    assert got["nccl_version"] == "2.22.3+cuda12.6" and got["network"] == "Socket"
    assert got["gdrdma"] is False
    assert got["notes"][:2] == [
        "NCCL found no InfiniBand/RoCE device (\"NET/IB : No device found\"): check "
        "/dev/infiniband, the HCA driver and NCCL_IB_HCA",
        "NCCL used TCP sockets between nodes, not InfiniBand/RoCE (\"Using network Socket\")"]
    # The socket transport's own GDR line is named, and nothing is said twice.
    assert len(got["notes"]) == len(set(got["notes"])) == 3


def test_gdr_disabled_and_timeouts() -> None:
    text = "\n".join([
        "h:1:2 [0] NCCL INFO Using network IB",
        "h:1:2 [5] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 5 'mlx5_5' (no module)",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 3[3] -> 8[0] [send] via NET/IB/0",
        "h:1:2 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
        "h:1:2 [0] NCCL WARN socketPollConnect: Connect to 10.0.0.2<41357> returned "
        "110(Connection timed out) errno 115(Operation now in progress)"])
    got = toolnotes.nccl_notes(text)
    assert got["gdrdma"] is False and got["network"] == "IB"
    assert got["notes"][0].startswith("GPUDirect RDMA disabled for HCA mlx5_5 (no module)")
    assert got["notes"][1].startswith("NCCL connection timed out: socketPollConnect")
    assert got["notes"][2].startswith("no NCCL network channel used GPUDirect RDMA")
    assert not any("NCCL_IB_TIMEOUT" in n for n in got["notes"])


def test_nccl_version_from_info_lines_only() -> None:
    """nccl-tests output whose version appears only in NCCL's INFO lines (no "NCCL version"
    line of its own, no library code in the header)."""
    base = real("nccl-tests/a100-sxm4-40gb-8gpu-all-reduce-old-format.log")
    assert bench.parse_nccl(base)["nccl_version"] is None
    withinfo = base.replace("#\n", "#\ndgx:1:1 [0] NCCL INFO NCCL version 2.8.4+cuda11.2\n", 1)
    parsed = bench.parse_nccl(withinfo)
    assert parsed["nccl_version"] == "2.8.4+cuda11.2" and parsed["rows"]


def test_nccl_judge_keeps_the_verdict_and_says_why() -> None:
    from nodecert.profiles import thresholds
    from nodecert_node.checks.fabric import judge_nccl
    from nodecert_node.contract import Limits
    h200 = Limits(thresholds.resolve("H200-SXM"))
    base = real("nccl-tests/h200-azure-8gpu-all-reduce-8g-single-size.log")
    plain = judge_nccl(bench.parse_nccl(base), 8, h200)
    noted = judge_nccl(bench.parse_nccl(
        base + "\n".join("h:1:2 [0] " + ln for ln in SOCKET_FALLBACK) + "\n"), 8,
        h200)
    assert noted.verdict is plain.verdict is Verdict.PASS
    assert noted.summary.startswith(plain.summary + " [NCCL says: NCCL found no InfiniBand")
    assert noted.facts["tool_notes"]["NCCL"][1].startswith("NCCL used TCP sockets")
    assert "tool_notes" not in plain.facts and "[" not in plain.summary


def test_real_perftest_warnings() -> None:
    got = toolnotes.perftest_notes(real(
        "perftest/a100-cx6-hdr-2node-ib_write_bw-a-mlx5_0-23gbs-cpu-freq-warnings-"
        "interleaved.txt"))
    assert got["mtu"] == 4096 and got["relax_order"] is True
    assert got["notes"] == [
        "the CPU frequency was not at its maximum (23 \"Conflicting CPU frequency values "
        "detected\" lines): check the CPU governor"]
    clean = toolnotes.perftest_notes(real("perftest/dgx-spark-gb10-cx7-roce-ib_write_bw-4qp-"
                                          "gbits.txt"))
    assert clean["notes"] == [] and clean["relax_order"] is True


def test_perftest_relax_off_and_mtu_lowered() -> None:
    real_text = real("perftest/dgx-spark-gb10-cx7-roce-ib_write_bw-4qp-gbits.txt")
    text = real_text.replace("PCIe relax order: ON", "PCIe relax order: OFF")
    text = "Requested mtu is higher than active mtu \nChanging to active mtu - 3\n" + text
    text += " WARNING: BW peak won't be measured in this run.\n"
    got = toolnotes.perftest_notes(text)
    assert got["relax_order"] is False
    assert [n.split(" ")[0:3] for n in got["notes"]] == [
        ["the", "port's", "active"], ["PCIe", "relaxed", "ordering"],
        ["perftest:", "BW", "peak"]]
    assert "active MTU enum 3" in got["notes"][0]


def test_cluster_rails_carry_perftest_notes() -> None:
    from nodecert.cluster.judge import RAIL_MARK, rail_notes
    part = real("perftest/a100-cx6-hdr-2node-ib_write_bw-a-mlx5_0-23gbs-cpu-freq-warnings-"
                "interleaved.txt")
    rank1 = f"{RAIL_MARK}mlx5_0\n{part}\n=== nodecert rc 0\n{RAIL_MARK}mlx5_1\n" + \
        real("perftest/dgx-spark-gb10-cx7-roce-ib_write_bw-4qp-gbits.txt")
    notes = rail_notes(rank1)
    assert len(notes) == 1 and notes[0].startswith("rail mlx5_0: the CPU frequency")


def test_a_warning_beside_good_results_is_a_note_not_a_failure() -> None:
    """With NCCL_DEBUG=INFO, NCCL prints its warnings; one beside a complete, valid result
    table does not fail a healthy node. Without results, the warning is the failure."""
    from nodecert.profiles import thresholds
    from nodecert_node.checks.fabric import judge_nccl
    from nodecert_node.contract import Limits
    h200 = Limits(thresholds.resolve("H200-SXM"))
    base = real("nccl-tests/h200-azure-8gpu-all-reduce-8g-single-size.log")
    warn = "h:1:2 [0] NCCL WARN NUMA auto balancing enabled which can lead to variability\n"
    r = judge_nccl(bench.parse_nccl(warn + base), 8, h200)
    assert r.verdict is Verdict.PASS
    assert r.facts["tool_notes"]["NCCL"] == [
        "NCCL WARN NUMA auto balancing enabled which can lead to variability"]
    head = base.split("#       size")[0]
    dead = bench.parse_nccl(head + "h:1:2 [0] NCCL WARN Cuda failure 'out of memory'\n")
    assert dead["failures"] == ["h:1:2 [0] NCCL WARN Cuda failure 'out of memory'"]
    assert judge_nccl(dead, 8, h200).verdict is Verdict.FAIL
