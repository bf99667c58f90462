"""The simulated GPU tools: real formats (checked against real fixtures), and faults.

These run the simulator directly (no lab host needed): it reads its hardware
description and the installed-package markers from paths given in the
environment, exactly as it does inside a lab host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodecert.lab.hardware import Fault
from support import toolparse as tp
from support.env import REPO
from support.simnode import STACK_580, Sim

SIMHW = REPO / "src" / "nodecert" / "lab" / "simhw" / "simhw.py"
REAL = REPO / "tests" / "fixtures" / "real"

def query(sim: Sim, *fields: str) -> list[dict[str, str]]:
    """--query-gpu with a header and no units: rows keyed by plain field names."""
    return tp.parse_csv(sim("nvidia-smi", f"--query-gpu={','.join(fields)}",
                            "--format=csv,nounits").stdout)


@pytest.fixture
def sim(tmp_path: Path) -> Sim:
    return Sim(tmp_path)


# --- formats: the same parser, the same expectations on real and simulated output -------

def test_q_layout_matches_real_565(sim: Sim) -> None:
    real = tp.parse_q((REAL / "nvidia-smi/h100-sxm-8gpu-565.57.01-q.txt").read_text())
    ours = tp.parse_q(sim("nvidia-smi", "-q").stdout)
    assert ours[""]["Driver Version"] == "580.173.02"
    assert ours[""]["CUDA Version"] == "13.0"
    assert ours[""]["Attached GPUs"] == "8"
    real_gpu = next(v for k, v in real.items() if k)
    gpu = ours["00000000:18:00.0"]
    # Every field the real R5xx layout has for a Hopper SXM GPU, we have, in the same path.
    missing = [k for k in real_gpu if k not in gpu and not k.startswith(("Processes",))]
    assert missing == [], missing
    assert gpu["FB Memory Usage/Total"] == "143771 MiB"
    assert gpu["PCI/GPU Link Info/Link Width/Current"] == "16x"
    assert gpu["Temperature/GPU Current Temp"].endswith(" C")
    assert gpu["GPU Power Readings/Power Draw"].endswith(" W")
    # Same column layout: the ':' of every field sits in column 42, as in the real file.
    real_text = (REAL / "nvidia-smi/h100-sxm-8gpu-565.57.01-q.txt").read_text()
    for text in (real_text, sim("nvidia-smi", "-q").stdout):
        colons = {line.index(":") for line in text.splitlines()
                  if " : " in line and not line.startswith("GPU ")}
        assert colons == {42}


def test_q_absolute_temperatures_on_ampere(tmp_path: Path) -> None:
    sim = Sim(tmp_path, profile="a100-sxm-8")
    real = tp.parse_q((REAL / "nvidia-smi/a100-sxm4-80gb-4gpu-555.42.02-q.txt").read_text())
    ours = tp.parse_q(sim("nvidia-smi", "-q").stdout)
    real_gpu, gpu = next(v for k, v in real.items() if k), next(v for k, v in ours.items() if k)
    for key in ("Temperature/GPU Shutdown Temp", "Temperature/GPU Slowdown Temp",
                "Temperature/GPU Max Operating Temp", "Temperature/Memory Max Operating Temp"):
        assert gpu[key] == real_gpu[key]
    assert gpu["Product Name"] == real_gpu["Product Name"] == "NVIDIA A100-SXM4-80GB"


def test_query_gpu_csv_header_and_units_like_real(sim: Sim) -> None:
    real = tp.parse_csv((REAL / "nvidia-smi/h200-1gpu-590.48.01-query-gpu-all-fields-idle.csv")
                        .read_text())[0]
    fields = ["index", "name", "uuid", "pci.bus_id", "memory.total", "temperature.gpu",
              "power.draw", "clocks.current.sm", "clocks_event_reasons.active",
              "pcie.link.width.current", "temperature.gpu.tlimit"]
    rows = tp.parse_csv(sim("nvidia-smi", f"--query-gpu={','.join(fields)}",
                            "--format=csv").stdout)
    assert len(rows) == 8
    assert set(rows[0]) <= set(real)  # header names with units exactly as the real tool
    for key in rows[0]:
        assert rows[0][key].split()[-1:] == real[key].split()[-1:] or not real[key].endswith(
            ("MiB", "W", "MHz")), key
    assert rows[0]["memory.total [MiB]"] == real["memory.total [MiB]"] == "143771 MiB"
    assert rows[0]["name"] == real["name"] == "NVIDIA H200"
    plain = sim("nvidia-smi", "--query-gpu=memory.total,power.draw",
                "--format=csv,noheader,nounits").stdout.splitlines()
    assert len(plain) == 8 and plain[0].startswith("143771, ")


def test_query_rejects_unknown_field(sim: Sim) -> None:
    p = sim("nvidia-smi", "--query-gpu=foo", "--format=csv", check=False)
    assert p.returncode == 2
    assert 'Field "foo" is not a valid field to query.' in p.stdout


def test_query_streams_with_lms(sim: Sim) -> None:
    proc = subprocess.Popen([sys.executable, str(SIMHW), "nvidia-smi",
                             "--query-gpu=index,temperature.gpu", "--format=csv,noheader",
                             "-lms", "50"], env=sim.env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(24)]  # three samples of 8 GPUs
    proc.terminate()
    proc.wait(timeout=10)
    assert [ln.split(",")[0] for ln in lines] == [str(i % 8) for i in range(24)]


def test_topo_and_nvlink_like_real(sim: Sim) -> None:
    real = tp.parse_topo((REAL / "topo/h100-sxm-8gpu-6nic-della-topo-m-blank-cpu-affinity.txt")
                         .read_text())
    ours = tp.parse_topo(sim("nvidia-smi", "topo", "-m").stdout)
    assert ours == real  # 8 GPUs, all pairs NV18, X on the diagonal
    real_nv = tp.parse_nvlink((REAL / "nvlink/h100-80gb-hbm3-1gpu-590.48.01-nvlink-s-18-links-"
                               "26.562.txt").read_text())
    nv = tp.parse_nvlink(sim("nvidia-smi", "nvlink", "-s").stdout)
    assert len(nv) == 8
    assert nv[0] == real_nv[0] == [26.562] * 18


def test_nvlink_not_supported_on_pcie_cards(tmp_path: Path) -> None:
    sim = Sim(tmp_path, profile="l40s-pcie-4")
    real = tp.parse_nvlink((REAL / "nvlink/l40s-1gpu-595.80-nvlink-s-not-supported.txt")
                           .read_text())
    assert tp.parse_nvlink(sim("nvidia-smi", "nvlink", "-s").stdout)[0] == real[0]


def test_allreduce_like_real(sim: Sim) -> None:
    real = tp.parse_allreduce((REAL / "nccl-tests/h200-azure-8gpu-all-reduce-8g-single-size.log")
                              .read_text())
    ours = tp.parse_allreduce(sim("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2",
                                  "-g", "8").stdout)
    assert real["oob"] == ours["oob"] == 0
    assert ours["nccl"] == "2.27.7+cuda13.0"  # the installed libnccl2, not a constant
    assert len(ours["rows"]) == 31  # type: ignore[arg-type]
    big = ours["rows"][-1]  # type: ignore[index]
    ref = real["rows"][-1]  # type: ignore[index]
    assert big["size"] == ref["size"] == 8589934592
    assert abs(big["busbw"] - ref["busbw"]) / ref["busbw"] < 0.02


def test_nvbandwidth_like_real(sim: Sim) -> None:
    real = tp.parse_nvbandwidth((REAL / "nvbandwidth/h100-sxm-8gpu-h2d-ce-v0.10-drv595.txt")
                                .read_text())
    ours = tp.parse_nvbandwidth(sim("nvbandwidth", "-t", "host_to_device_memcpy_ce").stdout)
    r, o = real["host_to_device_memcpy_ce"], ours["host_to_device_memcpy_ce"]
    assert len(o) == len(r) == 1 and len(o[0]) == len(r[0]) == 8
    assert all(abs(a - b) < 0.5 for a, b in zip(o[0], r[0], strict=True))  # type: ignore[operator]
    d2d = tp.parse_nvbandwidth(sim("nvbandwidth", "-t", "device_to_device_memcpy_write_ce")
                               .stdout)["device_to_device_memcpy_write_ce"]
    assert len(d2d) == 8 and d2d[0][0] is None and d2d[0][1] > 350  # type: ignore[operator]


def test_dcgmi_like_real(sim: Sim) -> None:
    real = tp.parse_dcgmi((REAL / "dcgmi/a100-sxm4-80gb-p4de-8gpu-diag-r2-pass.txt").read_text())
    ours = tp.parse_dcgmi(sim("dcgmi", "diag", "-r", "2").stdout)
    assert set(real) <= set(ours)
    assert ours["DCGM Version"] == "4.4.2" and ours["Driver Version Detected"] == "580.173.02"
    assert ours["PCIe"] == real["PCIe"] == "Pass - All"


def test_lspci_like_real(sim: Sim) -> None:
    real = tp.parse_lspci_nn((REAL / "lspci/a100-sxm4-80gb-azure-8gpu-6nvswitch-lspci-nn.txt")
                             .read_text())
    ours = tp.parse_lspci_nn(sim("lspci", "-nn").stdout)
    assert {d["class"] for d in real if d["vendor"] == "10de"} == {
        d["class"] for d in ours if d["vendor"] == "10de"}
    # each GPU behind a PCIe switch port, as on HGX baseboards
    assert len([d for d in ours if d["class_id"] == "0604" and d["vendor"] == "1000"]) == 8
    gpus = [d for d in ours if d["class_id"] == "0302"]
    assert [d["device"] for d in gpus] == ["2335"] * 8
    assert len([d for d in ours if d["class_id"] == "0680"]) == 4


def test_gpus_visible_before_driver_but_no_nvidia_smi(tmp_path: Path) -> None:
    sim = Sim(tmp_path, installed={})
    assert len([d for d in tp.parse_lspci_nn(sim("lspci", "-nn").stdout)
                if d["class_id"] == "0302"]) == 8
    p = sim("nvidia-smi", check=False)
    assert p.returncode == 9 and "couldn't communicate with the NVIDIA driver" in p.stdout
    p = sim("all_reduce_perf", "-g", "8", check=False)
    assert p.returncode == 127 and "libnccl.so.2" in p.stderr


def test_versions_follow_installed_packages(tmp_path: Path) -> None:
    sim = Sim(tmp_path, installed={"driver": ("nvidia-driver-570-server-open",
                                              "570.211.01-0ubuntu0.24.04.2"),
                                   "nccl": ("libnccl2", "2.25.1-1+cuda12.8")})
    q = tp.parse_q(sim("nvidia-smi", "-q").stdout)
    assert (q[""]["Driver Version"], q[""]["CUDA Version"]) == ("570.211.01", "12.8")
    assert tp.parse_allreduce(sim("all_reduce_perf", "-g", "2").stdout)["nccl"] == \
        "2.25.1+cuda12.8"


# --- load: temperatures, clocks and power follow it ---------------------------------------

@pytest.mark.integration
def test_temperature_rises_under_load(sim: Sim) -> None:
    def reading() -> dict[str, str]:
        return query(sim, "temperature.gpu", "clocks.sm", "power.draw",
                     "clocks_event_reasons.active", "utilization.gpu")[0]
    idle = reading()
    sim.load([0], started_s_ago=5)
    early = reading()
    sim.load([0], started_s_ago=120)
    hot = reading()
    assert int(idle["temperature.gpu"]) < int(early["temperature.gpu"]) < int(
        hot["temperature.gpu"])
    assert idle["clocks_event_reasons.active"] == "0x0000000000000001"  # GpuIdle
    assert hot["clocks_event_reasons.active"] == "0x0000000000000000"
    assert int(hot["clocks.sm"]) == 1980 and float(hot["power.draw"]) > 600


@pytest.mark.integration
def test_gpu_burn_output_and_load(sim: Sim) -> None:
    p = sim("gpu_burn", "2", timeout=60)
    real = (REAL / "gpu-burn/rtx-a400-500s-ok.txt").read_text()
    for text in (real, p.stdout):
        assert "Burning for " in text and "Tested " in text
        assert "proc'd: " in text and "Gflop/s" in text and "errors: " in text
    assert "Tested 8 GPUs:" in p.stdout
    assert p.stdout.count(": OK") == 8
    assert not (sim.run_dir / "load.json").exists()  # load marker cleared at the end


# --- faults ------------------------------------------------------------------------------

def test_fault_gpu_missing(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "gpu_missing", "gpu": 3}])
    assert len(tp.parse_csv(sim("nvidia-smi", "--query-gpu=index", "--format=csv").stdout)) == 7
    assert len([d for d in tp.parse_lspci_nn(sim("lspci", "-nn").stdout)
                if d["class_id"] == "0302"]) == 7


def test_fault_pcie_degraded(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "pcie_degraded", "gpu": 2, "width": 8}])
    rows = query(sim, "pcie.link.width.current", "pcie.link.width.max")
    assert [r for r in rows if r["pcie.link.width.current"] == "8"] == [rows[2]]
    vv = sim("lspci", "-vv").stdout
    real = (REAL / "lspci/rtx2060-2gpu-lnksta-width-x8-downgraded-grep-gt.txt").read_text()
    assert "Width x8 (downgraded)" in real and "Width x8 (downgraded)" in vv
    h2d = tp.parse_nvbandwidth(sim("nvbandwidth", "-t", "host_to_device_memcpy_ce").stdout)
    row = h2d["host_to_device_memcpy_ce"][0]
    assert row[2] < 0.6 * row[0]  # type: ignore[operator]


@pytest.mark.integration
def test_fault_nvlink_down(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "nvlink_down", "gpu": 1}, {"kind": "nvlink_down",
                                                                   "gpu": 5}])
    nv = tp.parse_nvlink(sim("nvidia-smi", "nvlink", "-s").stdout)
    real = tp.parse_nvlink((REAL / "nvlink/a100-sxm4-80gb-gpu6-nvlink-s-all-links-inactive.txt")
                           .read_text())
    assert nv[1] == nv[5] == real[6] == \
        "NVML: Unable to retrieve NVLink information as all links are inactive"
    topo = tp.parse_topo(sim("nvidia-smi", "topo", "-m").stdout)
    assert topo["GPU1"]["GPU5"] in ("NODE", "SYS") and topo["GPU0"]["GPU2"] == "NV18"
    big = tp.parse_allreduce(sim("all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8").stdout)
    assert big["rows"][0]["busbw"] < 100  # type: ignore[index]


def test_fault_some_links_inactive(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "nvlink_down", "gpu": 0, "links": [3, 4]}])
    nv = tp.parse_nvlink(sim("nvidia-smi", "nvlink", "-s", "-i", "0").stdout)
    assert nv[0][3] is None and nv[0][4] is None and nv[0][0] == 26.562  # type: ignore[index]
    assert tp.parse_topo(sim("nvidia-smi", "topo", "-m").stdout)["GPU0"]["GPU1"] == "NV16"


@pytest.mark.integration
def test_fault_thermal_throttle_after_load(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "thermal_throttle", "gpu": 6, "after_s": 30}])
    sim.load(list(range(8)), started_s_ago=10)
    rows = query(sim, "clocks_event_reasons.active")
    assert {r["clocks_event_reasons.active"] for r in rows} == {"0x0000000000000000"}
    sim.load(list(range(8)), started_s_ago=60)
    rows = query(sim, "clocks_event_reasons.active", "temperature.gpu",
                 "temperature.gpu.tlimit", "clocks.sm")
    assert int(rows[6]["clocks_event_reasons.active"], 16) & 0x48 == 0x48
    assert int(rows[6]["temperature.gpu.tlimit"]) < 0  # hotter than its T.Limit
    assert int(rows[6]["clocks.sm"]) < int(rows[0]["clocks.sm"])
    q = tp.parse_q(sim("nvidia-smi", "-q", "-i", "6").stdout)
    gpu = next(v for k, v in q.items() if k)
    assert gpu["Clocks Event Reasons/HW Thermal Slowdown"] == "Active"


def test_fault_ecc_and_row_remap(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 4, "count": 2},
                                {"kind": "row_remap_pending", "gpu": 4}])
    rows = query(sim, "ecc.errors.uncorrected.volatile.total", "remapped_rows.pending")
    assert rows[4] == {"ecc.errors.uncorrected.volatile.total": "2",
                       "remapped_rows.pending": "Yes"}
    assert rows[0]["remapped_rows.pending"] == "No"
    diag = sim("dcgmi", "diag", "-r", "2", check=False)
    assert diag.returncode != 0
    assert tp.parse_dcgmi(diag.stdout)["Page Retirement/Row Remap"] == "Fail"


def test_fault_xid_in_kernel_log(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "xid", "gpu": 2, "code": 79}])
    real = tp.parse_xids((REAL / "dmesg/h100-dell-xe9680-xid119-gsp-rpc-timeout-dmesg-T.txt")
                         .read_text())
    assert real[0] == ("0000:9b:00", 119)  # the same regex reads the real log
    assert tp.parse_xids(sim("dmesg", "-T").stdout) == [("0000:3a:00", 79)]


def test_dmesg_T_pads_the_day_with_a_space_as_util_linux_does(tmp_path: Path) -> None:
    # util-linux prints ctime stamps ("%a %b %e ..."): "[Sun Feb  2 ...]", never "Feb 02"
    import calendar
    boot = calendar.timegm((2026, 2, 1, 23, 58, 0, 0, 0, 0))
    sim = Sim(tmp_path, faults=[{"kind": "xid", "gpu": 2, "code": 79, "at_s": 300}],
              boot_time=boot)
    p = subprocess.run([sys.executable, str(SIMHW), "dmesg", "-T"], env=dict(sim.env(), TZ="UTC"),
                       capture_output=True, text=True, timeout=30, check=True)
    assert "[Mon Feb  2 00:03:00 2026] NVRM: Xid (PCI:0000:3a:00): 79," in p.stdout
    assert tp.parse_xids(p.stdout) == [("0000:3a:00", 79)]


def test_fault_busbw_low_and_wrong_values(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "busbw_low", "factor": 0.7}, {"kind": "nccl_wrong"}])
    p = sim("all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8", check=False)
    r = tp.parse_allreduce(p.stdout)
    assert 300 < r["rows"][0]["busbw"] < 345  # type: ignore[index]
    assert r["rows"][0]["wrong"] > 0 and r["oob"] > 0  # type: ignore[index,operator]
    assert p.returncode != 0


@pytest.mark.integration
def test_fault_nccl_hang_never_finishes(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "nccl_hang"}])
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        subprocess.run([sys.executable, str(SIMHW), "all_reduce_perf", "-g", "8"],
                       env=sim.env(), capture_output=True, text=True, timeout=3, check=False)
    partial = exc.value.stdout or b""
    text = partial.decode() if isinstance(partial, bytes) else partial
    assert "# Using devices" in text and "Avg bus bandwidth" not in text


@pytest.mark.integration
def test_fault_sdc_makes_gpu_burn_report_faulty(tmp_path: Path) -> None:
    sim = Sim(tmp_path, faults=[{"kind": "sdc", "gpu": 5}])
    out = sim("gpu_burn", "1", timeout=60).stdout
    assert "GPU 5: FAULTY" in out and out.count(": OK") == 7


# --- nvidia-smi -q -x: the real tags, the same facts as -q ----------------------------------

def xml_paths(text: str) -> set[str]:
    """Every element path under a <gpu> of an `nvidia-smi -q -x` document."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(text.split("\n", 2)[2] if text.startswith("<?xml") else text)
    out: set[str] = set()

    def walk(el: Any, path: str) -> None:
        for child in el:
            out.add(f"{path}/{child.tag}")
            walk(child, f"{path}/{child.tag}")
    for gpu in root.iter("gpu"):
        walk(gpu, "gpu")
    return out


REAL_XML_PATHS = set().union(*(xml_paths(f.read_text()) for f in sorted(
    (REPO / "tests" / "fixtures" / "real" / "nvidia-smi").glob("*.xml"))))
# Readings that move between two calls (the simulated GPUs warm and draw as real ones do).
LIVE = {"temp_gpu", "temp_memory", "temp_headroom", "temp_tlimit_margin", "power_draw_w"}


@pytest.mark.parametrize("profile", ["h200-sxm-8", "h100-sxm-8", "a100-sxm-8", "l40s-pcie-4",
                                     "b200-hgx-8", "gb200-nvl-4", "gb300-nvl-4"])
def test_q_x_writes_real_tags_and_the_facts_q_prints(tmp_path: Path, profile: str) -> None:
    from nodecert_node.parse import smi
    sim = Sim(tmp_path, profile)
    xml = sim("nvidia-smi", "-q", "-x").stdout
    assert xml_paths(xml) - REAL_XML_PATHS == set()
    _, from_text = smi.parse_q(sim("nvidia-smi", "-q").stdout)
    _, from_xml = smi.parse_q_xml(xml)
    assert from_xml[0]["mig_current"] == "Disabled" and from_xml[0]["pcie_gen_max"]
    for a, b in zip(from_text, from_xml, strict=True):
        assert {k: v for k, v in a.items() if k not in LIVE} == \
            {k: v for k, v in b.items() if k not in LIVE}


def test_new_faults_on_a_running_host_keep_its_boot_time(tmp_path: Path) -> None:
    """`lab faults` rewrites a host's hardware whole (faults replace faults), but the
    host did not reboot: its uptime and its kernel log's times stay."""
    from nodecert.lab.config import LabConfig
    from nodecert.lab.hostroot import install_hardware
    cfg = LabConfig(root=tmp_path)
    root = cfg.host_dir(1) / "root"
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    hw = cfg.hardware_file(1)
    install_hardware(cfg, 1, "h1", "h200-sxm-8", [], seed="seed")
    booted = json.loads(hw.read_text())
    booted["boot_time"] -= 3600  # up an hour
    hw.write_text(json.dumps(booted))
    install_hardware(cfg, 1, "h1", "h200-sxm-8", [Fault("h1", "xid", {"gpu": 2, "code": 79})],
                     seed="seed", keep_boot=True)
    after = json.loads(hw.read_text())
    assert after["boot_time"] == booted["boot_time"] and after["faults"]
    install_hardware(cfg, 1, "h1", "h200-sxm-8", [], seed="seed")  # a boot (up, reset): now
    assert json.loads(hw.read_text())["boot_time"] > booted["boot_time"] + 3000


def test_the_simulated_nccl_drops_gdrdma_where_a_rank_has_no_peermem(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL_DEBUG=INFO's channels say "/GDRDMA" only where every rank has a GPUDirect RDMA
    path: a host with the peermem_missing fault makes them plain "via NET/IB/k", and the
    parser then reads gdrdma False."""
    monkeypatch.syspath_prepend(str(REPO / "src" / "nodecert" / "lab" / "simhw"))
    from nodecert_simhw import nccl

    from nodecert_node.parse import toolnotes

    def rank(host: str, gdr: bool) -> dict[str, Any]:
        return {"host": host, "pid": 7, "buses": ["0000:18:00"], "rails": [400.0, 400.0],
                "mnnvl": None, "gdr": gdr}
    for gdr, want in ((True, True), (False, False)):
        nccl._info_lines([rank("h1", True), rank("h2", gdr)], "2.27.7+cuda13.0")
        got = toolnotes.nccl_notes(capsys.readouterr().out)
        assert got["gdrdma"] is want and got["network"] == "IB"


def test_dcgm_fabric_manager_on_a_rack_tray_reads_the_switch_trays_fabric(
        tmp_path: Path) -> None:
    """A GB200 compute tray runs no Fabric Manager (the NVLink switch trays manage the
    fabric): its diag passes the Fabric Manager test; a non-rack NVSwitch host without
    Fabric Manager fails it."""
    stack = {k: v for k, v in STACK_580.items() if k != "fabric_manager"}
    (tmp_path / "tray").mkdir()
    (tmp_path / "hgx").mkdir()
    tray = Sim(tmp_path / "tray", profile="gb200-nvl-4", installed=stack)
    desc = json.loads(tray.hw.read_text())
    desc["rack"] = {"name": "rack-a1"}
    tray.hw.write_text(json.dumps(desc))
    got = tp.parse_dcgmi(tray("dcgmi", "diag", "-r", "1", check=False).stdout)
    assert got["Fabric Manager"] == "Pass"
    hgx = Sim(tmp_path / "hgx", installed=stack)
    got = tp.parse_dcgmi(hgx("dcgmi", "diag", "-r", "1", check=False).stdout)
    assert got["Fabric Manager"] == "Fail"
