"""Cluster runs without a cluster: launchers that answer from a script or from a fabric
model (every job's output in the real tools' formats), and the lab's scaling model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from nodecert.cluster.context import ClusterContext
from nodecert.cluster.judge import RAIL_MARK, expectation
from nodecert.cluster.run import ClusterRun
from nodecert.inventory.cluster import ClusterConfig
from nodecert.transport.engines import SlurmLauncher
from nodecert.transport.jobs import Job, JobResult, Launcher
from nodecert.transport.ssh import Endpoint
from nodecert_node.scaling import model_size
from nodecert_node.workers.scaling import params
from support.env import REPO

LIMITS = {"cluster.busbw_per_nic_fraction_min": {"value": 0.828, "source": "NICBW"},
          "cluster.rail_bw_fraction_min": {"value": 0.85, "source": "RAILBW"}}


FABRIC = {"link_layer": "InfiniBand", "ports": 8, "rate_gbps": 400}


def ep(host: str, user: str = "root") -> Endpoint:
    return Endpoint(host, f"10.0.0.{int(host[1:]) if host[1:].isdigit() else 1}", 22, user,
                    None, (), "python3")


class ScriptedLauncher(SlurmLauncher):
    """The launch host as a script: (exit code, output, timed out) per command."""

    def __init__(self, answers: dict[str, tuple[int | None, str, bool]]) -> None:
        super().__init__(ClusterConfig(engine="slurm", partition="gpu"), ep("h1"))
        self.answers, self.sent = answers, []
        self.swept: list[str] = []

    def remote(self, command: str, timeout: float,
               always: bool = False) -> tuple[int | None, str, bool]:
        self.sent.append(command)
        for key, answer in self.answers.items():
            if key in command:
                return answer
        return 0, "", False

    def sweep(self, job: Job) -> dict[str, int]:
        self.swept.append(job.name)
        return dict.fromkeys(job.nodes, 0)


def nccl_text(hosts: list[str], busbw: float) -> str:
    lines = ["# nccl-tests version 2.17.8 nccl-headers=22707 nccl-library=22707",
             "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 8589934592 step: 2(factor) "
             "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#",
             "# Using devices"]
    lines += [f"#  Rank {k * 8 + g:2d} Group  0 Pid    100 on {h:>10} device {g:2d} "
              f"[0000:18:00] NVIDIA H200" for k, h in enumerate(hosts) for g in range(8)]
    algbw = busbw / (2 * (len(hosts) * 8 - 1) / (len(hosts) * 8))
    lines += ["NCCL version 2.27.7+cuda13.0", "#",
              f"  8589934592    2147483648     float     sum      -1    47535 {algbw:7.2f} "
              f"{busbw:7.2f}      0    47743 {algbw:7.2f} {busbw:7.2f}      0",
              "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100", "#"]
    return "\n".join(lines) + "\n"


def perftest_text(dev: str, gbps: float) -> str:
    return (f" RDMA_Write BW Test\n Dual-port       : OFF\t\tDevice         : {dev}\n"
            f" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            f" 65536      5000             {gbps:.2f}             {gbps:.2f}             0.7\n"
            + "-" * 40 + "\n")


class ModelLauncher(Launcher):
    """Answers each job from a fabric model: node -> factor of its rails (and per rail),
    hung nodes never answer. Records the jobs and the waves they ran in."""

    engine = "slurm"

    def __init__(self, slow: dict[str, float] | None = None,
                 rails: dict[str, dict[str, float]] | None = None,
                 hang: set[str] | None = None, no_gdr: set[str] | None = None,
                 failover: set[str] | None = None) -> None:
        super().__init__(ClusterConfig(engine="slurm"), ep("h1"))
        self.slow, self.rails, self.hang = slow or {}, rails or {}, hang or set()
        # nodes without GPUDirect RDMA: NCCL's channels through them lack "/GDRDMA"
        self.no_gdr = no_gdr or set()
        # nodes that lose a port late in each run and whose NCCL fails over from it (its
        # figures barely move: the loss shows only in NCCL's own log line)
        self.failover = failover or set()
        self.ran: list[Job] = []

    def run(self, job: Job) -> JobResult:
        self.ran.append(job)
        if self.hang & set(job.nodes):
            return JobResult(job, "srun ...", 124, " 0: # nThread 1\n", 30.0, timed_out=True,
                             leftovers=dict.fromkeys(job.nodes, 0))
        busbw = 376.0 * min(self.slow.get(n, 1.0) for n in job.nodes)
        busbw *= min(min(self.rails.get(n, {}).values(), default=1.0) for n in job.nodes)
        gdr = "" if self.no_gdr & set(job.nodes) else "/GDRDMA"
        text = nccl_text(list(job.nodes), busbw) + "".join(
            f"{job.nodes[0]}:100:101 [0] NCCL INFO Channel {c:02d}/0 : 0[0] -> 8[0] [send] "
            f"via NET/IB/{c}{gdr}\n" for c in range(2))
        out = "".join(f" 0: {ln}\n" for ln in text.splitlines())
        for rank, node in enumerate(job.nodes):
            if node in self.failover:
                out += (f" {rank}: {node}:200:209 [0] transport/net_ib/p2p_resiliency.cc:325 "
                        "NCCL WARN NET/IB: ncclIbResiliencyHandleDeviceFailure: Device 1 "
                        "marked as failed. Initiating recovery? No (send comm=0x7f03e8000001, "
                        "outstandingRecovery=0)\n")
        if "ib_write_bw" in job.script:
            for k in range(8):
                dev = f"mlx5_{k}"
                g = 388.0 * min(self.slow.get(n, 1.0) * self.rails.get(n, {}).get(dev, 1.0)
                                for n in job.nodes)
                out += f" 1: {RAIL_MARK}{dev}\n" + "".join(
                    f" 1: {ln}\n" for ln in perftest_text(dev, g).splitlines())
        return JobResult(job, "srun ...", 0, out, 0.5)


def context(n: int) -> ClusterContext:
    nodes = [f"h{k}" for k in range(1, n + 1)]
    return ClusterContext(nodes, {x: x for x in nodes}, {}, {x: ep(x) for x in nodes},
                          ep("h1"), ClusterConfig(engine="slurm", scaling=False),
                          expectation(FABRIC, 8, LIMITS), simulated=True)


def fabric_ok(nodes: list[str], bad: dict[str, str] | None = None) -> dict[str, Any]:
    bad = bad or {}
    return {n: {"check": "net.ib", "verdict": "FAIL" if n in bad else "PASS",
                "summary": bad.get(n, "8 ports Active"), "findings": [],
                "identity": {"system_uuid": f"uuid-{n}", "system_serial": f"SN-{n}",
                             "gpus": [{"serial": f"G-{n}-{i}", "uuid": f"GPU-{n}-{i}"}
                                      for i in range(8)]}} for n in nodes}


def run_model(tmp_path: Path, n: int, launcher: ModelLauncher,
              bad_fabric: dict[str, str] | None = None, *,
              fabric: dict[str, Any] | None = None) -> dict[str, Any]:
    ctx = context(n)
    if fabric is not None:
        ctx = dataclasses.replace(ctx, exp=expectation(fabric, 8, LIMITS))
    d = tmp_path / "cluster-run-abcdef"
    d.mkdir()
    return ClusterRun(ctx, d, lambda _: None, launcher).run(fabric_ok(ctx.nodes, bad_fabric))


PROFILES = yaml.safe_load((REPO / "src" / "nodecert" / "lab" / "profiles.yml").read_text())


def model_efficiency(profile: str, gpus: int, busbw: float, slow: float = 1.0) -> float:
    """The lab's model as documented (nodecert_simhw/scaling.py), computed here from the
    profile's figures: compute alone / (compute of the slowest GPU + 30% of the gradient
    all-reduce at its algorithm bandwidth)."""
    g = PROFILES["profiles"][profile]["gpu"]
    size = model_size(g["memory_mib"])
    p = params(size["layers"], size["d_model"])
    rate = g["bf16_tflops"] * 0.84 * 0.45 * 1e12
    one = 6 * p * size["batch"] * size["seq"] / rate
    comm = 4 * p / (busbw * gpus / (2 * (gpus - 1)) * 1e9)
    return one / (one / slow + 0.3 * comm)

