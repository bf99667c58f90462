"""Provisioning end to end on the lab: real Ansible, real apt, simulated GPU packages.

Needs root (CI runs as root). Uses the session lab (h1, h3: HGX H200; h2: L40S).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodecert.lab.hosts import Lab
from nodecert.provision.run import ProvisionReport, ProvisionRequest, provision
from support.env import REPO
from support.orders import h200_host

pytestmark = pytest.mark.lab  # root, network namespaces, the lab hosts

NVIDIA_SOURCE = "/etc/apt/sources.list.d/nodecert-nvidia.list"


def inventory(lab: Lab, tmp_path: Path, per_host: dict[str, str],
              drop: tuple[str, ...] = (), extra_hosts: str = "") -> Path:
    """The lab inventory with extra per-host variables and without some [lab:vars]."""
    text = (lab.cfg.state / "inventory.ini").read_text()
    out = []
    for raw in text.splitlines():
        name = raw.split(" ", 1)[0]
        line = f"{raw} {per_host[name]}" if name in per_host and "ansible_host=" in raw else raw
        if any(line.startswith(f"{d}=") for d in drop):
            continue
        out.append(line)
        if line == "[lab]" and extra_hosts:
            out.append(extra_hosts)
    path = tmp_path / "inventory.ini"
    path.write_text("\n".join(out) + "\n")
    # The lab's group_vars beside it: the lab mirror's wheels are the lab's own builds, so
    # the inventory pins them by their sha256 (framework_wheel_hashes), as a site would.
    shutil.copytree(lab.cfg.state / "group_vars", tmp_path / "group_vars", dirs_exist_ok=True)
    return path


def run(inv: Path, tmp_path: Path, **kw: Any) -> ProvisionReport:
    return provision(ProvisionRequest(inv, runs_dir=tmp_path / "runs", **kw),
                     progress=lambda line: None)


def sh(lab: Lab, host: str, cmd: str) -> str:
    return lab.ssh(host, cmd, timeout=120).stdout


@pytest.fixture(scope="module")
def fresh(lab: Lab) -> Lab:
    lab.apply_faults(None)
    for h in ("h1", "h2", "h3"):
        lab.reset(h)
    return lab


def test_incompatible_stack_stops_before_any_ssh(fresh: Lab, tmp_path: Path) -> None:
    inv = inventory(fresh, tmp_path, {})
    # The legacy R550 stack pins nothing for Debian 12 (the lab hosts' OS).
    report = run(inv, tmp_path, stack="r550-cuda12.4")
    assert report.gate_failed and report.exit_code == 1 and report.run_dir is None
    assert not (tmp_path / "runs").exists()
    for h in ("h1", "h2", "h3"):
        assert fresh.ssh(h, f"test -e {NVIDIA_SOURCE}", check=False).returncode == 1


def test_check_mode_changes_nothing(fresh: Lab, tmp_path: Path) -> None:
    inv = inventory(fresh, tmp_path, {})
    report = run(inv, tmp_path, stack="r580-cuda13.0", check=True, limit=("h2",))
    assert report.exit_code == 0, report.as_dict()
    assert report.hosts["h2"].status == "provisioned" and report.hosts["h2"].conformance is None
    assert fresh.ssh("h2", f"test -e {NVIDIA_SOURCE}", check=False).returncode == 1
    assert fresh.ssh("h2", "dpkg -s libnccl2", check=False).returncode == 1


def test_two_stacks_from_an_air_gapped_mirror_then_idempotent(fresh: Lab,
                                                             tmp_path: Path) -> None:
    # The lab inventory's own mirror settings are dropped: only --mirror (a local
    # path, as an air-gapped site would have) tells the hosts where packages are.
    inv = inventory(fresh, tmp_path, {"h1": "nodecert_stack=r580-cuda13.0",
                                      "h2": "nodecert_stack=r570-cuda12.8"},
                    drop=("nvidia_repo_url", "framework_index_url"))
    first = run(inv, tmp_path, limit=("h1", "h2"), mirror="/srv/nodecert-mirror")
    for h in ("h1", "h2"):
        o = first.hosts[h]
        assert o.status == "provisioned" and o.conformance is not None, o.as_dict()
        assert o.conformance.ok, o.conformance.problems
        assert o.changed > 0
    assert sh(fresh, "h1", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
              ).splitlines()[0] == "580.173.02"
    assert sh(fresh, "h2", "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
              ).splitlines()[0] == "570.211.01"
    assert "file:/srv/nodecert-mirror/nvidia" in sh(fresh, "h1", f"cat {NVIDIA_SOURCE}")
    # Fabric Manager only where NVSwitches are.
    assert sh(fresh, "h1", "systemctl is-active nvidia-fabricmanager").strip() == "active"
    assert fresh.ssh("h2", "dpkg -s nvidia-fabricmanager-570", check=False).returncode == 1
    # Run artifacts: inputs, ansible events, per-host results.
    run_dir = first.run_dir
    assert run_dir is not None
    assert (run_dir / "provision.json").is_file()
    assert (run_dir / "inputs" / "inventory.ini").is_file()
    assert list((run_dir / "ansible").glob("artifacts/*/job_events/*.json"))
    second = run(inv, tmp_path, limit=("h1", "h2"), mirror="/srv/nodecert-mirror")
    assert {h: (o.changed, o.conformance.ok if o.conformance else None)
            for h, o in second.hosts.items()} == {"h1": (0, True), "h2": (0, True)}


def task_outcomes(report: ProvisionReport) -> dict[str, set[str]]:
    """Each task's outcomes in the run (ok, skipped, failed; "changed" added when it was)."""
    assert report.run_dir is not None
    out: dict[str, set[str]] = {}
    for f in report.run_dir.glob("ansible/artifacts/*/job_events/*.json"):
        e = json.loads(f.read_text())
        data = e.get("event_data", {})
        if e["event"] in ("runner_on_ok", "runner_on_skipped", "runner_on_failed",
                          "runner_item_on_ok", "runner_item_on_skipped"):
            outcome = e["event"].rsplit("_", 1)[1]
            out.setdefault(data.get("task", ""), set()).add(
                "changed" if (data.get("res") or {}).get("changed") else outcome)
    return out


# What a converged host's re-run finds in place from its one read of each role's files
# and units: these steps do not run at all.
IN_PLACE_STEPS = ("Add the NVIDIA repository", "Pin every package of the stack to its exact "
                  "version", "Blacklist the nouveau driver", "Enable and start "
                  "nvidia-persistenced", "Install the re-validation service and timer",
                  "Enable the timer and the after-reboot run", "Start the timer",
                  "Run the hook after every dpkg transaction apt makes",
                  "Record the provisioned stack and its pins", "Copy the node code bundle",
                  "Install the node code (the script `nodecert validate` runs)",
                  "Install the pinned framework wheels into the environment",
                  "Record the environment (pip freeze)")


def test_a_rerun_repairs_drift_it_reads_from_the_host(fresh: Lab, tmp_path: Path) -> None:
    # A re-run skips apt, pip and the file and service steps for what is in place: what it
    # skips must come from the host's real state, so drift in versions, holds, wheels,
    # files and services is still repaired.
    timer = "/etc/systemd/system/nodecert-revalidate.timer"
    sh(fresh, "h1", "apt-get install -y -qq --allow-downgrades --allow-change-held-packages "
                    "libnccl2=2.25.1-1+cuda12.8 >/dev/null 2>&1; apt-mark unhold "
                    "datacenter-gpu-manager-4-cuda13 >/dev/null; "
                    "/opt/nodecert/envs/r580-cuda13.0/bin/pip uninstall -q -y torch; "
                    f"echo '# edited by hand' >> {timer}; "
                    "systemctl disable --now nodecert-revalidate.timer 2>/dev/null; "
                    "chmod 0600 /etc/modprobe.d/nodecert-blacklist-nouveau.conf; "
                    "rm /etc/apt/apt.conf.d/99nodecert-revalidate; "
                    "echo 'Package: *' >> /etc/apt/preferences.d/nodecert-stack.pref")
    inv = inventory(fresh, tmp_path, {"h1": "nodecert_stack=r580-cuda13.0"})
    report = run(inv, tmp_path, limit=("h1",))
    o = report.hosts["h1"]
    assert o.status == "provisioned" and o.conformance is not None and o.conformance.ok, \
        o.as_dict()
    assert o.changed > 0
    state = sh(fresh, "h1", "dpkg-query -W -f='${Package}=${Version} ${db:Status-Abbrev}\\n' "
                            "libnccl2 datacenter-gpu-manager-4-cuda13")
    assert "libnccl2=2.27.7-1+cuda13.0 hi" in state
    assert re.search(r"datacenter-gpu-manager-4-cuda13=\S+ hi", state), state
    assert "torch==2.9.1+cu130" in sh(fresh, "h1", "/opt/nodecert/envs/r580-cuda13.0/bin/"
                                                   "pip freeze")
    assert "edited by hand" not in sh(fresh, "h1", f"cat {timer}")
    assert sh(fresh, "h1", "systemctl is-enabled nodecert-revalidate.timer; "
                           "systemctl is-active nodecert-revalidate.timer").split() == \
        ["enabled", "active"]
    assert sh(fresh, "h1", "stat -c %a /etc/modprobe.d/nodecert-blacklist-nouveau.conf").strip() \
        == "644"
    assert "DPkg::Post-Invoke" in sh(fresh, "h1", "cat /etc/apt/apt.conf.d/99nodecert-revalidate")
    assert "Package: *" not in sh(fresh, "h1", "cat /etc/apt/preferences.d/nodecert-stack.pref")
    steps = task_outcomes(report)
    for repaired in ("Install the re-validation service and timer", "Start the timer",
                     "Blacklist the nouveau driver", "Pin every package of the stack to its "
                     "exact version", "Run the hook after every dpkg transaction apt makes"):
        assert "changed" in steps[repaired], (repaired, steps[repaired])
    # The gate provision ran before the play spared the play its own run of it.
    gate = "Run the compatibility gate on the control machine"
    assert steps[gate] == {"skipped"}, steps[gate]

    # Converged again: the next run changes nothing and runs none of those steps.
    again = run(inv, tmp_path, limit=("h1",))
    assert again.hosts["h1"].changed == 0, again.hosts["h1"].as_dict()
    steps = task_outcomes(again)
    for step in IN_PLACE_STEPS:
        assert steps[step] == {"skipped"}, (step, steps[step])


def test_apt_upgrade_moves_no_pinned_package(fresh: Lab) -> None:
    # The mirror holds libnccl2 2.27.7-1+cuda13.0, newer than h2's pinned 2.25.1-1+cuda12.8.
    before = sh(fresh, "h2", "dpkg-query -W -f='${Package}=${Version}\\n' libnccl2")
    assert before.strip() == "libnccl2=2.25.1-1+cuda12.8"
    sh(fresh, "h2", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y "
                    "-qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get dist-upgrade -y "
                    "-qq >/dev/null")
    assert sh(fresh, "h2", "dpkg-query -W -f='${Package}=${Version}\\n' libnccl2") == before
    assert "libnccl2" in sh(fresh, "h2", "apt-mark showhold").split()


def test_upgrade_to_another_stack_leaves_the_new_versions_held(fresh: Lab,
                                                              tmp_path: Path) -> None:
    inv = inventory(fresh, tmp_path, {})
    report = run(inv, tmp_path, stack="r580-cuda13.0", limit=("h2",))
    o = report.hosts["h2"]
    assert o.conformance is not None and o.conformance.ok, o.as_dict()
    held = set(sh(fresh, "h2", "apt-mark showhold").split())
    assert {"libnccl2", "nvidia-open", "datacenter-gpu-manager-4-cuda13"} <= held
    # dpkg-query exits 1 when a pattern matches nothing: read its output regardless.
    installed = fresh.ssh("h2", "dpkg-query -W -f='${Package}=${Version} ${db:Status-Abbrev}\\n'"
                                " 'libnccl2' 'nvidia-driver-570*' 'datacenter-gpu-manager*'",
                          check=False).stdout
    assert "libnccl2=2.27.7-1+cuda13.0 hi" in installed
    # The R570 stack's packages that R580 does not pin were retired.
    assert not re.search(r"nvidia-driver-570-server-open=\S+ .i", installed)
    assert not re.search(r"datacenter-gpu-manager-4-cuda12=\S+ .i", installed)


def test_per_host_failures_do_not_stop_the_others(fresh: Lab, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A stacks tree with one broken manifest: NCCL pinned at a version the mirror lacks.
    home = tmp_path / "home"
    shutil.copytree(REPO / "stacks", home / "stacks")
    data = yaml.safe_load((home / "stacks/r580-cuda13.0.yml").read_text())
    data["name"] = "broken-nccl"
    data["components"]["nccl"] = "2.27.8-1+cuda13.0"
    for pins in data["os"].values():
        for p in pins["packages"]:
            if p["component"] == "nccl":
                p["version"] = "2.27.8-1+cuda13.0"
    (home / "stacks/broken-nccl.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("NODECERT_HOME", str(home))
    unreachable_ip = fresh.cfg.host_ip(90)  # in the lab subnet, no host there
    inv = inventory(fresh, tmp_path, {
        "h1": "nodecert_stack=r580-cuda13.0",
        "h2": "nodecert_stack=r580-cuda13.0 nodecert_gpu_count=8",  # the L40S box has 4
        "h3": "nodecert_stack=broken-nccl"},
        extra_hosts=h200_host("h90", unreachable_ip, "nodecert_stack=r580-cuda13.0"))
    report = run(inv, tmp_path, mirror="/srv/nodecert-mirror")
    out = dict(report.hosts)
    assert report.exit_code == 1
    assert out["h1"].status == "provisioned" and out["h1"].conformance is not None
    assert out["h1"].conformance.ok
    assert out["h2"].status == "failed"
    assert "the order is 8x L40S, but lspci shows 4 NVIDIA GPU(s)" in (out["h2"].first_error
                                                                       or "")
    assert fresh.ssh("h2", "dpkg -s libnccl2", check=False).returncode in (0, 1)
    assert out["h3"].status == "failed"
    assert "2.27.8-1+cuda13.0" in (out["h3"].first_error or "")
    assert "libnccl2" in (out["h3"].first_error or "")
    assert out["h90"].status == "unreachable"
