"""`nodecert validate` end to end on the lab: real SSH (paramiko, strict host keys),
real systemd/apt hosts, simulated GPUs, real fio.

Needs root (CI runs as root). Brings up a lab of its own, shaped like the session's (h1,
h3: HGX H200; h2: L40S), provisioned once for this module with r580-cuda13.0: the lab
tier runs this file beside the shared lab's files, on another worker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.cli import main
from nodecert.lab.hosts import Lab
from nodecert.provision.run import ProvisionRequest, provision
from nodecert.validation.run import ValidateRequest, ValidationRun, validate
from support.env import require_root
from support.lab import lab_config
from support.orders import h200_host

pytestmark = pytest.mark.lab  # root, network namespaces, the lab hosts

STACK = "r580-cuda13.0"
HW = ("hardware.inventory", "hardware.pcie", "hardware.topology", "net.ib", "net.roce",
      "health.gpu", "health.xid")


@pytest.fixture(scope="module")
def plab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_root()
    lab = Lab(lab_config("vl", 6), log=lambda m: None)
    try:
        lab.up(nodes=3, profiles=("h200-sxm-8", "l40s-pcie-4"))
        report = provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK,
                           runs_dir=tmp_path_factory.mktemp("prov")),
                           progress=lambda line: None)
        assert all(h.conformance is not None and h.conformance.ok
                   for h in report.hosts.values()), report.as_dict()
        yield lab
    finally:
        lab.down()  # runs even when tests failed: nothing is left behind


def inv(lab: Lab) -> Path:
    return lab.cfg.state / "inventory.ini"


def run(lab: Lab, tmp_path: Path, **kw: Any) -> ValidationRun:
    lines: list[str] = kw.pop("lines", [])
    return validate(ValidateRequest(inv(lab), stack=STACK, runs_dir=tmp_path, **kw),
                    progress=lines.append)


def failing(r: ValidationRun) -> dict[str, dict[str, str]]:
    return {h: {x.check: x.summary for x in hr.results if x.verdict.name != "PASS"}
            for h, hr in r.hosts.items()}


def faults(lab: Lab, tmp_path: Path, text: str) -> None:
    path = tmp_path / "faults.yml"
    path.write_text(text)
    lab.apply_faults(path)


def test_healthy_lab_passes_every_check_with_live_progress(plab: Lab, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["validate", "-i", str(inv(plab)), "--stack", STACK,
                                  "--runs-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output + r.stderr
    for h in ("h1", "h2", "h3"):
        assert f"{h:<14} [1/17] hardware.inventory ..." in r.stderr
        assert f"{h:<14} [4/17] net.ib PASS (SIMULATED)" in r.stderr
        assert f"{h:<14} [17/17] storage.fio PASS (SIMULATED)" in r.stderr
        assert f"{h:<14} finished: PASS (17 PASS)" in r.stderr
    assert "PASS     done" in r.stdout and "SIMULATED" in r.stdout
    (run_dir,) = tmp_path.iterdir()
    data = json.loads((run_dir / "h2" / "results.json").read_text())
    assert data["schema"] == "nodecert.validation/v1" and data["verdict"] == "PASS"
    assert data["simulated"] is True and all(x["simulated"] for x in data["results"])
    assert [x["check"] for x in data["results"]] == [
        *HW, "power.limit", "platform.pcie_acs", "platform.iommu", "platform.cpu_governor",
        "platform.numa_balancing", "platform.gpudirect", "stack.conformance",
        "stack.advisories", "container.gpu_smoke", "storage.fio"]
    # Thresholds say where they came from: the L40S profile, the lab inventory.
    assert data["thresholds"]["pcie.gen"]["origin"] == "profile L40S (profiles/L40S.yml)"
    fio = next(x for x in data["results"] if x["check"] == "storage.fio")
    assert fio["thresholds"]["seq_read_mbps"]["origin"] == "inventory nodecert_thresholds (h2)"
    assert fio["evidence"][0]["sha256"] and "fio --name=seq_write" in fio["evidence"][0][
        "command"]
    # The node identity for the certificate: DMI serial, GPU serials/UUIDs, NIC MAC, NVMe.
    ident = data["identity"]
    assert ident["system_serial"].startswith("SIM") and len(ident["gpus"]) == 4
    assert all(g["uuid"].startswith("GPU-") for g in ident["gpus"])
    assert ident["nic_macs"] and len(ident["nvme"]) == 2
    summary = json.loads((run_dir / "validate.json").read_text())
    assert summary["verdict"] == "PASS" and set(summary["hosts"]) == {"h1", "h2", "h3"}


def test_hardware_faults_fail_exactly_the_right_check(plab: Lab, tmp_path: Path) -> None:
    rounds = [
        ("  - {host: h1, kind: gpu_missing, gpu: 3}\n"
         "  - {host: h2, kind: xid, gpu: 1, code: 79}\n"
         "  - {host: h3, kind: pcie_degraded, gpu: 2, width: 8}\n",
         {"h1": ("hardware.inventory", "7 GPUs visible to the driver, the spec orders 8"),
          "h2": ("health.xid", "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on GPU1"),
          "h3": ("hardware.pcie", "link trained at x8 of x16 (degraded width)")}),
        ("  - {host: h1, kind: nvlink_down, gpu: 5, links: [2]}\n"
         "  - {host: h2, kind: row_remap_pending, gpu: 0}\n"
         "  - {host: h3, kind: ecc_uncorrectable, gpu: 7}\n",
         {"h1": ("hardware.topology", "GPU5: NVLink 2 inactive (17 of 18 up)"),
          "h2": ("health.gpu", "row remapping pending"),
          "h3": ("health.gpu", "1 uncorrectable ECC errors since the driver loaded")}),
        ("  - {host: h1, kind: port_down, hca: 2}\n"
         "  - {host: h3, kind: symbol_errors, hca: 6, per_s: 40}\n",
         {"h1": ("net.ib", "mlx5_2 port 1: Down/Polling, expected Active/LinkUp"),
          "h3": ("net.ib", "mlx5_6 port 1 SymbolErrorCounter over 3 s")}),
    ]
    try:
        for text, expect in rounds:
            faults(plab, tmp_path, "faults:\n" + text)
            r = run(plab, tmp_path, checks=HW)
            got = failing(r)
            for host, (check, words) in expect.items():
                assert list(got[host]) == [check], (host, got[host])
                assert words in got[host][check], got[host][check]
                res = next(x for x in r.hosts[host].results if x.check == check)
                assert res.remediation and res.fault_code and res.simulated
    finally:
        plab.apply_faults(None)


def test_the_main_job_runs_from_an_installed_wheel(plab: Lab, tmp_path: Path) -> None:
    """nodecert installed from its wheel, outside the repository, builds an air-gapped
    mirror (the lab's repository and index playing upstream), then provisions, validates
    and certifies a lab host from that mirror alone -- the lab's own repository hidden
    on the host -- with an inventory directory whose group_vars choose the stack, as a
    non-root user whose sudo wants a password (vaulted in host_vars), through another lab
    host as the jump host."""
    import base64
    import io
    import tarfile

    from nodecert.certs.signing import init_key
    from support.wheel import build_wheel, install_wheel
    env = install_wheel(build_wheel(tmp_path / "build"), tmp_path / "site")
    key = init_key(tmp_path / "keys").private
    st = plab.cfg.state
    upstream = Path(json.loads((st / "lab.json").read_text())["mirror"])

    def wheel_cli(entry: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", f"import sys; from nodecert.cli import {entry}; "
             f"sys.argv[0] = 'nodecert'; {entry}()", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200, check=False)

    site_mirror = tmp_path / "site-mirror"
    # The lab's Debian repository (fio, python3-venv, ...) stays visible as the OS
    # archive; its simulated RDMA tools sit in the lab's NVIDIA repository, so they come in
    # as extra packages here, with the site's GPU tools. The container toolkit is not
    # named: the mirror carries what the roles pin on its own.
    os_archive = ("infiniband-diags", "perftest")
    gpu_tools = ("nccl-tests", "nvbandwidth", "gpu-burn", "mlnx-tools")
    r = wheel_cli("main", "mirror", "build", "--stack", STACK, "--os", "debian-12",
                  "--out", str(site_mirror), "--apt-upstream", str(upstream / "nvidia"),
                  "--index-url", f"file://{upstream / 'simple'}", "--allow-unsigned-upstream",
                  # the lab's stand-in wheels are locked by the lab (not the shipped lock)
                  "--wheel-hashes", str(st / "group_vars" / "lab.yml"),
                  *(a for name in os_archive + gpu_tools for a in ("--extra-package", name)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert wheel_cli("main", "mirror", "verify", str(site_mirror)).returncode == 0
    # an inventory directory: the hosts file, group_vars that pick the stack, host_vars
    # that reach h2 as `ops` through h1 with a vaulted sudo password
    inv_dir = tmp_path / "inventory"
    (inv_dir / "group_vars").mkdir(parents=True)
    (inv_dir / "host_vars").mkdir()
    shutil.copy(inv(plab), inv_dir / "hosts.ini")
    (inv_dir / "group_vars" / "lab.yml").write_text(
        f"nodecert_stack: {STACK}\n" + (st / "group_vars" / "lab.yml").read_text())
    password = "pw-" + os.urandom(6).hex()
    vault_pw = tmp_path / "vault-pw"
    vault_pw.write_text("v-" + os.urandom(6).hex() + "\n")
    vault_pw.chmod(0o600)
    from ansible.parsing.vault import VaultLib, VaultSecret
    blob = VaultLib([("default", VaultSecret(vault_pw.read_text().strip().encode()))]
                    ).encrypt(password).decode()
    h1_ip = str(plab.cfg.host_ip(1))
    (inv_dir / "host_vars" / "h2.yml").write_text(
        "ansible_user: ops\nansible_become: true\n"
        f"ansible_ssh_common_args: '-F {st / 'ssh_config'} -o UserKnownHostsFile="
        f"{st / 'known_hosts'} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
        f"-o ProxyJump=root@{h1_ip}'\n"
        "ansible_become_password: !vault |\n" + "".join(f"  {ln}\n" for ln in blob.splitlines()))
    # h2 as it came from the factory: everything provisioning installs must come from
    # the site's mirror alone
    plab.reset("h2")
    assert plab.ssh("h2", "dpkg-query -W nvidia-container-toolkit", check=False).returncode
    plab.ssh("h2", f"id ops >/dev/null 2>&1 || useradd -m -s /bin/sh ops; echo 'ops:{password}' "
             "| chpasswd && install -d -m 700 -o ops -g ops /home/ops/.ssh && install -m 600 "
             "-o ops -g ops /root/.ssh/authorized_keys /home/ops/.ssh/authorized_keys && "
             "echo 'ops ALL=(ALL) ALL' > /etc/sudoers.d/ops && chmod 440 /etc/sudoers.d/ops")
    # the mirror reaches h2 at the same path (as an NFS mount would); the lab's own
    # NVIDIA repository and index are hidden there
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(site_mirror, arcname=site_mirror.name)
    ssh = ["ssh", "-F", str(st / "ssh_config"), "h2"]
    subprocess.run([*ssh, f"mkdir -p {tmp_path} && base64 -d | tar -xz -C {tmp_path} && "
                    "for d in nvidia simple wheels; do mount -t tmpfs -o size=1m,ro "
                    "nodecert-hidden /srv/nodecert-mirror/$d; done"],
                   input=base64.b64encode(buf.getvalue()).decode(), text=True, check=True,
                   timeout=120, capture_output=True)
    try:
        assert plab.ssh("h2", "ls /srv/nodecert-mirror/nvidia | wc -l").stdout.strip() == "0"
        r = wheel_cli("provision_main", "--inventory", str(inv_dir), "--limit", "h2",
                      "--mirror", str(site_mirror), "--runs-dir", str(tmp_path / "runs"),
                      "--key", str(key), "--vault-password-file", str(vault_pw))
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        # Ansible and validate logged in as ops (through h1), never as root
        logins = plab.ssh("h2", "journalctl -u ssh -u sshd --no-pager -q | grep -c "
                          "'Accepted publickey for ops' || true").stdout.strip()
        assert int(logins or 0) > 0
        for f in (tmp_path / "runs").rglob("*"):
            if f.is_file():
                assert password.encode() not in f.read_bytes(), f
        source = plab.ssh("h2", "cat /etc/apt/sources.list.d/nodecert-nvidia.list").stdout
        assert f"file:{site_mirror}/nvidia" in source, source
        # pip installed with --require-hashes from the mirror's digests
        reqs = plab.ssh("h2", f"cat /opt/nodecert/envs/{STACK}.requirements.txt").stdout
        assert "torch==2.9.1+cu130 --hash=sha256:" in reqs, reqs
        toolkit = plab.ssh("h2", "dpkg-query -W -f '${Version}' nvidia-container-toolkit")
        assert toolkit.stdout == "1.17.8-1"  # from the site's mirror
    finally:
        plab.ssh("h2", "rm -f /etc/sudoers.d/ops; "
                 "for d in nvidia simple wheels; do umount /srv/nodecert-mirror/$d; "
                 "done; echo 'deb [trusted=yes] file:/srv/nodecert-mirror/nvidia ./' > "
                 "/etc/apt/sources.list.d/nodecert-nvidia.list && apt-get update -qq",
                 timeout=300, check=False)
    (cert,) = (tmp_path / "runs").glob("*/reports/h2.intoto.dsse.json")
    v = CliRunner().invoke(main, ["verify", str(cert), "--pubkey", str(key.with_suffix(
        ".pub")), "--allow-simulated", "--expect-host", "h2", "--revocations",
        str(tmp_path / "runs" / "revocations.intoto.dsse.json")])
    assert v.exit_code == 0 and "current on the list #1" in v.output, v.output
    # the playbook and roles Ansible ran are the wheel's, not the checkout's
    commands = list((tmp_path / "runs").glob("*/ansible/artifacts/*/command"))
    assert commands and all(str(tmp_path / "site") in c.read_text() for c in commands)


def test_a_provisioned_node_is_judged_against_the_stack_it_recorded(
        plab: Lab, tmp_path: Path) -> None:
    """No --stack and no nodecert_stack in the lab inventory: validate judges each host
    against the stack its provisioning recorded (/etc/nodecert/provisioned.json)."""
    lines: list[str] = []
    r = validate(ValidateRequest(inv(plab), runs_dir=tmp_path, limit=("h1",),
                 checks=("stack.conformance",)), progress=lines.append)
    res = r.hosts["h1"].results[0]
    assert res.verdict.name == "PASS", res.summary
    assert any("stack r580-cuda13.0: recorded by provisioning on the node" in ln
               for ln in lines), lines


PLATFORM = ("platform.pcie_acs", "platform.iommu", "platform.cpu_governor",
            "platform.numa_balancing", "platform.gpudirect")


def test_platform_faults_fail_exactly_their_check(plab: Lab, tmp_path: Path) -> None:
    """On the provisioned lab hosts (h1, h3 H200; h2 L40S): each platform setting gone
    wrong fails its own check and no other, and a host without a fault passes them."""
    rounds = [
        ("  - {host: h1, kind: pcie_acs, gpu: 2}\n  - {host: h2, kind: numa_balancing}\n"
         "  - {host: h3, kind: peermem_missing}\n",
         {"h1": ("platform.pcie_acs", "in front of 0000:3a:00.0"),
          "h2": ("platform.numa_balancing", "needs == 0, measured 1"),
          "h3": ("platform.gpudirect", "needs >= 1 paths, measured 0 paths")}),
        ("  - {host: h1, kind: iommu_translated}\n  - {host: h3, kind: cpu_powersave}\n",
         {"h1": ("platform.iommu", "the IOMMU translates DMA for 0000:18:00.0"),
          "h2": None,
          "h3": ("platform.cpu_governor", "governor: needs == performance, measured "
                 "powersave")}),
    ]
    try:
        for text, expect in rounds:
            faults(plab, tmp_path, "faults:\n" + text)
            r = run(plab, tmp_path, checks=PLATFORM)
            got = failing(r)
            for host, want in expect.items():
                if want is None:
                    assert got[host] == {}, got[host]
                    continue
                assert list(got[host]) == [want[0]], (host, got[host])
                assert want[1] in got[host][want[0]], got[host][want[0]]
                res = next(x for x in r.hosts[host].results if x.check == want[0])
                assert res.remediation and res.simulated
    finally:
        plab.apply_faults(None)


def test_wrong_driver_and_slow_nvme_fail_their_checks(plab: Lab, tmp_path: Path) -> None:
    faults(plab, tmp_path, "faults:\n  - {host: h2, kind: nvme_slow, read_mbps: 8, "
           "write_mbps: 8}\n")
    plab.ssh("h3", "apt-get install -y -q --allow-downgrades --allow-change-held-packages "
             "nvidia-open=570.211.01-1", timeout=300)
    try:
        r = run(plab, tmp_path, checks=("hardware.topology", "stack.conformance",
                                        "storage.fio"))
        got = failing(r)
        assert got["h1"] == {}
        assert list(got["h2"]) == ["storage.fio"]
        slow = got["h2"]["storage.fio"]
        assert "needs >= 25 MB/s, measured " in slow
        assert slow.endswith("(inventory nodecert_thresholds (h2))") or \
            "(inventory nodecert_thresholds (h2)) (+" in slow
        assert list(got["h3"]) == ["stack.conformance"]
        conf = next(x for x in r.hosts["h3"].results if x.check == "stack.conformance")
        assert "nvidia-open is 570.211.01-1, pinned 580.173.02-1" in conf.findings
        assert "nvidia-smi reports driver '570.211.01', pinned 580.173.02" in conf.findings
        assert conf.remediation.startswith("Re-run `nodecert provision --stack r580-cuda13.0`")
    finally:
        plab.apply_faults(None)
        plab.ssh("h3", "apt-get install -y -q --allow-change-held-packages "
                 "nvidia-open=580.173.02-1 && apt-mark hold nvidia-open", timeout=300)


def test_fabric_checks_on_the_lab(plab: Lab, tmp_path: Path) -> None:
    fabric = ("fabric.nccl_allreduce", "fabric.bandwidth", "dcgm.diag")
    faults(plab, tmp_path, "faults:\n  - {host: h3, kind: busbw_low, factor: 0.7}\n")
    try:
        r = run(plab, tmp_path, suite="standard", checks=fabric)
    finally:
        plab.apply_faults(None)
    verdicts = {h: {x.check: x.verdict.name for x in hr.results} for h, hr in r.hosts.items()}
    assert verdicts["h1"] == dict.fromkeys(fabric, "PASS")
    # L40S: no published all-reduce floor for PCIe-only nodes -> WARN with the figure.
    assert verdicts["h2"] == {"fabric.nccl_allreduce": "WARN", "fabric.bandwidth": "PASS",
                              "dcgm.diag": "PASS"}
    assert verdicts["h3"]["fabric.nccl_allreduce"] == "FAIL"
    h3 = next(x for x in r.hosts["h3"].results if x.check == "fabric.nccl_allreduce")
    assert "needs >= 440 GB/s" in h3.summary and h3.thresholds[
        "fabric.allreduce_busbw_gbs_min"].origin == "profile H200-SXM (profiles/H200-SXM.yml)"


def test_load_checks_on_the_lab(plab: Lab, tmp_path: Path) -> None:
    """The stack's (simulated) PyTorch is the load: the provisioned environment's python
    runs nodecert's GEMM and smoke workers; the lab's hardware model plays the GPUs."""
    load = ("stack.framework_smoke", "load.burnin", "load.thermal_soak")
    faults(plab, tmp_path, "faults:\n  - {host: h1, kind: sdc, gpu: 3}\n"
           "  - {host: h1, kind: tflops_low, gpu: 1, factor: 0.8}\n"
           "  - {host: h3, kind: thermal_throttle, gpu: 5, after_s: 3}\n")
    try:
        r = run(plab, tmp_path, suite="standard", checks=load,
                option_overrides={"load": {"burnin_s": 6, "soak_s": 8, "report_s": 2}})
    finally:
        plab.apply_faults(None)
    failing_now = failing(r)
    assert failing_now["h2"] == {}
    assert list(failing_now["h1"]) == ["load.burnin"]
    burn = next(x for x in r.hosts["h1"].results if x.check == "load.burnin")
    assert burn.value["load"] == "torch" and burn.simulated
    assert burn.findings[0].startswith("GPU3: silent data corruption")
    assert any(f.startswith("GPU1 ") and "as a fraction of the node's best GPU" in f
               for f in burn.findings)
    assert "load.thermal_soak" in failing_now["h3"]
    assert "GPU5: HW Slowdown under load" in failing_now["h3"]["load.thermal_soak"]
    soak = next(x for x in r.hosts["h2"].results if x.check == "load.thermal_soak")
    assert soak.simulated and len(soak.facts["series"]) == 4
    smoke = next(x for x in r.hosts["h2"].results if x.check == "stack.framework_smoke")
    assert smoke.summary == "torch 2.9.1+cu130 (CUDA 13.0) sees 4 GPUs and trains on each"


def test_provision_validate_certify_verify_on_the_lab(plab: Lab, tmp_path: Path) -> None:
    """Certification end to end: `provision` chains install -> conformance -> validate ->
    certify; the certificates verify offline and against the live hosts; a faulty node
    gets a signed NOT READY; tampering and another node's hardware are rejected."""
    from nodecert.certs.certify import HEALTHY, NOT_READY, certify
    from nodecert.certs.signing import init_key, load_private_key

    kp = init_key(tmp_path / "keys")
    r = CliRunner().invoke(main, ["provision", "-i", str(inv(plab)), "--stack", STACK,
                                  "--limit", "h1", "--runs-dir", str(tmp_path / "runs"),
                                  "--key", str(kp.private)])
    assert r.exit_code == 0, r.output
    assert "h1             READY (SIMULATED)" in r.output
    reports = Path(r.output.split("certificates: ")[1].split(" ")[0])
    cert = reports / "h1.intoto.dsse.json"
    assert (reports / "h1.html").is_file() and (reports / "index.html").is_file()

    def verify(*args: str) -> Any:
        return CliRunner().invoke(main, ["verify", str(cert), "--pubkey", str(kp.public),
                                         *args])
    assert verify().exit_code == 1  # simulated hardware is not a real certificate
    ok = verify("--allow-simulated", "--host", "h1", "-i", str(inv(plab)))
    assert ok.exit_code == 0, ok.output
    assert "the host's live hardware identity matches the certificate" in ok.output
    # the main job's default: the lab acceptance suite, every stage measured
    # the burn-in as measured: at least the plan's 3 s (a busy machine runs a step over)
    said = re.search(r"acceptance certificate: suite lab, acceptance profile lab; "
                     r"burn-in ([0-9.]+) s", ok.output)
    assert said and 3 <= float(said.group(1)) < 10, ok.output
    assert verify("--allow-simulated", "--require", "acceptance").exit_code == 0
    other = verify("--allow-simulated", "--host", "h3", "-i", str(inv(plab)))
    assert other.exit_code == 1
    assert "the host's hardware differs from the certificate: system serial" in other.output
    tampered = tmp_path / "tampered.json"
    env = json.loads(cert.read_text())
    env["payload"] = env["payload"][:40] + ("A" if env["payload"][40] != "A" else "B") + \
        env["payload"][41:]
    tampered.write_text(json.dumps(env))
    bad = CliRunner().invoke(main, ["verify", str(tampered), "--pubkey", str(kp.public),
                                    "--allow-simulated"])
    assert bad.exit_code == 1 and "FAIL signature" in bad.output

    # A faulty node (uncorrectable ECC on h3) gets a signed report that says NOT READY.
    faults(plab, tmp_path, "faults:\n  - {host: h3, kind: ecc_uncorrectable, gpu: 2}\n")
    try:
        vr = run(plab, tmp_path, limit=("h2", "h3"))
    finally:
        plab.apply_faults(None)
    cr = certify(vr.run_dir, load_private_key(kp.private))
    got = {n.host: (n.verdict, n.simulated) for n in cr.nodes}
    # a quick run: the healthy node gets a health record, the faulty one NOT READY
    assert got == {"h2": (HEALTHY, True), "h3": (NOT_READY, True)}
    h3 = next(n for n in cr.nodes if n.host == "h3")
    assert h3.reasons[0] == ("health.gpu FAIL: GPU 0000:3a:00.0: 1 uncorrectable ECC errors "
                             "since the driver loaded")
    assert "NOT READY (SIMULATED)" in h3.html.read_text()

    # The hand-over: the lab's runs as one bundle (in Portuguese, with PDFs), checked
    # offline in one command; the NOT READY node is named, the READY one holds; h2's
    # quick run is a health record, refused unless handed over knowingly.
    bundle = tmp_path / "acme"
    args = ["handover", str(reports.parent), str(vr.run_dir), "--out", str(bundle), "--key",
            str(kp.private), "--lang", "pt-BR", "--pdf"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "h2 (h2.intoto.dsse.json: suite quick" in r.output, r.output
    r = CliRunner().invoke(main, [*args, "--allow-health-records"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (bundle / "reports").iterdir()) == [
        f"node-{h}.{ext}" for h in ("h1", "h2", "h3") for ext in ("html", "pdf")]
    assert "Entrega: 1 de 3 certificados PRONTOS" in (bundle / "index.html").read_text()
    vb = CliRunner().invoke(main, ["verify-bundle", str(bundle), "--pubkey", str(kp.public),
                                   "--allow-simulated", "--allow-health-records",
                                   "--lang", "pt-BR"])
    assert vb.exit_code == 1, vb.output
    assert "NÃO VÁLIDO: 1 de 3 certificados válidos e PRONTOS" in vb.output
    assert "FAIL certificates/node-h3.intoto.dsse.json" in vb.output
    assert "ok   certificates/node-h1.intoto.dsse.json" in vb.output
    assert "ok   certificates/node-h2.intoto.dsse.json" in vb.output


def wait_on(lab: Lab, host: str, condition: str, timeout: int = 240) -> None:
    """Block until a shell condition holds on the host (polled there), or fail."""
    r = lab.ssh(host, f"timeout {timeout} sh -c 'until {condition}; do sleep 0.5; done'",
                timeout=timeout + 30, check=False)
    assert r.returncode == 0, f"{host}: `{condition}` not true within {timeout} s"


def test_revalidation_schedule_hook_and_drift_on_the_lab(plab: Lab, tmp_path: Path) -> None:
    """Re-validation on real systemd and apt: the timer fires, the apt hook queues a run for
    a watched package and not for others, the metrics parse, history is kept, and
    `nodecert revalidate` reports an unheld package and a swapped GPU, then passes the
    unchanged node."""
    from prometheus_client.parser import text_string_to_metric_families

    from nodecert.certs.certify import certify
    from nodecert.certs.signing import init_key, load_private_key

    h = "h2"
    units = plab.ssh(h, "systemctl is-enabled nodecert-revalidate.timer "
                        "nodecert-revalidate-boot.service; "
                        "systemctl is-active nodecert-revalidate.timer").stdout.split()
    assert units == ["enabled", "enabled", "active"]
    # Baseline: validate + certify (the node keeps the quick plan for its own runs).
    kp = init_key(tmp_path / "keys")
    base = run(plab, tmp_path / "base", limit=(h,))
    reports = certify(base.run_dir, load_private_key(kp.private)).out_dir
    # The timer fires the service (a drop-in makes it due now).
    plab.ssh(h, "rm -rf /var/lib/nodecert/history; "
                "mkdir -p /etc/systemd/system/nodecert-revalidate.timer.d && printf "
                "'[Timer]\\nOnCalendar=\\nOnActiveSec=1s\\nRandomizedDelaySec=0\\n' "
                "> /etc/systemd/system/nodecert-revalidate.timer.d/test.conf && "
                "systemctl daemon-reload && systemctl restart nodecert-revalidate.timer")
    try:
        wait_on(plab, h, "ls /var/lib/nodecert/history | grep -q -- -timer-")
    finally:
        plab.ssh(h, "rm -rf /etc/systemd/system/nodecert-revalidate.timer.d && "
                    "systemctl daemon-reload && systemctl restart nodecert-revalidate.timer")
    prom = plab.ssh(h, "cat /var/lib/prometheus/node-exporter/nodecert.prom").stdout
    fams = {f.name: f for f in text_string_to_metric_families(prom)}
    assert fams["nodecert_node_verdict"].samples[0].value == 0.0  # PASS
    assert {s.labels["check"] for s in fams["nodecert_check_verdict"].samples} >= {
        "hardware.inventory", "health.gpu", "storage.fio"}
    # The apt hook: an unrelated package queues nothing; a watched one queues a run.
    deb = ("mkdir -p /tmp/{n}/DEBIAN && printf 'Package: {n}\\nVersion: 1.0\\n"
           "Architecture: all\\nMaintainer: nodecert tests <t@example.invalid>\\n"
           "Description: probe\\n' > /tmp/{n}/DEBIAN/control && "
           "dpkg-deb -b /tmp/{n} /tmp/{n}.deb >/dev/null && "
           "apt-get install -y -q /tmp/{n}.deb >/dev/null 2>&1")
    plab.ssh(h, deb.format(n="nodecert-unrelated-probe"), timeout=180)
    assert plab.ssh(h, "test -e /var/lib/nodecert/revalidate-pending", check=False
                    ).returncode == 1
    plab.ssh(h, deb.format(n="nvidia-nodecert-probe"), timeout=180)
    try:
        wait_on(plab, h, "ls /var/lib/nodecert/history | grep -q -- -after-update-")
        wait_on(plab, h, "! test -e /var/lib/nodecert/revalidate-pending")
    finally:
        plab.ssh(h, "apt-get purge -y -q nvidia-nodecert-probe nodecert-unrelated-probe "
                    ">/dev/null 2>&1", timeout=180)
    def collect(runs: Path) -> tuple[Any, dict[str, Any]]:
        """`revalidate --collect after-update` against the certificate: its result and the
        collected run's record."""
        r = CliRunner().invoke(main, [
            "revalidate", "-i", str(inv(plab)), "--stack", STACK, "--limit", h,
            "--baseline", str(reports), "--key", str(kp.private),
            "--runs-dir", str(runs), "--collect", "after-update"])
        record = json.loads(next(runs.glob(f"*/{h}/results.json")).read_text()) \
            if r.exit_code in (0, 1) else {}
        return r, record

    # An unhold makes no apt transaction: the watch on dpkg's status file queues a run,
    # which FAILs stack.conformance for the pinned package no longer held.
    count = "ls /var/lib/nodecert/history | grep -c -- -after-update-"
    assert plab.ssh(h, "systemctl is-enabled nodecert-hold-watch.path; "
                       "systemctl is-active nodecert-hold-watch.path").stdout.split() == [
        "enabled", "active"]
    before = int(plab.ssh(h, count, check=False).stdout.strip() or 0)
    plab.ssh(h, "apt-mark unhold nvidia-open >/dev/null")
    try:
        wait_on(plab, h, f"[ $({count}) -gt {before} ]")
        wait_on(plab, h, "! test -e /var/lib/nodecert/revalidate-pending")
        r, col = collect(tmp_path / "unheld")
        assert r.exit_code == 1, r.output
        conf = next(x for x in col["results"] if x["check"] == "stack.conformance")
        assert conf["verdict"] == "FAIL", conf
        assert "nvidia-open 580.173.02-1 is not held against upgrades" in conf["findings"], conf
    finally:
        plab.ssh(h, "apt-mark hold nvidia-open >/dev/null")
    # holding it again is a change as well: its run ends before the next step
    wait_on(plab, h, f"[ $({count}) -gt {before + 1} ]")
    wait_on(plab, h, "! test -e /var/lib/nodecert/revalidate-pending")
    # Changing a pinned (held) package with apt queues a run as well.
    before = int(plab.ssh(h, count, check=False).stdout.strip() or 0)
    plab.ssh(h, "apt-get install -y -q --allow-downgrades --allow-change-held-packages "
                "nvidia-open=570.211.01-1 >/dev/null", timeout=300)
    wait_on(plab, h, f"[ $({count}) -gt {before} ]")
    wait_on(plab, h, "! test -e /var/lib/nodecert/revalidate-pending")
    # The control side collects that run: conformance judged, drift against the certificate.
    r, col = collect(tmp_path / "collected")
    assert r.exit_code == 1, r.output
    assert "drift.stack" in r.output and "nvidia-open 580.173.02-1 -> 570.211.01-1" in r.output
    assert col["node"]["reason"] == "after-update"
    conf = next(x for x in col["results"] if x["check"] == "stack.conformance")
    assert conf["verdict"] == "FAIL"
    assert "nvidia-open is 570.211.01-1, pinned 580.173.02-1" in conf["findings"]
    # Drift: a changed driver version, an unheld package and a swapped GPU; exit 1.
    plab.ssh(h, "apt-mark unhold nvidia-open && apt-get install -y -q --allow-downgrades "
                "nvidia-open=570.211.01-1 >/dev/null", timeout=300)
    faults(plab, tmp_path, f"faults:\n  - {{host: {h}, kind: gpu_swapped, gpu: 1}}\n")
    try:
        r = CliRunner().invoke(main, [
            "revalidate", "-i", str(inv(plab)), "--stack", STACK, "--limit", h,
            "--baseline", str(reports), "--key", str(kp.private),
            "--runs-dir", str(tmp_path / "runs")])
    finally:
        plab.apply_faults(None)
        plab.ssh(h, "apt-get install -y -q --allow-downgrades nvidia-open=580.173.02-1 "
                    ">/dev/null && apt-mark hold nvidia-open", timeout=300)
    assert r.exit_code == 1, r.output
    assert "drift.stack" in r.output and "nvidia-open 580.173.02-1 -> 570.211.01-1" in r.output
    rv = json.loads(next((tmp_path / "runs").glob(f"*/{h}/results.json")).read_text())
    stack = next(x for x in rv["results"] if x["check"] == "drift.stack")
    assert "nvidia-open is no longer held (apt may upgrade it silently)" in stack["findings"]
    assert stack["value"]["old"]["nvidia-open"] == "580.173.02-1"
    assert "drift.identity" in r.output and "hardware changed: GPU replaced in slot 1, bus " \
        in r.output
    assert "7777" in r.output  # the swapped board's serial
    # Unchanged node: every comparison passes; the quick re-run is a health record.
    r = CliRunner().invoke(main, [
        "revalidate", "-i", str(inv(plab)), "--stack", STACK, "--limit", h,
        "--baseline", str(reports), "--key", str(kp.private),
        "--runs-dir", str(tmp_path / "runs2")])
    assert r.exit_code == 0, r.output
    assert "FAIL" not in r.output and "HEALTHY (SIMULATED)" in r.output
    hist = CliRunner().invoke(main, ["history", h, "--runs-dir", str(tmp_path / "runs")])
    assert hist.exit_code == 0 and "FAIL" in hist.output
    # Performance: a baseline with the all-reduce and the soak, then lower busbw and a
    # hotter GPU are regressions with old and new values (h1, an 8-GPU H200 host).
    from nodecert.revalidate.run import RevalidateRequest, revalidate
    perf = ("hardware.inventory", "fabric.nccl_allreduce", "load.thermal_soak")
    short = {"load": {"soak_s": 8, "report_s": 2}}
    b = run(plab, tmp_path / "pbase", limit=("h1",), suite="standard", checks=perf,
            option_overrides=short)
    key = load_private_key(kp.private)
    preports = certify(b.run_dir, key).out_dir
    faults(plab, tmp_path, "faults:\n  - {host: h1, kind: busbw_low, factor: 0.8}\n"
           "  - {host: h1, kind: thermal_throttle, gpu: 4, after_s: 0}\n")
    try:
        again = ValidateRequest(inv(plab), suite="standard", runs_dir=tmp_path / "pruns",
                                limit=("h1",), stack=STACK, checks=perf,
                                option_overrides=short)
        rv2 = revalidate(RevalidateRequest(again, key=key, trusted=[key.public_key()],
                                           baseline=preports), progress=lambda line: None)
    finally:
        plab.apply_faults(None)
    got = {x.check: x for x in rv2.drift["h1"]}
    bw = got["drift.perf.allreduce_busbw"]
    assert bw.verdict.name == "FAIL" and bw.value["change_pct"] == pytest.approx(-20, abs=1)
    hot = got["drift.perf.soak_peak_temp"]
    assert hot.verdict.name == "FAIL" and hot.value["change"] > 5
    assert rv2.regressed and not rv2.cert.all_ready  # type: ignore[union-attr]


def test_unreachable_host_and_unknown_host_key(plab: Lab, tmp_path: Path) -> None:
    nobody = plab.cfg.subnet[99]  # in the lab's subnet, no host there
    text = inv(plab).read_text().replace(
        "[lab]\n", f"[lab]\n{h200_host('ghost', nobody)}\n")
    path = tmp_path / "with-ghost.ini"
    path.write_text(text)
    r = validate(ValidateRequest(path, stack=STACK, runs_dir=tmp_path, checks=("health.gpu",)),
                 progress=lambda line: None)
    ghost = r.hosts["ghost"]
    assert ghost.status == "unreachable" and f"cannot reach {nobody}:22" in ghost.error
    assert [x.fault_code for x in ghost.results] == ["NC-HOST-UNREACHABLE"]
    assert {h: r.hosts[h].status for h in ("h1", "h2", "h3")} == dict.fromkeys(
        ("h1", "h2", "h3"), "done")
    assert r.verdict.name == "ERROR"
    # Host keys are checked: a known_hosts that lacks them refuses every host.
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    strict = tmp_path / "strict.ini"
    strict.write_text(inv(plab).read_text().replace(
        str(plab.cfg.state / "known_hosts"), str(empty)))
    r = validate(ValidateRequest(strict, stack=STACK, runs_dir=tmp_path, checks=("health.gpu",),
                 limit=("h1",)), progress=lambda line: None)
    assert r.hosts["h1"].status == "unreachable"
    assert "is not in known_hosts" in r.hosts["h1"].error


def test_ctrl_c_keeps_finished_results_and_marks_the_rest(plab: Lab, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "nodecert", "validate", "-i", str(inv(plab)),
                             "--stack", STACK, "--runs-dir", str(tmp_path), "--limit", "h1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:  # block until the first result has arrived
            if "[1/17] hardware.inventory PASS" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    (run_dir,) = tmp_path.iterdir()
    data = json.loads((run_dir / "h1" / "results.json").read_text())
    assert data["status"] == "interrupted"
    res = {x["check"]: x for x in data["results"]}
    assert res["hardware.inventory"]["verdict"] == "PASS"
    assert len(res) == 17  # the quick suite
    not_run = [x for x in data["results"] if x["fault_code"] == "NC-NOT-RUN-INTERRUPTED"]
    assert not_run and all(x["verdict"] == "ERROR" for x in not_run)
    assert "interrupted" in out
    # Nothing keeps running on the node: its runner saw the channel close and stopped
    # (pidwait blocks until any straggler exits; the pattern does not match itself; the
    # check it was in finishes first, which on a loaded machine takes a while).
    left = plab.ssh("h1", "timeout 60 pidwait -f 'nodecert_nod[e]'; "
                    "pgrep -af 'nodecert_nod[e]' || true", timeout=90).stdout.strip()
    assert left == ""


def test_host_time_limit(plab: Lab, tmp_path: Path) -> None:
    faults(plab, tmp_path, "faults:\n  - {host: h1, kind: nvme_slow, read_mbps: 8, "
           "write_mbps: 8}\n")
    try:
        r = run(plab, tmp_path, limit=("h1",), checks=("health.gpu", "storage.fio"),
                host_timeout_s=8)
    finally:
        plab.apply_faults(None)
    h1 = r.hosts["h1"]
    assert h1.status == "lost"
    assert h1.error == "host time limit of 8 s reached during storage.fio"
    assert [(x.check, x.verdict.name) for x in h1.results] == [("health.gpu", "PASS"),
                                                               ("storage.fio", "ERROR")]
    # The node stopped the check when the connection closed: no fio keeps running there.
    left = plab.ssh("h1", "timeout 20 pidwait -x fio; pgrep -ax fio || true",
                    timeout=60).stdout.strip()
    assert left == ""


def test_host_dropping_mid_run_is_an_error_while_others_finish(plab: Lab,
                                                              tmp_path: Path) -> None:
    """Last in the module: h1 is reset (its provisioning is gone afterwards)."""
    faults(plab, tmp_path, "faults:\n  - {host: h1, kind: nvme_slow, read_mbps: 8, "
           "write_mbps: 8}\n")  # keeps h1's storage test busy long enough to cut it
    started = threading.Event()

    def progress(line: str) -> None:
        if line.startswith("h1") and "storage.fio ..." in line:
            started.set()

    out: dict[str, ValidationRun] = {}
    request = ValidateRequest(inv(plab), stack=STACK, runs_dir=tmp_path,
                              checks=("health.gpu", "storage.fio"))
    t = threading.Thread(target=lambda: out.setdefault("r", validate(request,
                                                                     progress=progress)))
    t.start()
    try:
        assert started.wait(timeout=120)
        plab.reset("h1")  # the host goes away mid-check
    finally:
        t.join(timeout=300)
        plab.apply_faults(None)
    r = out["r"]
    h1 = r.hosts["h1"]
    assert h1.status == "lost", h1.error
    assert [(x.check, x.verdict.name) for x in h1.results] == [("health.gpu", "PASS"),
                                                               ("storage.fio", "ERROR")]
    assert h1.results[1].fault_code == "NC-HOST-LOST"
    assert "during storage.fio" in h1.results[1].summary
    assert {h: (r.hosts[h].status, r.hosts[h].verdict.name) for h in ("h2", "h3")} == {
        "h2": ("done", "PASS"), "h3": ("done", "PASS")}
    saved = json.loads((r.run_dir / "h1" / "results.json").read_text())
    assert saved["status"] == "lost" and saved["verdict"] == "ERROR"
