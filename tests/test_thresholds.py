"""Threshold profiles, suites, plans and node connection settings (control side)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodecert.core.errors import InventoryError, ManifestError
from nodecert.inventory.reader import load_inventory
from nodecert.profiles import thresholds
from nodecert.stack.manifest import find_stack
from nodecert.transport.bundle import node_bundle
from nodecert.transport.ssh import Endpoint
from nodecert.validation.plan import build_plan
from support.env import REPO


def test_every_profile_value_is_sourced_and_model_overrides_common() -> None:
    keys = thresholds.known_keys()
    assert {"pcie.gen", "nvlink.links_per_gpu", "storage.seq_read_mbps_min",
            "health.retired_pages_max"} <= keys
    for model in ("H200-SXM", "H100-SXM", "A100-SXM4-80GB", "L40S"):
        for key, v in thresholds.resolve(model).items():
            # A public page with its address, or a stated nodecert policy: nothing else.
            src = v["source"]
            assert re.match(r"^(nodecert policy: .{20,}|.{10,} <https://[^ >]+>.*)$", src), \
                (model, key, src)
    h200 = thresholds.resolve("H200-SXM")
    assert h200["nvlink.links_per_gpu"]["value"] == 18 and h200["nvswitch.count"]["value"] == 4
    assert h200["host.cpu_cores_per_gpu"]["origin"] == "profile common (profiles/common.yml)"
    # Sources are public pages (title <https://...>) or a stated nodecert policy.
    assert h200["pcie.gen"]["source"].startswith("NVIDIA H200 Tensor Core GPU datasheet")
    assert "<https://" in h200["pcie.gen"]["source"]
    assert h200["gpu.memory_mib_min"]["source"].startswith("nodecert policy: ")
    assert h200["gpu.memory_mib_min"]["source"].endswith("(143771 MiB observed, 0.5% margin)")
    assert thresholds.resolve("L40S")["nvlink.links_per_gpu"]["value"] == 0


def test_overrides_inventory_then_cli() -> None:
    t = thresholds.resolve("H200-SXM", inventory={"pcie.gen": 4, "xid.window_h": 72},
                           cli={"pcie.gen": 3}, host="n1")
    assert (t["pcie.gen"]["value"], t["pcie.gen"]["origin"]) == (3, "command line --threshold")
    assert t["xid.window_h"]["origin"] == "inventory nodecert_thresholds (n1)"
    with pytest.raises(InventoryError, match=r"unknown threshold 'pcie\.gne'"):
        thresholds.resolve("H200-SXM", cli={"pcie.gne": 4})
    # a model without a profile: the common thresholds, never exit 2 (the plan marks it
    # and hardware.inventory WARNs)
    other = thresholds.resolve("X999")
    assert "gpu.names" not in other and "xid.window_h" in other
    assert not thresholds.has_profile("X999") and thresholds.has_profile("B300")
    assert thresholds.parse_cli_thresholds(("a=3000", "b=[x, y]", "c=0.9")) == {
        "a": 3000, "b": ["x", "y"], "c": 0.9}


def test_profile_errors_name_file_line_and_fix(tmp_path: Path) -> None:
    bad = tmp_path / "X.yml"
    head = "schema: nodecert.validator-profile/v1\nsources:\n"
    good = "  A: {title: a page, url: 'https://example.org/a'}\n  P: {policy: a rationale}\n"
    bad.write_text(head + good + "thresholds:\n  pcie.gen: {value: 5, op: '>=', source: B}\n")
    with pytest.raises(ManifestError, match="cites 'B'") as e:
        thresholds._read_profile(bad, "X")
    assert f"{bad}:6" in e.value.render()
    bad.write_text(head + good + "thresholds:\n  pcie.gen: {value: 5, op: '>>', source: A}\n")
    with pytest.raises(ManifestError, match="'>>' is not one of: >=, <=, >, <, ==, in"):
        thresholds._read_profile(bad, "X")
    fine = bad.with_name("Y.yml")
    fine.write_text(head + good + "thresholds:\n  a: {value: 1, op: '>=', source: A}\n"
                    "  b: {value: 2, op: '<=', source: P (two)}\n")
    ok = thresholds._read_profile(fine, "Y")
    assert ok.thresholds["a"]["source"] == "a page <https://example.org/a>"
    assert ok.thresholds["b"]["source"] == "nodecert policy: a rationale (two)"
    # A source must be a public page or a stated policy: nothing else is a source.
    for src, why in (("  A: just text\n", "expected a mapping"),
                     ("  A: {title: t, url: 'shared/x'}\n", "public https"),
                     ("  A: {title: t, url: 'https://x', policy: p}\n", "must be")):
        bad.write_text(head + src + "thresholds:\n  a: {value: 1, op: '>=', source: A}\n")
        with pytest.raises(ManifestError, match=why):
            thresholds._read_profile(bad, "X")


def test_suites() -> None:
    s = thresholds.suites()
    assert set(s) >= {"quick", "standard", "full"}
    assert s["quick"].storage["runtime_s"] < s["standard"].storage["runtime_s"] < \
        s["full"].storage["runtime_s"]
    assert "storage.fio" in s["quick"].checks


def test_plan_for_a_sample_host() -> None:
    specs = load_inventory(REPO / "inventory" / "sample" / "lab.ini")
    spec = next(iter(specs.values()))
    plan = build_plan(spec, thresholds.suite("quick"), find_stack("r580-cuda13.0"), "rid",
                      cli_thresholds={}, scratch=None).as_dict()
    assert plan["checks"][0] == "hardware.inventory" and plan["run_id"] == "rid"
    assert plan["options"]["storage"]["targets"] == ["/var/lib/nodecert/scratch"]
    assert plan["options"]["storage"]["allow_raw_devices"] == []
    assert "dpkg-query" in plan["conformance"]["script"]
    assert plan["spec"]["gpu_count"] == spec.gpu_count
    assert plan["host_timeout_s"] == 17 * 120 + 120  # the quick suite: 17 checks
    big = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                     scratch="/data/s", option_overrides={"storage": {"runtime_s": 10}},
                     checks=("storage.fio", "health.gpu")).as_dict()
    assert big["checks"] == ["health.gpu", "storage.fio"]  # the suite's order
    assert big["options"]["storage"]["runtime_s"] == 10
    assert big["options"]["storage"]["targets"] == ["/data/s"] and big["conformance"] == {}


def test_endpoint_from_ansible_variables() -> None:
    ep = Endpoint.from_hostvars("n1", {
        "ansible_host": "10.78.0.11", "ansible_port": "2222", "ansible_user": "ops",
        "ansible_ssh_private_key_file": "/k/id",
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/k/known -o StrictHostKeyChecking=no",
        "ansible_python_interpreter": "/usr/bin/python3"})
    assert (ep.address, ep.port, ep.user, ep.key_file, ep.known_hosts, ep.python) == (
        "10.78.0.11", 2222, "ops", "/k/id", ("/k/known",), "/usr/bin/python3")
    # StrictHostKeyChecking=no in the inventory does not switch host-key checking off:
    # nodecert's client always rejects unknown keys (nodessh.connect uses RejectPolicy).
    assert Endpoint.from_hostvars("n2", {}).address == "n2"


def test_node_bundle_is_reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same code gives the same bytes at any time of building: the bundle's id names
    the install directory, so a time-dependent byte would re-install on every run."""
    import time
    a, sha_a = node_bundle()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400)  # a day later
    b, sha_b = node_bundle()
    assert a == b and sha_a == sha_b and len(a) > 10_000


def test_host_verdict_never_claims_checks_that_did_not_run(tmp_path: Path) -> None:
    from nodecert.runs.store import HostRun
    from nodecert_node.contract import Result, Verdict
    specs = load_inventory(REPO / "inventory" / "sample" / "lab.ini")
    spec = next(iter(specs.values()))
    plan = build_plan(spec, thresholds.suite("quick"), None, "rid", cli_thresholds={},
                      scratch=None, checks=("health.gpu", "health.xid"))
    hr = HostRun(spec.name, spec, plan, None, tmp_path)
    assert hr.verdict is Verdict.ERROR  # pending, nothing ran
    hr.status = "done"
    hr.results.append(Result("health.gpu", Verdict.PASS, "ok"))
    assert hr.verdict is Verdict.ERROR  # health.xid has no result
    hr.results.append(Result("health.xid", Verdict.WARN, "old Xid"))
    assert hr.verdict is Verdict.WARN
    hr.status = "lost"
    assert hr.verdict is Verdict.ERROR
    hr.status = "done"
    hr.finish_missing("x", "NC-X")
    assert len(hr.results) == 2  # nothing missing: nothing added
