"""`nodecert rack validate` on a lab rack: 18 GB200 compute trays (nspawn hosts with real
systemd, apt and sshd; GPUs, NVLink fabric and IMEX simulated), real Slurm running the
NVLink domain's jobs, and the rack's 9 switch trays, 2 power shelves and CDU as real
Redfish endpoints in the lab's BMC namespace.
A healthy rack passes and its certificate verifies; each fault gives the right verdict
naming the right tray, GPU or component, and nothing else fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodecert.certs.signing import init_key
from nodecert.core.errors import NodecertError
from nodecert.lab.hosts import Lab
from nodecert.lab.machine import INOTIFY_LIMIT, check_inotify
from support.env import require_root
from support.lab import lab_config

pytestmark = pytest.mark.lab
TRAYS = 18


@pytest.fixture(scope="module")
def rack_lab() -> Iterator[Lab]:
    require_root()
    lab = Lab(lab_config("rk", 9), log=lambda m: None)
    # 18 hosts' systemd need more inotify instances than a default machine allows: the
    # limit is raised for this lab (as `lab up` advises) and put back after it.
    before = INOTIFY_LIMIT.read_text()
    try:
        check_inotify(TRAYS)
    except NodecertError:
        INOTIFY_LIMIT.write_text(f"{max(1024, int(before) * 4)}\n")
    try:
        lab.up(nodes=TRAYS, profiles=("gb200-nvl-4",), with_rack=True, as_cluster=True)
        assert lab.ssh("h18", "systemctl is-active nvidia-imex").stdout.strip() == "active"
        yield lab
    finally:
        lab.down()
        INOTIFY_LIMIT.write_text(before)


def _nodecert(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodecert", *args], capture_output=True,
                          text=True, timeout=900, cwd=cwd, env=dict(os.environ, NO_COLOR="1"),
                          check=False)


def _validate(lab: Lab, tmp: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    p = _nodecert("rack", "validate", "-i", str(lab.cfg.state / "inventory.ini"),
                  "--runs-dir", str(tmp / "runs"), "--json", *extra, cwd=tmp)
    assert p.stdout.strip(), p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout)


def _faults(lab: Lab, tmp: Path, *faults: dict[str, Any]) -> None:
    """Apply these faults (none: clear them) to the running lab."""
    if not faults:
        lab.apply_faults(None)
        return
    f = tmp / "faults.yml"
    f.write_text(yaml.safe_dump({"faults": list(faults)}))
    lab.apply_faults(f)


def _with_faults(lab: Lab, tmp: Path, *faults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rack validated under these faults (cleared after): rule -> its result."""
    _faults(lab, tmp, *faults)
    try:
        rc, data = _validate(lab, tmp)
    finally:
        _faults(lab, tmp)
    assert rc == 1, data
    return _by(data)


def _by(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["check"]: r for r in data["results"]}


def test_a_healthy_rack_passes_and_its_certificate_verifies(rack_lab: Lab,
                                                             tmp_path: Path) -> None:
    kp = init_key(tmp_path / "keys")
    rc, data = _validate(rack_lab, tmp_path, "--key", str(kp.private))
    by = _by(data)
    assert rc == 0 and data["verdict"] == "PASS", {k: v["summary"] for k, v in by.items()}
    assert list(by) == ["rack.trays", "rack.domain", "rack.switch_trays", "rack.nvlink_map",
                        "rack.power", "rack.cooling", "rack.firmware", "rack.allreduce",
                        "rack.sweep", "fabric.cabling"]
    # the trays' InfiniBand fabric (the lab's ibsim, 4 HCAs a tray) read by the real
    # ibnetdiscover from a tray, against the plan the lab's inventory names
    assert by["fabric.cabling"]["summary"] == ("all 72 planned links where the plan says, "
                                               "at its width and speed")
    assert by["rack.allreduce"]["value"] >= 690
    assert by["rack.sweep"]["value"]["rounds"] == 2
    assert by["rack.sweep"]["value"]["confirmations"] == 0
    assert len(by["rack.sweep"]["value"]["heatmap"]) == 18
    assert by["rack.domain"]["value"]["gpus"] == 72 and by["rack.domain"]["value"]["trays"] == 18
    assert by["rack.switch_trays"]["summary"] == ("9 switch trays healthy, 1296/1296 NVLink "
                                                  "ports up")
    # the switch trays' ports name the GPU behind each (Redfish), the trays' runs their
    # GPUs: every GPU once on every switch chip
    assert by["rack.nvlink_map"]["summary"] == (
        "72 GPUs each linked once to each of 18 NVLink switch chips (1296 links as the "
        "GB200-NVL72 is wired)")
    assert data["not_judged"] == []
    assert data["certificate_verdict"] == "READY"
    v = _nodecert("verify", data["certificate"], "--pubkey", str(kp.public),
                  "--allow-simulated", "--expect-host", "h7", cwd=tmp_path)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "18 compute trays and 9 switch trays" in v.stdout
    page = Path(data["html"]).read_text()
    # the sweep's heat map (a cell a GPU) and the wiring's grid (a cell a tray and chip)
    assert 'id="sweep"' in page and 'data-plot="nvlink-map"' in page
    assert page.count('class="cell"') == 72 + 18 * 18
    assert page.count('class="link ok"') == 72  # the fabric drawn, every link as planned
    print(f"\nhealthy rack: trays {data['seconds']['trays']} s, load {data['seconds']['load']} "
          f"s, infrastructure {data['seconds']['infrastructure']} s, total "
          f"{data['seconds']['total']} s")


def test_tray_faults_are_named_and_nothing_else_fails(rack_lab: Lab, tmp_path: Path) -> None:
    by = _with_faults(rack_lab, tmp_path,
                      {"kind": "fabric_clique", "host": "h5", "clique": 7},
                      {"kind": "nvlink_insufficient", "host": "h7", "gpu": 1},
                      {"kind": "tray_vbios", "host": "h9"},
                      {"kind": "imex_hang", "host": "h11"})
    verdicts = {k: v["verdict"] for k, v in by.items()}
    assert verdicts == {"rack.trays": "ERROR", "rack.domain": "FAIL",
                        "rack.switch_trays": "PASS", "rack.nvlink_map": "PASS",
                        "rack.power": "PASS",
                        "rack.cooling": "PASS", "rack.firmware": "FAIL",
                        "rack.allreduce": "FAIL", "rack.sweep": "FAIL",
                        "fabric.cabling": "PASS"}
    # h5 outside the domain's clique: NCCL goes over the NICs, its four GPUs are named
    sweep = by["rack.sweep"]["findings"]
    assert [f.split(":")[0] for f in sweep] == [f"h5 GPU {g}" for g in range(4)], sweep
    trays = by["rack.trays"]["findings"]
    assert any(f.startswith("tray h11: domain.imex ERROR") for f in trays), trays
    assert any(f.startswith("tray h7: domain.fabric: GPU ") and "Unhealthy" in f
               for f in trays), trays
    assert len(trays) == 2, trays  # no other tray named
    assert len(by["rack.domain"]["findings"]) == 1
    assert by["rack.domain"]["findings"][0].startswith("tray h5: in clique 7 of cluster")
    fw = by["rack.firmware"]["findings"]
    assert len(fw) == 4 and all(f.startswith("tray h9 GPU ") and "97.00.88.00.01" in f
                                for f in fw), fw


def test_rack_faults_are_named_and_nothing_else_fails(rack_lab: Lab, tmp_path: Path) -> None:
    by = _with_faults(rack_lab, tmp_path,
                      {"kind": "imex_node_down", "node": 2},  # every tray sees h3's down
                      {"kind": "rack_part_down", "part": "nvsw-04"},
                      {"kind": "rack_psu_failed", "part": "ps-02", "bay": 4},
                      {"kind": "rack_leak"},
                      {"kind": "rack_firmware", "part": "nvsw-06", "version": "35.2014.1500"},
                      {"kind": "rack_nvlink_crossed", "part": "nvsw-02", "switch": 1,
                       "port": 9, "to": 13})
    assert {k: v["verdict"] for k, v in by.items()} == {
        "rack.trays": "FAIL", "rack.domain": "PASS", "rack.switch_trays": "FAIL",
        "rack.nvlink_map": "FAIL", "rack.power": "FAIL", "rack.cooling": "FAIL",
        "rack.firmware": "FAIL",
        "rack.allreduce": "PASS", "rack.sweep": "PASS", "fabric.cabling": "PASS"}
    ip3 = str(rack_lab.cfg.host_ip(3))
    trays = by["rack.trays"]["findings"]
    assert len(trays) == TRAYS and all(
        f.startswith(f"tray h{k}: domain.imex: IMEX node #2 ({ip3}) is DOWN, expected READY")
        for k, f in zip(sorted(range(1, TRAYS + 1), key=str), trays, strict=True)), trays
    assert by["rack.switch_trays"]["findings"][0].startswith("switch tray nvsw-04 (")
    assert len(by["rack.switch_trays"]["findings"]) == 1
    power = by["rack.power"]["findings"]
    assert "power shelf ps-02 supply Bay4: health Critical" in power
    assert all(f.startswith("power shelf ps-02") for f in power), power
    # port 9 carries GPU 8 (h3's first), 13 GPU 12 (h4's first): the crossed cable names
    # both GPUs; the switch tray that did not answer leaves its links unmapped
    nvl = by["rack.nvlink_map"]["findings"]
    assert nvl[0].startswith("switch tray nvsw-02 switch NVSwitch_1 ports acp9, acp13: all "
                             "to tray h4 GPU "), nvl
    assert nvl[1].startswith("tray h3 GPU ") and nvl[1].endswith(
        ": no NVLink to switch tray nvsw-02 switch NVSwitch_1"), nvl
    assert len(nvl) == 3 and nvl[2].startswith("switch tray nvsw-04 (") and nvl[2].endswith(
        "its switch chips' links are not mapped"), nvl
    assert by["rack.cooling"]["summary"].startswith("CDU cdu-01: LEAK detected by Moisture")
    assert all("nvsw-06" in f for f in by["rack.firmware"]["findings"]), \
        by["rack.firmware"]["findings"]


def test_a_slow_nvlink_on_one_gpu_is_named_by_the_sweep(rack_lab: Lab, tmp_path: Path
                                                         ) -> None:
    """Every link and the fabric's health read healthy: only traffic shows it. The sweep
    names the GPU in two rounds and one confirmation; the rack-wide all-reduce, paced by
    its slowest GPU, falls below the floor; nothing else fails."""
    by = _with_faults(rack_lab, tmp_path, {"kind": "nvlink_slow", "host": "h7", "gpu": 2})
    assert {k: v["verdict"] for k, v in by.items()} == {
        "rack.trays": "PASS", "rack.domain": "PASS", "rack.switch_trays": "PASS",
        "rack.nvlink_map": "PASS", "rack.power": "PASS", "rack.cooling": "PASS",
        "rack.firmware": "PASS", "rack.allreduce": "FAIL", "rack.sweep": "FAIL",
        "fabric.cabling": "PASS"}
    sweep = by["rack.sweep"]
    assert len(sweep["findings"]) == 1 and sweep["findings"][0].startswith("h7 GPU 2: ")
    assert sweep["value"]["rounds"] == 2 and sweep["value"]["confirmations"] == 1
    heat = sweep["value"]["heatmap"]
    assert heat["h7"]["2"] < 0.6 * heat["h7"]["1"]


def test_without_a_load_the_domain_is_not_judged_under_load(rack_lab: Lab, tmp_path: Path
                                                             ) -> None:
    rc, data = _validate(rack_lab, tmp_path, "--no-load")
    assert rc == 0 and "rack.sweep" not in _by(data)
    assert data["not_judged"] == ["rack.allreduce, rack.sweep: not asked for (--no-load)"]
