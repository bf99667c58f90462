"""The framework checks: GEMM burn-in worker and smoke test.

Three layers: the workers themselves on the CPU with the real PyTorch (tiny sizes),
the judges on what the workers printed on a real H200 (tests/fixtures/recorded/),
and the checks end to end on the simulator (the lab's SIMULATED torch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from nodecert.profiles import thresholds
from nodecert_node.checks.hardware import judge_topology
from nodecert_node.checks.load import judge_gemm, judge_soak
from nodecert_node.checks.stack import judge_smoke
from nodecert_node.contract import Limits, Result, Verdict
from nodecert_node.parse import smi, topo
from nodecert_node.parse.events import events
from nodecert_node.workers.gemm import compare
from support.env import REPO
from support.simnode import SimNode

WORKERS = REPO / "validators" / "nodecert_node" / "workers"
H200 = REPO / "tests" / "fixtures" / "recorded" / "h200-device-2026-11-29"


def limits(model: str, **over: Any) -> Limits:
    return Limits(thresholds.resolve(model, cli=over))


def worker(name: str, *args: str, timeout: float = 120) -> list[dict[str, Any]]:
    # One CPU thread per worker: tiny matrices gain nothing from more, and parallel test
    # processes would otherwise oversubscribe the cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, str(WORKERS / name), *args], capture_output=True,
                       text=True, timeout=timeout, check=False, env=env)
    assert p.returncode in (0, 2, 3), p.stderr
    return events(p.stdout)


def recorded(name: str) -> list[dict[str, Any]]:
    return events((H200 / "gemm" / name).read_text())


def run_results() -> dict[str, Result]:
    out = {}
    for line in (H200 / "run" / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "result":
            r = Result.from_dict(ev["result"])
            out[r.check] = r
    return out


# --- the correctness comparison (pure, CPU) ------------------------------------------------

def test_compare_identical_one_ulp_and_corrupted() -> None:
    ref = torch.randn(32, 32).to(torch.bfloat16)
    assert compare(ref.clone(), ref, 2e-2) == {"differing": 0, "bad": 0, "max_abs": 0.0,
                                               "max_rel": 0.0}
    ulp = ref.clone()
    ulp.view(-1)[5] = ulp.view(-1)[5] * (1 + 2 ** -7)  # one bf16 ULP
    cmp = compare(ulp, ref, 2e-2)
    assert cmp["differing"] == 1 and cmp["bad"] == 0  # a bit flip inside the tolerance
    bad = ref.clone()
    bad.view(-1)[7] = 1000.0
    bad.view(-1)[9] = float("nan")
    cmp = compare(bad, ref, 2e-2)
    assert cmp["differing"] == 2 and cmp["bad"] == 2 and cmp["max_rel"] > 1


# --- the workers on the CPU with the real PyTorch ------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8"])
@pytest.mark.integration
def test_gemm_worker_on_cpu_is_bit_exact(dtype: str) -> None:
    evs = worker("gemm.py", "--device", "cpu", "--dtype", dtype, "--size", "48",
                 "--seconds", "0.4", "--report-s", "0.1", "--check-every", "5")
    kinds = [e["event"] for e in evs]
    assert kinds[0] == "ready" and kinds[-1] == "done" and "window" in kinds
    assert "mismatch" not in kinds and "error" not in kinds
    ready, done = evs[0], evs[-1]
    assert ready["ref_bad"] == 0 and ready["ref_max_rel"] < ready["tolerance"]
    assert done["checks"] > 0 and done["mismatches"] == 0 and done["tflops"] > 0
    res = judge_gemm({0: evs}, limits("H200-SXM", **{"burnin.tflops_min_bf16": 0,
                                                     "burnin.tflops_min_fp8": 0}))
    assert res.verdict is Verdict.PASS, res.summary


@pytest.mark.integration
def test_gemm_worker_catches_an_injected_corruption() -> None:
    evs = worker("gemm.py", "--device", "cpu", "--dtype", "fp32", "--size", "32",
                 "--seconds", "0.3", "--check-every", "4", "--inject-fault", "10")
    mism = [e for e in evs if e["event"] == "mismatch"]
    assert len(mism) == 1 and mism[0]["iter"] == 12 and mism[0]["bad"] == 1
    assert all(e.get("inject_fault") == 10 for e in evs if e["event"] in ("ready", "done"))
    res = judge_gemm({0: evs}, limits("L40S"))
    assert res.verdict is Verdict.FAIL
    assert res.summary.startswith("GPU0: silent data corruption: 1 elements differ")


@pytest.mark.integration
def test_gemm_worker_on_a_missing_device_reports_an_error() -> None:
    evs = worker("gemm.py", "--device", "3", "--size", "16", "--seconds", "0.1")
    assert evs[-1]["event"] == "error"
    res = judge_gemm({0: evs}, limits("H200-SXM"))
    assert res.verdict is Verdict.ERROR and res.fault_code == "NC-LOAD-ERROR"
    assert res.summary.startswith("GPU0: the GEMM load did not finish")


@pytest.mark.integration
def test_smoke_worker_trains_on_cpu_and_reports_versions() -> None:
    evs = worker("smoke.py", "--framework", "torch", "--cpu", "--steps", "30")
    fw = next(e for e in evs if e["event"] == "framework")
    assert fw["version"] == torch.__version__ and fw["gpus"] == []
    train = next(e for e in evs if e["event"] == "train")
    assert len(train["losses"]) == 30 and train["losses"][-1] < 0.5 * train["losses"][0]
    # Judged against what this CPU build is: versions match, no GPU to see.
    res = judge_smoke(evs, {"torch": torch.__version__}, gpu_count=0)
    assert res.verdict is Verdict.FAIL and "torch: no cuDNN" in res.findings
    res = judge_smoke(evs, {"torch": "2.9.1+cu130"}, gpu_count=0)
    assert f"torch: version {torch.__version__}, the stack pins 2.9.1+cu130" in res.findings


def test_smoke_worker_without_the_framework_fails() -> None:
    evs = worker("smoke.py", "--framework", "tensorflow", "--cpu")
    assert evs == [{"event": "error", "framework": "tensorflow",
                    "message": "not importable: No module named 'tensorflow'"}]
    res = judge_smoke(evs, {"tensorflow": "2.18.0"}, gpu_count=8)
    assert res.verdict is Verdict.FAIL
    assert res.summary == "tensorflow: not importable: No module named 'tensorflow'"


def test_smoke_judge_loss_not_falling_and_missing_gpus() -> None:
    evs = [{"event": "framework", "framework": "torch", "version": "2.9.1+cu130",
            "cuda": "13.0", "cudnn": "91300", "nccl": "2.27.7", "gpus": ["NVIDIA H200"] * 7},
           *({"event": "train", "framework": "torch", "device": f"cuda:{i}",
              "losses": [1.0, 0.2]} for i in range(6)),
           {"event": "train", "framework": "torch", "device": "cuda:6", "losses": [1.0, 0.9]}]
    res = judge_smoke(evs, {"torch": "2.9.1+cu130", "torch_cuda": "13.0"}, gpu_count=8)
    assert res.verdict is Verdict.FAIL
    assert set(res.findings) == {"torch: sees 7 GPUs, nvidia-smi sees 8",
                                 "torch on cuda:6: loss did not fall by half (1.0 -> 0.9)"}


# --- judges on a real H200 (recorded 2026-11-29) --------------------------------------------

def test_recorded_h200_burnin_passes_the_sustained_floor() -> None:
    r = run_results()["load.burnin"]
    assert r.verdict is Verdict.FAIL  # as recorded: judged against the old burst-based floor
    assert r.summary == "GPU0: 666 TFLOPS sustained (bf16), below the floor of 711"
    evs = events(next(e.output for e in r.evidence if e.name == "gemm GPU0"))
    res = judge_gemm({0: evs}, limits("H200-SXM"))  # today's profile: 590, sustained
    assert res.verdict is Verdict.PASS, res.summary
    assert res.value["tflops_per_gpu"] == {"0": 665.6}
    assert res.thresholds["burnin.tflops_min_bf16"].value == 590
    assert res.thresholds["burnin.tflops_min_bf16"].source.startswith(
        "nodecert policy: 90% of the sustained GEMM rate")


@pytest.mark.parametrize(("dtype", "low", "high"), [("bf16", 650, 660), ("fp16", 630, 640),
                                                    ("tf32", 340, 350), ("fp8", 1195, 1210)])
def test_recorded_h200_dtypes(dtype: str, low: float, high: float) -> None:
    res = judge_gemm({0: recorded(f"gemm-{dtype}.jsonl")}, limits("H200-SXM"))
    assert res.verdict is Verdict.PASS, res.summary
    assert low < res.value["tflops_per_gpu"]["0"] < high and res.value["dtype"] == dtype


def test_recorded_h200_injected_corruption_fails_naming_the_gpu() -> None:
    evs = recorded("gemm-bf16-injected.jsonl")
    res = judge_gemm({0: evs, 1: recorded("gemm-bf16.jsonl")}, limits("H200-SXM"))
    assert res.verdict is Verdict.FAIL
    assert res.summary.startswith("GPU0: silent data corruption: 1 elements differ from the "
                                  "reference product beyond the bf16 tolerance (first at "
                                  "iteration 100")


def test_slow_gpu_is_failed_against_the_best_in_the_node() -> None:
    good = recorded("gemm-bf16.jsonl")
    slow = [dict(e, windows=[w * 0.85 for w in e["windows"]]) if e["event"] == "done" else e
            for e in good]
    res = judge_gemm({0: good, 1: good, 2: slow}, limits("H200-SXM"))
    assert res.verdict is Verdict.FAIL
    assert res.findings == (
        "GPU2 sustained bf16 TFLOPS: needs >= 590 TFLOPS, measured 557.8 TFLOPS",
        "GPU2 558 TFLOPS as a fraction of the node's best GPU (656): needs >= 0.9 ratio, "
        "measured 0.85 ratio")


def test_hung_worker_partial_output_is_an_error() -> None:
    good = recorded("gemm-bf16.jsonl")
    hung = [e for e in good if e["event"] != "done"] + [
        {"event": "error", "message": "gemm GPU1 did not finish within 320 s (killed)"}]
    res = judge_gemm({0: good, 1: hung}, limits("H200-SXM"))
    assert res.verdict is Verdict.ERROR
    assert "GPU1: the GEMM load did not finish: gemm GPU1 did not finish within 320 s" \
        in res.summary


def test_recorded_h200_soak_at_the_power_cap_passes() -> None:
    r = run_results()["load.thermal_soak"]
    telemetry = next(e.output for e in r.evidence if e.name == "telemetry")
    fields = ["index", "temperature.gpu", "temperature.gpu.tlimit", "clocks.sm",
              "power.draw", "clocks_event_reasons.active"]
    rows = smi.parse_query_csv(telemetry, fields)
    assert len(rows) >= 60
    # Under the load the GPU sits at its power limit (SwPowerCap 0x4), which is not a fault.
    assert {int(x["clocks_event_reasons.active"], 16) for x in rows[10:]} == {0x4}
    res = judge_soak(rows, {0: None}, limits("H200-SXM"))
    assert res.verdict is Verdict.PASS and res.value["peak_temp_c"] == {0: 64.0}


def test_recorded_h200_smoke_and_topology() -> None:
    got = run_results()
    smoke = got["stack.framework_smoke"]
    assert smoke.verdict is Verdict.WARN
    assert smoke.value["torch"] == {"version": "2.11.0+cu130", "cuda": "13.0",
                                    "cudnn": "91900", "nccl": "2.28.9", "gpus": 1}
    evs = events(next(e.output for e in smoke.evidence if e.name == "torch smoke"))
    res = judge_smoke(evs, {"torch": "2.11.0+cu130", "torch_cuda": "13.0"}, gpu_count=1)
    assert res.verdict is Verdict.PASS, res.findings
    # The VM exposes no NVLink: `nvidia-smi nvlink -s` prints nothing (exit 0). That is
    # "no links", which an HGX H200 order must fail -- not a parse error, not a pass.
    assert topo.parse_nvlink_status((H200 / "smi" / "nvlink-s.txt").read_text()) == {}
    matrix = topo.parse_topo_matrix((H200 / "smi" / "topo-m.txt").read_text())
    assert matrix == {"GPU0": {"GPU0": "X"}}
    _, gpus = smi.parse_q((H200 / "smi" / "nvidia-smi-q.txt").read_text())
    res = judge_topology({"gpus": gpus, "matrix": matrix, "nvlink": {}},
                         limits("H200-SXM", **{"nvswitch.count": 0}))
    assert res.verdict is Verdict.FAIL
    assert res.findings == ("GPU0: `nvidia-smi nvlink -s` reports no NVLink, expected 18",)


# --- end to end on the simulator (the lab's SIMULATED torch) -------------------------------

def sim_check(node: SimNode, name: str, **load: Any) -> Result:
    plan = node.plan([name], suite="standard")
    plan["framework"] = node.framework_env()
    plan["options"]["load"].update(load)
    return node.check(name, plan)


@pytest.mark.integration
def test_sim_torch_burnin_smoke_and_soak_healthy(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    res = sim_check(node, "load.burnin", burnin_s=2, report_s=1)
    assert res.verdict is Verdict.PASS, res.summary
    assert res.value["load"] == "torch" and len(res.value["tflops_per_gpu"]) == 8
    # What the burn-in drew: the limit in force, the plateau, energy, TFLOPS per watt.
    energy = res.value["energy"]
    assert energy["power_limit_w_per_gpu"] == {str(g): 700.0 for g in range(8)}
    assert all(600 < w <= 700 for w in energy["power_w_per_gpu"].values())
    assert energy["energy_wh"] == pytest.approx(sum(energy["energy_wh_per_gpu"].values()))
    assert energy["energy_wh"] > 0 and energy["samples"] >= 8
    for g, per_w in energy["tflops_per_w_per_gpu"].items():
        assert per_w == pytest.approx(res.value["tflops_per_gpu"][g]
                                      / energy["power_w_per_gpu"][g], rel=1e-3)
    assert any(e.name == "power" for e in res.evidence)
    res = sim_check(node, "stack.framework_smoke")
    assert res.verdict is Verdict.PASS, res.findings
    assert res.summary == "torch 2.9.1+cu130 (CUDA 13.0) sees 8 GPUs and trains on each"
    res = sim_check(node, "load.thermal_soak", soak_s=3, report_s=1)
    assert res.verdict is Verdict.PASS, res.summary
    assert any(e.name == "gemm GPU7" for e in res.evidence)


@pytest.mark.integration
def test_sim_torch_burnin_faults(tmp_path: Path) -> None:
    node = SimNode(tmp_path, faults=[{"kind": "sdc", "gpu": 3},
                                     {"kind": "tflops_low", "gpu": 1, "factor": 0.8}])
    res = sim_check(node, "load.burnin", burnin_s=2, report_s=1)
    assert res.verdict is Verdict.FAIL
    assert [f.split(" ")[0].rstrip(":") for f in res.findings] == ["GPU3", "GPU1", "GPU1"]
    assert "silent data corruption" in res.findings[0]
    assert res.findings[1].startswith("GPU1 sustained bf16 TFLOPS: needs >= 590 TFLOPS")
    assert "as a fraction of the node's best GPU" in res.findings[2]


@pytest.mark.integration
def test_missing_framework_environment_fails(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    plan = node.plan(["load.burnin"], suite="standard")
    plan["framework"] = {**node.framework_env(), "python": str(tmp_path / "nope/bin/python")}
    res = node.check("load.burnin", plan)
    assert res.verdict is Verdict.FAIL and res.fault_code == "NC-NO-FRAMEWORK"
    assert str(tmp_path / "nope/bin/python") in res.summary


def test_soak_memory_temperature_limit_from_the_profile() -> None:
    row = {"index": "0", "temperature.gpu": "62", "temperature.gpu.tlimit": "21",
           "clocks.sm": "1500", "power.draw": "691.0", "clocks_event_reasons.active": "0x4",
           "temperature.memory": "74"}
    ok = judge_soak([row, dict(row, **{"temperature.memory": "92"})], {0: None},
                    limits("H200-SXM"))
    assert ok.verdict is Verdict.PASS and ok.facts["series"]["0"][1][5] == 92
    hot = judge_soak([row, dict(row, **{"temperature.memory": "93"})], {0: None},
                     limits("H200-SXM"))
    assert hot.verdict is Verdict.FAIL
    assert hot.summary == ("GPU0 memory temperature under load (sample 1): needs <= 92 C, "
                           "measured 93 C")
    assert hot.thresholds["soak.mem_temp_max_c"].source.endswith("(95 - 3 C margin: nodecert "
                                                                 "policy; real H200s report "
                                                                 "this limit only as a "
                                                                 "relative T.Limit)")
    # GDDR parts report N/A: nothing to judge, not a failure.
    na = judge_soak([dict(row, **{"temperature.memory": "[N/A]"})], {0: None}, limits("L40S"))
    assert na.verdict is Verdict.PASS and na.facts["series"]["0"][0][5] is None


# --- fabric fallbacks in the stack's PyTorch (no nccl-tests / nvbandwidth) ------------------

@pytest.mark.integration
def test_allreduce_worker_on_cpu_counts_wrong_values() -> None:
    from nodecert_node.checks.fabric import judge_nccl, nccl_from_events
    args = ("allreduce", "--cpu", "--ranks", "2", "--max-bytes", "4K", "--iters", "3",
            "--warmup", "1")
    evs = worker("collective.py", *args)
    parsed = nccl_from_events(evs)
    assert parsed["ranks"] == 2 and [r["size"] for r in parsed["rows"]] == [
        8 << k for k in range(10)]
    assert all(r["wrong"] == 0 and r["busbw"] == pytest.approx(r["algbw"], rel=0.02)
               for r in parsed["rows"] if r["algbw"] > 0.001)  # 2(n-1)/n = 1 for n = 2
    res = judge_nccl(parsed, 2, limits("L40S"))
    assert res.verdict is Verdict.WARN  # no PCIe-only floor: the figure is reported
    bad = nccl_from_events(worker("collective.py", *args, "--inject-fault"))
    assert all(r["wrong"] == 3 for r in bad["rows"])
    res = judge_nccl(bad, 2, limits("L40S"))
    assert res.verdict is Verdict.FAIL
    assert res.summary.startswith("3 wrong values at 8 B (out-of-place): the collective "
                                  "returned corrupted data")


@pytest.mark.integration
def test_copy_worker_on_cpu_feeds_the_bandwidth_judge() -> None:
    from nodecert_node.checks.fabric import judge_bandwidth, nvbandwidth_from_events
    evs = worker("collective.py", "copy", "--cpu", "--bytes", "8M")
    parsed = nvbandwidth_from_events(evs)
    assert set(parsed["tests"]) == {"host_to_device_memcpy_ce", "device_to_host_memcpy_ce"}
    assert parsed["tests"]["host_to_device_memcpy_ce"]["matrix"][0][0] > 0
    res = judge_bandwidth(parsed, limits("L40S", **{"fabric.h2d_gbs_min": 0.001}))
    assert res.verdict is Verdict.PASS, res.summary
    res = judge_bandwidth(parsed, limits("L40S", **{"fabric.h2d_gbs_min": 10000}))
    assert res.verdict is Verdict.FAIL and res.summary.startswith("GPU0 host->GPU")


@pytest.mark.integration
def test_fabric_checks_fall_back_to_torch_when_the_tools_are_missing(tmp_path: Path) -> None:
    node = SimNode(tmp_path, faults=[{"kind": "busbw_low", "factor": 0.7}])
    for tool in ("all_reduce_perf", "nvbandwidth"):
        (node.bin / tool).unlink()
    res = sim_check(node, "fabric.nccl_allreduce")
    assert res.value["tool"] == "torch.distributed" and res.verdict is Verdict.FAIL
    assert "needs >= 440 GB/s" in res.summary
    assert res.evidence[-1].name == "torch fallback for all_reduce_perf"
    res = sim_check(node, "fabric.bandwidth")
    assert res.verdict is Verdict.PASS, res.summary
    assert res.value["tool"] == "torch copy test"
    assert len(res.value["device_to_device_memcpy_read_ce"]) == 56  # 8 x 7 ordered pairs
    # Neither the tool nor a framework: ERROR that says so, never a pass.
    plan = node.plan(["fabric.nccl_allreduce"], suite="standard")
    res = node.check("fabric.nccl_allreduce", plan)
    assert res.verdict is Verdict.ERROR and res.fault_code == "NC-TOOL-MISSING"
    assert "all_reduce_perf is not installed and there is no PyTorch" in res.summary


def test_recorded_h200_fabric_fallbacks() -> None:
    from nodecert_node.checks.fabric import (
        judge_bandwidth,
        judge_nccl,
        nccl_from_events,
        nvbandwidth_from_events,
    )
    got = {}
    for line in (H200 / "fabric" / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "result":
            got[ev["result"]["check"]] = Result.from_dict(ev["result"])
    bw = got["fabric.bandwidth"]
    assert bw.verdict is Verdict.PASS and bw.value["tool"] == "torch copy test"
    evs = events(next(e.output for e in bw.evidence if e.name.startswith("torch fallback")))
    res = judge_bandwidth(nvbandwidth_from_events(evs), limits("H200-SXM"))
    assert res.verdict is Verdict.PASS
    assert res.value["host_to_device_memcpy_ce"] == {0: 54.89}  # Gen5 x16, floor 45 (C2)
    copy4g = events((H200 / "fabric" / "copy-4g.jsonl").read_text())
    assert [e.get("gbs") for e in copy4g if e["event"] in ("h2d", "d2h")] == [55.3, 55.28]
    # One GPU: the recorded all-reduce has busbw 0 by definition; as recorded it FAILED
    # against the 8-GPU floor; the judge now says the floor does not apply (WARN).
    ar = got["fabric.nccl_allreduce"]
    assert ar.verdict is Verdict.FAIL and ar.summary.startswith("bus bandwidth 0 GB/s")
    evs = events(next(e.output for e in ar.evidence if e.name.startswith("torch fallback")))
    parsed = nccl_from_events(evs)
    assert parsed["ranks"] == 1 and parsed["nccl_version"] == "2.28.9"
    assert all(r["wrong"] == 0 for r in parsed["rows"]) and parsed["rows"][-1]["size"] == 1 << 30
    res = judge_nccl(parsed, 1, limits("H200-SXM"))
    assert res.verdict is Verdict.WARN and res.summary.startswith("one GPU")
    # The same events claimed for an 8-GPU node fail: 1 rank of 8.
    res = judge_nccl(parsed, 8, limits("H200-SXM"))
    assert res.verdict is Verdict.FAIL and "all-reduce ran on 1 of the node's 8 GPUs" in \
        res.findings
