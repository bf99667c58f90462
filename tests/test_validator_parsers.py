"""Every real fixture the validators read, through the validators' own parsers.

Values asserted here were read off the recorded files (tests/fixtures/real,
SOURCES.md names where each came from).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.parse import ParseError, bench, dcgmi, fio, kernel, pci, smi, system, topo
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real"


def text(rel: str) -> str:
    return (REAL / rel).read_text()


# file, driver, GPUs, name, serial, MiB, ECC on, volatile uncorrectable, remap pending,
# PCIe max gen, current width, pstate, headroom C, active clock-event reasons, fabric state
Q_TEXT = [
    ("a10-1gpu-535.129.03-q.txt", "535.129.03", 1, "NVIDIA A10", "1324521052681", 23028,
     True, 0, True, 4, 16, "P8", None, ["gpu_idle"], None),
    ("a100-sxm4-80gb-4gpu-555.42.02-q.txt", "555.42.02", 4, "NVIDIA A100-SXM4-80GB",
     "1320222043305", 81920, True, 0, False, 4, 16, "P0", 60, ["gpu_idle"], None),
    ("a40-10gpu-550.127.05-q.txt", "550.127.05", 10, "NVIDIA A40", "1322221017584", 46068,
     True, 0, False, 4, 16, "P8", None, ["sw_power_cap"], None),
    ("h100-80gb-hbm3-1gpu-590.48.01-q-under-gpu-burn-load.txt", "590.48.01", 1,
     "NVIDIA H100 80GB HBM3", "0000000000000", 81559, True, 0, False, 5, 16, "P0", 26, [],
     "Completed"),
    ("h100-80gb-hbm3-8gpu-535.161.08-q.txt", "535.161.08", 8, "NVIDIA H100 80GB HBM3",
     "1650124031592", 81559, True, 0, False, 5, 16, "P0", None,
     ["hw_power_brake_slowdown", "hw_slowdown"], "Completed"),
    ("h100-80gb-hbm3-mig-4-instances-590.48.01-q-idle.txt", "590.48.01", 1,
     "NVIDIA H100 80GB HBM3", "0000000000000", 81559, True, 0, None, 5, 16, "P0", None,
     ["gpu_idle"], "Completed"),
    ("h100-nvl-2gpu-550.54.14-q.txt", "550.54.14", 2, "NVIDIA H100 NVL", "1650724004565",
     95830, True, 0, False, 5, 16, "P0", None, ["gpu_idle"], None),
    ("h100-sxm-1gpu-545.23.08-a-as-pasted.txt", "545.23.08", 1, "NVIDIA H100 80GB HBM3",
     "1654123038646", 81559, True, 0, False, 5, 16, "P0", None, ["gpu_idle"], "Completed"),
    ("h100-sxm-8gpu-565.57.01-q.txt", "565.57.01", 8, "NVIDIA H100 80GB HBM3",
     "1654423001593", 81559, True, 0, False, 5, 16, "P0", None, ["gpu_idle"], "Completed"),
    ("h200-1gpu-590.48.01-q-idle.txt", "590.48.01", 1, "NVIDIA H200", "0000000000000",
     143771, True, 0, False, 5, 16, "P0", 59, ["gpu_idle"], "Completed"),
    ("h200-mig-5-instances-590.48.01-q-under-load.txt", "590.48.01", 1, "NVIDIA H200",
     "0000000000000", 143771, True, 0, None, 5, 16, "P0", 46, [], "Completed"),
    ("l4-1gpu-550.90.07-q.txt", "550.90.07", 1, "NVIDIA L4", "1653723016068", 23034, True, 0,
     False, 4, 8, "P8", None, ["gpu_idle"], None),
    ("l40s-1gpu-550.127.05-q.txt", "550.127.05", 1, "NVIDIA L40S", "1323623029179", 46068,
     True, 0, False, 4, 16, "P8", None, ["gpu_idle"], None),
    ("l40s-1gpu-595.80-q-under-load.txt", "595.80", 1, "NVIDIA L40S", "0000000000000", 46068,
     True, 0, False, 4, 16, "P0", None, [], None),
]


@pytest.mark.parametrize(("name", "driver", "n", "product", "serial", "mib", "ecc", "vu",
                          "remap", "gen", "width", "pstate", "headroom", "reasons", "fabric"),
                         Q_TEXT)
def test_nvidia_smi_q_text(name: str, driver: str, n: int, product: str, serial: str, mib: int,
                           ecc: bool, vu: int, remap: bool | None, gen: int, width: int,
                           pstate: str, headroom: int | None, reasons: list[str],
                           fabric: str | None) -> None:
    header, gpus = smi.parse_q(text(f"nvidia-smi/{name}"))
    g = gpus[0]
    assert header["Driver Version"] == driver and len(gpus) == n
    assert (g["name"], g["serial"], g["memory_total_mib"]) == (product, serial, mib)
    assert (g["ecc_current"], g["ecc_volatile_uncorrectable"], g["remap_pending"]) == (
        ecc, vu, remap)
    assert (g["pcie_gen_max"], g["pcie_width_current"], g["pstate"]) == (gen, width, pstate)
    if headroom is not None:
        assert g["temp_headroom"] == headroom
    assert sorted(k for k, v in g["clock_reasons"].items() if v) == reasons
    assert g["fabric_state"] == fabric
    assert g["uuid"] and g["uuid"].startswith("GPU-")


def test_q_text_real_failure_cases() -> None:
    # A real A10 with 4 uncorrectable remapped rows still pending a reset.
    g = smi.parse_q(text("nvidia-smi/a10-1gpu-535.129.03-q.txt"))[1][0]
    assert (g["remap_uncorrectable"], g["remap_pending"], g["remap_failure"]) == (4, True, False)
    # A -q cut off after the first GPU of eight is refused, not read as a 1-GPU node.
    with pytest.raises(ParseError, match="8 attached GPUs but 1"):
        smi.parse_q(text("nvidia-smi/h100-80gb-hbm3-8gpu-535.183.01-q-TRUNCATED-invalid.txt"))
    # -q -d PAGE_RETIREMENT: only the retired-pages block per GPU.
    _, gpus = smi.parse_q(text("nvidia-smi/azure-8gpu-535.86.10-q-d-page-retirement.txt"))
    assert len(gpus) == 8 and gpus[0]["bus_id"] == "0001:00:00.0"
    assert {(g["retired_sbe"], g["retired_dbe"], g["retired_pending"]) for g in gpus} == {
        (0, 0, False)}
    with pytest.raises(ParseError):
        smi.parse_q("Mon Jan 1 00:00:00 2024\n+------+\n| NVIDIA-SMI 550 |\n")


@pytest.mark.parametrize(("name", "driver", "product", "gen_cur", "width", "max_op"), [
    ("a100-sxm4-80gb-mig-535.54.03-q.xml", "535.54.03", "NVIDIA A100-SXM4-80GB", 4, 16, 85),
    ("a10g-1gpu-515.105.01-q-x-v11.xml", "515.105.01", "NVIDIA A10G", 1, 8, 88),
    ("tesla-t4-1gpu-515.105.01-q-x-v11.xml", "515.105.01", "Tesla T4", 3, 8, 85),
])
def test_nvidia_smi_q_xml(name: str, driver: str, product: str, gen_cur: int, width: int,
                          max_op: int) -> None:
    # v12 uses <clocks_event_reasons>, v11 <clocks_throttle_reasons>: both read, under
    # the keys -q's labels give (the XML's "display_clocks_setting" included).
    raw = text(f"nvidia-smi/{name}")
    header, gpus = smi.parse_q_xml(raw)
    g = gpus[0]
    assert header["Driver Version"] == driver and g["name"] == product
    assert set(g["clock_reasons"]) == set(smi.REASON_LABELS.values())
    assert g["clock_reasons"].get("hw_slowdown") is False
    assert (g["pcie_gen_current"], g["pcie_width_current"]) == (gen_cur, width)
    assert g["ecc_current"] is True and g["ecc_volatile_uncorrectable"] == 0
    assert g["temp_max_operating"] == max_op
    # Without a max operating temperature there is none: the shutdown temperature
    # (gpu_temp_max_threshold) is never taken for it.
    unknown = re.sub(r"<gpu_temp_max_gpu_threshold>[^<]*<", "<gpu_temp_max_gpu_threshold>N/A<",
                     raw)
    g2 = smi.parse_q_xml(unknown)[1][0]
    assert g2["temp_max_operating"] is None and g2["temp_headroom"] is None


def test_xml_errors() -> None:
    with pytest.raises(ParseError, match="well-formed"):
        smi.parse_q_xml("<nvidia_smi_log><gpu>")
    with pytest.raises(ParseError, match="expected <nvidia_smi_log>"):
        smi.parse_q_xml("<other/>")


@pytest.mark.parametrize(("name", "rows", "field", "value"), [
    ("a100-sxm4-80gb-4gpu-query-gpu-580.105.08.csv", 4, "memory.total", "81920 MiB"),
    ("h100-80gb-hbm3-1gpu-590.48.01-query-gpu-all-fields-under-load.csv", 1, "temperature.gpu",
     "59"),
    ("h200-1gpu-590.48.01-query-gpu-all-fields-idle.csv", 1, "temperature.gpu", "28"),
    ("l40s-1gpu-595.80-query-gpu-all-fields-under-load.csv", 1, "temperature.gpu", "54"),
    ("tesla-p100-pcie-query-gpu.csv", 1, "fan.speed", ""),
])
def test_query_gpu_csv(name: str, rows: int, field: str, value: str) -> None:
    out = smi.parse_query_csv(text(f"nvidia-smi/{name}"))
    assert len(out) == rows and out[0][field] == value
    assert smi.csv_number(out[0][field]) == (float(value.split(maxsplit=1)[0]) if value else None)


def test_query_csv_noheader_and_bad_rows() -> None:
    rows = smi.parse_query_csv("0, 45, 350.12\n1, 47, 349.00\n", ["index", "temp", "power"])
    assert rows[1] == {"index": "1", "temp": "47", "power": "349.00"}
    with pytest.raises(ParseError, match="row 1 has 2 values for 3 fields"):
        smi.parse_query_csv("0, 45\n", ["index", "temp", "power"])


# --- lspci ---------------------------------------------------------------------------------

def test_lspci_listings() -> None:
    d = pci.parse_lspci(text("lspci/a100-sxm4-80gb-azure-8gpu-6nvswitch-lspci-nn.txt"))
    gpus = pci.nvidia_gpus(d)
    assert len(gpus) == 8 and gpus[0]["slot"] == "0001:00:00.0"
    assert {g["device_id"] for g in gpus} == {"20b2"}
    assert len(pci.nvswitches(d)) == 6
    gb = pci.parse_lspci(text("lspci/gb200-compute-tray-lspci-D-4gpu-cx7-bf3.txt"))
    assert len(pci.nvidia_gpus(gb)) == 4 and {g["device_id"] for g in pci.nvidia_gpus(gb)} == {
        "2941"}
    sw = pci.parse_lspci(text("lspci/h100-hgx-nvswitch-22a3-lspci-vvv-stanza-EXCERPT.txt"))
    assert [s["device_id"] for s in pci.nvswitches(sw)] == ["22a3"]


def test_lspci_link_status() -> None:
    d = pci.parse_lspci(text("lspci/h100-sxm-dell-xe9680-gpu-19-00-0-lspci-vvv-EXCERPT.txt"))
    g = pci.nvidia_gpus(d)[0]
    assert (g["slot"], g["cap_gen"], g["cap_width"], g["sta_gen"], g["sta_width"]) == (
        "0000:19:00.0", 5, 16, 5, 16)
    path = pci.parse_lspci(text(
        "lspci/h100-sxm-dell-xe9680-gpu0-pcie-path-root-port-pex890xx-switch-nvme-gpu-cx7-"
        "lspci-vvv-EXCERPT.txt"))
    assert len(path) == 10 and len(pci.nics(path)) == 1
    # Real degraded links: two RTX 2060 trained at x8 in x16 slots.
    rtx = pci.parse_lspci(text("lspci/rtx2060-2gpu-lnksta-width-x8-downgraded-grep-gt.txt"))
    assert [(g["cap_width"], g["sta_width"], g["sta_flags"]) for g in pci.nvidia_gpus(rtx)] == [
        (16, 8, ["ok", "downgraded"])] * 2


# --- topology and NVLink -----------------------------------------------------------------

@pytest.mark.parametrize(("name", "gpus", "pair", "cell"), [
    ("a100-sxm4-4gpu-nv12-roce-nic-topo-m.txt", 4, ("GPU0", "GPU3"), "NV12"),
    ("dgx-a100-8gpu-12nic-topo-m-nv12-old-format.txt", 8, ("GPU7", "GPU0"), "NV12"),
    ("dgx1-v100-8gpu-4nic-topo-mp-pcie-view.txt", 8, ("GPU0", "GPU4"), "SYS"),
    ("h100-1gpu-vm-590.48.01-topo-m-ansi-underline-header.txt", 1, ("GPU0", "GPU0"), "X"),
    ("h100-sxm-8gpu-6nic-della-topo-m-blank-cpu-affinity.txt", 8, ("GPU2", "GPU6"), "NV18"),
    ("rtx2080ti-2gpu-pix-topo-m-gpu-numa-id-tabs-expanded.txt", 2, ("GPU0", "GPU1"), "PIX"),
    ("v100-sxm2-4gpu-power9-traverse-topo-m-nv3.txt", 4, ("GPU0", "GPU1"), "NV3"),
])
def test_topo_matrix(name: str, gpus: int, pair: tuple[str, str], cell: str) -> None:
    m = topo.parse_topo_matrix(text(f"topo/{name}"))
    assert len(m) == gpus and m[pair[0]][pair[1]] == cell


def test_topo_rejects_other_output() -> None:
    with pytest.raises(ParseError, match="not `nvidia-smi topo -m`"):
        topo.parse_topo_matrix(text("nvlink/a100-sxm4-80gb-p4de-gpu0-nvlink-s.txt"))


@pytest.mark.parametrize(("name", "gpu", "links", "speed"), [
    ("a100-sxm4-80gb-8gpu-nvlink-status-12x25gbs.txt", 7, 12, 25.0),
    ("a100-sxm4-80gb-gpu7-nvlink-s-12x25gbs-tab-indent.txt", 7, 12, 25.0),
    ("a100-sxm4-80gb-p4de-gpu0-nvlink-s.txt", 0, 12, 25.0),
    ("h100-80gb-hbm3-1gpu-590.48.01-nvlink-s-18-links-26.562.txt", 0, 18, 26.562),
])
def test_nvlink_status(name: str, gpu: int, links: int, speed: float) -> None:
    s = topo.parse_nvlink_status(text(f"nvlink/{name}"))
    got = s[gpu]
    assert isinstance(got, list) and len(got) == links and set(got) == {speed}


@pytest.mark.parametrize(("name", "message"), [
    ("a100-sxm4-80gb-gpu6-nvlink-s-all-links-inactive.txt", "all links are inactive"),
    ("h100-mig-590.48.01-nvlink-s-not-supported-in-mig-mode.txt", "not supported"),
    ("l40s-1gpu-595.80-nvlink-s-not-supported.txt", "does not have or support"),
])
def test_nvlink_messages(name: str, message: str) -> None:
    s = topo.parse_nvlink_status(text(f"nvlink/{name}"))
    (value,) = s.values()
    assert isinstance(value, str) and message in value


# --- kernel log, DMI, CPU, fio -------------------------------------------------------------

@pytest.mark.parametrize(("name", "xids"), [
    ("h100-dell-xe9680-xid119-gsp-rpc-timeout-dmesg-T.txt", [119] * 5),
    ("xid13-xid109-dmesg-ctime-peermem.txt", [13, 13, 13, 109]),
    ("xid31-mmu-fault-xid109-dmesg-ctime.txt", [31, 109]),
])
def test_dmesg_xids(name: str, xids: list[int]) -> None:
    events = kernel.parse_xids(text(f"dmesg/{name}"))
    assert [e["xid"] for e in events] == xids
    assert all(e["time"] is not None for e in events)  # ctime stamps are absolute
    assert events[-1]["time"] >= events[0]["time"]


def test_dmesg_relative_timestamps() -> None:
    line = "[  120.500000] NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=x, GPU has fallen off"
    (e,) = kernel.parse_xids(line, boot_time=1000.0)
    assert (e["pci"], e["xid"], e["time"]) == ("0000:9a:00", 79, 1120.5)


@pytest.mark.parametrize(("name", "product", "serial", "uuid"), [
    ("dell-poweredge-xe8545-dmidecode-t1-system.txt", "PowerEdge T-XE8545", "DW4SFT3",
     "4c4c4544-0057-3410-8053-c4c04f465433"),
    ("dell-poweredge-xe9680-dmidecode-t-system.txt", "PowerEdge XE9680", "HSR8X04",
     "4c4c4544-0053-5210-8038-c8c04f583034"),
    ("dgx-a100-dmidecode-t1-system.txt", "DGXA100 920-23687-2531-001", "1571620610013",
     "9f9ffb35-ff5c-03d3-1000-bfde6aa63a00"),
])
def test_dmidecode_system(name: str, product: str, serial: str, uuid: str) -> None:
    ident = system.dmi_identity(system.parse_dmidecode(text(f"dmidecode/{name}")))
    assert (ident["system_product"], ident["system_serial"], ident["system_uuid"]) == (
        product, serial, uuid)


def test_dmidecode_placeholders_and_memory() -> None:
    recs = system.parse_dmidecode(
        "Handle 0x0001, DMI type 1, 27 bytes\nSystem Information\n"
        "\tSerial Number: To Be Filled By O.E.M.\n\n"
        "Handle 0x1100, DMI type 17, 92 bytes\nMemory Device\n\tSize: 64 GB\n\n"
        "Handle 0x1101, DMI type 17, 92 bytes\nMemory Device\n\tSize: No Module Installed\n")
    assert system.dmi_identity(recs)["system_serial"] == ""
    assert system.dmi_memory_gb(recs) == {"dimms": 1, "empty_slots": 1, "total_gb": 64.0}


def test_lscpu() -> None:
    cpu = system.parse_lscpu(text("lscpu/della-pli-h100-node-xeon8468-2s-rhel8-style.txt"))
    assert cpu == {"model": "Intel(R) Xeon(R) Platinum 8468", "arch": "x86_64", "sockets": 2,
                   "cores_per_socket": 48, "cores": 96, "threads": 96, "numa_nodes": 2}
    with pytest.raises(ParseError):
        system.parse_lscpu("nothing here")


def test_fio_json_and_mixed_output() -> None:
    (job,) = fio.parse_fio(text("fio/nvme0n1-randrw-4k-qd64-j4-fio3.16.json"))
    assert job["fio_version"] == "fio-3.16" and round(job["read"]["iops"]) == 85139
    assert job["read"]["bw_bytes"] == 348743777.0
    (cbt,) = fio.parse_fio(text("fio/nvme8n13-randwrite-4k-qd1-fio3.42-json-plus-normal-cbt.txt"))
    assert cbt["name"] == "/dev/nvme8n13" and round(cbt["write"]["iops"]) == 1244
    assert cbt["read"]["iops"] == 0


@pytest.mark.parametrize(("name", "version", "bw", "iops", "io", "lat_us"), [
    ("nvme-seqread-128k-iouring-jobs1-text-results-only.txt", "", 3347 * 2**20, 26800,
     196 * 2**30, 36.82),
    ("nvme-seqread-4k-libaio-qd64-fio3.28-text.txt", "fio-3.28", 677 * 2**20, 173000,
     10 * 2**30, 368.96)])
def test_fio_text_output(name: str, version: str, bw: int, iops: int, io: int,
                         lat_us: float) -> None:
    (job,) = fio.parse_fio(text(f"fio/{name}"))
    assert job["fio_version"] == version and job["error"] == 0
    assert job["read"] == {"bw_bytes": bw, "iops": iops, "io_bytes": io,
                           "lat_mean_us": pytest.approx(lat_us)}
    # the job did not write: its write figures were not measured, never 0
    assert job["write"] == dict.fromkeys(("bw_bytes", "iops", "io_bytes", "lat_mean_us"))


def test_fio_figures_the_output_leaves_out_are_absent_not_zero() -> None:
    import json as _json
    plain = text("fio/nvme-seqread-4k-libaio-qd64-fio3.28-text.txt")
    no_lat = "\n".join(ln for ln in plain.splitlines() if "lat (" not in ln)
    (job,) = fio.parse_fio(no_lat)
    assert job["read"]["lat_mean_us"] is None and job["read"]["iops"] == 173000
    data = _json.loads(text("fio/nvme0n1-randrw-4k-qd64-j4-fio3.16.json"))
    for j in data["jobs"]:
        del j["read"]["lat_ns"], j["read"]["iops"]
    (job,) = fio.parse_fio(_json.dumps(data))
    assert job["read"]["lat_mean_us"] is None and job["read"]["iops"] is None
    assert job["read"]["bw_bytes"] > 0


def test_storage_check_refuses_a_figure_fio_did_not_report() -> None:
    from nodecert_node.checks.storage import _figure
    from nodecert_node.contract import Evidence
    from nodecert_node.tools import Output, ToolError
    out = Output("", Evidence.of("fio", "fio", 0, ""))
    job = {"read": {"iops": None, "bw_bytes": 5e8}, "write": {"bw_bytes": None}}
    assert _figure(job, "read", "bw_bytes", "seq_read", out) == 5e8
    with pytest.raises(ToolError, match="reported no write bw_bytes: nothing was measured"):
        _figure(job, "write", "bw_bytes", "checkpoint", out)


def test_every_fixture_the_validators_read_is_covered() -> None:
    """A new fixture in a directory the validators read must get a test here."""
    covered = {r[0] for r in Q_TEXT} | {
        "azure-8gpu-535.86.10-q-d-page-retirement.txt",
        "h100-80gb-hbm3-8gpu-535.183.01-q-TRUNCATED-invalid.txt"}
    qfiles = {p.name for p in (REAL / "nvidia-smi").glob("*.txt")
              if "-q" in p.name or "-a-" in p.name}
    assert qfiles <= covered, qfiles - covered
    # Every real output in the directories the validators read goes through its parser:
    # read, or refused with a ParseError naming the problem -- never a crash and never
    # silently empty (a guard that can fail, unlike a file-name search).
    parsers = {"lspci": pci.parse_lspci, "topo": topo.parse_topo_matrix,
               "nvlink": topo.parse_nvlink_status, "dmesg": kernel.parse_xids,
               "dmidecode": system.parse_dmidecode, "lscpu": system.parse_lscpu,
               "fio": fio.parse_fio, "nccl-tests": bench.parse_nccl,
               "nvbandwidth": bench.parse_nvbandwidth, "dcgmi": dcgmi.parse_dcgmi_diag,
               "gpu-burn": bench.parse_gpu_burn}
    refused: set[str] = set()
    for d, parse in parsers.items():
        for p in sorted((REAL / d).iterdir()):
            try:
                parsed = parse(p.read_text(errors="replace"))
            except ParseError:
                refused.add(p.name)
                continue
            assert parsed or d in ("dmesg", "nvlink"), f"{d}/{p.name}: parsed to nothing"
    # The only refusal: a `topo -p2p p` status matrix is not `topo -m` output.
    assert refused == {"rtx2080ti-2gpu-topo-p2p-p-not-supported.txt"}


# --- benchmark tools: nccl-tests, nvbandwidth, dcgmi ------------------------------------

@pytest.mark.parametrize(("name", "rows", "busbw", "wrong", "ranks", "version"), [
    ("a100-sxm4-40gb-8gpu-all-reduce-old-format.log", 34, 235.26, None, 8, None),
    ("a100-sxm4-40gb-8gpu-reduce-scatter-old-format.log", 34, 231.52, None, 8, None),
    ("h100-a3mega-2node-16gpu-all-reduce.log", 31, 338.82, 0, 16, None),
    ("h200-azure-8gpu-all-reduce-8g-single-size.log", 1, 476.96, 0, 8, "2.19.3+cuda12.2"),
])
def test_nccl_tests(name: str, rows: int, busbw: float, wrong: int | None, ranks: int,
                    version: str | None) -> None:
    r = bench.parse_nccl(text(f"nccl-tests/{name}"))
    assert len(r["rows"]) == rows and r["rows"][-1]["busbw"] == busbw
    assert r["rows"][-1]["wrong"] == wrong and r["ranks"] == ranks
    assert r["nccl_version"] == version and r["oob"] == 0 and r["oob_ok"] is True
    assert r["failures"] == []


def test_nccl_tests_real_failure() -> None:
    r = bench.parse_nccl(text("nccl-tests/gh200-2node-8rank-device-busy-failure.log"))
    assert r["rows"] == [] and r["ranks"] == 8
    assert "CUDA-capable device(s) is/are busy or unavailable" in r["failures"][0]
    with pytest.raises(ParseError, match="not all_reduce_perf output"):
        bench.parse_nccl("hello\n")


@pytest.mark.parametrize(("name", "test", "version", "cell", "total"), [
    ("h100-azure-ndv5-8gpu-d2d-read-ce-v0.4.txt", "device_to_device_memcpy_read_ce", "v0.4",
     370.90, None),
    ("h100-sxm-8gpu-d2d-read-ce-v0.10-drv595.txt", "device_to_device_memcpy_read_ce",
     "v0.10.0", 395.08, 22126.64),
    ("h100-sxm-8gpu-h2d-ce-v0.10-drv595.txt", "host_to_device_memcpy_ce", "v0.10.0", 55.36,
     442.87),
])
def test_nvbandwidth(name: str, test: str, version: str, cell: float,
                     total: float | None) -> None:
    r = bench.parse_nvbandwidth(text(f"nvbandwidth/{name}"))
    t = r["tests"][test]
    assert r["version"] == version and t["matrix"][0][1] == cell
    if total is not None:
        assert t["sum"] == total
        values = [v for row in t["matrix"].values() for v in row.values() if v is not None]
        assert abs(sum(values) - total) < 0.5  # the matrix adds up to the tool's SUM line
    if "device_to_device" in test:
        assert t["matrix"][3][3] is None and len(t["matrix"]) == 8


def _nvb_waived_after_h2d() -> str:
    """The real H100 h2d run as nvbandwidth prints it when also asked for a GPU<->GPU case
    its filter waives (a bare "Waived: " line, without the case's name)."""
    real = text("nvbandwidth/h100-sxm-8gpu-h2d-ce-v0.10-drv595.txt")
    head, note = real.split("NOTE:", 1)
    return head + "Waived: \n\nNOTE:" + note


def test_nvbandwidth_waived_and_error_cases() -> None:
    planned = ["host_to_device_memcpy_ce", "device_to_device_memcpy_read_ce"]
    r = bench.parse_nvbandwidth(_nvb_waived_after_h2d())
    assert [s["status"] for s in r["statuses"]] == ["running", "waived"]
    assert bench.nvbandwidth_unmeasured(r, planned) == [
        "device_to_device_memcpy_read_ce waived by nvbandwidth (nothing it could measure on "
        "this node, e.g. no GPU pair with peer access)"]
    # A case that errors while running is that case's error, not a new one.
    broken = text("nvbandwidth/h100-sxm-8gpu-h2d-ce-v0.10-drv595.txt").replace(
        "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
        "ERROR: CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc")
    r = bench.parse_nvbandwidth(broken)
    assert r["statuses"] == [{"test": "host_to_device_memcpy_ce", "status": "error",
                              "message": "CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc"}]
    assert bench.nvbandwidth_unmeasured(r, planned[:1]) == [
        "host_to_device_memcpy_ce ended in an error: CUDA_ERROR_OUT_OF_MEMORY in cuMemAlloc"]
    # Status lines alone, without nvbandwidth's header, are not nvbandwidth output.
    with pytest.raises(ParseError, match="not nvbandwidth output"):
        bench.parse_nvbandwidth("Waived: \nERROR: something\n")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["run", "waive", "error", "absent"]), min_size=1,
                max_size=4))
def test_nvbandwidth_every_planned_case_is_accounted(kinds: list[str]) -> None:
    names = ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
             "device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce"]
    planned = names[:len(kinds)]
    out = ["nvbandwidth Version: v0.10.0", ""]
    for name, kind in zip(planned, kinds, strict=True):
        if kind == "run":
            out += [f"Running {name}.", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                    "           0         1", " 0     55.37     55.36", "",
                    f"SUM {name} 110.73", ""]
        elif kind == "waive":
            out.append("Waived: ")
        elif kind == "error":
            out.append(f"ERROR: Testcase {name} failed")
    if "run" not in kinds and len(out) == 2:
        out.append("Waived: ")  # nothing printed at all is another test
    r = bench.parse_nvbandwidth("\n".join(out) + "\n")
    missing = bench.nvbandwidth_unmeasured(r, planned)
    # Every case that did not run is named, none that ran is; a status is never moved
    # onto another case's name.
    assert [m.split()[0] for m in missing] == [n for n, k in zip(planned, kinds, strict=True)
                                               if k != "run"]
    if "absent" not in kinds:
        for m, k in zip(missing, [k for k in kinds if k != "run"], strict=True):
            assert ("waived" in m) == (k == "waive") and ("error" in m) == (k == "error")


def test_dcgmi_diag() -> None:
    r = dcgmi.parse_dcgmi_diag(text("dcgmi/a100-sxm4-80gb-p4de-8gpu-diag-r2-pass.txt"))
    assert r["meta"]["DCGM Version"] == "3.3.3"
    assert r["tests"]["PCIe"] == "Pass - All" and r["tests"]["Inforom"] == "Pass"
    assert len(r["tests"]) == 11


def test_gpu_burn() -> None:
    r = bench.parse_gpu_burn(text("gpu-burn/rtx-a400-500s-ok.txt"))
    assert (r["seconds"], r["gpus"], r["verdicts"]) == (500, 1, {0: "OK"})
    assert len(r["reports"]) == 10
    assert r["reports"][0] == {"pct": 10.8, "gflops": [1784.0], "errors": [0], "temps": [70]}
    assert r["reports"][-1]["pct"] == 100.0
    with pytest.raises(ParseError, match="not gpu_burn output"):
        bench.parse_gpu_burn("Burning nothing\n")


FIO_TEXT = text("fio/nvme-seqread-4k-libaio-qd64-fio3.28-text.txt")


@settings(max_examples=60, deadline=None)
@given(drop=st.sets(st.integers(min_value=0, max_value=len(FIO_TEXT.splitlines()) - 1)))
def test_property_fio_lines_left_out_read_as_absent_never_zero(drop: set[int]) -> None:
    (whole,) = fio.parse_fio(FIO_TEXT)
    lines = [ln for n, ln in enumerate(FIO_TEXT.splitlines()) if n not in drop]
    try:
        jobs = fio.parse_fio("\n".join(lines) + "\n")
    except ParseError:
        return  # refused, naming what is missing: fine
    for job in jobs:
        for side in ("read", "write"):
            for key, value in job[side].items():
                # a figure is what the full output says, or absent: never a made-up 0
                assert value is None or value == whole[side][key], (side, key, value)


def test_lifetime_corrected_ecc_and_idle_temperature_from_real_q_outputs() -> None:
    """The figures trends are read from: a real A40's lifetime count where the volatile one
    is 0 (the driver was reloaded), an A100's 353, and absent (a `-d PAGE_RETIREMENT`
    output has no ECC or temperature section) as None, never 0."""
    from nodecert_node.parse import smi
    _, a40 = smi.parse_q((REAL / "nvidia-smi" / "a40-10gpu-550.127.05-q.txt").read_text())
    assert (a40[0]["ecc_aggregate_correctable"], a40[0]["ecc_volatile_correctable"],
            a40[0]["temp_gpu"]) == (10, 0, 29)
    _, a100 = smi.parse_q((REAL / "nvidia-smi" / "a100-sxm4-80gb-4gpu-555.42.02-q.txt")
                          .read_text())
    assert a100[1]["ecc_aggregate_correctable"] == 353
    _, azure = smi.parse_q((REAL / "nvidia-smi" / "azure-8gpu-535.86.10-q-d-page-retirement.txt")
                           .read_text())
    assert {g["ecc_aggregate_correctable"] for g in azure} == {None}
    assert {g["temp_gpu"] for g in azure} == {None}
