"""GPUs are told apart by UUID; a serial number names a board, which on Grace-Blackwell
trays carries two GPUs (hardware.inventory)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.profiles import thresholds
from nodecert_node.checks.hardware import identity, judge_inventory
from nodecert_node.contract import Limits, Verdict
from nodecert_node.parse import smi
from support.env import REPO

GB200_XML = (REPO / "tests/fixtures/real/nvidia-smi/"
             "gb200-4gpu-p6e-arm64-580.173.02-q-x-v13.xml").read_text()
H100_TXT = (REPO / "tests/fixtures/real/nvidia-smi/"
            "h100-80gb-hbm3-8gpu-535.161.08-q.txt").read_text()


def _judge(model: str, gpus: list[dict[str, object]]) -> tuple[Verdict, str]:
    facts = {"gpus": gpus, "cpu": {"cores": 64 * len(gpus), "model": "x"},
             "meminfo_total_gb": 256 * len(gpus), "nvme": [],
             "dmi": {"system_serial": "S1", "system_uuid": "u", "baseboard_serial": "B1"}}
    spec = {"gpu_model": model, "gpu_count": len(gpus), "threshold_profile": model}
    r = judge_inventory(facts, spec, Limits(thresholds.resolve(model)))
    return r.verdict, " | ".join(r.findings) or r.summary


def test_a_healthy_gb200_tray_whose_boards_share_serials_passes() -> None:
    _, gpus = smi.parse_q_xml(GB200_XML)
    assert [g["serial"] for g in gpus] == ["1650000000001"] * 2 + ["1650000000002"] * 2
    assert [g["module_id"] for g in gpus] == ["2", "1", "4", "3"]
    assert len({g["uuid"] for g in gpus}) == 4
    verdict, why = _judge("GB200", gpus)
    assert verdict is Verdict.PASS, why
    # the identity the certificate binds: every GPU by bus, serial and UUID, stable
    ident = identity({"gpus": gpus, "dmi": {}})
    assert [(g["serial"], g["uuid"]) for g in ident["gpus"]] == [
        (g["serial"], g["uuid"]) for g in gpus]
    assert identity({"gpus": gpus, "dmi": {}}) == ident


def test_a_third_gpu_on_one_serial_or_a_shared_uuid_fails() -> None:
    _, gpus = smi.parse_q_xml(GB200_XML)
    three = [dict(g, serial="1650000000001") for g in gpus[:3]] + gpus[3:]
    verdict, why = _judge("GB200", three)
    assert verdict is Verdict.FAIL and "report the same serial number 1650000000001" in why
    twins = [gpus[0], dict(gpus[1], uuid=gpus[0]["uuid"]), *gpus[2:]]
    verdict, why = _judge("GB200", twins)
    assert verdict is Verdict.FAIL and f"the same UUID {gpus[0]['uuid']}" in why


def test_elsewhere_one_serial_is_one_gpu() -> None:
    _, gpus = smi.parse_q(H100_TXT)
    assert _judge("H100-SXM", gpus)[0] is not Verdict.FAIL
    copied = [gpus[0], dict(gpus[1], serial=gpus[0]["serial"]), *gpus[2:]]
    verdict, why = _judge("H100-SXM", copied)
    assert verdict is Verdict.FAIL
    assert f"GPUs {gpus[0]['bus_id']}, {gpus[1]['bus_id']} report the same serial" in why


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10_000))
def test_property_the_order_gpus_are_listed_in_changes_nothing(seed: int) -> None:
    _, gpus = smi.parse_q_xml(GB200_XML)
    random.Random(seed).shuffle(gpus)
    assert _judge("GB200", gpus)[0] is Verdict.PASS
