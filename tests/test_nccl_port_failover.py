"""A network port lost under a multi-node collective's load: the acceptance collectives
run with NCCL's port failover off, so the run fails and names the port; where a site's
NCCL (2.29.7+) fails over anyway, its own log line of the failover fails the run though
the bandwidth on the ports left meets its floor. Real NCCL lines from NVIDIA/nccl issues
and the real RoCE fixture; the lab's simulator across two processes; the cluster stage."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from nodecert.cluster.judge import allreduce_script, pair_script, read_allreduce
from nodecert_node.parse.bench import parse_nccl
from nodecert_node.parse.toolnotes import port_failures
from support.cluster import FABRIC, LIMITS, ModelLauncher, run_model
from support.env import REPO
from support.simnode import STACK_580, SimNode

pytestmark = pytest.mark.unit

REAL = REPO / "tests" / "fixtures" / "real" / "nccl-debug"
HOST = os.uname().nodename
NCCL_2297 = {**STACK_580, "nccl": ("libnccl2", "2.29.7-1+cuda13.0")}


# --- reading NCCL's own lines ---------------------------------------------------------------

def test_a_failed_transfer_names_its_host_and_hca_in_every_nccl_format() -> None:
    real = (REAL / "roce-400g-2node-nccl-warn-net-ib-got-completion-status-5-12-vendor-err-"
                   "proxy.log").read_text()
    assert port_failures(real) == [
        "atl1g3r4u9gpu mlx5_9: a transfer with peer 10.46.70.21<50854> failed with status "
        "5 (IBV_WC_WR_FLUSH_ERR: the queue pair was already in error)",
        "atl1g3r1u16gpu mlx5_10: a transfer with peer 10.46.70.22<39226> failed with status "
        "12 (IBV_WC_RETRY_EXC_ERR: transport retries exceeded, a link or the remote side did "
        "not answer)"]
    # NVIDIA/nccl-tests#252 (an older NCCL: "with error N", no HCA named), behind srun's label
    older = (" 1: kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion "
             "from peer 10.0.35.1<49189> with error 4, opcode 5327, len 5327, vendor err 81 "
             "(Send)\n 1: kolyoz2:25146:25854 [0] NCCL INFO transport/net.cc:1137 -> 6\n")
    assert port_failures(older) == ["kolyoz2: a transfer with peer 10.0.35.1<49189> failed "
                                    "with status 4 (IBV_WC_LOC_PROT_ERR)"]


def test_a_failover_in_nccl_s_log_is_a_lost_port() -> None:
    # NVIDIA/nccl#2157, NCCL 2.29+ with NCCL_IB_RESILIENCY_PORT_FAILOVER=1 (its timestamp
    # prefix kept)
    line = ("[2026-05-04 19:55:27] GPU-606:534134:535429 [1] transport/net_ib/"
            "p2p_resiliency.cc:325 NCCL WARN NET/IB: ncclIbResiliencyHandleDeviceFailure: "
            "Device 0 marked as failed. Initiating recovery? Yes (send comm=0x7f03e8086000, "
            "outstandingRecovery=0)")
    assert port_failures(line + "\n" + line) == [
        "GPU-606: NCCL marked device 0 of a merged NIC failed and moved its traffic to the "
        "others (port failover)"]
    # INFO lines and other warnings are not lost ports
    assert port_failures("h1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n"
                         "h1:1:2 [0] NCCL WARN NET/Socket : socket timed out\n") == []


# --- the settings the acceptance collectives run with -----------------------------------------

def test_the_acceptance_collectives_run_with_port_failover_off() -> None:
    from nodecert.cluster.judge import expectation
    for script in (allreduce_script("h1", 29500, 8, "8G"),
                   pair_script("h1", 29500, expectation(FABRIC, 8, LIMITS), "8G", True)):
        assert "NCCL_IB_RESILIENCY_PORT_FAILOVER=0" in script
        assert script.index("NCCL_IB_RESILIENCY_PORT_FAILOVER=0") < script.index("_perf")


# --- the lab's simulator: two processes meeting as two nodes ---------------------------------

def _two_nodes(tmp: Path, failover: str, installed: dict[str, tuple[str, str]] | None = None,
               fault: bool = True) -> tuple[list[int], list[str]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes = [SimNode(tmp / "a", installed=installed),
             SimNode(tmp / "b", installed=installed,
                     faults=[{"kind": "port_fails_under_load", "hca": 2}] if fault else [])]
    procs = [subprocess.Popen(
        [str(node.bin / "all_reduce_perf"), "-b", "1M", "-e", "1G", "-f", "2", "-g", "8"],
        env={**node.env(), "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "2",
             "NCCL_COMM_ID": f"127.0.0.1:{port}", "NCCL_DEBUG": "INFO",
             "NCCL_IB_RESILIENCY_PORT_FAILOVER": failover},
        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for rank, node in enumerate(nodes)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    return [p.returncode for p in procs], outs


def test_without_failover_the_run_fails_and_names_the_port(tmp_path: Path) -> None:
    rcs, (rank0, rank1) = _two_nodes(tmp_path, "0", NCCL_2297)
    assert rcs == [3, 3]  # nccl-tests' testNcclError on every rank
    assert f"{HOST}: Test NCCL failure common.cu:1148 'remote process exited" in rank0
    assert "NCCL WARN" not in rank0  # the port is rank 1's: rank 0 only sees the end
    assert "with status=12 opcode=0 len=0 vendor err 129 (Send)" in rank1
    r = read_allreduce(rank0, [rank1])
    assert r.busbw is None and "Test NCCL failure" in r.problem
    assert r.port_failures == [
        f"{HOST} mlx5_2: a transfer with peer 127.0.0.1<40002> failed with status "
        "12 (IBV_WC_RETRY_EXC_ERR: transport retries exceeded, a link or the remote side did "
        "not answer)"]
    # rows printed before the port dropped are no figure
    sizes = [row["size"] for row in parse_nccl(rank0)["rows"]]
    assert sizes and max(sizes) < 1 << 30


def test_with_failover_on_nccl_rides_it_out_and_says_so(tmp_path: Path) -> None:
    rcs, (rank0, rank1) = _two_nodes(tmp_path / "fo", "1", NCCL_2297)
    assert rcs == [0, 0]
    assert ("transport/net_ib/p2p_resiliency.cc:325 NCCL WARN NET/IB: "
            "ncclIbResiliencyHandleDeviceFailure: Device 0 marked as failed. Initiating "
            "recovery? No") in rank1
    r = read_allreduce(rank0, [rank1])
    _, (healthy, _) = _two_nodes(tmp_path / "ok", "1", NCCL_2297, fault=False)
    full = read_allreduce(healthy).busbw
    assert r.busbw is not None and full is not None
    # 7 of 8 rails: above the fabric's 82.8% floor, so the bandwidth alone would pass it
    assert r.busbw / full == pytest.approx(7 / 8, rel=0.02)
    assert r.port_failures == [f"{HOST}: NCCL marked device 0 of a merged NIC failed and "
                               "moved its traffic to the others (port failover)"]


def test_before_2_29_7_there_is_no_failover_to_turn_on(tmp_path: Path) -> None:
    rcs, (_, rank1) = _two_nodes(tmp_path, "1")  # the r580 stack's NCCL 2.27.7
    assert rcs == [3, 3] and "hca mlx5_2" in rank1 and "marked as failed" not in rank1


# --- the cluster stage -------------------------------------------------------------------------

def test_a_lost_port_fails_the_cluster_though_its_bandwidth_meets_the_floor(
        tmp_path: Path) -> None:
    data = run_model(tmp_path, 4, ModelLauncher(failover={"h3"}))
    assert data["verdict"] == "FAIL" and data["culprits"] == ["h3"]
    res = {r["check"]: r for r in data["results"]}
    ar = res["cluster.allreduce"]
    assert ar["verdict"] == "FAIL" and ar["value"] == pytest.approx(376.0)
    assert ar["summary"].startswith("all-reduce over 4 nodes lost a network port under load: "
                                    "h3: NCCL marked device 1")
    assert any(f.endswith("lost h3: NCCL marked device 1 of a merged NIC failed and moved its "
                          "traffic to the others (port failover)")
               for f in res["cluster.pairs"]["findings"])
    # the same cluster without the lost port passes
    other = tmp_path / "healthy"
    other.mkdir()
    assert run_model(other, 4, ModelLauncher())["verdict"] == "PASS"
