"""Scaling efficiency: the training worker on the CPU with the real PyTorch, the model's
sizing, the node judge (load.scaling) and the cluster judge, and the check end to end on
the simulator, whose SIMULATED figures must match the hardware model's expectation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodecert.cluster.scaling import NodeScaling, job_script, judge
from nodecert.inventory.cluster import parse_cluster
from nodecert.profiles import thresholds
from nodecert.runs.records import GroupRecord
from nodecert_node.contract import Limits, Threshold, Verdict
from nodecert_node.parse.events import events
from nodecert_node.scaling import judge_scaling, model_size, topology
from nodecert_node.workers.scaling import build, params
from support.cluster import ModelLauncher, model_efficiency, run_model
from support.env import REPO
from support.simnode import SimNode

WORKER = REPO / "validators" / "nodecert_node" / "workers" / "scaling.py"
PROFILES = yaml.safe_load((REPO / "src" / "nodecert" / "lab" / "profiles.yml").read_text())


def limits(model: str, **over: Any) -> Limits:
    return Limits(thresholds.resolve(model, cli=over))


def worker(*args: str) -> tuple[int, list[dict[str, Any]]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, str(WORKER), "--cpu", "--steps", "2",
                        "--warmup", "1", "--layers", "1", "--d-model", "64", "--heads", "4",
                        "--seq", "32", *args], capture_output=True, text=True, timeout=180,
                       check=False, env=env)
    return p.returncode, events(p.stdout)


# --- the worker, for real on the CPU -------------------------------------------------------

@pytest.mark.integration
def test_a_rendezvous_port_taken_before_rank_0_binds_it_is_tried_again(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """The worker finds a free port, but another program takes it first (here: held by
    this test): the rendezvous moves to a new port instead of failing the run."""
    import socket as real_socket

    from nodecert_node.workers import scaling as mod
    taken = real_socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    handed: list[int] = []

    class FirstPortTaken(real_socket.socket):
        def getsockname(self) -> tuple[str, int]:
            if not handed:  # the first port "found free" is the one already in use
                handed.append(taken.getsockname()[1])
                return ("127.0.0.1", handed[0])
            got: tuple[str, int] = super().getsockname()
            handed.append(got[1])
            return got

    monkeypatch.setattr(mod.socket, "socket", FirstPortTaken)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        rc = mod.main(["ddp", "--gpus", "2", "--cpu", "--steps", "2", "--warmup", "1",
                       "--layers", "1", "--d-model", "64", "--heads", "4", "--seq", "32"])
    finally:
        taken.close()
    evs = events(capfd.readouterr().out)
    assert rc == 0, evs
    assert len(handed) == 2 and handed[0] != handed[1]  # tried again on a new port
    assert [e["event"] for e in evs] == ["ready", "result", "done"]


@pytest.mark.integration
def test_the_worker_trains_every_gpu_alone_and_all_together() -> None:
    rc, evs = worker("single", "--gpus", "2")
    assert rc == 0, evs
    assert evs[0]["event"] == "ready" and evs[0]["params"] == params(1, 64)
    alone = sorted(e["gpu"] for e in evs if e["event"] == "gpu")
    assert alone == [0, 1]
    assert all(e["tokens_s"] > 0 and e["steps"] == 2 for e in evs if e["event"] == "gpu")
    rc, evs = worker("ddp", "--gpus", "2")
    assert rc == 0, evs  # the worker's error event says why
    result = [e for e in evs if e["event"] == "result"]
    assert len(result) == 1 and result[0]["world"] == 2
    assert result[0]["step_ms_min"] <= result[0]["step_ms_median"] <= result[0]["step_ms_max"]


def test_the_worker_refuses_sizes_it_cannot_build() -> None:
    rc, evs = worker("single", "--gpus", "1", "--heads", "5")
    assert rc == 2 and evs[-1]["event"] == "error" and "divide" in evs[-1]["message"]


def test_the_parameter_count_is_the_models() -> None:
    import argparse
    for layers, d in ((1, 64), (3, 128)):
        model = build(argparse.Namespace(layers=layers, d_model=d, heads=4))
        assert sum(p.numel() for p in model.parameters()) == params(layers, d)


# --- sizing and the node judge ----------------------------------------------------------

def test_the_model_is_sized_from_the_gpus_memory() -> None:
    h200 = model_size(143771)
    assert (h200["d_model"], h200["layers"], h200["seq"], h200["batch"]) == (4096, 9, 2048, 4)
    # weights, gradients and AdamW state take about a fifth of the memory
    assert 0.15 < params(h200["layers"], 4096) * 16 / (143771 * 2 ** 20) < 0.25
    assert model_size(46068)["d_model"] == 2048
    assert model_size(1)["layers"] == 2  # never below 2 layers


def test_topology_follows_the_models_profile() -> None:
    assert topology(limits("H200-SXM")) == "nvlink"
    assert topology(limits("L40S")) == "pcie"
    assert topology(limits("A100-PCIE-80GB")) == "pcie"  # NVLink bridges optional: PCIe


def evs_of(alone: list[float], together: float | None) -> tuple[list[dict[str, Any]],
                                                                 list[dict[str, Any]]]:
    single = [{"event": "ready", "params": 10}] + [
        {"event": "gpu", "gpu": g, "tokens_s": v} for g, v in enumerate(alone)]
    ddp = [] if together is None else [{"event": "result", "tokens_s": together,
                                        "step_ms_median": 100.0, "step_ms_min": 99.0,
                                        "step_ms_max": 102.0}]
    return single, ddp


def test_node_judge_passes_a_node_that_scales() -> None:
    r = judge_scaling(*evs_of([1000.0] * 8, 7800.0), 8, "nvlink", limits("H200-SXM"))
    assert r.verdict is Verdict.PASS, r.findings
    assert r.value["efficiency"] == 0.975 and r.value["tokens_s_1"] == 1000.0
    assert r.facts["curve"] == [[1, 1.0], [8, 0.975]]
    assert r.value["step_spread"] == 0.03
    assert "scaling.node_efficiency_min_nvlink" in r.thresholds


def test_node_judge_names_the_slow_gpu_and_the_poor_scaling() -> None:
    r = judge_scaling(*evs_of([1000.0] * 7 + [700.0], 5600.0), 8, "nvlink",
                      limits("H200-SXM"))
    assert r.verdict is Verdict.FAIL and r.fault_code == "NC-SCALING"
    assert r.findings[0].startswith("GPU7 alone 700 tokens/s as a fraction of the node's best")
    assert "scaling efficiency over 8 GPUs" in r.findings[1]
    assert "needs >= 0.9 ratio, measured 0.7 ratio" in r.findings[1]
    # the same figure passes a PCIe-only node's floor
    r = judge_scaling(*evs_of([1000.0] * 4, 2800.0), 4, "pcie", limits("L40S"))
    assert r.verdict is Verdict.PASS, r.findings


def test_node_judge_errors_when_a_figure_is_missing() -> None:
    single, ddp = evs_of([1000.0] * 7, 7800.0)
    r = judge_scaling(single, ddp, 8, "nvlink", limits("H200-SXM"))
    assert r.verdict is Verdict.ERROR and "GPU7: no single-GPU figure" in r.summary
    single, _ = evs_of([1000.0] * 8, None)
    r = judge_scaling(single, [{"event": "error", "message": "NCCL error: unhandled"}], 8,
                      "nvlink", limits("H200-SXM"))
    assert r.verdict is Verdict.ERROR and "NCCL error" in r.summary
    r = judge_scaling(single, [], 8, "nvlink", limits("H200-SXM"))
    assert r.verdict is Verdict.ERROR and "no result" in r.summary


# --- the check on the simulator -------------------------------------------------------------



def sim_scaling(tmp: Path, profile: str = "h200-sxm-8",
                faults: list[dict[str, Any]] | None = None) -> Any:
    node = SimNode(tmp, profile=profile, faults=faults)
    plan = node.plan(["load.scaling"], suite="standard")
    plan["framework"] = node.framework_env()
    return node.check("load.scaling", plan)


@pytest.mark.integration
def test_sim_efficiency_matches_the_hardware_model(tmp_path: Path) -> None:
    r = sim_scaling(tmp_path)
    assert r.verdict is Verdict.PASS, r.findings
    fab = PROFILES["profiles"]["h200-sxm-8"]["fabric"]
    want = model_efficiency("h200-sxm-8", 8, fab["allreduce_busbw_gbs"])
    assert abs(r.value["efficiency"] - want) / want < 0.02, (r.value["efficiency"], want)
    assert r.facts["python"].endswith("/bin/python")
    assert [e.name for e in r.evidence][-2:] == ["scaling: every GPU alone",
                                                 "scaling: 8 GPUs, DDP"]


@pytest.mark.integration
def test_sim_pcie_only_node_scales_within_its_floor(tmp_path: Path) -> None:
    r = sim_scaling(tmp_path, "l40s-pcie-4")
    fab = PROFILES["profiles"]["l40s-pcie-4"]["fabric"]
    want = model_efficiency("l40s-pcie-4", 4, fab["allreduce_busbw_gbs"])
    assert r.verdict is Verdict.PASS and r.value["topology"] == "pcie"
    assert abs(r.value["efficiency"] - want) / want < 0.02


@pytest.mark.parametrize(("fault", "first"), [
    ({"kind": "tflops_low", "gpu": 5, "factor": 0.7}, "GPU5 alone"),
    ({"kind": "nvlink_down"}, "scaling efficiency over 8 GPUs"),
])
@pytest.mark.integration
def test_sim_faults_fail_load_scaling(tmp_path: Path, fault: dict[str, Any],
                                      first: str) -> None:
    r = sim_scaling(tmp_path, faults=[fault])
    assert r.verdict is Verdict.FAIL and r.findings[0].startswith(first), r.findings


# --- the cluster's judge ---------------------------------------------------------------------

def cluster_limits() -> dict[str, Threshold]:
    return {k: Threshold.from_dict(v) for k, v in thresholds.resolve("H200-SXM").items()
            if k.startswith("scaling.")}


def node(tokens_1: float = 1000.0, tokens_n: float = 7800.0, verdict: str = "PASS"
         ) -> NodeScaling:
    return NodeScaling(verdict, f"{verdict} summary", tokens_1, tokens_n,
                       tokens_n / (8 * tokens_1), "/opt/nodecert/envs/s/bin/python",
                       {"layers": 9, "d_model": 4096, "seq": 2048, "batch": 4},
                       "/opt/nodecert/node/0123456789abcdef/nodecert_node/workers/scaling.py")


def rank0(tokens: float) -> str:
    return json.dumps({"event": "result", "tokens_s": tokens, "step_ms_median": 330.0,
                       "step_ms_min": 329.0, "step_ms_max": 333.0, "world": 16})


def test_cluster_judge_passes_and_draws_the_curve() -> None:
    r, named = judge({"h1": node(), "h2": node()}, rank0(15400.0), "", gpus=8,
                     limits=cluster_limits(), link_layer="InfiniBand", simulated=True)
    assert r.verdict is Verdict.PASS and named == []
    assert r.value["efficiency"] == 0.9625
    assert r.facts["curve"] == [[1, 1.0], [8, 0.975], [16, 0.9625]]
    assert r.thresholds["efficiency"].value == 0.85


def test_cluster_judge_names_the_node_slower_than_its_peers() -> None:
    r, named = judge({"h1": node(), "h2": node(tokens_n=7000.0), "h3": node()},
                     rank0(20000.0), "", gpus=8, limits=cluster_limits(),
                     link_layer="InfiniBand", simulated=True)
    assert r.verdict is Verdict.FAIL and named == ["h2"]
    assert r.findings[0].startswith("h2: 7000 tokens/s on its 8 GPUs as a fraction of the "
                                    "best node's (7800)")
    r, named = judge({"h1": node(), "h2": node(verdict="FAIL")}, rank0(15400.0), "",
                     gpus=8, limits=cluster_limits(), link_layer="Ethernet", simulated=True)
    assert r.verdict is Verdict.FAIL and named == ["h2"]


def test_cluster_judge_fails_poor_scaling_and_errors_without_figures() -> None:
    r, _ = judge({"h1": node(), "h2": node()}, rank0(12000.0), "", gpus=8,
                 limits=cluster_limits(), link_layer="InfiniBand", simulated=False)
    assert r.verdict is Verdict.FAIL
    assert "needs >= 0.85 ratio, measured 0.75 ratio" in r.findings[0]
    r, _ = judge({"h1": node(), "h2": node()}, "", "hung past its limit", gpus=8,
                 limits=cluster_limits(), link_layer="InfiniBand", simulated=False)
    assert r.verdict is Verdict.ERROR and "hung past its limit" in r.summary


def test_the_cluster_job_quotes_what_it_runs() -> None:
    s = job_script("h1", 29600, node(), gpus=8, nodes=4, steps=(30, 10))
    assert 'export NCCL_COMM_ID="$first:29600"' in s
    assert "scaling.py ddp --gpus 8 --nodes 4 --layers 9 --d-model 4096 --heads 32" in s
    assert s.endswith('--node-rank "$r" --master "$first:29600"')
    assert node().launch_problem() == ""


def test_a_node_cannot_choose_what_the_cluster_job_runs() -> None:
    from dataclasses import replace
    evil = replace(node(), python="/tmp/x; rm -rf /")
    assert evil.launch_problem().startswith("unexpected framework python")
    evil = replace(node(), worker="/opt/nodecert/node/0123456789abcdef/../../../tmp/w.py")
    assert evil.launch_problem().startswith("unexpected scaling worker path")
    assert replace(node(), model={}).launch_problem() == "the node's run reported no model size"


def test_scaling_can_be_turned_off_and_takes_booleans_only() -> None:
    cfg, why = parse_cluster({"scaling": False})
    assert cfg is not None and not cfg.scaling and why is None
    cfg, why = parse_cluster({"scaling": "yes"})
    assert cfg is None and why == "scaling must be true or false, got 'yes'"
    cfg, why = parse_cluster({"storage": False})
    assert cfg is not None and not cfg.storage and cfg.scaling


def test_the_command_line_turns_the_stages_off() -> None:
    from click.testing import CliRunner

    from nodecert.cli import main
    out = CliRunner().invoke(main, ["cluster", "validate", "--help"])
    assert "--no-scaling" in out.output and "--no-storage" in out.output
    assert "nodecert cluster validate -i site.ini --no-scaling --no-storage" in out.output


# --- the report and the certificate ------------------------------------------------------------

def test_the_node_page_plots_efficiency_against_gpus() -> None:
    from nodecert.certs.html import plots, scaling_chart
    r = judge_scaling(*evs_of([1000.0] * 8, 7800.0), 8, "nvlink", limits("H200-SXM"))
    svg = plots({"results": [r.as_dict()]})
    assert len(svg) == 1 and 'data-plot="scaling"' in svg[0]
    assert "Scaling efficiency vs GPUs" in svg[0]
    # a malformed curve from a node is not drawn (never a crash, never a made-up line)
    assert scaling_chart({"facts": {"curve": [["8", "<script>"]]}}) == ""
    assert scaling_chart({"facts": {"curve": [[1, 1.0]]}}) == ""


def test_the_cluster_certificate_carries_the_scaling_curve_and_its_floors(
        tmp_path: Path) -> None:
    import datetime as dt

    from nodecert.certs.cluster import certify_cluster, statement
    from nodecert.certs.signing import init_key, load_private_key
    data = run_model(tmp_path, 2, ModelLauncher())
    res, _ = judge({"h1": node(), "h2": node()}, rank0(15400.0), "", gpus=8,
                   limits=cluster_limits(), link_layer="InfiniBand", simulated=True)
    data["scaling"] = res.as_dict()
    data["results"].append(res.as_dict())
    st = statement(GroupRecord(tmp_path / "results.json", data), issued=dt.datetime.now(dt.UTC))
    sc = st["predicate"]["scaling"]
    assert sc["value"]["efficiency"] == 0.9625 and sc["facts"]["curve"][-1] == [16, 0.9625]
    assert sc["thresholds"]["efficiency"]["value"] == 0.85
    assert sc["thresholds"]["efficiency"]["source"].startswith("nodecert policy: across nodes")
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    _, html, verdict = certify_cluster(run_dir, load_private_key(keys.private))
    assert verdict == "READY"
    assert 'id="scaling"' in html.read_text()


# --- figures and drift ---------------------------------------------------------------------

def test_scaling_and_shared_storage_figures_drift_against_the_certificate() -> None:
    from nodecert.revalidate.drift import compare
    from nodecert_node.contract import figures
    base = judge_scaling(*evs_of([1000.0] * 8, 7800.0), 8, "nvlink", limits("H200-SXM"))
    worse = judge_scaling(*evs_of([1000.0] * 8, 6800.0), 8, "nvlink", limits("H200-SXM"))
    f = figures(base.as_dict())
    assert f["scaling_efficiency"].value == 0.975 and f["training_tokens_s"].unit == "tokens/s"
    shared = {"check": "storage.shared", "verdict": "PASS",
              "value": {"/mnt/data": {"seq_read_mbps": 2000.0, "small_files_per_s": 900.0}}}
    assert set(figures(shared)) == {"storage /mnt/data shared_seq_read_mbps",
                                    "storage /mnt/data shared_small_files_per_s"}
    rec = {"identity": None, "software": None, "run_id": "r"}
    got = {r.check: r for r in compare({**rec, "results": [base.as_dict()]},
                                       {**rec, "results": [worse.as_dict()]},
                                       limits("H200-SXM"))}
    eff = got["drift.perf.scaling_efficiency"]
    assert eff.verdict is Verdict.FAIL and "0.975 -> 0.85" in eff.summary


def test_a_stack_without_pytorch_is_not_failed_for_it(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    plan = node.plan(["load.scaling"], suite="standard")
    plan["framework"] = {**node.framework_env(), "torch": ""}
    r = node.check("load.scaling", plan)
    assert r.verdict is Verdict.WARN and r.summary.startswith("not measured: the stack pins "
                                                              "no PyTorch")
