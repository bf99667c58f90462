"""The conformance judge, on output recorded from a provisioned lab host."""

from __future__ import annotations

import pytest

from nodecert.stack.conformance import imex_expected, judge, ssh_argv
from nodecert.stack.manifest import find_stack
from nodecert_node.contract import COMPUTE_DOMAINS
from support.env import REPO

RECORDED = (REPO / "tests/fixtures/recorded/conformance-lab-h1-r580-debian12.txt").read_text()
STACK = find_stack("r580-cuda13.0")


def test_recorded_provisioned_host_is_conformant() -> None:
    c = judge("h1", STACK, RECORDED)
    assert c.ok, c.problems
    assert c.checked == 8 + 2 + 1 + 1  # pins, two services, driver, torch


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("libnccl2\t2.27.7-1+cuda13.0\thi", "libnccl2\t2.27.7-1+cuda12.9\thi",
     "libnccl2 is 2.27.7-1+cuda12.9, pinned 2.27.7-1+cuda13.0"),
    ("nvidia-open\t580.173.02-1\thi", "nvidia-open\t580.173.02-1\tii",
     "nvidia-open 580.173.02-1 is not held against upgrades"),
    ("libcudnn9-cuda-13\t9.12.0.46-1\thi \n", "",
     "libcudnn9-cuda-13 is not installed (pinned 9.12.0.46-1)"),
    ("nvidia-fabricmanager enabled active", "nvidia-fabricmanager enabled failed",
     "service nvidia-fabricmanager is enabled/failed, not enabled and active"),
    ("##smi\n580.173.02", "##smi\n570.211.01", "nvidia-smi reports driver '570.211.01'"),
    ("torch==2.9.1+cu130", "torch==2.8.0+cu128", "framework environment lacks torch==2.9.1"),
    ("##os\ndebian-12", "##os\ndebian-13", "host runs debian-13; stack r580-cuda13.0 pins"),
])
def test_each_drift_is_reported(old: str, new: str, problem: str) -> None:
    assert old in RECORDED
    c = judge("h1", STACK, RECORDED.replace(old, new))
    assert not c.ok
    assert any(problem in p for p in c.problems), c.problems


def test_fabric_manager_not_required_without_nvswitch() -> None:
    text = RECORDED.replace("##nvswitch\n4", "##nvswitch\n0").replace(
        "nvidia-fabricmanager enabled active", "nvidia-fabricmanager missing inactive")
    for name in ("libnvidia-nscq", "nvidia-fabricmanager"):
        text = text.replace(f"{name}\t580.173.02-1\thi \n", "")
    c = judge("h2", STACK, text)
    assert c.ok, c.problems


@pytest.mark.parametrize(("service", "problem"), [
    ("masked inactive", None), ("disabled inactive", None),
    ("enabled active", "service nvidia-imex is enabled/active: the rack's IMEX is the "
                       "customer's ComputeDomains"),
    ("masked active", "service nvidia-imex is masked/active")])
def test_a_compute_domains_tray_holds_imex_with_its_host_service_off(
        service: str, problem: str | None) -> None:
    """Where the customer's Kubernetes runs IMEX (DRA ComputeDomains), the package is
    pinned and held as on any tray, and its host service must not run or be enabled."""
    text = RECORDED.replace("##holds\n", "##holds\nnvidia-imex\n").replace(
        "##pkgs\n", "##pkgs\nnvidia-imex\t580.173.02-1\thi \n").replace(
        "##smi", f"nvidia-imex {service}\n##smi")
    c = judge("h1", STACK, text, imex=COMPUTE_DOMAINS)
    assert [p for p in c.problems if "imex" in p] == ([] if problem is None else [
        next(p for p in c.problems if p.startswith(problem))])
    bare = judge("h1", STACK, RECORDED, imex=COMPUTE_DOMAINS)
    assert "nvidia-imex is not installed (pinned 580.173.02-1)" in bare.problems
    assert imex_expected({"rack": {"imex": COMPUTE_DOMAINS}}) == COMPUTE_DOMAINS
    assert imex_expected({"rack": {"imex": True}}) is True and imex_expected({}) is False


def test_imex_is_judged_only_on_the_trays_of_a_rack_that_expects_it() -> None:
    """The recorded HGX host has no nvidia-imex: fine there, not on an NVLink domain's
    compute tray, where the package must be pinned and held and the service running."""
    assert "nvidia-imex" not in RECORDED.split("##services")[0]
    assert judge("h1", STACK, RECORDED).ok
    tray = judge("h1", STACK, RECORDED, imex=True)
    assert tray.problems == ["nvidia-imex is not installed (pinned 580.173.02-1)",
                             "service nvidia-imex is missing, not enabled and active"]
    text = RECORDED.replace("##holds\n", "##holds\nnvidia-imex\n").replace(
        "##pkgs\n", "##pkgs\nnvidia-imex\t580.173.02-1\thi \n").replace(
        "##smi", "nvidia-imex enabled active\n##smi")
    ok = judge("h1", STACK, text, imex=True)
    assert ok.ok, ok.problems
    assert ok.checked == 8 + 1 + 3 + 1 + 1  # pins, IMEX, three services, driver, torch


def _tray(text: str) -> str:
    """The recorded host as a GB200 compute tray: no NVSwitch, IMEX pinned, held, running."""
    return text.replace("##nvswitch\n4", "##nvswitch\n0").replace(
        "##holds\n", "##holds\nnvidia-imex\n").replace(
        "##pkgs\n", "##pkgs\nnvidia-imex\t580.173.02-1\thi \n").replace(
        "##smi", "nvidia-imex enabled active\n##smi")


def test_fabric_manager_on_a_compute_tray_is_a_finding() -> None:
    """A GB200/GB300 tray (no NVSwitch, IMEX expected) with Fabric Manager installed or
    running fails conformance naming it; without it, it passes."""
    tray = _tray(RECORDED)
    c = judge("tray01", STACK, tray, imex=True)
    assert not c.ok
    assert c.problems == [
        "Fabric Manager on a compute tray of an NVLink domain (nvidia-fabricmanager "
        "580.173.02-1; service nvidia-fabricmanager active): the rack's switch trays run the "
        "NVLink fabric and IMEX shares memory across trays; stop and purge "
        "nvidia-fabricmanager here"]
    stopped = tray.replace("nvidia-fabricmanager enabled active",
                           "nvidia-fabricmanager missing inactive")
    only_pkg = judge("tray01", STACK, stopped, imex=True)
    assert only_pkg.problems and "service nvidia-fabricmanager active" not in \
        only_pkg.problems[0]
    gone = stopped
    for name in ("libnvidia-nscq", "nvidia-fabricmanager"):
        gone = gone.replace(f"{name}\t580.173.02-1\thi \n", "")
    clean = judge("tray01", STACK, gone, imex=True)
    assert clean.ok, clean.problems
    # an HGX host outside a rack is not judged on it
    assert judge("h1", STACK, RECORDED.replace("##nvswitch\n4", "##nvswitch\n0")).ok


def test_ssh_argv_checks_host_keys_and_uses_inventory_settings() -> None:
    argv = ssh_argv({"ansible_host": "10.78.0.11", "ansible_port": 2222, "ansible_user": "ops",
                     "ansible_ssh_private_key_file": "/k/id",
                     "ansible_ssh_common_args": "-o UserKnownHostsFile=/k/known_hosts"}, "h1")
    assert "StrictHostKeyChecking=yes" in argv
    assert argv[-1] == "ops@10.78.0.11"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/k/id"
    assert "UserKnownHostsFile=/k/known_hosts" in argv


def test_loaded_kernel_module_must_match_the_pinned_driver() -> None:
    # Real hosts expose /sys/module/nvidia/version; after an upgrade without a reboot
    # the userspace is new and the running module old.
    running = RECORDED.replace("##freeze", "##module\n580.173.02\n##freeze")
    assert judge("h1", STACK, running).ok
    stale = RECORDED.replace("##freeze", "##module\n570.211.01\n##freeze")
    c = judge("h1", STACK, stale)
    assert c.problems == ["the loaded kernel module is 570.211.01, pinned 580.173.02: reboot "
                          "(or reload the nvidia modules) to run the pinned driver"]


@pytest.mark.parametrize(("node_verdict", "judged"), [
    ("PASS", "ERROR"), ("WARN", "ERROR"),  # no output: never a PASS
    ("FAIL", "FAIL"), ("ERROR", "ERROR"),  # the node's own failure stands
])
def test_a_conformance_result_without_its_output_is_not_a_pass(node_verdict: str,
                                                               judged: str) -> None:
    from nodecert.stack.conformance import judge_result
    from nodecert_node.contract import Result, Verdict
    res = Result("stack.conformance", Verdict[node_verdict], "the node's own words")
    got = judge_result(res, "h1", STACK)
    assert got.verdict is Verdict[judged]
    if node_verdict in ("PASS", "WARN"):
        assert "reported no conformance output" in got.summary
        assert got.fault_code == "NC-STACK-NOT-MEASURED"
    with_output = res.with_(facts={"conformance_output": RECORDED})
    assert judge_result(with_output, "h1", STACK).verdict is Verdict.PASS
    assert judge_result(res, "h1", None) is res  # no stack: nothing to judge against
