"""Day one on the lab: the BMCs and the GPU container path.

BMCs: every host's BMC on the lab bridge, Redfish over HTTPS (sushy-tools behind TLS and
Basic authentication) and IPMI over LAN (OpenIPMI's ipmi_sim, read with the real
ipmitool), readings SIMULATED from the hardware model. Healthy BMCs pass and see the
burn-in's draw; each BMC fault gets its verdict with the part named; the BMC password (a
canary) is in no run file, log line or certificate.

Containers: real podman on the provisioned host runs the lab's image archive (pinned
by id) with every GPU through the CDI spec the container_toolkit role generated; the
simulated nvidia-smi inside sees the GPUs outside; each toolkit/CDI fault fails."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodecert.lab import bmc as labbmc
from nodecert.lab.hosts import Lab
from nodecert.provision.run import ProvisionRequest, provision
from nodecert.validation.run import ValidateRequest, ValidationRun, validate
from support.env import require_root
from support.lab import lab_config

pytestmark = pytest.mark.lab
STACK = "r580-cuda13.0"
BMC = ("bmc.sensors", "bmc.sel", "bmc.power", "bmc.inventory")


@pytest.fixture(scope="module")
def blab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_root()
    lab = Lab(lab_config("bm", 8), log=lambda m: None)
    try:
        lab.up(nodes=2, with_bmc=True)
        report = provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK,
                           limit=("h1",), runs_dir=tmp_path_factory.mktemp("prov")),
                           progress=lambda x: None)
        assert report.hosts["h1"].conformance is not None
        assert report.hosts["h1"].conformance.ok
        yield lab
    finally:
        lab.down()
    # nothing of the BMCs is left: their namespace, processes and files are gone
    assert not labbmc.present(lab.cfg)
    assert not (lab.cfg.state / "bmc").exists()


def password(lab: Lab) -> str:
    return (lab.cfg.state / "bmc" / "password").read_text().strip()


def run(lab: Lab, tmp_path: Path, inventory: Path | None = None, **kw: Any
        ) -> tuple[ValidationRun, list[str]]:
    lines: list[str] = []
    r = validate(ValidateRequest(inventory or lab.cfg.state / "inventory.ini", stack=STACK,
                                 runs_dir=tmp_path, **kw), progress=lines.append)
    return r, lines


def bmc_results(r: ValidationRun, host: str) -> dict[str, Any]:
    return {x.check: x for x in r.hosts[host].results if x.check in BMC}


def assert_no_secret(secret: str, root: Path, lines: list[str]) -> None:
    """The canary: the BMC password in no file under root and no progress line."""
    assert len(secret) >= 12
    for path in root.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert not any(secret in line for line in lines)


@contextlib.contextmanager
def faults(lab: Lab, tmp_path: Path, text: str) -> Iterator[None]:
    """The lab's BMCs with the faults of `text` (a faults file), healthy again after."""
    path = tmp_path / "faults.yml"
    path.write_text(text)
    lab.apply_faults(path)
    try:
        yield
    finally:
        lab.apply_faults(None)


def test_healthy_bmcs_pass_and_see_the_burn_in(blab: Lab, tmp_path: Path) -> None:
    from nodecert.certs.certify import certify
    from nodecert.certs.signing import init_key, load_private_key

    r, lines = run(blab, tmp_path / "runs", limit=("h1",), suite="standard",
                   checks=("hardware.inventory", "load.burnin"),
                   option_overrides={"load": {"burnin_s": 8, "report_s": 2}})
    got = bmc_results(r, "h1")
    assert {c: x.verdict.name for c, x in got.items()} == dict.fromkeys(BMC, "PASS"), \
        {c: x.summary for c, x in got.items()}
    power = got["bmc.power"]
    assert power.simulated and "during load.burnin" in power.summary
    # idle: about 1.8 kW; 8 GPUs at 93% of 700 W under the burn-in: about 6.6 kW
    assert power.facts["peak_w"] > 5500, power.facts["samples"]
    assert min(s["power_w"] for s in power.facts["samples"]) < 2500
    assert "BMC sees 8 GPUs, 8 network adapters" in got["bmc.inventory"].summary
    assert any("BMC redfish 10.78.8.211:443: sampling every 2 s" in x for x in lines)
    cr = certify(r.run_dir, load_private_key(init_key(tmp_path / "keys").private))
    node = cr.nodes[0]
    html = node.html.read_text()
    assert 'data-plot="bmc-power"' in html and 'data-plot="bmc-temps"' in html
    envelope = json.loads(node.envelope.read_text())
    signed = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    checks = {x["check"]: x for x in signed["results"]}
    assert checks["bmc.power"]["thresholds"]["bmc.power_capacity_fraction_max"]["source"]
    # the firmware the BMC lists, against the host's recipe, in the signed BOM
    assert checks["firmware.recipe"]["verdict"] == "PASS"
    assert checks["bmc.bios"]["verdict"] == "PASS"
    assert signed["firmware"]["recipe"] == "dgx-h200-motherboard"
    assert signed["firmware"]["components"]["cpld_mb"]["found"] == {
        "BMC CPLDMB_0": "0.2.1.6"}
    assert checks["bmc.power"]["facts"]["bmc"]["verified_by"].startswith("CA ")
    assert_no_secret(password(blab), tmp_path, lines)


def test_redfish_faults_get_their_verdicts(blab: Lab, tmp_path: Path) -> None:
    with faults(blab, tmp_path, "faults:\n"
                "  - {host: h2, kind: psu_failed, psu: 2}\n"
                "  - {host: h2, kind: fan_failed, fan: 3}\n"
                "  - {host: h2, kind: sel_critical_event}\n  - {host: h2, kind: bmc_firmware}\n"
                "  - {host: h1, kind: bmc_bad_credentials}\n"):
        r, lines = run(blab, tmp_path / "runs", checks=("hardware.inventory",))
    h2 = bmc_results(r, "h2")
    assert {c: x.verdict.name for c, x in h2.items()} == dict.fromkeys(BMC, "FAIL")
    assert h2["bmc.power"].summary.startswith("power supply PSU2 failed")
    assert any("PSU Redundancy: redundancy Critical" in f for f in h2["bmc.power"].findings)
    assert "Fan 3 0 RPM <= lower non-recoverable 300 RPM" in h2["bmc.sensors"].findings
    assert "DIMM_B3: Uncorrectable ECC error" in h2["bmc.sel"].summary
    assert h2["bmc.inventory"].summary == "BMC firmware 1.17, the site's golden version is 1.18"
    h1 = bmc_results(r, "h1")
    assert {x.verdict.name for x in h1.values()} == {"ERROR"}
    assert "refused the credentials of user nodecert (HTTP 401)" in h1["bmc.sel"].summary
    assert r.hosts["h1"].verdict.name == "ERROR"  # never READY with its BMC unread
    assert_no_secret(password(blab), tmp_path, lines)


def test_a_component_behind_its_recipe_fails_firmware_recipe(blab: Lab,
                                                              tmp_path: Path) -> None:
    with faults(blab, tmp_path, "faults:\n  - {host: h2, kind: firmware_old, component: erot_bmc, "
                "version: 00.04.0011.0000_n00}\n"):
        r, _ = run(blab, tmp_path / "runs", checks=("hardware.inventory",))
    got = {h: next(x for x in r.hosts[h].results if x.check == "firmware.recipe")
           for h in ("h1", "h2")}
    assert got["h1"].verdict.name == "PASS", got["h1"].summary
    assert got["h2"].verdict.name == "FAIL" and got["h2"].simulated
    assert got["h2"].summary == ("erot_bmc: BMC EROT_BMC_0 runs 00.04.0011.0000_n00, the "
                                 "recipe wants 00.04.0018.0000_n00")


def test_firmware_apply_brings_the_host_to_its_recipe_and_it_certifies(
        blab: Lab, tmp_path: Path) -> None:
    """A component behind on h1's BMC fails firmware.recipe; `nodecert firmware apply`
    pushes the mirror's image over Redfish (multipart push, task followed), after which
    h1 passes and its certificate carries the recipe's versions."""
    from nodecert.certs.certify import certify
    from nodecert.certs.signing import init_key, load_private_key
    from nodecert.firmware.apply import FirmwareRequest, run_firmware

    inv = blab.cfg.state / "inventory.ini"
    with faults(blab, tmp_path, "faults:\n  - {host: h1, kind: firmware_old, component: "
                "cpld_mid, version: 0.2.0.5}\n"):
        before, _ = run(blab, tmp_path / "before", limit=("h1",),
                        checks=("hardware.inventory",))
        res = next(x for x in before.hosts["h1"].results if x.check == "firmware.recipe")
        assert res.verdict.name == "FAIL" and "cpld_mid: BMC CPLDMID_0 runs 0.2.0.5" in \
            res.summary
        done = run_firmware(FirmwareRequest(inv, ("h1",), labbmc.firmware_mirror(blab.cfg),
                                            poll_s=0.5, task_timeout_s=60,
                                            runs_dir=tmp_path / "fw"))
        assert done.hosts["h1"].status == "updated", done.hosts["h1"].as_dict()
        after, lines = run(blab, tmp_path / "after", limit=("h1",),
                           checks=("hardware.inventory",))
    res = next(x for x in after.hosts["h1"].results if x.check == "firmware.recipe")
    assert res.verdict.name == "PASS", res.summary
    node = certify(after.run_dir, load_private_key(init_key(tmp_path / "keys").private)
                   ).nodes[0]
    signed = json.loads(base64.b64decode(json.loads(node.envelope.read_text())["payload"]))
    assert signed["predicate"]["firmware"]["components"]["cpld_mid"]["found"] == {
        "BMC CPLDMID_0": "0.2.0.7"}
    # one check of the suite: a health record, with nothing failed
    assert signed["predicate"]["verdict"] == "HEALTHY"
    assert_no_secret(password(blab), tmp_path, lines)


def test_a_bios_setting_gone_wrong_fails_and_firmware_apply_bios_sets_it(
        blab: Lab, tmp_path: Path) -> None:
    from nodecert.firmware.apply import FirmwareRequest, run_firmware

    with faults(blab, tmp_path, "faults:\n  - {host: h1, kind: bios_attr, attribute: "
                "SriovGlobalEnable, value: Disabled}\n"):
        before, _ = run(blab, tmp_path / "before", limit=("h1",),
                        checks=("hardware.inventory",))
        bad = next(x for x in before.hosts["h1"].results if x.check == "bmc.bios")
        assert bad.verdict.name == "FAIL"
        assert bad.summary == "SriovGlobalEnable is Disabled, the profile wants Enabled"
        done = run_firmware(FirmwareRequest(
            blab.cfg.state / "inventory.ini", ("h1",), labbmc.firmware_mirror(blab.cfg),
            poll_s=0.5, task_timeout_s=60, runs_dir=tmp_path / "fw", bios=True))
        assert done.hosts["h1"].status in ("at-recipe", "updated"), done.hosts["h1"].error
        after, _ = run(blab, tmp_path / "after", limit=("h1",),
                       checks=("hardware.inventory",))
    good = next(x for x in after.hosts["h1"].results if x.check == "bmc.bios")
    assert good.verdict.name == "PASS", good.summary


def test_ipmi_catches_a_hot_inlet_and_an_unreachable_bmc(blab: Lab, tmp_path: Path) -> None:
    """The same checks over IPMI (ipmitool lanplus against ipmi_sim): the inlet past its
    critical threshold, and the crossing logged in the BMC's own SEL."""
    inv = tmp_path / "ipmi.ini"
    text = (blab.cfg.state / "inventory.ini").read_text()
    text = re.sub(r'"protocol": "redfish", "port": 443, "ca_file": "[^"]*"',
                  '"protocol": "ipmi", "port": 623, "psu_capacity_w": 3000', text)
    assert text.count('"protocol": "ipmi"') == 2
    inv.write_text(text)
    with faults(blab, tmp_path, "faults:\n  - {host: h2, kind: temp_critical}\n"
                "  - {host: h1, kind: bmc_unreachable}\n"):
        r, lines = run(blab, tmp_path / "runs", inventory=inv, checks=("hardware.inventory",))
    h2 = bmc_results(r, "h2")
    assert h2["bmc.sensors"].verdict.name == "FAIL"
    assert "Inlet Temp 44 C >= upper critical 42 C" in h2["bmc.sensors"].findings
    assert h2["bmc.sel"].verdict.name == "FAIL"
    assert "Temperature Inlet Temp | Upper Critical going high" in h2["bmc.sel"].summary
    assert h2["bmc.power"].verdict.name == "PASS"  # six supplies present, none failed
    assert h2["bmc.sensors"].evidence[0].command.startswith("ipmitool -I lanplus -H 10.78.8.212")
    # Suite 17 asked for first; the suite ipmi_sim agreed to is on the result.
    assert "cipher suite" in h2["bmc.sensors"].facts["bmc"]["session"]
    h1 = bmc_results(r, "h1")
    assert {x.verdict.name for x in h1.values()} == {"ERROR"}
    assert "BMC not read" in h1["bmc.sensors"].summary
    assert_no_secret(password(blab), tmp_path, lines)


def test_the_gpu_container_sees_every_gpu_and_each_break_fails(blab: Lab,
                                                               tmp_path: Path) -> None:
    def smoke(tag: str) -> Any:
        r, _ = run(blab, tmp_path / tag, limit=("h1",), suite="standard",
                   checks=("container.gpu_smoke",))
        return next(x for x in r.hosts["h1"].results if x.check == "container.gpu_smoke")

    spec_before = blab.ssh("h1", "cat /etc/cdi/nvidia.yaml").stdout
    ok = smoke("ok")
    assert ok.verdict.name == "PASS", ok.summary
    assert ok.simulated and ok.summary == ("toolkit 1.17.8, CDI spec for driver 580.173.02; "
                                           "8 GPUs inside the container, as outside")
    assert any(e.command.startswith("podman run --rm --device nvidia.com/gpu=all sha256:")
               for e in ok.evidence)
    want = {"cdi_stale": "was generated for driver 570.211.01, the driver running is "
                         "580.173.02",
            "cdi_missing": "no CDI spec for the GPUs",
            "toolkit_missing": "the NVIDIA Container Toolkit is not installed"}
    for kind, text in want.items():
        with faults(blab, tmp_path, f"faults:\n  - {{host: h1, kind: {kind}}}\n"):
            bad = smoke(kind)
        assert bad.verdict.name == "FAIL" and text in bad.summary, (kind, bad.summary)
    # every fault undone: the host's own spec is back, byte for byte, and the path works
    assert blab.ssh("h1", "cat /etc/cdi/nvidia.yaml").stdout == spec_before
    assert smoke("again").verdict.name == "PASS"
