"""The imex role on a lab rack: two GB200 compute trays reset to bare hosts, provisioned
with the whole stack over real Ansible and SSH from the lab's mirror. IMEX lands at the
driver's version and held, its node list holds the rack's trays in order, the service
runs, the conformance check counts IMEX on the trays, the role is idempotent, and the
trays' IMEX domain then validates. A host in no rack never gets IMEX (test_roles_lab)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testinfra

from nodecert.lab.hosts import Lab
from nodecert.provision.run import ProvisionRequest, provision
from nodecert.stack.manifest import find_stack
from nodecert.validation.run import ValidateRequest, validate
from support.env import require_root
from support.lab import lab_config

pytestmark = pytest.mark.lab
STACK = find_stack("r580-cuda13.0")
TRAYS = ("h1", "h2")


@pytest.fixture(scope="module")
def rack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path]]:
    require_root()
    lab = Lab(lab_config("ix", 11), log=lambda m: None)
    try:
        lab.up(nodes=len(TRAYS), profiles=("gb200-nvl-4",), with_rack=True)
        for h in TRAYS:  # bare trays: what the lab's rack set up is gone
            lab.reset(h)
            assert lab.ssh(h, "test -e /usr/bin/nvidia-imex-ctl || echo absent"
                           ).stdout.strip() == "absent"
        yield lab, tmp_path_factory.mktemp("runs")
    finally:
        lab.down()


def _provision(lab: Lab, runs: Path, tags: tuple[str, ...] = ()) -> Any:
    return provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK.name,
                                      limit=TRAYS, tags=tags, runs_dir=runs),
                     progress=lambda line: None)


def test_the_trays_get_imex_from_the_role_and_their_domain_validates(
        rack: tuple[Lab, Path], tmp_path: Path) -> None:
    lab, runs = rack
    report = _provision(lab, runs)
    for h in TRAYS:
        outcome = report.hosts[h]
        assert outcome.status == "provisioned", outcome.as_dict()
        c = outcome.conformance
        assert c is not None and c.ok, c.problems if c else outcome.as_dict()
    pin = next(p for p in STACK.os["debian-12"].packages if p.component == "imex")
    ips = [str(lab.cfg.host_ip(n)) for n in range(1, len(TRAYS) + 1)]
    for h in TRAYS:
        host = testinfra.get_host(f"ssh://{h}", ssh_config=str(lab.cfg.state / "ssh_config"))
        pkg = host.package(pin.name)
        assert pkg.is_installed and pkg.version == str(pin.version)
        assert pin.name in host.check_output("apt-mark showhold").split()
        nodes = host.file("/etc/nvidia-imex/nodes_config.cfg")
        assert nodes.mode == 0o644 and nodes.user == "root"
        assert nodes.content_string.split() == ips  # the same order on every tray
        svc = host.service("nvidia-imex")
        assert svc.is_enabled and svc.is_running
        # no Fabric Manager on a compute tray: its NVLink switches are in the switch trays
        assert not host.package("nvidia-fabricmanager-580").is_installed
    # the role alone, again: nothing to change
    again = _provision(lab, runs, tags=("imex",))
    for h in TRAYS:
        assert again.hosts[h].changed == 0, again.hosts[h].as_dict()
    # what the role left is a working IMEX domain (both trays READY, domain UP)
    vr = validate(ValidateRequest(lab.cfg.state / "inventory.ini", suite="quick", limit=TRAYS,
                                  checks=("domain.imex", "stack.conformance"),
                                  runs_dir=tmp_path / "runs"), progress=lambda line: None)
    for h in TRAYS:
        by = {r.check: r for r in vr.hosts[h].results}
        assert by["domain.imex"].verdict.name == "PASS", by["domain.imex"].summary
        assert by["stack.conformance"].verdict.name == "PASS", by["stack.conformance"].summary


def test_provisioned_trays_have_no_fail_anywhere(rack: tuple[Lab, Path],
                                                 tmp_path: Path) -> None:
    """Trays provisioned with the whole stack like any host: the full lab suite (burn-in,
    soak, NCCL, storage, containers, the stack, the tray's domain; the trays' two GPUs of
    a board share a serial) finds nothing to FAIL on either."""
    lab, runs = rack
    if any(lab.ssh(h, "test -e /opt/nodecert/envs", check=False).returncode != 0
           for h in TRAYS):
        _provision(lab, runs)  # this test alone: provision as the test above does
    vr = validate(ValidateRequest(lab.cfg.state / "inventory.ini", suite="lab", limit=TRAYS,
                                  runs_dir=tmp_path / "runs"), progress=lambda line: None)
    for h in TRAYS:
        bad = {r.check: r.summary for r in vr.hosts[h].results
               if r.verdict.name in ("FAIL", "ERROR")}
        assert bad == {}, (h, bad)
        checks = {r.check for r in vr.hosts[h].results}
        assert {"stack.conformance", "container.gpu_smoke", "domain.imex",
                "hardware.inventory"} <= checks, checks


def test_a_changed_node_list_restarts_imex(rack: tuple[Lab, Path]) -> None:
    lab, runs = rack
    lab.ssh("h2", "echo 10.0.0.1 > /etc/nvidia-imex/nodes_config.cfg")
    # Each start of a unit gets a new invocation ID. (Its MainPID is no witness: for a
    # Type=forking unit without a PID file systemd only guesses it, and may report 0.)
    before = _service(lab, "h2")
    assert before[0] == "active", before
    report = _provision(lab, runs, tags=("imex",))
    assert report.hosts["h2"].changed >= 1 and report.hosts["h1"].changed == 0
    assert lab.ssh("h2", "cat /etc/nvidia-imex/nodes_config.cfg").stdout.split() == [
        str(lab.cfg.host_ip(1)), str(lab.cfg.host_ip(2))]
    after = _service(lab, "h2")
    assert after[0] == "active" and after[1] != before[1], (before, after)
    assert _service(lab, "h1")[0] == "active"


def _service(lab: Lab, host: str) -> tuple[str, str]:
    out = lab.ssh(host, "systemctl show -p ActiveState -p InvocationID nvidia-imex").stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return props.get("ActiveState", ""), props.get("InvocationID", "")


def test_a_rack_for_kubernetes_compute_domains_keeps_the_host_imex_off(
        rack: tuple[Lab, Path], tmp_path: Path) -> None:
    """The same trays ordered for a Kubernetes customer whose DRA ComputeDomains run IMEX
    (nodecert_rack imex: compute-domains): the role keeps nvidia-imex installed and held
    but stops, disables and masks its host service; domain.imex then PASSes on the host
    service being off, and FAILs a tray where someone started it again. (Last in this
    module: it leaves the trays in compute-domains mode.)"""
    import shutil
    lab, runs = rack
    state = lab.cfg.state
    text = (state / "inventory.ini").read_text()
    assert '"imex": true' in text
    k8s = tmp_path / "inventory.ini"
    k8s.write_text(text.replace('"imex": true', '"imex": "compute-domains"'))
    for d in ("group_vars", "host_vars"):
        if (state / d).is_dir():
            shutil.copytree(state / d, tmp_path / d)
    def converge() -> Any:
        return provision(ProvisionRequest(k8s, stack=STACK.name, limit=TRAYS, tags=("imex",),
                                          runs_dir=runs), progress=lambda line: None)
    report, again = converge(), converge()
    pin = next(p for p in STACK.os["debian-12"].packages if p.component == "imex")
    for h in TRAYS:
        assert report.hosts[h].status == "provisioned", report.hosts[h].as_dict()
        assert report.hosts[h].changed >= 1 and again.hosts[h].changed == 0  # idempotent
        enabled, active = lab.ssh(h, "systemctl is-enabled nvidia-imex; systemctl is-active "
                                     "nvidia-imex", check=False).stdout.split()
        # stopped: inactive, or failed where the daemon did not exit cleanly on the stop
        # (seen on a busy machine); domain.imex takes both as stopped
        assert enabled == "masked" and active in ("inactive", "failed"), (h, enabled, active)
        assert pin.name in lab.ssh(h, "apt-mark showhold").stdout.split()
    vr = validate(ValidateRequest(k8s, suite="quick", limit=TRAYS,
                                  checks=("domain.imex", "stack.conformance"),
                                  runs_dir=tmp_path / "runs"), progress=lambda line: None)
    for h in TRAYS:
        by = {r.check: r for r in vr.hosts[h].results}
        assert by["domain.imex"].verdict.name == "PASS", by["domain.imex"].summary
        assert "ComputeDomains" in by["domain.imex"].summary
        assert by["stack.conformance"].verdict.name == "PASS", by["stack.conformance"].summary
    # someone starts the host service behind the customer's ComputeDomains
    lab.ssh("h2", "systemctl unmask nvidia-imex && systemctl start nvidia-imex")
    vr = validate(ValidateRequest(k8s, suite="quick", limit=("h2",), checks=("domain.imex",),
                                  runs_dir=tmp_path / "again"), progress=lambda line: None)
    r = vr.hosts["h2"].results[0]
    assert r.verdict.name == "FAIL" and "nvidia-imex service is active" in r.findings[0], r
