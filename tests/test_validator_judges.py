"""Judges (pure) on passing and failing inputs, the Result type, and check isolation."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from nodecert.profiles import thresholds
from nodecert_node.checks.hardware import judge_inventory, judge_pcie, judge_topology
from nodecert_node.checks.health import judge_gpu_health, judge_xids, load_catalog
from nodecert_node.checks.storage import judge_storage, raw_device_problems, signatures
from nodecert_node.context import Ctx as NodeCtx
from nodecert_node.context import NoGpu
from nodecert_node.contract import EVIDENCE_LIMIT, Evidence, Limits, Plan, Result, Verdict, worst
from nodecert_node.parse import kernel, smi, topo
from nodecert_node.registry import CheckSpec, run_check
from nodecert_node.tools import ToolError, run
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real"


def limits(model: str, **over: Any) -> Limits:
    return Limits(thresholds.resolve(model, cli=over))


def q(name: str) -> tuple[dict[str, str], list[dict[str, Any]], str]:
    raw = (REAL / "nvidia-smi" / name).read_text()
    header, gpus = smi.parse_q(raw)
    return header, gpus, raw


# --- Result ---------------------------------------------------------------------------------

def test_verdict_order_and_worst() -> None:
    assert Verdict.PASS < Verdict.WARN < Verdict.FAIL < Verdict.ERROR
    assert worst([Verdict.WARN, Verdict.PASS, Verdict.FAIL]) is Verdict.FAIL
    assert worst([]) is Verdict.PASS


def test_result_round_trip_and_evidence_digest() -> None:
    big = "x" * (EVIDENCE_LIMIT + 10)
    ev = Evidence.of("tool", "tool --flag", 0, big, 1.23456)
    assert ev.truncated and len(ev.output) == EVIDENCE_LIMIT
    assert ev.sha256 == __import__("hashlib").sha256(big.encode()).hexdigest()
    r = Result("health.gpu", Verdict.FAIL, "bad", value={"n": 1}, unit="x",
               findings=("a", "b"), evidence=(ev,), fault_code="C", remediation="fix",
               duration_s=1.5, simulated=True, facts={"k": [1]})
    back = Result.from_dict(json.loads(json.dumps(r.as_dict())))
    assert back == r
    with pytest.raises(ValueError, match="schema"):
        Result.from_dict({"check": "x"})
    with pytest.raises(AttributeError):
        r.verdict = Verdict.PASS  # type: ignore[misc]  # frozen


# --- run_check: a crash or a hung tool never aborts anything --------------------------------

def _crash(ctx: NodeCtx) -> Result:
    raise KeyError("boom")


def _hang(ctx: NodeCtx) -> Result:
    run(["python3", "-c", "import signal; signal.pause()"], timeout=0.5, name="hung tool")
    raise AssertionError("unreachable")


def _nogpu(ctx: NodeCtx) -> Result:
    raise NoGpu("no NVIDIA GPU on this node", [], "NC-NO-GPU", "seat the GPUs")


@pytest.fixture
def doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three test checks, registered for this test only (the registry is shared)."""
    from nodecert_node import registry
    registry.discover()
    for name, fn in (("test.crash", _crash), ("test.hang", _hang), ("test.nogpu", _nogpu)):
        monkeypatch.setitem(registry.REGISTRY, name,
                            CheckSpec(name, fn, "test double", 0, (), (), __name__))


@pytest.mark.usefixtures("doubles")
def test_crash_timeout_and_no_gpu_become_verdicts() -> None:
    ctx = NodeCtx(Plan(run_id="t", host="t", suite="quick", checks=[]))
    crash = run_check("test.crash", ctx)
    assert crash.verdict is Verdict.ERROR and crash.fault_code == "NC-CHECK-CRASH"
    assert "KeyError: 'boom'" in crash.summary and "Traceback" in crash.evidence[0].output
    start = time.monotonic()
    hang = run_check("test.hang", ctx)
    assert time.monotonic() - start < 10
    assert hang.verdict is Verdict.ERROR and hang.fault_code == "NC-TOOL-TIMEOUT"
    assert "killed after 0.5 s" in hang.evidence[0].output
    nogpu = run_check("test.nogpu", ctx)
    assert nogpu.verdict is Verdict.FAIL and nogpu.fault_code == "NC-NO-GPU"
    assert run_check("test.nope", ctx).fault_code == "NC-UNKNOWN-CHECK"


def test_tool_errors_name_the_tool() -> None:
    with pytest.raises(ToolError, match="not installed") as missing:
        run(["nodecert-no-such-tool"], timeout=5)
    assert missing.value.kind == "missing"
    with pytest.raises(ToolError, match="exited with status 3: oops") as failed:
        run(["sh", "-c", "echo oops; exit 3"], timeout=5)
    assert failed.value.evidence is not None and failed.value.evidence.returncode == 3


# --- hardware judges ------------------------------------------------------------------------

def inv_facts(gpus: list[dict[str, Any]], cores: int = 112, ram: float = 2048.0,
              nvme: int = 8) -> dict[str, Any]:
    return {"gpus": gpus, "pci_gpus": [g["bus_id"] for g in gpus],
            "cpu": {"model": "Intel(R) Xeon(R) Platinum 8468", "cores": cores},
            "dimms": {"dimms": 32, "empty_slots": 0, "total_gb": ram},
            "dmi": {"system_serial": "HSR8X04", "baseboard_serial": "", "system_uuid": "u"},
            "nvme": [{"name": f"nvme{i}n1", "serial": f"S{i}", "model": "m",
                      "size_bytes": 3_840_755_982_336, "tran": "nvme"} for i in range(nvme)],
            "nic_macs": ["02:00:00:00:00:01"]}


def test_inventory_on_a_real_8x_h100() -> None:
    _, gpus, _ = q("h100-sxm-8gpu-565.57.01-q.txt")
    spec = {"gpu_model": "H100-SXM", "gpu_count": 8, "cpu_cores": 96, "ram_gb": 2048,
            "nvme_count": 8, "nvme_min_gb": 3840}
    ok = judge_inventory(inv_facts(gpus), spec, limits("H100-SXM"))
    assert ok.verdict is Verdict.PASS, ok.findings
    ident = ok.facts["identity"]
    assert ident["system_serial"] == "HSR8X04" and len(ident["gpus"]) == 8
    assert ident["gpus"][0]["serial"] == "1654423001593"
    # One GPU short, on a node ordered as H200: both named.
    bad = judge_inventory(inv_facts(gpus[:7]), dict(spec, gpu_model="H200-SXM"),
                          limits("H200-SXM"))
    assert bad.verdict is Verdict.FAIL
    assert any("7 GPUs visible to the driver, the spec orders 8" in f for f in bad.findings)
    assert any("model (the spec orders H200-SXM): needs one of NVIDIA H200, measured "
               "'NVIDIA H100 80GB HBM3'" in f for f in bad.findings)
    # Fewer cores than ordered is FAIL; the per-GPU rule of thumb alone is WARN.
    few = judge_inventory(inv_facts(gpus, cores=48), spec, limits("H100-SXM"))
    assert few.verdict is Verdict.FAIL and "48 CPU cores, the spec orders 96" in few.summary
    thumb = judge_inventory(inv_facts(gpus, cores=48, ram=512),
                            dict(spec, cpu_cores=48, ram_gb=512), limits("H100-SXM"))
    assert thumb.verdict is Verdict.WARN
    assert set(thumb.findings) >= {
        "CPU cores per GPU (sizing rule): needs >= 8 cores, measured 6 cores",
        "RAM per GPU (sizing rule): needs >= 128 GB, measured 64 GB"}
    gone = dict(inv_facts(gpus), pci_gpus=[g["bus_id"] for g in gpus] + ["0000:ff:00.0"])
    lost = judge_inventory(gone, spec, limits("H100-SXM"))
    assert any("not initialised: 0000:ff:00.0" in f for f in lost.findings)
    small = judge_inventory(inv_facts(gpus, nvme=7), spec, limits("H100-SXM"))
    assert "7 NVMe drives, the spec orders 8" in small.summary


def test_pcie_idle_power_management_is_not_a_failure() -> None:
    # A real L40S at P8 reports Gen1 of Gen4: link power management, not a fault.
    _, gpus, _ = q("l40s-1gpu-550.127.05-q.txt")
    idle = judge_pcie(gpus, [], limits("L40S"))
    assert idle.verdict is Verdict.PASS and "normal link power management" in idle.findings[0]
    # The same link at Gen1 while busy (P0) is degraded.
    busy = judge_pcie([dict(gpus[0], pstate="P0")], [], limits("L40S"))
    assert busy.verdict is Verdict.FAIL and "Gen1 of Gen4 in P0" in busy.summary
    # A real L4 at x8 of x16 while idle: cannot be confirmed at idle -> WARN, not FAIL.
    _, l4, _ = q("l4-1gpu-550.90.07-q.txt")
    assert judge_pcie(l4, [], limits("L40S")).verdict is Verdict.WARN
    # A slot that cannot reach the model's generation fails whatever the state.
    _, h100, _ = q("h100-sxm-8gpu-565.57.01-q.txt")
    gen4 = judge_pcie([dict(h100[0], pcie_gen_max=4, pcie_gen_current=4)], [],
                      limits("H100-SXM"))
    assert gen4.verdict is Verdict.FAIL and gen4.summary == (
        "GPU 0000:18:00.0 maximum link generation (the slot, riser or BIOS limits it): "
        "needs >= 5, measured 4")
    assert judge_pcie(h100, [], limits("H100-SXM")).verdict is Verdict.PASS


def test_pcie_nics() -> None:
    base = {"slot": "0000:1a:00.0", "class_id": "0207", "class": "Infiniband controller",
            "cap_gen": 5, "cap_width": 16, "sta_gen": 5, "sta_width": 16, "sta_flags": []}
    cx7 = dict(base, name="Mellanox ConnectX-7", vendor_id="15b3")
    assert judge_pcie([], [cx7], limits("H200-SXM")).verdict is Verdict.PASS
    degraded = judge_pcie([], [dict(cx7, sta_width=8)], limits("H200-SXM"))
    assert degraded.verdict is Verdict.FAIL and "x8 of x16" in degraded.summary
    other = dict(base, name="Intel I350", vendor_id="8086", sta_gen=2, cap_gen=3)
    assert judge_pcie([], [other], limits("H200-SXM")).verdict is Verdict.WARN


def test_topology_on_real_matrices() -> None:
    della = topo.parse_topo_matrix(
        (REAL / "topo/h100-sxm-8gpu-6nic-della-topo-m-blank-cpu-affinity.txt").read_text())
    links = {i: [26.562] * 18 for i in range(8)}
    ok = judge_topology({"matrix": della, "nvlink": links}, limits("H100-SXM"))
    assert ok.verdict is Verdict.PASS and ok.value["pairs_nvlink"] == 28
    # A DGX-1 PCIe view: every pair on PCIe.
    pcie = topo.parse_topo_matrix(
        (REAL / "topo/dgx1-v100-8gpu-4nic-topo-mp-pcie-view.txt").read_text())
    bad = judge_topology({"matrix": pcie, "nvlink": {}}, limits("H100-SXM"))
    assert bad.verdict is Verdict.FAIL
    assert "GPU0<->GPU1 talk over PCIe (PIX), expected NV18" in bad.findings
    # A real A100 whose links are all inactive; one link down; a slow link.
    inactive = topo.parse_nvlink_status(
        (REAL / "nvlink/a100-sxm4-80gb-gpu6-nvlink-s-all-links-inactive.txt").read_text())
    r = judge_topology({"matrix": {}, "nvlink": inactive}, limits("A100-SXM4-80GB"))
    assert r.verdict is Verdict.FAIL and "all links are inactive" in r.summary
    one: dict[int, Any] = {**links, 5: [26.562] * 3 + [None] + [26.562] * 14}
    r = judge_topology({"matrix": della, "nvlink": one}, limits("H100-SXM"))
    assert r.summary.startswith("GPU5: NVLink 3 inactive (17 of 18 up)")
    # NVSwitch fabric not set up / Fabric Manager down.
    gpus = [{"bus_id": "0000:19:00.0", "fabric_state": "In Progress", "fabric_status": None}]
    r = judge_topology({"matrix": della, "nvlink": links, "nvswitches": 4, "gpus": gpus,
                        "fabricmanager": "failed"}, limits("H100-SXM"))
    assert {"nvidia-fabricmanager service is failed, expected active"} <= set(r.findings)
    assert any("fabric state In Progress" in f for f in r.findings)
    # PCIe-only models expect no NVLink at all.
    assert judge_topology({}, limits("L40S")).verdict is Verdict.PASS


# --- health judges --------------------------------------------------------------------------

def test_gpu_health_on_real_outputs() -> None:
    for name in ("h200-1gpu-590.48.01-q-idle.txt", "h100-sxm-8gpu-565.57.01-q.txt",
                 "l40s-1gpu-550.127.05-q.txt"):
        h, g, raw = q(name)
        res = judge_gpu_health(h, g, raw, limits("H100-SXM"))
        assert res.verdict is Verdict.PASS, (name, res.findings)
    # Real failures: pending row remap (A10); HW slowdown + power brake at rest (H100).
    h, g, raw = q("a10-1gpu-535.129.03-q.txt")
    a10 = judge_gpu_health(h, g, raw, limits("L40S"))
    assert a10.verdict is Verdict.FAIL and "row remapping pending" in a10.summary
    h, g, raw = q("h100-80gb-hbm3-8gpu-535.161.08-q.txt")
    brake = judge_gpu_health(h, g, raw, limits("H100-SXM"))
    assert brake.verdict is Verdict.FAIL
    assert "clocks held down by HW Slowdown, HW Power Brake Slowdown at rest" in brake.summary


@pytest.mark.parametrize(("change", "verdict", "words"), [
    ({"ecc_current": False}, Verdict.FAIL, "ECC is disabled"),
    ({"ecc_volatile_uncorrectable": 2}, Verdict.FAIL, "2 uncorrectable ECC errors since"),
    ({"ecc_aggregate_uncorrectable": 3}, Verdict.WARN, "in the GPU's lifetime"),
    ({"remap_failure": True}, Verdict.FAIL, "row remapping failed"),
    ({"retired_sbe": 50, "retired_dbe": 11}, Verdict.FAIL,
     "retired pages: needs <= 60 pages, measured 61 pages"),
    ({"retired_pending": True}, Verdict.FAIL, "page retirement pending"),
    ({"persistence_mode": False}, Verdict.WARN, "persistence mode is off"),
    ({"recovery_action": "Reset"}, Verdict.FAIL, "recovery action 'Reset'"),
    ({"clock_reasons": {"sw_thermal_slowdown": True}}, Verdict.WARN, "SW Thermal Slowdown"),
])
def test_gpu_health_each_fault(change: dict[str, Any], verdict: Verdict, words: str) -> None:
    h, g, raw = q("h200-1gpu-590.48.01-q-idle.txt")
    res = judge_gpu_health(h, [dict(g[0], **change)], raw, limits("H200-SXM"))
    assert res.verdict is verdict and words in res.summary, res.summary


def test_gpu_fallen_off_the_bus_in_raw_output() -> None:
    h, g, raw = q("h200-1gpu-590.48.01-q-idle.txt")
    raw += "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error\n"
    res = judge_gpu_health(h, g, raw, limits("H200-SXM"))
    assert res.verdict is Verdict.FAIL and "fallen off the bus" in res.summary


def test_xid_window_and_catalog_on_real_logs() -> None:
    cat = load_catalog()
    assert cat[79]["severity"] == "fatal" and cat[13]["severity"] == "application"
    events = kernel.parse_xids(
        (REAL / "dmesg/h100-dell-xe9680-xid119-gsp-rpc-timeout-dmesg-T.txt").read_text())
    last = max(e["time"] for e in events)
    gpus = [{"bus_id": "0000:9b:00.0"}]
    recent = judge_xids(events, cat, gpus, now=last + 3600, window_h=24,
                        limits=limits("H100-SXM"))
    assert recent.verdict is Verdict.FAIL
    assert recent.summary.startswith("Xid 119 (GSP_RPC_TIMEOUT) on GPU0 0000:9b:00.0, 5x")
    old = judge_xids(events, cat, gpus, now=last + 30 * 86400, window_h=24,
                     limits=limits("H100-SXM"))
    assert old.verdict is Verdict.WARN and "before the window" in old.summary
    app = kernel.parse_xids(
        (REAL / "dmesg/xid31-mmu-fault-xid109-dmesg-ctime.txt").read_text())
    only31 = [e for e in app if e["xid"] == 31]
    r = judge_xids(only31, cat, [], now=only31[0]["time"] + 60, window_h=24,
                   limits=limits("H100-SXM"))
    assert r.verdict is Verdict.PASS and "application" in r.findings[0]
    assert judge_xids([], cat, [], now=0, window_h=24, limits=limits("H100-SXM")).verdict \
        is Verdict.PASS


# --- storage -----------------------------------------------------------------------------

def test_signatures() -> None:
    blank = bytearray(70000)
    assert signatures(bytes(blank)) == []
    ext4 = bytearray(blank)
    ext4[1080:1082] = b"\x53\xef"
    assert signatures(bytes(ext4)) == ["ext2/3/4 filesystem"]
    gpt = bytearray(blank)
    gpt[512:520] = b"EFI PART"
    gpt[446] = 0xEE
    gpt[510:512] = b"\x55\xaa"
    assert signatures(bytes(gpt)) == ["GPT partition table", "MBR partition table"]
    xfs = bytearray(blank)
    xfs[0:4] = b"XFSB"
    assert signatures(bytes(xfs)) == ["XFS filesystem"]


def test_raw_device_refusals() -> None:
    empty = {"is_block": True, "mounts": [], "partitions": [], "holders": [], "swap": [],
             "signatures": [], "blkid": "", "nonzero": False}
    assert raw_device_problems("/dev/nvme1n1", ["/dev/nvme1n1"], empty) == []
    assert "not listed in allow_raw_devices" in raw_device_problems("/dev/nvme1n1", [],
                                                                     empty)[0]
    for key, value, words in (("mounts", ["/data"], "mounted at /data"),
                              ("partitions", ["nvme1n1p1"], "has partitions"),
                              ("holders", ["md0"], "is in use by md0"),
                              ("swap", ["/dev/nvme1n1"], "is active swap"),
                              ("signatures", ["XFS filesystem"], "carries XFS filesystem"),
                              ("blkid", "TYPE=ext4", "blkid finds TYPE=ext4"),
                              ("nonzero", True, "holds data")):
        got = raw_device_problems("/dev/nvme1n1", ["/dev/nvme1n1"], dict(empty, **{key: value}))
        assert len(got) == 1 and words in got[0], (key, got)
    assert raw_device_problems("/dev/x", ["/dev/x"], {"is_block": False}) == [
        "/dev/x is not a block device"]


def test_storage_judge_rated_figures_and_floors() -> None:
    measured = {"/scratch": {"seq_read_mbps": 5000.0, "seq_write_mbps": 3000.0,
                             "rand_read_iops": 900000.0, "checkpoint_mbps": 2000.0}}
    lim = limits("H200-SXM")
    assert judge_storage(measured, lim, {}).verdict is Verdict.PASS
    # The spec's datasheet figure: 85% of 7000 MB/s = 5950 > 5000 measured.
    rated = judge_storage(measured, lim, {"nvme_rated_seq_read_mbps": 7000})
    assert rated.verdict is Verdict.FAIL
    assert rated.thresholds["seq_read_mbps"].value == 5950.0
    assert "inventory nvme_rated_seq_read_mbps=7000 x 0.85" in rated.thresholds[
        "seq_read_mbps"].origin
    slow = judge_storage({"/s": dict(measured["/scratch"], seq_write_mbps=8.0)}, lim, {})
    assert slow.verdict is Verdict.FAIL
    assert "/s seq write mbps: needs >= 500 MB/s, measured 8 MB/s" in slow.summary


def test_local_nvme_scratch_is_held_to_the_sourced_floor() -> None:
    measured = {"/scratch": {"seq_read_mbps": 5000.0, "seq_write_mbps": 3000.0,
                             "rand_read_iops": 900000.0, "checkpoint_mbps": 2000.0}}
    lim = limits("H200-SXM")
    on_nvme = judge_storage(measured, lim, {}, {"/scratch": "nvme0n1"})
    assert on_nvme.verdict is Verdict.FAIL
    assert "/scratch (local NVMe nvme0n1) seq read: needs >= 7000 MB/s, measured 5000 MB/s" \
        in on_nvme.summary
    t = on_nvme.thresholds["local_nvme_seq_read_mbps"]
    assert t.source.startswith("Samsung PM1743") and "Gen4 x4 enterprise drive" in t.source
    # a network or virtual filesystem is not local NVMe; the order's rated figure wins
    assert judge_storage(measured, lim, {}, {"/scratch": None}).verdict is Verdict.PASS
    assert judge_storage(dict(measured, **{"/scratch": dict(measured["/scratch"],
                                                             seq_read_mbps=6500.0)}),
                         lim, {"nvme_rated_seq_read_mbps": 7000},
                         {"/scratch": "nvme0n1"}).verdict is Verdict.PASS


# --- fabric judges on real outputs ------------------------------------------------------

def real_bench(rel: str) -> str:
    return (REAL / rel).read_text()


def test_nccl_judge_on_real_logs() -> None:
    from nodecert_node.checks.fabric import judge_nccl
    from nodecert_node.parse import bench
    h200 = bench.parse_nccl(
        real_bench("nccl-tests/h200-azure-8gpu-all-reduce-8g-single-size.log"))
    ok = judge_nccl(h200, 8, limits("H200-SXM"))
    assert ok.verdict is Verdict.PASS and ok.value["busbw_gbs"] == 476.96
    assert ok.thresholds["fabric.allreduce_busbw_gbs_min"].value == 440
    # The real 8x A100 log meets the A100 floor (210) but not an H100's (440).
    a100 = bench.parse_nccl(
        real_bench("nccl-tests/a100-sxm4-40gb-8gpu-all-reduce-old-format.log"))
    assert judge_nccl(a100, 8, limits("A100-SXM4-80GB")).verdict is Verdict.WARN  # -c 0
    low = judge_nccl(a100, 8, limits("H100-SXM"))
    assert low.verdict is Verdict.FAIL
    assert "bus bandwidth at 8589934592 B: needs >= 440 GB/s, measured 235.3 GB/s" in \
        low.findings
    busy = bench.parse_nccl(real_bench("nccl-tests/gh200-2node-8rank-device-busy-failure.log"))
    r = judge_nccl(busy, 8, limits("H100-SXM"))
    assert r.verdict is Verdict.FAIL and "busy or unavailable" in r.summary
    wrong = dict(h200, rows=[dict(h200["rows"][0], wrong=3)])
    assert "3 wrong values at 8589934592 B" in judge_nccl(wrong, 8, limits("H200-SXM")).summary
    fewer = judge_nccl(dict(h200, ranks=4), 8, limits("H200-SXM"))
    assert "ran on 4 of the node's 8 GPUs" in fewer.summary


def test_bandwidth_judge_on_real_matrices() -> None:
    from nodecert_node.checks.fabric import judge_bandwidth
    from nodecert_node.parse import bench
    h2d = bench.parse_nvbandwidth(
        real_bench("nvbandwidth/h100-sxm-8gpu-h2d-ce-v0.10-drv595.txt"))
    d2d = bench.parse_nvbandwidth(
        real_bench("nvbandwidth/h100-sxm-8gpu-d2d-read-ce-v0.10-drv595.txt"))
    both = {"version": "v0.10.0", "tests": {**h2d["tests"], **d2d["tests"]}}
    ok = judge_bandwidth(both, limits("H100-SXM"))
    assert ok.verdict is Verdict.PASS, ok.findings
    # One slow GPU among peers, above the absolute floor: still the outlier.
    slow = {"tests": {"host_to_device_memcpy_ce": {"matrix": {0: {**h2d["tests"][
        "host_to_device_memcpy_ce"]["matrix"][0], 5: 30.0}}, "sum": None}}}
    r = judge_bandwidth(slow, limits("A100-SXM4-80GB"))  # floor 22 GB/s
    assert r.verdict is Verdict.FAIL and r.summary == (
        "GPU5 host->GPU 30 GB/s as a fraction of its peers' median (55.36 GB/s): needs >= "
        "0.8 ratio, measured 0.542 ratio")
    # The older Azure H100 (v0.4, ~371 GB/s per pair) passes NVLink4's 350 floor.
    az = bench.parse_nvbandwidth(
        real_bench("nvbandwidth/h100-azure-ndv5-8gpu-d2d-read-ce-v0.4.txt"))
    assert judge_bandwidth(az, limits("H100-SXM")).verdict is Verdict.PASS


def test_bandwidth_judge_waived_case_is_not_measured() -> None:
    """The GPU<->GPU case planned on an NVLink node and waived by nvbandwidth is not a
    pass on the host<->GPU figures alone; nothing measured at all is an ERROR."""
    from nodecert_node.checks.fabric import judge_bandwidth
    from nodecert_node.parse import bench
    real = real_bench("nvbandwidth/h100-sxm-8gpu-h2d-ce-v0.10-drv595.txt")
    head, note = real.split("NOTE:", 1)
    planned = ["host_to_device_memcpy_ce", "device_to_device_memcpy_read_ce"]
    r = judge_bandwidth(bench.parse_nvbandwidth(head + "Waived: \n\nNOTE:" + note),
                        limits("H100-SXM"), planned)
    assert r.verdict is Verdict.WARN and r.fault_code == "NC-BANDWIDTH-NOT-MEASURED"
    assert r.summary.startswith("copy bandwidth not measured: "
                                "device_to_device_memcpy_read_ce waived by nvbandwidth")
    assert r.value["not_measured"] and r.value["host_to_device_memcpy_ce"]
    # Run as planned (both cases measured): no warning.
    d2d = real_bench("nvbandwidth/h100-sxm-8gpu-d2d-read-ce-v0.10-drv595.txt")
    both = bench.parse_nvbandwidth(head + d2d.split("\n\n", 2)[2])
    assert judge_bandwidth(both, limits("H100-SXM"), planned).verdict is Verdict.PASS
    nothing = judge_bandwidth(bench.parse_nvbandwidth(
        "nvbandwidth Version: v0.10.0\n\nWaived: \nWaived: \n"), limits("H100-SXM"),
        planned)
    assert nothing.verdict is Verdict.ERROR and "measured nothing" in nothing.summary


def test_dcgm_judge() -> None:
    from nodecert_node.checks.dcgm import judge_dcgm
    from nodecert_node.parse import dcgmi
    real = dcgmi.parse_dcgmi_diag(real_bench("dcgmi/a100-sxm4-80gb-p4de-8gpu-diag-r2-pass.txt"))
    assert judge_dcgm(real, 2).verdict is Verdict.PASS
    bad = dict(real, tests={**real["tests"], "GPU Memory": "Fail - GPU: 3"})
    r = judge_dcgm(bad, 2)
    assert r.verdict is Verdict.FAIL and r.summary == "DCGM GPU Memory: Fail - GPU: 3"


# --- load judges ----------------------------------------------------------------------------

def test_burnin_judge_on_the_real_gpu_burn_log() -> None:
    from nodecert_node.checks.load import judge_burnin
    from nodecert_node.parse import bench
    real = bench.parse_gpu_burn(real_bench("gpu-burn/rtx-a400-500s-ok.txt"))
    r = judge_burnin(real, limits("L40S"))
    assert r.verdict is Verdict.PASS and r.value["gflops_per_gpu"] == [1772.0]
    faulty = dict(real, verdicts={0: "FAULTY"})
    assert "GPU0: results differ from the reference" in judge_burnin(
        faulty, limits("L40S")).summary


def test_soak_judge_on_real_samples_and_faults() -> None:
    from nodecert_node.checks.load import judge_soak
    from nodecert_node.parse import smi as smi_parse
    rows = [smi_parse.parse_query_csv(real_bench(f"nvidia-smi/{n}"))[0] for n in (
        "h100-80gb-hbm3-1gpu-590.48.01-query-gpu-all-fields-under-load.csv",
        "l40s-1gpu-595.80-query-gpu-all-fields-under-load.csv")]
    for row in rows:  # real GPUs under load: 26 C and 34 C from their limits, no bits
        r = judge_soak([row], {0: None}, limits("H100-SXM"))
        assert r.verdict is Verdict.PASS, r.findings
    base = dict(rows[0])
    hot = dict(base, **{"temperature.gpu.tlimit": "1"})
    r = judge_soak([base, hot], {0: None}, limits("H100-SXM"))
    assert r.verdict is Verdict.FAIL and r.summary == (
        "GPU0 headroom to its max operating temperature (at 59 C, sample 1): needs >= 2 C, "
        "measured 1 C")
    assert r.facts["series"]["0"][1][0] == 1  # the time series is kept for the report
    brake = dict(base, **{"clocks_event_reasons.active": "0x0000000000000088"})
    r = judge_soak([brake], {0: None}, limits("H100-SXM"))
    assert r.verdict is Verdict.FAIL
    clock = base["clocks.current.sm"].split()[0]
    assert r.findings == (f"GPU0: HW Slowdown under load (sample 0, 59 C, clock {clock} MHz)",
                          f"GPU0: HW Power Brake Slowdown under load (sample 0, 59 C, clock "
                          f"{clock} MHz)")
    sw = dict(base, **{"clocks_event_reasons.active": "0x0000000000000020"})
    assert judge_soak([sw], {0: None}, limits("H100-SXM")).verdict is Verdict.WARN
    # Pre-Hopper GPUs give an absolute limit instead of a T.Limit margin.
    ampere = dict(base, **{"temperature.gpu.tlimit": "", "temperature.gpu": "84"})
    assert judge_soak([ampere], {0: 85}, limits("A100-SXM4-80GB")).verdict is Verdict.FAIL
    assert judge_soak([], {}, limits("H100-SXM")).verdict is Verdict.FAIL


def test_a_gb200_soak_judges_temperature_over_consecutive_samples() -> None:
    """On Grace-Blackwell trays one sample beyond the headroom is a transient (WARN);
    three in a row are a failure. Elsewhere every sample counts, as before."""
    from nodecert_node.checks.load import judge_soak
    from nodecert_node.parse import smi as smi_parse
    base = smi_parse.parse_query_csv(real_bench(
        "nvidia-smi/h100-80gb-hbm3-1gpu-590.48.01-query-gpu-all-fields-under-load.csv"))[0]
    hot = dict(base, **{"temperature.gpu.tlimit": "1"})
    gb = limits("GB200")
    assert gb.value("soak.sustained_samples_min") == 3
    spike = judge_soak([base, hot, hot, base, base], {0: None}, gb)
    assert spike.verdict is Verdict.WARN
    assert spike.summary == ("GPU0 headroom to its max operating temperature (at 59 C, sample "
                             "1): needs >= 2 C, measured 1 C: a transient of 2 sample(s), "
                             "under the 3 consecutive samples that make a failure")
    held = judge_soak([base, hot, hot, hot, base], {0: None}, gb)
    assert held.verdict is Verdict.FAIL
    assert held.summary.endswith("sample 1): needs >= 2 C, measured 1 C; held for 3 "
                                 "consecutive samples")
    tail = judge_soak([base, base, hot], {0: None}, gb)  # cut short by the end of the soak
    assert tail.verdict is Verdict.WARN and "a transient of 1 sample(s)" in tail.summary
    assert judge_soak([base, hot], {0: None}, limits("H100-SXM")).verdict is Verdict.FAIL
