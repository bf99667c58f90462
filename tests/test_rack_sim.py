"""A lab rack's compute tray, simulated: its GPUs' NVLink fabric registration (the rack's
clique and cluster, health) and `nvidia-imex-ctl -N`, in the real tools' formats (read by
the same parsers as the real outputs) and judged by the node checks; each tray fault
gives the verdict it must, naming the GPU or the IMEX node."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodecert.core.errors import NodecertError
from nodecert.lab.hardware import Fault
from nodecert.lab.rack import check, part_faults, rack_gpus
from nodecert_node.checks.domain import judge_fabric, judge_imex
from nodecert_node.contract import Verdict
from nodecert_node.parse.imex import parse_imex_status
from nodecert_node.parse.smi import parse_q, parse_q_xml
from support.simnode import Sim

REAL = Path(__file__).parent / "fixtures" / "real"
TRAYS = [{"name": f"tray{i:02d}", "ip": f"10.99.0.{i + 11}"} for i in range(18)]
RACK = {"name": "rack-l1", "clique_id": "32766",
        "cluster_uuid": "4a1f3c2e-7d55-4c1b-9a0e-2f6b8c9d0e11", "trays": TRAYS}
SPEC = {"name": "rack-l1", "trays": [t["name"] for t in TRAYS]}


def tray(tmp: Path, *faults: dict[str, Any], imex_running: bool = True) -> Sim:
    sim = Sim(tmp, profile="gb200-nvl-4", faults=list(faults))
    hw = json.loads(sim.hw.read_text())
    sim.hw.write_text(json.dumps({**hw, "rack": RACK}))
    if imex_running:  # the IMEX daemon's pid file, naming a live process (this one)
        sim.run_dir.mkdir(exist_ok=True)
        (sim.run_dir / "imex.pid").write_text(f"{os.getpid()}\n")
    return sim


def test_a_tray_reports_its_rack_clique_in_text_and_xml(tmp_path: Path) -> None:
    sim = tray(tmp_path)
    _, text = parse_q(sim("nvidia-smi", "-q").stdout)
    _, xml = parse_q_xml(sim("nvidia-smi", "-q", "-x").stdout)
    for gpus in (text, xml):
        assert len(gpus) == 4
        assert {(g["fabric_clique_id"], g["fabric_cluster_uuid"]) for g in gpus} == \
            {("32766", RACK["cluster_uuid"])}
        assert gpus[0]["fabric_health"]["summary"] == "Healthy"
        r = judge_fabric("domain.fabric", gpus, SPEC)
        assert r.verdict == Verdict.PASS, r.findings
        assert r.facts["clique_id"] == "32766"
    # the health block has the real GB200 XML's children, in its order
    real = (REAL / "nvidia-smi/gb200-4gpu-p6e-arm64-580.173.02-q-x-v13.xml").read_text()
    want = re.findall(r"<(\w+)>", real[real.index("<health>"):real.index("</health>")])
    ours = sim("nvidia-smi", "-q", "-x").stdout
    assert re.findall(r"<(\w+)>", ours[ours.index("<health>"):ours.index("</health>")]) == want


def test_insufficient_nvlinks_fail_naming_the_gpu(tmp_path: Path) -> None:
    sim = tray(tmp_path, {"kind": "nvlink_insufficient", "gpu": 2})
    _, gpus = parse_q(sim("nvidia-smi", "-q").stdout)
    r = judge_fabric("domain.fabric", gpus, SPEC)
    assert r.verdict == Verdict.FAIL
    bus = gpus[2]["bus_id"]
    # the named reason leads, the generic Unhealthy rides on it
    assert r.findings == (f"GPU {bus}: NVLink fabric bandwidth Degraded (degraded: links down "
                          "or insufficient NVLinks); fabric health Unhealthy",)


def test_a_tray_in_another_clique_is_whole_on_its_own(tmp_path: Path) -> None:
    # the tray alone cannot tell: every GPU agrees; the rack's rule across trays names it
    sim = tray(tmp_path, {"kind": "fabric_clique", "clique": 5})
    _, gpus = parse_q(sim("nvidia-smi", "-q").stdout)
    r = judge_fabric("domain.fabric", gpus, SPEC)
    assert r.verdict == Verdict.PASS and r.facts["clique_id"] == "5"


def test_another_vbios_on_one_tray(tmp_path: Path) -> None:
    sim = tray(tmp_path, {"kind": "tray_vbios"})
    _, gpus = parse_q(sim("nvidia-smi", "-q").stdout)
    assert {g["vbios"] for g in gpus} == {"97.00.88.00.01"}
    _, gpus = parse_q_xml(sim("nvidia-smi", "-q", "-x").stdout)
    assert {g["vbios"] for g in gpus} == {"97.00.88.00.01"}


def test_the_imex_domain_in_the_real_layout(tmp_path: Path) -> None:
    out = tray(tmp_path)("nvidia-imex-ctl", "-N").stdout
    status = parse_imex_status(out)
    assert [n["address"] for n in status["nodes"]] == [t["ip"] for t in TRAYS]
    assert judge_imex("domain.imex", status, SPEC, "active").verdict == Verdict.PASS
    real = (REAL / "nvidia-imex/gb200-p6e-ultraserver-18-node-imex-ctl-N-all-ready-domain-up-"
            "570.172.txt").read_text()
    # line for line the real tool's shape: legend verbatim, node rows and matrix aligned
    def shape(text: str) -> list[str]:
        return [re.sub(r"\d", "9", re.sub(r"\d+\.\d+\.\d+\.\d+ *", "IP ",
                                           re.sub(r"^\d+/\d+/\d+ ", "DATE ",
                                                  re.sub(r"Version: \S+", "V", line))))
                for line in text.splitlines()]
    ours, theirs = shape(out), shape(real)
    assert len(ours) == len(theirs)
    assert [(a, b) for a, b in zip(ours, theirs, strict=True) if a != b] == []


def test_an_imex_node_down_fails_naming_it(tmp_path: Path) -> None:
    out = tray(tmp_path, {"kind": "imex_node_down", "node": 3})("nvidia-imex-ctl", "-N").stdout
    r = judge_imex("domain.imex", parse_imex_status(out), SPEC, "active")
    assert r.verdict == Verdict.FAIL
    assert r.findings[:2] == ("IMEX node #3 (10.99.0.14) is DOWN, expected READY",
                              "IMEX domain state DEGRADED, expected UP")


def test_a_hung_imex_query_never_answers(tmp_path: Path) -> None:
    sim = tray(tmp_path, {"kind": "imex_hang"})
    with pytest.raises(subprocess.TimeoutExpired):
        sim("nvidia-imex-ctl", "-N", timeout=3)


def test_an_imex_query_without_its_daemon_cannot_connect(tmp_path: Path) -> None:
    p = tray(tmp_path, imex_running=False)("nvidia-imex-ctl", "-N", check=False)
    assert p.returncode == 1 and "could not connect to the IMEX daemon" in p.stderr
    assert p.stdout == ""


def test_a_host_outside_any_rack_has_no_imex_domain(tmp_path: Path) -> None:
    p = Sim(tmp_path)("nvidia-imex-ctl", "-N", check=False)
    assert p.returncode == 1 and "no IMEX domain" in p.stderr


def test_the_lab_rack_refuses_a_fault_on_a_part_it_does_not_have() -> None:
    got = part_faults([Fault("*", "rack_psu_failed", {"part": "ps-02", "bay": 4}),
                       Fault("*", "rack_leak", {})])
    assert got == {"ps-02": {"psu_failed": {"bay": 4}},
                   "cdu-01": {"leak": {"detector": "Moisture"}}}
    with pytest.raises(NodecertError, match="no part named nvsw-10"):
        part_faults([Fault("*", "rack_part_down", {"part": "nvsw-10"})])
    crossed = part_faults([Fault("*", "rack_nvlink_crossed", {"part": "nvsw-02",
                                                              "port": 9})])
    assert crossed == {"nvsw-02": {"nvlink_crossed": {"switch": 0, "port": 9, "to": 10}}}


def test_the_switch_trays_see_the_boards_the_trays_report(tmp_path: Path) -> None:
    """What the switch trays' ports are wired to is each tray's GPUs, in tray order, as
    the tray's own nvidia-smi reports them (a swapped board's UUID included)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = tray(tmp_path / "a")
    b = tray(tmp_path / "b", {"kind": "gpu_swapped", "gpu": 2})
    got = rack_gpus([a.hw, b.hw])
    smi = [g["uuid"] for sim in (a, b) for g in parse_q(sim("nvidia-smi", "-q").stdout)[1]]
    assert list(got) == smi and len(got) == 8 and got[6].endswith("7777")


def test_a_lab_rack_is_gb200_or_gb300_trays_and_at_most_18() -> None:
    from nodecert.lab.rack import kind_of
    check(18, ("gb200-nvl-4",))
    check(18, ("gb300-nvl-4",))
    assert (kind_of("gb200-nvl-4"), kind_of("gb300-nvl-4")) == ("GB200-NVL72", "GB300-NVL72")
    with pytest.raises(NodecertError, match=r"holds 1\.\.18 compute trays, not 19"):
        check(19, ("gb200-nvl-4",))
    with pytest.raises(NodecertError, match="trays are all gb200-nvl-4 or all gb300-nvl-4, "
                                            "not h200-sxm-8"):
        check(4, ("h200-sxm-8",))
    with pytest.raises(NodecertError, match="not gb200-nvl-4, gb300-nvl-4"):
        check(2, ("gb200-nvl-4", "gb300-nvl-4"))


@pytest.mark.parametrize(("profile", "recipe"), [("gb200-nvl-4", "dgx-gb200-compute-tray"),
                                                 ("gb300-nvl-4", "dgx-gb300-compute-tray")])
def test_a_lab_tray_carries_its_recipe_and_shares_a_serial_per_board(
        tmp_path: Path, profile: str, recipe: str) -> None:
    """A GB200/GB300 tray's two GPUs of a board share its serial, as the recorded tray
    reports, and hardware.inventory passes it; its VBIOS and HCA firmware (read in band)
    and its BMC's firmware inventory are at the tray's recipe: firmware.recipe PASSes."""
    from nodecert.lab.bmcmodel import firmware_members
    from nodecert.lab.hardware import profile as lab_profile
    from nodecert.stack.firmware import find_recipe, inband_readings, judge_recipe
    from support.simnode import SimNode
    assert lab_profile(profile)["firmware_recipe"] == recipe
    node = SimNode(tmp_path, profile)
    hw = json.loads(node.hw.read_text())
    serials = [g["serial"] for g in hw["identity"]["gpus"]]
    assert serials[0] == serials[1] and serials[2] == serials[3] and serials[1] != serials[2]
    inventory, ib = node.check("hardware.inventory"), node.check("net.ib")
    assert inventory.verdict is Verdict.PASS, inventory.findings
    members = [{"id": k, "name": v["name"], "version": v["version"]}
               for k, v in firmware_members(hw, "1.0").items()]
    judged = judge_recipe(find_recipe(recipe), members, inband_readings([inventory, ib]))
    assert judged.verdict is Verdict.PASS, judged.findings
