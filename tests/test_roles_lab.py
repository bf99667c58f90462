"""Each role verified on the lab, in the molecule style.

Converge: the whole stack (r580-cuda13.0) on a freshly reset HGX H200 host, once per
module. Then per role: idempotence (the role's tag alone, run again, changes nothing)
and verify (testinfra assertions on the host's real state: packages at their pinned
versions and held, files and modes, services, what nvidia-smi reports).

One role alone: `pytest -m lab -k role_nvidia_driver`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml

from nodecert.lab.hosts import Lab
from nodecert.provision.run import ProvisionRequest, provision
from nodecert.stack.manifest import find_stack
from nodecert.transport.bundle import node_bundle
from support.env import REPO

pytestmark = pytest.mark.lab

HOST = "h3"  # the session lab's second HGX H200 (h1 is shared with other modules)
STACK = find_stack("r580-cuda13.0")
PINS = STACK.os["debian-12"]


def site_tags() -> dict[str, str]:
    """role -> the tag that selects it in playbooks/site.yml."""
    plays = yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    roles = next(p["roles"] for p in plays if "roles" in p)
    return {r["role"]: r["tags"][0] for r in roles}


@pytest.fixture(scope="module")
def converged(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> tuple[Lab, Path]:
    lab.apply_faults(None)
    lab.reset(HOST)
    runs = tmp_path_factory.mktemp("runs")
    inv = lab.cfg.state / "inventory.ini"
    report = provision(ProvisionRequest(inv, stack=STACK.name, limit=(HOST,), runs_dir=runs),
                       progress=lambda line: None)
    outcome = report.hosts[HOST]
    assert outcome.status == "provisioned", outcome.as_dict()
    assert outcome.conformance is not None and outcome.conformance.ok, \
        outcome.conformance.problems if outcome.conformance else outcome.as_dict()
    return lab, runs


@pytest.fixture(scope="module")
def host(converged: tuple[Lab, Path]) -> Any:
    lab, _ = converged
    # testinfra over the lab's ssh_config: host keys checked strictly, as everywhere.
    return testinfra.get_host(f"ssh://{HOST}", ssh_config=str(lab.cfg.state / "ssh_config"))


def held(host: Any) -> set[str]:
    return set(host.check_output("apt-mark showhold").split())


def pinned(host: Any, *components: str) -> None:
    """Every package of these components installed at its exact version and held."""
    hold = held(host)
    for comp in components:
        for p in PINS.for_component(comp):
            pkg = host.package(p.name)
            assert pkg.is_installed, p.name
            assert pkg.version == str(p.version), (p.name, pkg.version, str(p.version))
            assert p.name in hold, f"{p.name} is not held"


def verify_nvidia_repo(host: Any) -> None:
    src = host.file("/etc/apt/sources.list.d/nodecert-nvidia.list")
    assert src.is_file and src.user == "root" and src.mode == 0o644
    pref = host.file("/etc/apt/preferences.d/nodecert-stack.pref")
    assert pref.is_file and pref.mode == 0o644
    libnccl = next(p for p in PINS.for_component("nccl") if p.name == "libnccl2")
    assert f"Pin: version {libnccl.version}" in pref.content_string


def verify_nvidia_driver(host: Any) -> None:
    pinned(host, "driver")
    assert host.file("/etc/modprobe.d/nodecert-blacklist-nouveau.conf").contains(
        "blacklist nouveau")
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled and svc.is_running
    versions = host.check_output(
        "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()
    assert set(versions) == {str(STACK.driver)} and len(versions) == 8


def verify_fabric_manager(host: Any) -> None:
    pinned(host, "fabric_manager", "nscq")
    svc = host.service("nvidia-fabricmanager")
    assert svc.is_enabled and svc.is_running


def verify_imex(host: Any) -> None:
    # An HGX host is in no NVLink domain: IMEX is never installed there (the compute
    # trays of a rack get it: test_imex_lab).
    assert not host.package("nvidia-imex").is_installed
    assert not host.file("/etc/nvidia-imex/nodes_config.cfg").exists


def verify_cuda_toolkit(host: Any) -> None:
    pinned(host, "cuda")


def verify_cudnn(host: Any) -> None:
    pinned(host, "cudnn")


def verify_nccl(host: Any) -> None:
    pinned(host, "nccl")


def verify_dcgm(host: Any) -> None:
    pinned(host, "dcgm")


def verify_framework(host: Any) -> None:
    py = f"/opt/nodecert/envs/{STACK.name}/bin/python"
    assert host.file(py).exists
    assert host.check_output(f"{py} -c 'import torch; print(torch.__version__)'") == \
        str(STACK.framework.pytorch)
    freeze = host.file(f"/opt/nodecert/envs/{STACK.name}/pip-freeze.txt")
    assert freeze.is_file and f"torch=={STACK.framework.pytorch}" in freeze.content_string
    # installed with --require-hashes from the lab's digests (group_vars/lab.yml)
    req = host.file(f"/opt/nodecert/envs/{STACK.name}.requirements.txt").content_string
    assert f"torch=={STACK.framework.pytorch} --hash=sha256:" in req


def verify_validators(host: Any) -> None:
    assert host.package("fio").is_installed
    # the RDMA tools the fabric checks and the cluster command drive
    assert host.package("infiniband-diags").is_installed and host.package("perftest").is_installed
    # The very bundle `nodecert validate` ships, installed where validate installs it.
    _, sha = node_bundle()
    assert host.file("/opt/nodecert/node/current").linked_to == f"/opt/nodecert/node/{sha[:16]}"
    assert host.file(f"/opt/nodecert/node/{sha[:16]}/.complete").is_file
    code = host.file(f"/opt/nodecert/node/{sha[:16]}/nodecert_node/contract.py")
    assert code.is_file and code.user == "root" and code.mode == 0o644
    listed = host.check_output("cd /opt/nodecert/node/current && python3 -m nodecert_node list")
    assert {"hardware.inventory", "power.limit", "dcgm.diag"} <= set(listed.split())
    timer = host.service("nodecert-revalidate.timer")
    assert timer.is_enabled
    hook = host.file("/etc/apt/apt.conf.d/99nodecert-revalidate")
    assert hook.is_file and "DPkg::Post-Invoke" in hook.content_string
    watch = host.service("nodecert-hold-watch.path")  # holds make no apt transaction
    assert watch.is_enabled and watch.is_running
    state = host.file("/var/lib/nodecert")
    assert state.is_directory and state.mode == 0o750


def verify_container_toolkit(host: Any) -> None:
    toolkit = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
               "libnvidia-container-tools", "libnvidia-container1")
    for name in toolkit:
        assert host.package(name).version == "1.17.8-1", name
    assert set(toolkit) <= held(host)
    assert host.package("podman").is_installed  # the lab's engine (inventory)
    spec = host.file("/etc/cdi/nvidia.yaml")
    assert spec.is_file and spec.mode == 0o644
    driver = str(next(p.version for p in PINS.packages if p.component == "driver"))
    assert f"--host-driver-version={driver.rsplit('-', 1)[0]}" in spec.content_string
    assert "nvidia.com/gpu=all" in host.check_output("nvidia-ctk cdi list").split()


def verify_platform(host: Any) -> None:
    conf = host.file("/etc/sysctl.d/90-nodecert-platform.conf")
    assert conf.mode == 0o644 and "kernel.numa_balancing = 0" in conf.content_string
    assert host.check_output("sysctl -n kernel.numa_balancing") == "0"
    assert host.file("/etc/modules-load.d/nodecert-platform.conf").content_string.endswith(
        "nvidia-peermem\n")  # the host has an InfiniBand fabric in its order
    assert host.check_output("lsmod").count("nvidia_peermem") >= 1
    assert host.file("/usr/local/sbin/nodecert-cpu-governor").mode == 0o755
    assert host.service("nodecert-cpu-governor").is_enabled
    assert host.check_output("/usr/local/sbin/nodecert-cpu-governor --show") == "performance"


VERIFY: dict[str, Callable[[Any], None]] = {
    "nvidia_repo": verify_nvidia_repo, "nvidia_driver": verify_nvidia_driver,
    "fabric_manager": verify_fabric_manager, "imex": verify_imex,
    "cuda_toolkit": verify_cuda_toolkit,
    "cudnn": verify_cudnn, "nccl": verify_nccl, "dcgm": verify_dcgm,
    "framework": verify_framework, "validators": verify_validators,
    "container_toolkit": verify_container_toolkit, "platform": verify_platform,
}


def test_every_role_of_the_site_play_has_a_scenario() -> None:
    assert set(VERIFY) == set(site_tags())


@pytest.mark.parametrize("role", sorted(site_tags()), ids=lambda r: f"role_{r}")
def test_role_idempotent_and_verified(role: str, converged: tuple[Lab, Path],
                                      host: Any) -> None:
    lab, runs = converged
    again = provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK.name,
                      limit=(HOST,), tags=(site_tags()[role],), runs_dir=runs),
                      progress=lambda line: None)
    outcome = again.hosts[HOST]
    assert outcome.status == "provisioned" and outcome.failed == 0, outcome.as_dict()
    assert outcome.changed == 0, f"{role} is not idempotent: {outcome.as_dict()}"
    VERIFY[role](host)


def test_the_platform_role_fixes_what_platform_checks_fail(converged: tuple[Lab, Path],
                                                           tmp_path: Path) -> None:
    """Settings gone wrong after provisioning (NUMA balancing on, powersave, peermem not
    loaded) fail their checks; the platform role sets them back and the checks pass."""
    from nodecert.validation.run import ValidateRequest, validate

    lab, runs = converged
    inv = lab.cfg.state / "inventory.ini"
    checks = ("platform.numa_balancing", "platform.cpu_governor", "platform.gpudirect")

    def verdicts() -> dict[str, str]:
        r = validate(ValidateRequest(inv, stack=STACK.name, limit=(HOST,), checks=checks,
                                     runs_dir=tmp_path / "v"), progress=lambda line: None)
        return {x.check: x.verdict.name for x in r.hosts[HOST].results if x.check in checks}

    faults = tmp_path / "faults.yml"
    faults.write_text(f"faults:\n  - {{host: {HOST}, kind: numa_balancing}}\n"
                      f"  - {{host: {HOST}, kind: cpu_powersave}}\n"
                      f"  - {{host: {HOST}, kind: peermem_missing}}\n")
    lab.apply_faults(faults)
    try:
        assert verdicts() == dict.fromkeys(checks, "FAIL")
        fixed = provision(ProvisionRequest(inv, stack=STACK.name, limit=(HOST,),
                                           tags=("platform",), runs_dir=runs),
                          progress=lambda line: None)
        assert fixed.hosts[HOST].changed >= 3, fixed.hosts[HOST].as_dict()
        assert verdicts() == dict.fromkeys(checks, "PASS")
    finally:
        lab.apply_faults(None)


def test_a_stale_cdi_spec_is_regenerated_by_the_handler(converged: tuple[Lab, Path],
                                                         host: Any) -> None:
    """A CDI spec made for another driver (as after a driver upgrade): the role notices,
    its handler regenerates the spec for the installed driver, and a second run is
    quiet again."""
    lab, runs = converged
    good = host.file("/etc/cdi/nvidia.yaml").content_string
    lab.ssh(HOST, "sed -i 's/--host-driver-version=[0-9.]*/--host-driver-version=570.211.01/' "
                  "/etc/cdi/nvidia.yaml")

    def converge() -> Any:
        return provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK.name,
                         limit=(HOST,), tags=("container_toolkit",), runs_dir=runs),
                         progress=lambda line: None).hosts[HOST]
    fixed = converge()
    assert fixed.status == "provisioned" and fixed.failed == 0, fixed.as_dict()
    assert fixed.changed >= 2  # the stale spec found, the handler ran
    assert host.file("/etc/cdi/nvidia.yaml").content_string == good
    again = converge()
    assert again.changed == 0, again.as_dict()


def test_framework_refuses_a_wheel_whose_hash_is_not_pinned(
        converged: tuple[Lab, Path]) -> None:
    """A wheel that is not the pinned one (a tampered mirror) is refused by pip."""
    lab, runs = converged
    env_dir = "/opt/nodecert/envs/hash-check"
    report = provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK.name,
                       limit=(HOST,), tags=(site_tags()["framework"],), runs_dir=runs,
                       extravars={
                           "framework_env_dir": env_dir,
                           "framework_wheel_hashes": {STACK.name: {
                               f"torch=={STACK.framework.pytorch}": ["0" * 64]}}}),
                       progress=lambda line: None)
    outcome = report.hosts[HOST]
    try:
        assert outcome.status == "failed", outcome.as_dict()
        assert "hash" in (outcome.first_error or "").lower(), outcome.as_dict()
    finally:
        lab.ssh(HOST, f"rm -rf {env_dir} {env_dir}.requirements.txt", check=False)


def test_a_key_failing_its_fingerprint_is_never_left_where_apt_trusts_it(
        converged: tuple[Lab, Path], tmp_path: Path) -> None:
    """The key is checked in a staging file: one whose fingerprint is not the pinned one
    fails the role and is found neither at signed-by's path nor in staging."""
    lab, runs = converged
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    try:
        subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", "repo@example.invalid",
                        "ed25519", "sign", "never"],
                       check=True, capture_output=True, timeout=60)
        armored = subprocess.run([*gpg, "--armor", "--export", "repo@example.invalid"],
                                 check=True, capture_output=True, text=True,
                                 timeout=60).stdout
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"],
                       capture_output=True, timeout=60, check=False)
    lab.ssh(HOST, f"cat > /root/other-key.asc <<'EOF'\n{armored}EOF")
    key = "/etc/apt/keyrings/nodecert-nvidia.asc"
    try:
        report = provision(ProvisionRequest(
            lab.cfg.state / "inventory.ini", stack=STACK.name, limit=(HOST,),
            tags=(site_tags()["nvidia_repo"],), runs_dir=runs,
            extravars={"nvidia_repo_trusted": False,
                       "nvidia_repo_key_url": "file:///root/other-key.asc",
                       "nvidia_repo_key_fingerprint": STACK.repository.key_fingerprint}),
            progress=lambda line: None)
        outcome = report.hosts[HOST]
        assert outcome.status == "failed", outcome.as_dict()
        assert "exactly the pinned key" in (outcome.first_error or ""), outcome.as_dict()
        left = lab.ssh(HOST, "ls -A /etc/apt/keyrings/").stdout
        assert "nodecert-nvidia" not in left, left
    finally:
        lab.ssh(HOST, f"rm -f /root/other-key.asc {key}", check=False)


def test_preflight_installs_nothing_on_a_bare_host(lab: Lab, tmp_path: Path,
                                                   converged: tuple[Lab, Path]) -> None:
    """preflight only looks: on a freshly reset host it runs and passes, and no
    repository, package or hold appears."""
    lab.reset("h2")
    report = provision(ProvisionRequest(lab.cfg.state / "inventory.ini", stack=STACK.name,
                       limit=("h2",), tags=("preflight",), runs_dir=tmp_path),
                       progress=lambda line: None)
    outcome = report.hosts["h2"]
    assert outcome.failed == 0, outcome.as_dict()
    assert lab.ssh("h2", "test -e /etc/apt/sources.list.d/nodecert-nvidia.list",
                   check=False).returncode == 1
    assert lab.ssh("h2", "apt-mark showhold").stdout.strip() == ""
    assert lab.ssh("h2", "dpkg -s libnccl2", check=False).returncode == 1
