"""A compute tray in its rack's NVLink domain: the fabric registration nvidia-smi reports
and the IMEX domain nvidia-imex-ctl reports, on real outputs and variants of them; the
checks are planned for a rack's trays only."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.checks.domain import judge_fabric, judge_imex
from nodecert_node.parse import ParseError
from nodecert_node.parse.imex import parse_imex_status
from nodecert_node.parse.smi import parse_q, parse_q_xml
from support.env import REPO
from support.orders import h200_host

REAL = REPO / "tests" / "fixtures" / "real"
IMEX_NEW = REAL / "nvidia-imex" / \
    "gb200-p6e-ultraserver-18-node-imex-ctl-N-all-ready-domain-up-570.172.txt"
IMEX_OLD = REAL / "nvidia-imex" / \
    "gh200-k8s-dra-computedomain-2-node-imex-ctl-N-570.00-old-format-no-version-column.txt"
GB200 = REAL / "nvidia-smi" / "gb200-4gpu-p6e-arm64-580.173.02-q-x-v13.xml"
HGX = REAL / "nvidia-smi" / \
    "h100-80gb-hbm3-hgx-8gpu-580.105.08-q-x-v13-fabric-completed-no-clique.xml"
RACK = {"name": "rack-a1", "kind": "GB200-NVL72", "imex": True,
        "trays": [f"tray{i:02d}" for i in range(18)]}


def _gpus(path: Path) -> list[dict[str, Any]]:
    return parse_q_xml(path.read_text())[1]


def test_a_real_gb200_tray_is_in_one_clique_of_one_cluster() -> None:
    gpus = _gpus(GB200)
    assert {(g["fabric_clique_id"], g["fabric_cluster_uuid"]) for g in gpus} == {
        ("2", "00000001-0000-0000-0000-000000000001")}
    assert gpus[0]["fabric_health"]["bandwidth"] == "Full"
    assert "incorrect_configuration" not in gpus[0]["fabric_health"]  # N/A: not read
    r = judge_fabric("domain.fabric", gpus, RACK)
    assert r.verdict.name == "PASS", r.findings
    assert r.facts["clique_id"] == "2"


def test_an_hgx_board_is_in_no_clique_and_fails_as_a_rack_tray() -> None:
    r = judge_fabric("domain.fabric", _gpus(HGX), RACK)
    assert r.verdict.name == "FAIL"
    assert r.findings[0].startswith("GPU 0000:") and "in no NVLink clique (clique 0" in \
        r.findings[0]


@pytest.mark.parametrize(("change", "wanted"), [
    ({"bandwidth": "Degraded"}, "NVLink fabric bandwidth Degraded"),
    ({"incorrect_configuration": "Incorrect Chassis Serial"},
     "fabric incorrect configuration: Incorrect Chassis Serial"),
    ({"summary": "Unhealthy"}, "fabric health Unhealthy"),
    ({"route_unhealthy": "True"}, "fabric route unhealthy: True"),
])
def test_each_fabric_health_fault_fails_naming_the_gpu(change: dict[str, str],
                                                      wanted: str) -> None:
    gpus = copy.deepcopy(_gpus(GB200))
    gpus[2]["fabric_health"].update(change)
    r = judge_fabric("domain.fabric", gpus, RACK)
    assert r.verdict.name == "FAIL"
    assert [f for f in r.findings if wanted in f] == [f"GPU {gpus[2]['bus_id']}: {wanted}"
                                                      + ("" if "Degraded" not in wanted else
                                                         " (degraded: links down or "
                                                         "insufficient NVLinks)")]


def test_a_named_reason_leads_the_summary() -> None:
    """A GPU whose health mask names why (a wrong chassis serial) leads with that, its
    generic Unhealthy riding on it, before other GPUs' generic findings."""
    gpus = copy.deepcopy(_gpus(GB200))
    gpus[0]["fabric_health"].update({"summary": "Unhealthy"})
    gpus[3]["fabric_health"].update({"summary": "Unhealthy",
                                     "incorrect_configuration": "Incorrect Chassis Serial"})
    r = judge_fabric("domain.fabric", gpus, RACK)
    assert r.summary.startswith(f"GPU {gpus[3]['bus_id']}: fabric incorrect configuration: "
                                "Incorrect Chassis Serial; fabric health Unhealthy"), r.summary
    assert r.findings[1] == f"GPU {gpus[0]['bus_id']}: fabric health Unhealthy"
    assert not any(f == f"GPU {gpus[3]['bus_id']}: fabric health Unhealthy"
                   for f in r.findings)


def test_a_gpu_in_another_clique_splits_the_tray() -> None:
    gpus = copy.deepcopy(_gpus(GB200))
    gpus[3]["fabric_clique_id"] = "7"
    r = judge_fabric("domain.fabric", gpus, RACK)
    assert r.verdict.name == "FAIL" and "different NVLink domains" in r.findings[0]
    assert "clique 7" in r.findings[0]


def test_recovery_in_progress_is_a_warning() -> None:
    gpus = copy.deepcopy(_gpus(GB200))
    gpus[0]["fabric_health"]["route_recovery_in_progress"] = "True"
    r = judge_fabric("domain.fabric", gpus, RACK)
    assert r.verdict.name == "WARN"


def test_the_text_report_gives_the_clique_and_cluster_it_prints() -> None:
    gpus = parse_q((REAL / "nvidia-smi" / "h100-sxm-8gpu-565.57.01-q.txt").read_text())[1]
    assert gpus[0]["fabric_clique_id"] == "0"
    assert gpus[0]["fabric_cluster_uuid"] == "00000000-0000-0000-0000-000000000000"
    assert gpus[0]["fabric_health"] == {}  # Bandwidth N/A: not read as a value


@pytest.mark.parametrize("path", sorted((REAL / "nvidia-smi").glob("*q*.txt"))
                         + sorted((REAL / "nvidia-smi").glob("*.xml")), ids=lambda p: p.name)
def test_every_real_report_gives_a_clique_only_where_it_prints_one(path: Path) -> None:
    """Older drivers print no CliqueId (R545) or N/A: absent stays None, never 0."""
    text = path.read_text()
    try:
        gpus = (parse_q_xml if path.suffix == ".xml" else parse_q)(text)[1]
    except ParseError:
        return  # a truncated report is refused by the parser, as its own tests show
    printed = "cliqueId>" in text or "CliqueId" in text
    for g in gpus:
        clique = g["fabric_clique_id"]
        assert clique is None or (printed and clique.isdigit()), (path.name, clique)


def test_both_imex_layouts_are_read() -> None:
    new = parse_imex_status(IMEX_NEW.read_text())
    assert len(new["nodes"]) == 18 and new["domain_state"] == "UP"
    assert new["nodes"][10] == {"index": 10, "address": "172.31.54.95", "state": "READY",
                                "version": "570.172"}
    assert set(new["matrix"][17].values()) == {"C"} and len(new["matrix"][17]) == 18
    assert new["legend"]["!V!"].startswith("Version mismatch")
    old = parse_imex_status(IMEX_OLD.read_text())
    assert [n["version"] for n in old["nodes"]] == [None, None]
    assert old["matrix"] == {0: {0: "C", 1: "C"}, 1: {0: "C", 1: "C"}}
    assert judge_imex("domain.imex", new, RACK, "active").verdict.name == "PASS"


def _imex_with(lines: dict[str, str]) -> str:
    text = IMEX_NEW.read_text()
    for old, new in lines.items():
        text = text.replace(old, new, 1)
    return text


@pytest.mark.parametrize(("lines", "service", "wanted"), [
    ({"172.31.50.39    - READY": "172.31.50.39    - UNAVAILABLE"}, "active",
     "IMEX node #4 (172.31.50.39) is UNAVAILABLE, expected READY"),
    ({"Domain State: UP": "Domain State: DOWN"}, "active",
     "IMEX domain state DOWN, expected UP"),
    ({}, "inactive", "nvidia-imex service is inactive, expected active"),
    ({"       3        C   C   C   C   C": "       3        C   C   C   D   C"}, "active",
     "IMEX node #3 -> #3: D (Disconnected)"),
    ({"Version: 570.172\nNode #1 ": "Version: 570.158\nNode #1 "}, "active",
     "IMEX nodes run different versions: 570.158, 570.172"),
])
def test_each_imex_fault_fails_naming_the_node(lines: dict[str, str], service: str,
                                               wanted: str) -> None:
    r = judge_imex("domain.imex", parse_imex_status(_imex_with(lines)), RACK, service)
    assert r.verdict.name == "FAIL" and wanted in r.findings, r.findings


def test_a_domain_missing_trays_fails() -> None:
    two = parse_imex_status(IMEX_OLD.read_text())
    r = judge_imex("domain.imex", two, RACK, "active")
    assert "the IMEX domain lists 2 nodes; rack rack-a1 has 18 compute trays" in r.findings


def _addressed_rack() -> dict[str, Any]:
    """RACK with each tray's inventory address: the real 18-node domain's addresses, in
    order."""
    nodes = parse_imex_status(IMEX_NEW.read_text())["nodes"]
    return {**RACK, "tray_addresses": {f"tray{n['index']:02d}": n["address"] for n in nodes}}


def test_the_trays_imex_lacks_or_adds_are_named_by_host_and_address() -> None:
    rack = _addressed_rack()
    full = parse_imex_status(IMEX_NEW.read_text())
    assert judge_imex("domain.imex", full, rack, "active").verdict.name == "PASS"
    lost = copy.deepcopy(full)
    gone = lost["nodes"].pop(4)
    r = judge_imex("domain.imex", lost, rack, "active")
    assert r.verdict.name == "FAIL"
    assert (f"the IMEX domain lacks 1 of rack rack-a1's 18 compute trays: tray04 "
            f"({gone['address']})") in r.findings, r.findings
    stranger = copy.deepcopy(full)
    stranger["nodes"][7] = {**stranger["nodes"][7], "address": "10.9.9.9"}
    r = judge_imex("domain.imex", stranger, rack, "active")
    assert "the IMEX domain lists 1 node(s) that are no compute tray of rack rack-a1: " \
        "#7 (10.9.9.9)" in r.findings
    assert any(f.startswith("the IMEX domain lacks 1 of rack rack-a1's 18 compute trays: "
                            "tray07 (") for f in r.findings)
    twice = copy.deepcopy(full)
    twice["nodes"][3] = {**twice["nodes"][3], "address": twice["nodes"][2]["address"]}
    r = judge_imex("domain.imex", twice, rack, "active")
    assert any(f.startswith("the IMEX domain lists a tray more than once: tray02")
               for f in r.findings)


def test_imex_on_its_own_network_is_compared_by_count_and_says_why() -> None:
    rack = {**RACK, "tray_addresses": {f"tray{i:02d}": f"10.0.0.{i}" for i in range(18)}}
    full = parse_imex_status(IMEX_NEW.read_text())
    assert judge_imex("domain.imex", full, rack, "active").verdict.name == "PASS"
    r = judge_imex("domain.imex", parse_imex_status(IMEX_OLD.read_text()), rack, "active")
    assert "the IMEX domain lists 2 nodes; rack rack-a1 has 18 compute trays (no IMEX " \
        "address is a tray's inventory address, so the trays cannot be named)" in r.findings


@pytest.mark.parametrize(("text", "why"), [
    ("", "no 'Domain State:' line"),
    (IMEX_NEW.read_text().split("Domain State")[0], "no 'Domain State:' line"),
    (IMEX_NEW.read_text().replace("Node #5   - 172.31.50.44    - READY",
                                  "Node #5 172.31.50.44 READY"), "not an IMEX node line"),
    (IMEX_NEW.read_text().replace("       9        C   C", "       9        C"),
     "has 17 cells for 18 columns"),
    (IMEX_NEW.read_text().replace("Node #7 ", "Node #6 "), "listed twice"),
])
def test_truncated_or_glued_imex_output_is_refused(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=re.escape(why)):
        parse_imex_status(text)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([IMEX_NEW, IMEX_OLD]), st.integers(min_value=0, max_value=4000),
       st.sampled_from(["\r\n", "\n"]))
def test_imex_variants_never_shift_a_value(path: Path, cut: int, newline: str) -> None:
    """CRLF line ends read the same; a cut anywhere is refused or, when it falls after
    the Domain State line, reads the same nodes: a node's state never moves."""
    text = path.read_text().replace("\n", newline)
    full = parse_imex_status(text)
    assert full == parse_imex_status(path.read_text())
    try:
        part = parse_imex_status(text[:cut])
    except ParseError:
        return
    assert part["nodes"] == full["nodes"] and part["domain_state"] == full["domain_state"]


def test_the_domain_checks_are_planned_for_rack_trays_only(tmp_path: Path) -> None:
    from nodecert.inventory.reader import load_inventory
    from nodecert.profiles import thresholds
    from nodecert.validation.plan import build_plan
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    tray = ("nodecert_gpu_model=GB200 nodecert_gpu_count=4 nodecert_cpu_cores=144 "
            "nodecert_ram_gb=960 nodecert_nvme_count=4")
    (inv / "hosts.ini").write_text(
        f"[rack]\nt1 ansible_host=10.0.0.1 {tray}\n[nvl]\nt2 ansible_host=10.0.0.2 {tray}\n"
        f"[hgx]\n{h200_host('h1', '10.0.0.3')}\n")
    (inv / "group_vars" / "rack.yml").write_text(
        "nodecert_rack: {name: r1, kind: GB200-NVL72, gpus: 4}\n")
    (inv / "group_vars" / "nvl.yml").write_text(
        "nodecert_rack: {name: r2, kind: GB200-NVL72, gpus: 4, imex: false}\n")
    specs = load_inventory(inv)
    suite = thresholds.suite("quick")

    def planned(host: str) -> list[str]:
        plan = build_plan(specs[host], suite, None, "rid", cli_thresholds={}, scratch=None)
        assert not plan.partial
        return [c for c in plan.checks if c.startswith("domain.")]

    assert planned("t1") == ["domain.fabric", "domain.imex"]
    assert planned("t2") == ["domain.fabric"]
    assert planned("h1") == []


def test_each_gpu_s_vbios_is_read_from_text_and_xml() -> None:
    # the firmware every tray of a rack must share (rack.firmware)
    base = REPO / "tests/fixtures/real/nvidia-smi"
    _, gpus = parse_q((base / "a100-sxm4-80gb-4gpu-555.42.02-q.txt").read_text())
    assert [g["vbios"] for g in gpus] == ["92.00.9E.00.02"] * len(gpus) and len(gpus) == 4
    _, gpus = parse_q_xml((base / "gb200-4gpu-p6e-arm64-580.173.02-q-x-v13.xml").read_text())
    assert {g["vbios"] for g in gpus} == {"97.00.B9.00.69"} and len(gpus) == 4


def test_a_domain_state_cut_short_is_refused_not_judged() -> None:
    """"Domain State: U" (cut inside "UP") is not a state the domain is in."""
    text = IMEX_NEW.read_text()
    cut = text.rstrip("\n")[:-1]  # ... "Domain State: U"
    with pytest.raises(ParseError, match="ends inside its last line"):
        parse_imex_status(cut)
    assert parse_imex_status(text)["domain_state"] == "UP"


# --- ComputeDomains: the customer's Kubernetes runs IMEX, the host service is off --------

@pytest.mark.parametrize(("active", "enabled", "verdict", "said"), [
    ("inactive", "masked", "PASS", "host nvidia-imex stopped and masked"),
    ("active", "masked-runtime", "FAIL", "nvidia-imex service is active: ComputeDomains"),
    ("active", "enabled", "FAIL", "nvidia-imex service is active"),
    ("inactive", "enabled", "FAIL", "is enabled: it starts at the next boot"),
    ("inactive", "disabled", "WARN", "is disabled, not masked"),
    ("failed", "masked", "PASS", "stopped and masked"),
    (None, "masked", "ERROR", "could not be read"),
    ("unknown", "masked", "ERROR", "could not be read"),  # systemctl printed nothing
    ("inactive", None, "ERROR", "could not be read"),
])
def test_a_compute_domain_rack_needs_the_host_imex_stopped_and_masked(
        active: str | None, enabled: str | None, verdict: str, said: str) -> None:
    from nodecert_node.checks.domain import judge_imex_off
    r = judge_imex_off("domain.imex", active, enabled)
    assert r.verdict.name == verdict and said in " ".join((r.summary, *r.findings)), r
    if verdict in ("FAIL", "WARN"):
        assert "systemctl mask nvidia-imex.service" in r.remediation


def _systemctl(active: str, enabled: str) -> str:
    """systemctl on a tray: is-active and is-enabled of nvidia-imex as systemd answers
    (exit 3 for a unit not active, 1 for one not enabled)."""
    return (f"#!/bin/sh\ncase \"$1\" in\n  is-active) echo {active}; "
            f"[ {active} = active ] || exit 3;;\n  is-enabled) echo {enabled}; "
            f"[ {enabled} = enabled ] || exit 1;;\nesac\n")


@pytest.mark.parametrize(("active", "enabled", "verdict"), [
    ("inactive", "masked", "PASS"), ("active", "enabled", "FAIL")])
def test_domain_imex_on_a_compute_domain_tray_reads_the_host_service_not_the_domain(
        tmp_path: Path, active: str, enabled: str, verdict: str) -> None:
    """On the simulated tray: where the rack's IMEX is ComputeDomains, domain.imex asks
    systemd about the host service and never asks nvidia-imex-ctl for a host domain."""
    from support.simnode import SimNode
    node = SimNode(tmp_path / "t1", "gb200-nvl-4")
    rack = {**RACK, "imex": "compute-domains", "trays": ["h1"]}
    plan = node.plan(["domain.imex"], validation={"rack": rack})
    (node.bin / "nvidia-imex-ctl").write_text("#!/bin/sh\necho asked >&2; exit 9\n")
    events = node.suite_with_tool("systemctl", _systemctl(active, enabled), plan)
    res = next(e["result"] for e in events if e["event"] == "result")
    assert res["verdict"] == verdict, res
    assert [e["command"] for e in res["evidence"]] == [
        "systemctl is-active nvidia-imex", "systemctl is-enabled nvidia-imex"]


def test_a_rack_orders_compute_domains_or_a_host_imex_and_nothing_else() -> None:
    from nodecert.inventory.rack import parse_rack
    spec, why = parse_rack({"name": "rack-a1", "kind": "GB200-NVL72",
                            "imex": "compute-domains"})
    assert why is None and spec is not None and spec["imex"] == "compute-domains"
    spec, why = parse_rack({"name": "rack-a1", "kind": "GB200-NVL72", "imex": "k8s"})
    assert spec is None and "imex must be true, false or compute-domains" in str(why)
