"""The lab end to end: real systemd, sshd and apt in each host; simulated GPUs.

Needs root (CI runs as root). The session fixture `lab` brings up h1 (HGX H200)
and h2 (L40S) on their own bridge and subnet, and tears them down at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest

from nodecert.core.errors import NodecertError
from nodecert.core.shell import CommandError
from nodecert.inventory.reader import load_inventory
from nodecert.lab import blkio, net
from nodecert.lab.hosts import Lab
from support import toolparse as tp
from support.env import REPO, require_root
from support.lab import lab_config

pytestmark = pytest.mark.lab  # root, network namespaces, the lab hosts

PIN_DRIVER = "nvidia-driver-580-server-open=580.173.02-0ubuntu0.24.04.1"
PIN_NCCL = "libnccl2=2.27.7-1+cuda13.0"
PIN_DCGM = "datacenter-gpu-manager-4-cuda13=1:4.4.2-1"


def sh(lab: Lab, host: str, cmd: str, timeout: float = 120) -> str:
    return lab.ssh(host, cmd, timeout=timeout).stdout


NVIDIA_SOURCE = "deb [trusted=yes] file:/srv/nodecert-mirror/nvidia ./"


def apt_install(lab: Lab, host: str, *pins: str) -> None:
    sh(lab, host, f"echo '{NVIDIA_SOURCE}' > /etc/apt/sources.list.d/lab-nvidia.list && "
       "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
       + " ".join(pins) + " >/dev/null 2>&1", timeout=300)


def test_hosts_boot_real_systemd_and_sshd(lab: Lab) -> None:
    for host in ("h1", "h2"):
        out = sh(lab, host, "hostname; systemctl is-system-running --wait; "
                            "ps -p 1 -o comm=; cat /etc/nodecert-lab/SIMULATED")
        lines = out.splitlines()
        assert lines[0] == host
        assert lines[1] in ("running", "degraded")
        assert lines[2] == "systemd"
        assert "SIMULATED" in lines[3]


def test_hosts_are_isolated(lab: Lab) -> None:
    # Inside: only the lab subnet is routable and there is no DNS.
    routes = sh(lab, "h1", "ip -4 route show; cat /etc/resolv.conf")
    # (acknowledging at once: the shared file system's synchronous client needs it)
    assert routes.strip() == f"{lab.cfg.subnet} dev eth0 proto kernel scope link src " \
                             f"{lab.cfg.host_ip(1)} quickack 1"
    unreachable = lab.ssh("h1", "ip route get 192.0.2.1", check=False)
    assert unreachable.returncode != 0 and "unreachable" in unreachable.stderr.lower()
    # Outside: the guard route drops the lab range if the bridge ever disappears.
    assert net.guard_present(lab.cfg)
    # Hosts reach each other across the bridge (h1 -> h2's sshd).
    assert "SSH-2.0" in sh(lab, "h1", "timeout 5 bash -c 'exec 3<>/dev/tcp/h2/22; "
                                      "head -c 7 <&3'")


def test_strict_host_key_checking(lab: Lab, tmp_path: Path) -> None:
    st = lab.cfg.state
    key = str(st / "id_ed25519")
    ip1 = str(lab.cfg.host_ip(1))
    ok = subprocess.run(["ssh", "-F", str(st / "ssh_config"), "h1", "true"], timeout=30,
                        capture_output=True, text=True, check=False)
    assert ok.returncode == 0
    # A known_hosts that holds another key for h1 (h2's): ssh must refuse.
    h2_pub = (lab.cfg.host_dir(2) / "keys/ssh_host_ed25519_key.pub").read_text().split()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{ip1} {h2_pub[0]} {h2_pub[1]}\n")
    bad = subprocess.run(["ssh", "-i", key, "-o", f"UserKnownHostsFile={wrong}",
                          "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                          f"root@{ip1}", "true"], timeout=30, capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in bad.stderr
    # paramiko, as the validators will use it: the lab's known_hosts + RejectPolicy.
    client = paramiko.SSHClient()
    client.load_host_keys(str(st / "known_hosts"))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(ip1, username="root", key_filename=key, timeout=10, look_for_keys=False,
                   allow_agent=False)
    _, out, _ = client.exec_command("hostname", timeout=10)
    assert out.read().decode().strip() == "h1"
    client.close()
    wrong_client = paramiko.SSHClient()
    wrong_client.load_host_keys(str(wrong))
    wrong_client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.BadHostKeyException):
        wrong_client.connect(ip1, username="root", key_filename=key, timeout=10,
                             look_for_keys=False, allow_agent=False)


def test_gpus_visible_before_any_driver(fresh_h1: Lab) -> None:
    lspci = tp.parse_lspci_nn(sh(fresh_h1, "h1", "lspci -nn"))
    assert [d["device"] for d in lspci if d["class_id"] == "0302"] == ["2335"] * 8
    assert len([d for d in lspci if d["class_id"] == "0680"]) == 4  # NVSwitches
    assert fresh_h1.ssh("h1", "command -v nvidia-smi", check=False).returncode != 0


def test_pinned_driver_from_mirror_brings_nvidia_smi(fresh_h1: Lab) -> None:
    apt_install(fresh_h1, "h1", PIN_DRIVER, PIN_NCCL, PIN_DCGM, "cuda-libraries-13-0=13.0.0-1",
                "nccl-tests")
    versions = sh(fresh_h1, "h1", "dpkg-query -W -f='${Package}=${Version}\\n' "
                                  "nvidia-driver-580-server-open libnccl2 "
                                  "datacenter-gpu-manager-4-cuda13")
    assert set(versions.split()) == {PIN_DRIVER, PIN_NCCL, PIN_DCGM}
    rows = tp.parse_csv(sh(fresh_h1, "h1", "nvidia-smi --query-gpu=name,driver_version,"
                                           "memory.total --format=csv"))
    assert len(rows) == 8
    assert rows[0] == {"name": "NVIDIA H200", "driver_version": "580.173.02",
                       "memory.total [MiB]": "143771 MiB"}
    ar = tp.parse_allreduce(sh(fresh_h1, "h1", "all_reduce_perf -b 1G -e 8G -f 2 -g 8"))
    assert ar["nccl"] == "2.27.7+cuda13.0" and ar["oob"] == 0
    # Held packages stay put through a dist-upgrade.
    sh(fresh_h1, "h1", "apt-mark hold nvidia-driver-580-server-open libnccl2 >/dev/null")
    held = sh(fresh_h1, "h1", "apt-mark showhold").split()
    assert held == ["libnccl2", "nvidia-driver-580-server-open"]


def test_a_wrong_install_shows(fresh_h1: Lab) -> None:
    # Install the R570 driver instead of the pinned R580 one: the tools say so.
    apt_install(fresh_h1, "h1", "nvidia-driver-570-server-open=570.211.01-0ubuntu0.24.04.2")
    q = tp.parse_q(sh(fresh_h1, "h1", "nvidia-smi -q"))
    assert (q[""]["Driver Version"], q[""]["CUDA Version"]) == ("570.211.01", "12.8")


def test_fabric_manager_refuses_other_driver_version(fresh_h1: Lab) -> None:
    apt_install(fresh_h1, "h1", "nvidia-driver-570-server-open=570.211.01-0ubuntu0.24.04.2",
                "nvidia-fabricmanager-580=580.173.02-0ubuntu0.24.04.1")
    r = fresh_h1.ssh("h1", "systemctl start nvidia-fabricmanager", check=False)
    assert r.returncode != 0
    log = sh(fresh_h1, "h1", "journalctl -u nvidia-fabricmanager --no-pager -o cat")
    assert "incompatible with the NVIDIA driver version 570.211.01" in log
    # With the matching driver it starts (and stays up).
    apt_install(fresh_h1, "h1", PIN_DRIVER)
    sh(fresh_h1, "h1", "systemctl start nvidia-fabricmanager")
    assert sh(fresh_h1, "h1", "systemctl is-active nvidia-fabricmanager").strip() == "active"


def test_real_debian_packages_install_and_run(lab: Lab) -> None:
    apt_install(lab, "h2", "fio")
    out = sh(lab, "h2", "fio --name=t --filename=/var/tmp/fio.scratch --size=4M --rw=write "
                        "--bs=64k --output-format=json >/tmp/fio.json && "
                        "rm -f /var/tmp/fio.scratch && cat /tmp/fio.json")
    job = json.loads(out)["jobs"][0]
    assert job["write"]["io_bytes"] == 4 * 1024 * 1024
    assert sh(lab, "h2", "fio --version").startswith("fio-3.")


def test_systemd_timer_fires(lab: Lab) -> None:
    unit = "[Unit]\nDescription=nodecert lab timer test\n[Service]\nType=oneshot\n" \
           "ExecStart=/bin/sh -c 'date +%%s%%N >> /var/log/nc-timer.log'\n"
    timer = "[Unit]\nDescription=every second\n[Timer]\nOnActiveSec=1\nOnUnitActiveSec=1\n" \
            "AccuracySec=100ms\n[Install]\nWantedBy=timers.target\n"
    sh(lab, "h2", f"printf '%s' \"{unit}\" > /etc/systemd/system/nc-timer.service && "
                  f"printf '%s' \"{timer}\" > /etc/systemd/system/nc-timer.timer && "
                  "systemctl daemon-reload && systemctl start nc-timer.timer")
    # Block (inside the host, with a hard limit) until the timer ran the service twice.
    fired = sh(lab, "h2", "timeout 30 sh -c 'until [ \"$(wc -l < /var/log/nc-timer.log "
                          "2>/dev/null || echo 0)\" -ge 2 ]; do sleep 0.2; done'; "
                          "wc -l < /var/log/nc-timer.log; systemctl list-timers --all "
                          "--no-pager | grep -c nc-timer", timeout=60)
    count, listed = (int(x) for x in fired.split())
    assert count >= 2 and listed == 1
    sh(lab, "h2", "systemctl stop nc-timer.timer")


def test_reset_restores_a_pristine_host_with_the_same_identity(lab: Lab) -> None:
    apt_install(lab, "h1", PIN_DRIVER)
    before = json.loads(sh(lab, "h1", "cat /etc/nodecert-lab/hardware.json"))["identity"]
    key_before = (lab.cfg.host_dir(1) / "keys/ssh_host_ed25519_key.pub").read_text()
    seconds = lab.reset("h1")
    assert seconds < 60
    assert lab.ssh("h1", "command -v nvidia-smi", check=False).returncode != 0
    after = json.loads(sh(lab, "h1", "cat /etc/nodecert-lab/hardware.json"))["identity"]
    assert after == before
    assert (lab.cfg.host_dir(1) / "keys/ssh_host_ed25519_key.pub").read_text() == key_before


def test_faults_change_what_the_tools_report(fresh_h1: Lab, tmp_path: Path) -> None:
    apt_install(fresh_h1, "h1", PIN_DRIVER)
    faults = tmp_path / "faults.yml"
    faults.write_text("faults:\n"
                      "  - {host: h1, kind: gpu_missing, gpu: 3}\n"
                      "  - {host: h1, kind: pcie_degraded, gpu: 0, width: 8}\n"
                      "  - {host: h1, kind: xid, gpu: 1, code: 79}\n")
    fresh_h1.apply_faults(faults)
    try:
        rows = tp.parse_csv(sh(fresh_h1, "h1", "nvidia-smi --query-gpu=index,"
                                               "pcie.link.width.current --format=csv,nounits"))
        assert len(rows) == 7 and rows[0]["pcie.link.width.current"] == "8"
        assert tp.parse_xids(sh(fresh_h1, "h1", "dmesg")) == [("0000:2a:00", 79)]
    finally:
        fresh_h1.apply_faults(None)
    assert len(tp.parse_csv(sh(fresh_h1, "h1", "nvidia-smi --query-gpu=index --format=csv"))) \
        == 8


def test_bad_fault_file_is_rejected_with_location(lab: Lab, tmp_path: Path) -> None:
    faults = tmp_path / "faults.yml"
    faults.write_text("faults:\n  - {host: h2, kind: gpu_missing, gpu: 6}\n")
    with pytest.raises(NodecertError) as exc:
        lab.apply_faults(faults)
    assert "GPU 6 does not exist on h2 (4 GPUs, 0-3)" in exc.value.render()
    assert str(faults) in exc.value.render()
    faults.write_text("faults:\n  - {kind: gpu_on_fire, gpu: 1}\n")
    with pytest.raises(NodecertError, match="'gpu_on_fire' is not one of"):
        lab.apply_faults(faults)


def test_inventory_describes_the_simulated_hardware(lab: Lab) -> None:
    hosts = load_inventory(lab.cfg.state / "inventory.ini")
    assert hosts["h1"].gpu_model == "H200-SXM" and hosts["h1"].gpu_count == 8
    assert hosts["h2"].gpu_model == "L40S" and hosts["h2"].gpu_count == 4
    assert all(h.simulated for h in hosts.values())
    assert hosts["h1"].cpu_cores == 112 and hosts["h1"].os == "debian-12"


def test_real_ansible_over_ssh(lab: Lab) -> None:
    ansible = Path(os.sys.executable).parent / "ansible"
    env = dict(os.environ, ANSIBLE_PIPELINING="True", ANSIBLE_HOST_KEY_CHECKING="True")
    r = subprocess.run([str(ansible), "-i", str(lab.cfg.state / "inventory.ini"), "lab",
                        "-m", "ansible.builtin.setup", "-a", "filter=ansible_service_mgr"],
                       capture_output=True, text=True, timeout=180, env=env, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count('"ansible_service_mgr": "systemd"') == 3


def test_lab_status_cli(lab: Lab) -> None:
    st = lab.status()
    assert st["up"] is True
    assert [(h["name"], h["ssh"]) for h in st["hosts"]] == [("h1", True), ("h2", True),
                                                              ("h3", True)]


# --- lifecycle on a second, separate lab -----------------------------------------------

def _leftovers(cfg: Any) -> dict[str, Any]:
    return {"netns": net.owned_netns(cfg), "mounts": net.owned_mounts(cfg),
            "blkio": blkio.owned(cfg),
            "bridge": net.link_exists(cfg.bridge),
            "nspawn": [p for p in _pids("systemd-nspawn") if cfg.prefix in _cmdline(p)]}


def _pids(name: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", name], capture_output=True, text=True, timeout=10,
                         check=False).stdout
    return [int(p) for p in out.split()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def test_down_after_a_crash_leaves_nothing_behind() -> None:
    require_root()
    cfg = lab_config("lc", 2)
    lab = Lab(cfg, log=lambda m: None)
    try:
        lab.up(nodes=2)
        # Simulate a crash of the control side: SIGKILL every host's supervisor and
        # container, and lose the state file. Kernel objects stay behind.
        for h in lab.hosts():
            for p in [h.pid, *net.netns_pids(h.netns)]:
                if p:
                    # (one killed first may take the others with it: gone is the aim)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, 9)
        (cfg.state / "lab.json").unlink()
        stale = _leftovers(cfg)
        assert stale["bridge"] and len(stale["netns"]) == 2 and len(stale["mounts"]) == 2
        # A new `up` recognises the lab's own leftovers, removes them, and comes up.
        again = Lab(cfg, log=lambda m: None).up(nodes=1)
        assert [h["name"] for h in again["hosts"]] == ["h1"]
    finally:
        Lab(cfg, log=lambda m: None).down()
    assert _leftovers(cfg) == {"netns": [], "mounts": [], "blkio": [], "bridge": False,
                               "nspawn": []}
    assert net.guard_present(cfg)  # the guard stays on purpose
    Lab(cfg).down(drop_guard=True)
    assert not net.guard_present(cfg)


def test_refuses_a_subnet_already_in_use() -> None:
    require_root()
    cfg = lab_config("sn", 3)
    # Something else on this machine already uses 10.78.3.0/24 (an interface the
    # lab did not create: a plain bridge, since this kernel has no dummy driver).
    subprocess.run(["ip", "link", "add", "ncsntaken0", "type", "bridge"], check=True, timeout=10)
    try:
        subprocess.run(["ip", "addr", "add", "10.78.3.5/24", "dev", "ncsntaken0"], check=True,
                       timeout=10)
        with pytest.raises(NodecertError) as exc:
            Lab(cfg, log=lambda m: None).up(nodes=1)
        assert "10.78.3.0/24 is already in use" in exc.value.render()
        assert "ncsntaken0" in exc.value.render()
        assert not net.link_exists(cfg.bridge)  # nothing was created
    finally:
        subprocess.run(["ip", "link", "del", "ncsntaken0"], check=False, timeout=10)
        Lab(cfg, log=lambda m: None).down(drop_guard=True)


def test_never_touches_a_bridge_it_did_not_create() -> None:
    require_root()
    cfg = lab_config("fb", 4)
    subprocess.run(["ip", "link", "add", cfg.bridge, "type", "bridge"], check=True, timeout=10)
    try:
        with pytest.raises(NodecertError, match="was not created by the lab"):
            Lab(cfg, log=lambda m: None).up(nodes=1)
        Lab(cfg, log=lambda m: None).down()
        assert net.link_exists(cfg.bridge)  # still there: not ours
    finally:
        subprocess.run(["ip", "link", "del", cfg.bridge], check=False, timeout=10)
        Lab(cfg, log=lambda m: None).down(drop_guard=True)


def test_never_takes_another_labs_objects_for_its_own_leftovers() -> None:
    """A lab whose names another lab on this machine already uses (its bridge carries
    the other lab's identity) refuses `up` and `down` before touching anything: no
    netns, mount or process of the other lab is taken for a crashed run's leftovers."""
    require_root()
    import dataclasses
    mine = lab_config("fb", 4)
    other = dataclasses.replace(mine, state_name="state-other")
    assert other.alias != mine.alias and other.bridge == mine.bridge
    subprocess.run(["ip", "link", "add", other.bridge, "type", "bridge"], check=True, timeout=10)
    subprocess.run(["ip", "link", "set", "dev", other.bridge, "alias", other.alias], check=True,
                   timeout=10)
    subprocess.run(["ip", "netns", "add", other.netns(1)], check=True, timeout=10)
    try:
        for act in (lambda: Lab(mine, log=lambda m: None).up(nodes=1),
                    lambda: Lab(mine, log=lambda m: None).down()):
            with pytest.raises(NodecertError, match="belongs to another lab on this machine"):
                act()
        # The other lab's namespace carries this lab's name, but no record of this lab's
        # proves it this lab's: it is never counted as a leftover of its own.
        assert net.link_exists(other.bridge) and other.netns(1) not in net.owned_netns(mine)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True, timeout=10).stdout
        assert other.netns(1) in listed
    finally:
        subprocess.run(["ip", "netns", "del", other.netns(1)], check=False, timeout=10)
        subprocess.run(["ip", "link", "del", other.bridge], check=False, timeout=10)
        Lab(mine, log=lambda m: None).down(drop_guard=True)


def test_lab_needs_root_and_tools_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.lab import machine
    real_which = shutil.which
    monkeypatch.setattr(machine.shutil, "which", lambda tool: None if tool == "mmdebstrap"
                        else real_which(tool))
    with pytest.raises(NodecertError) as exc:
        machine.preflight_tools()
    assert exc.value.hint == "apt-get install mmdebstrap"


def test_simulator_in_hosts_is_the_shipped_one(lab: Lab) -> None:
    src = REPO / "src/nodecert/lab/simhw"
    lib = lab.cfg.host_dir(2) / "root/usr/lib/nodecert-lab"
    assert (lib / "simhw.py").read_bytes() == (src / "simhw.py").read_bytes()
    shipped = {p.name: p.read_bytes() for p in (src / "nodecert_simhw").glob("*.py")}
    inside = {p.name: p.read_bytes() for p in (lib / "nodecert_simhw").glob("*.py")}
    assert inside == shipped and "faults.py" in inside


def test_a_host_comes_back_after_reboot(lab: Lab) -> None:
    boot_id = sh(lab, "h2", "cat /proc/sys/kernel/random/boot_id").strip()
    lab.ssh("h2", "systemctl reboot", check=False)
    h2 = lab.host("h2")
    # Wait (with a deadline) until h2 answers again with a new boot id.
    deadline = time.monotonic() + 60
    new_id = boot_id
    while new_id == boot_id and time.monotonic() < deadline:
        try:
            r = lab.ssh("h2", "cat /proc/sys/kernel/random/boot_id", check=False, timeout=10)
        except CommandError:  # a connection that hangs while the host shuts down
            continue
        new_id = r.stdout.strip() if r.returncode == 0 else boot_id
    assert new_id != boot_id
    assert lab.host("h2").pid == h2.pid  # the same supervisor started it again
    assert sh(lab, "h2", "systemctl is-system-running --wait").strip() in ("running",
                                                                          "degraded")


def test_framework_wheelhouse_installs_pinned_torch(fresh_h1: Lab) -> None:
    apt_install(fresh_h1, "h1", "python3-venv", PIN_DRIVER)
    out = sh(fresh_h1, "h1",
             "python3 -m venv /opt/nodecert/envs/t && /opt/nodecert/envs/t/bin/pip install -q "
             "--index-url file:///srv/nodecert-mirror/simple torch==2.9.1+cu130 && "
             "/opt/nodecert/envs/t/bin/python -c 'import torch; print(torch.__version__, "
             "torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.nccl.version(), "
             "torch.cuda.device_count(), torch.cuda.get_device_name(0), "
             "torch.__nodecert_simulated__)'", timeout=300)
    assert out.strip() == "2.9.1+cu130 13.0 91300 (2, 27, 7) 8 NVIDIA H200 True"
    # pip checks the index's sha256 fragments: a tampered wheel is refused.
    bad = fresh_h1.ssh("h1", "mkdir -p /tmp/m && cp -r /srv/nodecert-mirror/wheels "
                             "/srv/nodecert-mirror/simple /tmp/m/ && "
                             "printf x >> /tmp/m/wheels/torch-2.8.0+cu128-py3-none-any.whl && "
                             "/opt/nodecert/envs/t/bin/pip install -q --index-url "
                             "file:///tmp/m/simple torch==2.8.0+cu128", check=False, timeout=300)
    assert bad.returncode != 0 and "HASH" in (bad.stdout + bad.stderr).upper()


def test_fault_slow_nvme_really_slows_real_fio(lab: Lab, tmp_path: Path) -> None:
    apt_install(lab, "h2", "fio")

    def write_mbps() -> float:
        out = sh(lab, "h2", "fio --name=w --filename=/var/tmp/fio.scratch --size=24M "
                            "--rw=write --bs=1M --direct=1 --ioengine=psync "
                            "--output-format=json; rm -f /var/tmp/fio.scratch", timeout=120)
        return float(json.loads(out)["jobs"][0]["write"]["bw_bytes"]) / 1e6
    fast = write_mbps()
    faults = tmp_path / "faults.yml"
    faults.write_text("faults:\n  - {host: h2, kind: nvme_slow, write_mbps: 8, "
                      "read_mbps: 8}\n")
    lab.apply_faults(faults)
    try:
        slow = write_mbps()
    finally:
        lab.apply_faults(None)
    assert slow < 10.0 < fast, (slow, fast)
    assert write_mbps() > 10.0  # cleared again


def test_lab_cli_bad_input_creates_nothing(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from nodecert.cli import main
    require_root()
    before = net.owned_netns(lab_config("pt", 1))
    r = CliRunner().invoke(main, ["lab", "up", "--profile", "h999-sxm-8"])
    assert r.exit_code == 2 and "unknown lab profile 'h999-sxm-8'" in r.stderr
    bad = tmp_path / "f.yml"
    bad.write_text("faults:\n  - {kind: gpu_missing}\n")
    r = CliRunner().invoke(main, ["lab", "up", "--faults", str(bad)])
    assert r.exit_code == 2 and "missing required key(s): gpu" in r.stderr
    assert net.owned_netns(lab_config("pt", 1)) == before


def test_lab_cli_status_json(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from nodecert import cli
    from nodecert.lab import hosts
    monkeypatch.setattr(hosts.Lab, "__init__", lambda self, cfg=None, log=None: (
        setattr(self, "cfg", lab.cfg), setattr(self, "log", lambda m: None))[0])
    r = CliRunner().invoke(cli.main, ["lab", "status", "--json"])
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert data["up"] is True and [h["name"] for h in data["hosts"]] == ["h1", "h2", "h3"]
    r = CliRunner().invoke(cli.main, ["lab", "reset", "h9"])
    assert r.exit_code == 2 and "no lab host named 'h9'" in r.stderr


def test_lab_refuses_more_hosts_than_inotify_allows(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """systemd in a host dies at boot ("Too many open files") past the machine's
    inotify limit: `lab up` says so before creating anything."""
    from nodecert.core.errors import NodecertError
    from nodecert.lab import machine
    limit = tmp_path / "max_user_instances"
    limit.write_text("40\n")
    monkeypatch.setattr(machine, "INOTIFY_LIMIT", limit)
    monkeypatch.setattr(machine, "inotify_in_use", lambda: 10)
    machine.check_inotify(3)  # 10 + 3 x 8 = 34 <= 40
    with pytest.raises(NodecertError, match="4 lab hosts need about 42 inotify instances, "
                                            "the machine allows 40") as e:
        machine.check_inotify(4)
    assert "sysctl -w fs.inotify.max_user_instances=512" in str(e.value.hint)


def test_lab_up_grows_and_shrinks_a_running_lab() -> None:
    """`lab up --nodes N` on a running lab: new hosts boot and join the inventory, the
    others keep running; fewer nodes stop the last hosts and remove their namespaces."""
    require_root()
    from nodecert.lab import net
    small = Lab(lab_config("gs", 3), log=lambda m: None)
    try:
        small.up(nodes=1, profiles=("l40s-pcie-4",))
        pid1 = small.host("h1").pid
        grown = small.up(nodes=2, profiles=("h200-sxm-8",))
        assert grown["resized"] == {"from": 1, "to": 2}
        assert [(h["name"], h["profile"]) for h in grown["hosts"]] == [
            ("h1", "l40s-pcie-4"), ("h2", "h200-sxm-8")]
        assert small.host("h1").pid == pid1  # h1 was not restarted
        assert "h2 ansible_host=" in (small.cfg.state / "inventory.ini").read_text()
        assert small.ssh("h2", "hostname").stdout.strip() == "h2"
        shrunk = small.up(nodes=1)
        assert [h["name"] for h in shrunk["hosts"]] == ["h1"]
        assert small.cfg.netns(2) not in net.owned_netns(small.cfg)
        assert "h2 " not in (small.cfg.state / "inventory.ini").read_text()
        assert small.ssh("h1", "hostname").stdout.strip() == "h1"
    finally:
        small.down()


def test_validate_as_a_non_root_user_through_a_jump_host(tmp_path: Path) -> None:
    """A site's SSH: the node refuses root logins; nodecert logs in as `ops` (passwordless
    sudo, ansible_become) through another host as the bastion (ProxyJump), both host
    keys checked, and runs its checks as root through sudo."""
    require_root()
    from nodecert.validation.run import ValidateRequest, validate
    site = Lab(lab_config("sj", 4), log=lambda m: None)
    password = "s3cret-" + secrets.token_hex(6)
    try:
        site.up(nodes=2, profiles=("l40s-pcie-4",))
        site.ssh("h2", f"useradd -m -s /bin/sh ops && echo 'ops:{password}' | chpasswd && "
                       "install -d -m 700 -o ops -g ops "
                       "/home/ops/.ssh && install -m 600 -o ops -g ops /root/.ssh/authorized_keys "
                       "/home/ops/.ssh/authorized_keys && echo 'ops ALL=(ALL) NOPASSWD: ALL' "
                       "> /etc/sudoers.d/ops && chmod 440 /etc/sudoers.d/ops && "
                       "echo 'PermitRootLogin no' > /etc/ssh/sshd_config.d/00-no-root.conf && "
                       "(systemctl restart ssh || systemctl restart sshd)")
        st = site.cfg.state
        h1_ip, h2_ip = str(site.cfg.host_ip(1)), str(site.cfg.host_ip(2))
        # root cannot log in to h2 any more
        client = paramiko.SSHClient()
        client.load_host_keys(str(st / "known_hosts"))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        with pytest.raises(paramiko.AuthenticationException):
            client.connect(h2_ip, username="root", key_filename=str(st / "id_ed25519"),
                           timeout=10, look_for_keys=False, allow_agent=False)
        client.close()
        common = (f"-o UserKnownHostsFile={st / 'known_hosts'} -o StrictHostKeyChecking=yes "
                  f"-o IdentitiesOnly=yes -o ProxyJump=root@{h1_ip}")
        inv = tmp_path / "inventory.ini"
        inv.write_text("\n".join(
            ln + (f" ansible_user=ops ansible_become=true ansible_ssh_common_args='{common}'"
                  if ln.startswith("h2 ") else "")
            for ln in (st / "inventory.ini").read_text().splitlines()) + "\n")
        run = validate(ValidateRequest(inv, limit=("h2",), checks=("health.xid",),
                       runs_dir=tmp_path / "runs"), progress=lambda line: None)
        hr = run.hosts["h2"]
        assert hr.status == "done", hr.error
        assert [r.verdict.name for r in hr.results] == ["PASS"], hr.results[0].summary
        # the bastion's host key is checked too: an unknown bastion key is refused
        (tmp_path / "kh").write_text(f"{h2_ip} " + (st / "known_hosts").read_text().split(
            f"{h2_ip} ", 1)[1].splitlines()[0] + "\n")
        inv.write_text(inv.read_text().replace(str(st / "known_hosts"), str(tmp_path / "kh")))
        bad = validate(ValidateRequest(inv, limit=("h2",), checks=("health.xid",),
                       runs_dir=tmp_path / "r2"), progress=lambda line: None)
        assert bad.hosts["h2"].status == "unreachable"
        inv.write_text(inv.read_text().replace(str(tmp_path / "kh"), str(st / "known_hosts")))
        _sudo_with_a_password(inv, tmp_path, password)
    finally:
        site.down()


def _sudo_with_a_password(inv: Path, tmp_path: Path, password: str) -> None:
    """The same user once sudo asks for its password: validate answers sudo's prompt
    from a password file or a vaulted ansible_become_password; a wrong password is a
    clear ERROR; the password is in no file of the run."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    from nodecert.inventory.reader import hostvars
    from nodecert.transport.become import BecomeSource
    from nodecert.transport.ssh import Endpoint, connect
    from nodecert.validation.run import ValidateRequest, validate
    # root cannot log in: ops changes its own sudo rule while it is still passwordless
    client = connect(Endpoint.from_hostvars("h2", hostvars(inv, ["h2"])["h2"]))
    try:
        _, out, _ = client.exec_command("sudo -n sh -c \"echo 'ops ALL=(ALL) ALL' > "
                                        "/etc/sudoers.d/ops\" && sudo -k && echo done",
                                        timeout=30)
        assert out.read().strip() == b"done"
    finally:
        client.close()

    def run(source: BecomeSource, where: str) -> Any:
        return validate(ValidateRequest(inv, limit=("h2",), checks=("health.xid",),
                        runs_dir=tmp_path / where, become=source), progress=lambda line: None)

    nopw = run(BecomeSource(), "r-nopw").hosts["h2"]
    assert nopw.status == "lost" and "--become-password-file" in str(nopw.error), nopw.error
    wrong = tmp_path / "wrong"
    wrong.write_text("not-it\n")
    wrong.chmod(0o600)
    bad = run(BecomeSource(wrong), "r-wrong").hosts["h2"]
    assert bad.status == "lost"
    assert "sudo refused the become password for ops on h2" in str(bad.error), bad.error
    pwfile = tmp_path / "become-pw"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    good = run(BecomeSource(pwfile), "r-file").hosts["h2"]
    assert good.status == "done", good.error
    assert [r.verdict.name for r in good.results] == ["PASS"]
    # the same password from the inventory, vault-encrypted
    vault_pw = tmp_path / "vault-pw"
    vault_pw.write_text("v4ult-" + secrets.token_hex(4) + "\n")
    vault_pw.chmod(0o600)
    blob = VaultLib([("default", VaultSecret(vault_pw.read_text().strip().encode()))]
                    ).encrypt(password).decode()
    # (a directory of its own: Ansible caches which host_vars directories exist)
    vdir = tmp_path / "vaulted"
    (vdir / "host_vars").mkdir(parents=True)
    (vdir / "host_vars" / "h2.yml").write_text(
        "ansible_become_password: !vault |\n" + "".join(f"  {ln}\n" for ln in blob.splitlines()))
    shutil.copy(inv, vdir / "inventory.ini")
    vaulted = validate(ValidateRequest(vdir / "inventory.ini", limit=("h2",),
                       checks=("health.xid",), runs_dir=tmp_path / "r-vault",
                       become=BecomeSource(None, vault_pw)), progress=lambda line: None).hosts["h2"]
    assert vaulted.status == "done", vaulted.error
    for runs in ("r-nopw", "r-wrong", "r-file", "r-vault"):
        for f in (tmp_path / runs).rglob("*"):
            if f.is_file():
                assert password.encode() not in f.read_bytes(), f
