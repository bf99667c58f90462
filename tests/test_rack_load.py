"""The NVLink domain under load: the sweep's plan (linear, every GPU each round with a
GPU of another tray), the naming of a slow GPU in two rounds plus one confirmation, the
rack-wide all-reduce's verdict from NCCL's own MNNVL line, and the simulator's MNNVL
model (two processes meeting over NCCL_COMM_ID, as across two trays)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.cluster.context import ClusterContext
from nodecert.cluster.judge import Expectation, Reading
from nodecert.inventory.cluster import ClusterConfig
from nodecert.rack import sweep
from nodecert.rack.load import DomainLoad, LoadPlan, judge_allreduce, mnnvl_span, pair_script
from nodecert.transport.jobs import Job, JobResult, Launcher
from nodecert_node.contract import Threshold, Verdict
from support.cluster import ep
from support.env import REPO
from support.simnode import SimNode

pytestmark = pytest.mark.unit
PEER = Threshold(0.85, ">=", "ratio", "SWEEPPEER")
FLOOR = Threshold(690, ">=", "GB/s", "MNNVL")
TRAYS = [f"h{k}" for k in range(1, 19)]
REAL_MNNVL = (REPO / "tests" / "fixtures" / "real" / "nccl-debug" /
              "gb200-nvl72-1-tray-4rank-nccl-2.30.7-debug-init-mnnvl-cliqueid-fabric-uuid-"
              "EXCERPT.log")


def measure(pairs: list[sweep.GpuPair], slow: dict[str, float]) -> dict[sweep.GpuPair, float]:
    return {p: 790.0 * min(slow.get(e, 1.0) for e in p.ends) for p in pairs}


def run_sweep(trays: list[str], slow: dict[str, float], *, confirm_slow: bool = True
              ) -> tuple[sweep.GpuPair | None, dict[sweep.GpuPair, float | None]]:
    figures: dict[sweep.GpuPair, float | None] = {}
    for pairs in sweep.plan(trays, 4):
        figures.update(measure(pairs, slow))
    iso = sweep.named(figures, PEER)
    again = sweep.confirmations(iso.culprits + iso.suspects, figures, PEER)
    figures.update(measure(again, slow if confirm_slow else {}))
    return (again[0] if again else None), figures


def test_the_plan_is_linear_and_pairs_every_gpu_across_trays_each_round() -> None:
    rounds = sweep.plan(TRAYS, 4)
    assert len(rounds) == 2
    met: dict[str, set[str]] = {}
    for pairs in rounds:
        assert len(pairs) == 36  # 72 GPUs, each once: linear, never every pair
        ends = [e for p in pairs for e in p.ends]
        assert len(ends) == len(set(ends)) == 72
        for p in pairs:
            assert p.trays[0] != p.trays[1]
            met.setdefault(p.ends[0], set()).add(p.trays[1])
            met.setdefault(p.ends[1], set()).add(p.trays[0])
    assert all(len(t) == 2 for t in met.values())  # two partners on two other trays


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 18), st.integers(1, 4))
def test_every_gpu_of_any_rack_meets_two_partner_trays(trays: int, gpus: int) -> None:
    names = [f"t{k:02d}" for k in range(trays)]
    met: dict[str, set[str]] = {}
    for pairs in sweep.plan(names, gpus):
        ends = [e for p in pairs for e in p.ends]
        assert len(ends) == len(set(ends))
        for p in pairs:
            met.setdefault(p.ends[0], set()).add(p.trays[1])
            met.setdefault(p.ends[1], set()).add(p.trays[0])
    assert len(met) == trays * gpus
    assert all(len(t) >= min(2, trays - 1) for t in met.values())


def test_a_slow_gpu_among_72_is_named_in_two_rounds_and_one_confirmation() -> None:
    confirm, figures = run_sweep(TRAYS, {"h7 GPU 2": 0.5})
    result, named = sweep.judge(figures, {}, PEER, simulated=True)
    assert named == ["h7 GPU 2"]
    assert result.verdict == Verdict.FAIL
    assert result.value["rounds"] == 2 and result.value["confirmations"] == 1
    assert result.value["pairs"] == 73
    assert confirm is not None and confirm.ends[0] == "h7 GPU 2"
    assert confirm.trays[1] not in ("h7",) and confirm.round == 0
    assert len(result.findings) == 1
    assert result.findings[0] == (
        "h7 GPU 2: 395.0 GB/s with h11 GPU 2, 395.0 GB/s with h13 GPU 1, and 395.0 GB/s with "
        "h1 GPU 0 in confirmation: needs >= 0.85 ratio, measured 0.5 ratio of the median "
        "pair (790.0 GB/s)")
    heat = result.value["heatmap"]
    assert heat["h7"]["2"] == 395.0
    assert all(v == 790.0 for t, g in heat.items() for k, v in g.items()
               if (t, k) != ("h7", "2"))


def test_two_slow_gpus_on_different_trays_are_both_named_and_nobody_else() -> None:
    _, figures = run_sweep(TRAYS, {"h3 GPU 0": 0.6, "h12 GPU 3": 0.5})
    result, named = sweep.judge(figures, {}, PEER, simulated=True)
    assert named == ["h12 GPU 3", "h3 GPU 0"] and result.verdict == Verdict.FAIL
    assert len(result.findings) == 2


def test_a_healthy_domain_passes_with_nothing_to_confirm() -> None:
    confirm, figures = run_sweep(TRAYS, {})
    result, named = sweep.judge(figures, {}, PEER, simulated=True)
    assert confirm is None and named == []
    assert result.verdict == Verdict.PASS
    assert result.summary == ("72 GPUs in 2 sampling rounds of pairs across trays: every pair "
                              "within >= 0.85 ratio of the median (790.0 GB/s)")


def test_a_gpu_fine_in_its_confirmation_is_a_transient_not_a_failure() -> None:
    _, figures = run_sweep(TRAYS, {"h7 GPU 2": 0.5}, confirm_slow=False)
    result, named = sweep.judge(figures, {}, PEER, simulated=True)
    assert named == [] and result.verdict == Verdict.WARN
    assert "a transient, not named" in result.findings[0]


def test_a_slow_pair_that_names_no_gpu_still_fails() -> None:
    """Each GPU of the slow pair did well with its other partner: no GPU is named, but
    the pair (the path between them) is slow, and the sweep never passes it."""
    figures: dict[sweep.GpuPair, float | None] = {}
    for pairs in sweep.plan(TRAYS, 4):
        figures.update(measure(pairs, {}))
    bad = sorted(figures)[5]
    figures[bad] = 300.0
    result, named = sweep.judge(figures, {}, PEER, simulated=True)
    assert named == [] and result.verdict == Verdict.FAIL
    assert result.findings == (f"{bad.label()}: 300.0 GB/s in round {bad.round}, below >= 0.85 "
                               "ratio of the median pair, while each GPU did well in another "
                               "pairing (the path between them?)",)


def test_a_pair_that_did_not_run_is_an_error_never_a_pass() -> None:
    figures: dict[sweep.GpuPair, float | None] = {}
    for pairs in sweep.plan(TRAYS, 4):
        figures.update(measure(pairs, {}))
    lost = next(iter(figures))
    figures[lost] = None
    result, _ = sweep.judge(figures, {lost: "hung past its limit (job-7)"}, PEER,
                            simulated=True)
    assert result.verdict == Verdict.ERROR
    assert any("hung past its limit" in f for f in result.findings)
    nothing, _ = sweep.judge({}, {}, PEER, simulated=True)
    assert nothing.verdict == Verdict.ERROR


def test_an_nvl36_rack_of_nine_trays_is_swept_too() -> None:
    trays = [f"h{k}" for k in range(1, 10)]
    _, figures = run_sweep(trays, {"h9 GPU 1": 0.5})
    result, named = sweep.judge(figures, {}, PEER, simulated=True)
    assert named == ["h9 GPU 1"] and result.value["gpus"] == 36


# --- the rack-wide all-reduce ------------------------------------------------------------

def test_nccl_s_real_mnnvl_line_is_read() -> None:
    text = REAL_MNNVL.read_text()
    assert mnnvl_span(text) == (1, 4)
    assert mnnvl_span("NCCL INFO Using network IB\n") is None


def _res(out: str = "", *, timed_out: bool = False, error: str = "") -> JobResult:
    return JobResult(Job("nodecert-abc-rack-1", ("h1", "h2"), "x", 60), "srun ...",
                     124 if timed_out else 0, out, 3.0, timed_out=timed_out, error=error)


def test_the_rack_all_reduce_verdicts() -> None:
    def judge(reading: Reading, span: tuple[int, int] | None, **kw: bool) -> str:
        r = judge_allreduce(reading, _res(**kw), span, FLOOR, world=72, trays=18,
                            timeout_s=600, simulated=True)
        return f"{r.verdict.name} {r.summary}"
    assert judge(Reading(busbw=770.0, oob=0), (1, 72)) == (
        "PASS all-reduce over 18 trays (72 GPUs): busbw needs >= 690 GB/s, measured 770 GB/s")
    assert judge(Reading(busbw=600.0, oob=0), (1, 72)) == (
        "FAIL all-reduce over 18 trays (72 GPUs): busbw needs >= 690 GB/s, measured 600 GB/s")
    # over InfiniBand instead of the NVLink domain: whatever the figure, not the domain
    assert judge(Reading(busbw=770.0, oob=0), (0, 4)).startswith(
        "FAIL NCCL did not run the all-reduce over the NVLink domain: MNNVL 0")
    assert judge(Reading(busbw=770.0, oob=0), (1, 68)).startswith("FAIL NCCL did not run")
    assert judge(Reading(), None, timed_out=True) == (
        "ERROR all-reduce over 18 trays hung past 600 s")
    assert judge(Reading(problem="no result rows"), None).startswith(
        "ERROR all-reduce over the rack did not run: no result rows")
    assert judge(Reading(busbw=770.0, oob=2), (1, 72)).startswith("FAIL")


def test_the_pair_script_gives_each_rank_its_own_gpu() -> None:
    s = pair_script("h3", 29500, "h12", 2, 1, max_bytes="8G")
    assert ('if [ "$first" = h12 ]; then g0=2; g1=1; else g0=1; g1=2; fi; if [ "$r" = 0 ]; '
            "then export CUDA_VISIBLE_DEVICES=$g0; else export CUDA_VISIBLE_DEVICES=$g1; fi"
            ) in s
    # the tray holding rank 0 is read where the job runs: h12 or not, each its own GPU
    choose = s[s.index('if [ "$first"'):s.index("; exec ")]
    for first, want in (("h12", ["2", "1"]), ("h3", ["1", "2"])):
        got = [subprocess.run(["bash", "-c", f'first={first}; r={r}; {choose}; echo '
                               '"$CUDA_VISIBLE_DEVICES"'], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip() for r in (0, 1)]
        assert got == want, (first, got)
    assert s.endswith("exec all_reduce_perf -b 1M -e 8G -f 2 -g 1")
    assert 'NCCL_COMM_ID="$first:29500"' in s


# --- DomainLoad through a launcher ---------------------------------------------------------

class DomainModel(Launcher):
    """Answers each job from an NVLink domain model: GPU -> factor; the pair jobs' GPUs
    come from their scripts (CUDA_VISIBLE_DEVICES per rank)."""

    engine = "slurm"

    def __init__(self, slow: dict[str, float]) -> None:
        super().__init__(ClusterConfig(engine="slurm"), ep("h1"))
        self.slow = slow
        self.ran: list[Job] = []

    def run(self, job: Job) -> JobResult:
        self.ran.append(job)
        m = re.search(r'if \[ "\$first" = (\S+) \]; then g0=(\d); g1=(\d);', job.script)
        if m:
            other = next(n for n in job.nodes if n != m.group(1))
            gpus = [f"{m.group(1)} GPU {m.group(2)}", f"{other} GPU {m.group(3)}"]
        else:
            gpus = [f"{n} GPU {g}" for n in job.nodes for g in range(4)]
        busbw = 790.0 * min(self.slow.get(g, 1.0) for g in gpus)
        n = len(gpus)
        lines = ["# nccl-tests version 2.17.8 nccl-headers=22707 nccl-library=22707",
                 "# Using devices", "NCCL version 2.27.7+cuda13.0",
                 f"h1:1:1 [0] NCCL INFO MNNVL 1 cliqueId 2786 cliqueSize {n} cliqueRank 0 "
                 f"nvlDomainSize {n}", "#",
                 f"  8589934592    2147483648     float     sum      -1    47535 "
                 f"{busbw / (2 * (n - 1) / n):7.2f} {busbw:7.2f}      0    47743 "
                 f"{busbw / (2 * (n - 1) / n):7.2f} {busbw:7.2f}      0",
                 "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100", "#"]
        return JobResult(job, "srun ...", 0, "".join(f" 0: {ln}\n" for ln in lines), 0.5)


def test_the_domain_under_load_names_the_slow_gpu(tmp_path: Path) -> None:
    ctx = ClusterContext(TRAYS, {t: t for t in TRAYS}, {}, {t: ep(t) for t in TRAYS},
                         ep("h1"), ClusterConfig(engine="slurm"),
                         Expectation(FLOOR, Threshold(0, ">=", "Gb/s"), (), 4, "NVLink"),
                         simulated=True)
    launcher = DomainModel({"h7 GPU 2": 0.5})
    d = tmp_path / "rack-run-abcdef"
    d.mkdir()
    domain = DomainLoad(LoadPlan(ctx, FLOOR, PEER, 4), d, lambda _: None, launcher)
    ar = domain.allreduce()
    assert ar.verdict == Verdict.FAIL and ar.value == 395.0  # the slowest GPU sets the pace
    result, named = domain.sweep()
    assert named == ["h7 GPU 2"] and result.value["rounds"] == 2
    sweeps = [j for j in launcher.ran if "-sweep-" in j.name]
    assert len(sweeps) == 73  # 2 rounds of 36 pairs, then one confirmation
    assert (d / "jobs").is_dir() and len(list((d / "jobs").iterdir())) == 74


# --- the simulator's MNNVL model ---------------------------------------------------------

def _tray(tmp: Path, name: str, clique: int, faults: list[dict[str, object]] | None = None
          ) -> SimNode:
    node = SimNode(tmp / name, "gb200-nvl-4", faults=faults)
    hw = json.loads(node.hw.read_text())
    hw["rack"] = {"name": "rack-a", "clique_id": str(clique),
                  "cluster_uuid": "a44167d1-5423-d758-7d6b-24c07d32e7b3"}
    node.hw.write_text(json.dumps(hw))
    return node


def _pair(nodes: list[SimNode], gpus: list[int]) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, (node, gpu) in enumerate(zip(nodes, gpus, strict=True)):
        env = {**node.env(), "OMPI_COMM_WORLD_RANK": str(rank),
               "OMPI_COMM_WORLD_SIZE": str(len(nodes)), "NCCL_COMM_ID": f"127.0.0.1:{port}",
               "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": str(gpu)}
        procs.append(subprocess.Popen([str(node.bin / "all_reduce_perf"), "-b", "1M", "-e",
                                       "1G", "-f", "2", "-g", "1"], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=60)[0] for p in procs]
    return outs[0]


def test_the_simulator_runs_a_gpu_pair_over_the_nvlink_domain(tmp_path: Path) -> None:
    from nodecert_node.parse.bench import parse_nccl
    a, b = _tray(tmp_path, "t1", 10118), _tray(tmp_path, "t2", 10118,
                                                [{"kind": "nvlink_slow", "gpu": 3}])
    fast = _pair([a, b], [1, 2])
    assert "NCCL INFO MNNVL 1 cliqueId 2786 cliqueSize 2 cliqueRank 0 nvlDomainSize 2" in fast
    assert re.search(r"NCCL INFO MNNVL busId 0x3f000 fabric UUID a44167d15423d758\."
                     r"7d6b24c07d32e7b3 cliqueId 0x2786 state 3 healthMask 0x0", fast), fast
    assert mnnvl_span(fast) == (1, 2)
    best = max(parse_nccl(fast)["rows"], key=lambda r: r["size"])["busbw"]
    slow = max(parse_nccl(_pair([a, b], [1, 3]))["rows"], key=lambda r: r["size"])["busbw"]
    assert slow / best < 0.6  # GPU 3 of t2 carries half its NVLink bandwidth
    # another clique: no MNNVL, NCCL goes over the NICs
    c = _tray(tmp_path, "t3", 9)
    other = _pair([a, c], [0, 0])
    assert mnnvl_span(other) is None and "Using network IB" in other
    over_ib = max(parse_nccl(other)["rows"], key=lambda r: r["size"])["busbw"]
    assert 150 < over_ib < 200  # 4 NDR rails, one channel each, not the NVLink domain

