"""Threshold profiles: every GPU model the gate knows has one, each value cited, and a
figure no source supports is stated open (the check WARNs with the statement)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodecert.inventory.reader import HostSpec
from nodecert.profiles import thresholds
from nodecert.stack.compat import load_matrix
from nodecert.validation.plan import build_plan
from nodecert_node.checks.hardware import judge_inventory, judge_pcie, judge_topology
from nodecert_node.contract import Limits, Verdict
from nodecert_node.parse import topo

REAL = Path(__file__).parent / "fixtures" / "real"


def _plan(model: str, count: int = 8, inventory: dict[str, Any] | None = None) -> Any:
    spec = HostSpec(name="n1", address="192.0.2.1", port=22, groups=(), gpu_model=model,
                    gpu_count=count, cpu_cores=64, ram_gb=512, nvme_count=0,
                    validation={"thresholds": inventory or {}})
    return build_plan(spec, thresholds.suite("quick"), None, "r", cli_thresholds={},
                      scratch=None)


@pytest.mark.parametrize("model", sorted(load_matrix().gpus))
def test_every_gate_model_has_a_cited_profile(model: str) -> None:
    assert thresholds.has_profile(model)
    prof = thresholds.load_profile(model)
    assert prof.thresholds, model
    for key, t in prof.thresholds.items():
        assert t["source"], (model, key)
    # what a profile leaves open is a real key with a statement, never both
    assert set(prof.unpublished) <= thresholds.known_keys()
    assert not set(prof.unpublished) & set(prof.thresholds)
    assert _plan(model).spec["threshold_profile"] == model


def test_an_open_nvlink_figure_warns_with_the_profiles_statement() -> None:
    plan = _plan("H100-PCIE", 2)
    limits = plan.limits()
    r = judge_topology({"gpus": [{}, {}]}, limits)
    assert r.verdict is Verdict.WARN
    assert r.summary.startswith("nvlink.links_per_gpu not judged: NVLink bridges")
    # a model whose PCIe-only nature is published passes without a word
    assert judge_topology({"gpus": [{}]}, _plan("L4", 1).limits()).verdict is Verdict.PASS


def test_an_operator_figure_closes_the_gap() -> None:
    plan = _plan("H100-PCIE", 2, {"nvlink.links_per_gpu": 12})
    assert "nvlink.links_per_gpu" not in plan.spec["threshold_gaps"]
    status = {0: [25.0] * 12, 1: [25.0] * 12}
    r = judge_topology({"gpus": [{}, {}], "nvlink": status,
                        "matrix": {"GPU0": {"GPU1": "NV12"}, "GPU1": {"GPU0": "NV12"}}},
                       plan.limits())
    assert r.verdict is Verdict.PASS, r.findings
    r = judge_topology({"gpus": [{}, {}], "nvlink": status,
                        "matrix": {"GPU0": {"GPU1": "PIX"}, "GPU1": {"GPU0": "PIX"}}},
                       plan.limits())
    assert r.verdict is Verdict.FAIL


def test_an_open_name_list_warns_and_the_memory_floor_still_judges() -> None:
    limits = _plan("V100-SXM2-32GB", 1).limits()
    gpu = {"bus_id": "0000:06:00.0", "name": "Tesla V100-SXM2-32GB",
           "memory_total_mib": 32510, "serial": "1", "uuid": "GPU-1"}
    facts = {"gpus": [gpu], "cpu": {"cores": 64, "model": "x"}, "meminfo_total_gb": 512,
             "nvme": []}
    spec = {"gpu_model": "V100-SXM2-32GB", "gpu_count": 1,
            "threshold_profile": "V100-SXM2-32GB"}
    r = judge_inventory(facts, spec, limits)
    assert r.verdict is Verdict.WARN and "gpu.names not judged" in r.summary
    # a 16 GB card shipped against a 32 GB order still fails
    small = dict(gpu, memory_total_mib=16160)
    r = judge_inventory(dict(facts, gpus=[small]), spec, limits)
    assert r.verdict is Verdict.FAIL and "memory" in r.summary


def test_the_b300_profile_passes_the_recorded_nvlink_and_catches_a_slow_link() -> None:
    limits = _plan("B300").limits()
    status = topo.parse_nvlink_status(
        (REAL / "nvlink/b300-sxm6-dell-xe9780-7gpu-610.57.04-nvlink-status-18x53.125-spaces.txt")
        .read_text())
    assert len(status) == 7 and all(len(v) == 18 for v in status.values())
    gpus = [{}] * 7
    r = judge_topology({"gpus": gpus, "nvlink": status}, limits)
    assert r.verdict is Verdict.PASS, r.findings
    slow = dict(status)
    slow[3] = [53.125] * 17 + [26.562]
    r = judge_topology({"gpus": gpus, "nvlink": slow}, limits)
    assert r.verdict is Verdict.FAIL and "GPU3 NVLink 17 speed" in r.summary


def test_a_grace_gpu_is_not_failed_for_its_c2c_attachment() -> None:
    limits = _plan("GH200", 1).limits()
    # What DCGM accepts for a C2C-attached GPU: any PCIe width reported.
    gpu = {"bus_id": "0009:01:00.0", "pcie_gen_max": 5, "pcie_gen_current": 5,
           "pcie_width_max": 16, "pcie_width_current": 16, "pstate": "P0"}
    assert judge_pcie([gpu], [], limits).verdict is Verdict.PASS
    assert isinstance(limits, Limits)
