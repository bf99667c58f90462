"""platform.*: ACS on the PCIe switches, the IOMMU's mode, the CPU governor, automatic
NUMA balancing and the GPUDirect RDMA path, on real outputs (lspci -vvv of a Dell
XE9680's GPU path, lsmod, cpupower) and against the simulator, where each platform fault
fails exactly its check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodecert_node.checks import platform as plat
from nodecert_node.contract import Limits, Verdict
from nodecert_node.parse import ParseError, pci, system
from support.simnode import SimNode

REAL = Path(__file__).parent / "fixtures" / "real"
PATH_VVV = (REAL / "lspci" / "h100-sxm-dell-xe9680-gpu0-pcie-path-root-port-pex890xx-switch-"
            "nvme-gpu-cx7-lspci-vvv-EXCERPT.txt").read_text()
LSMOD = (REAL / "lsmod" / "dell-gpu-node-550.90.07-lsmod-grep-nvid-nvidia-peermem-loaded.txt"
         ).read_text()
CPUPOWER = (REAL / "cpupower" / "xeon-gpu-node-cpupower-frequency-info-intel-pstate-"
            "performance-unable-to-call-hardware.txt").read_text()
ACS_OFF = "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
ACS_ON = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"


def limits() -> Limits:
    return Limits({"platform.acs_redirect_ports_max": {"value": 0, "op": "<=", "unit": "ports"},
                   "platform.iommu_translated_max": {"value": 0, "op": "<="},
                   "platform.cpu_governor": {"value": "performance", "op": "=="},
                   "platform.numa_balancing": {"value": 0, "op": "=="},
                   "platform.gpudirect_paths_min": {"value": 1, "op": ">="}})


# --- lspci -vvv: ACS -------------------------------------------------------------------------

def test_the_real_gpu_path_reads_its_ports_and_their_acs_control() -> None:
    devs = {d["slot"]: d for d in pci.parse_lspci(PATH_VVV)}
    assert devs["0000:15:01.0"]["port"] == "Root Port"
    assert devs["0000:17:01.0"]["port"] == "Downstream Port"
    assert devs["0000:17:01.0"]["buses"] == (0x19, 0x19)  # the H100 behind it
    assert devs["0000:17:01.0"]["acs_ctl"]["SrcValid"] is False
    assert devs["0000:19:00.0"]["port"] is None  # the GPU is an endpoint
    assert plat.judge_acs(list(devs.values()), limits()).verdict is Verdict.PASS


def test_acs_redirect_on_a_switch_port_in_front_of_the_gpu_fails_naming_it() -> None:
    # only the port in front of the H100 (17:01.0) turns its redirect on
    text = PATH_VVV.split("17:01.0 PCI bridge")
    on = text[0] + "17:01.0 PCI bridge" + text[1].replace(ACS_OFF, ACS_ON, 1)
    res = plat.judge_acs(pci.parse_lspci(on), limits())
    assert res.verdict is Verdict.FAIL
    assert res.summary.startswith("PCIe switch port 0000:17:01.0 (Downstream Port) redirects")
    assert "in front of 0000:19:00.0" in res.summary
    assert res.facts["ports"][0]["redirect"] == ["SrcValid", "ReqRedir", "CmpltRedir"]


def test_acs_on_a_root_port_or_in_front_of_nothing_of_ours_is_not_judged() -> None:
    root_on = PATH_VVV.replace(ACS_OFF, ACS_ON, 1)  # the first ACSCtl: root port 15:01.0
    assert plat.judge_acs(pci.parse_lspci(root_on), limits()).verdict is Verdict.PASS
    nvme = PATH_VVV.split("17:00.0 PCI bridge")  # 17:00.0 serves the NVMe drive (bus 18)
    on = nvme[0] + "17:00.0 PCI bridge" + nvme[1].replace(ACS_OFF, ACS_ON, 1)
    assert plat.judge_acs(pci.parse_lspci(on), limits()).verdict is Verdict.PASS


def test_an_acsctl_line_without_its_redirect_flags_is_refused() -> None:
    broken = PATH_VVV.replace(ACS_OFF, "ACSCtl:\tSrcValid- TransBlk-", 1)
    with pytest.raises(ParseError, match="ACSCtl without"):
        pci.parse_lspci(broken)


# --- the IOMMU -------------------------------------------------------------------------------

GPU, NIC = "0000:19:00.0", "0000:1a:00.0"


@pytest.mark.parametrize(("groups", "log", "verdict"), [
    (None, None, Verdict.PASS),                                            # no IOMMU at all
    ({"41": {"type": "identity", "devices": [GPU]}}, None, Verdict.PASS),  # passthrough
    ({"41": {"type": "DMA-FQ", "devices": [GPU]}}, None, Verdict.FAIL),
    ({"41": {"type": "DMA", "devices": [NIC]}}, "Passthrough", Verdict.FAIL),  # sysfs wins
    ({"7": {"type": "DMA", "devices": ["0000:00:14.0"]}}, None, Verdict.PASS),  # not ours
    ({"41": {"type": "", "devices": [GPU]}}, "Translated", Verdict.FAIL),  # old kernel
    (None, "Translated", Verdict.FAIL),
    (None, "Passthrough", Verdict.PASS),
])
def test_iommu_mode(groups: dict[str, Any] | None, log: str | None, verdict: Verdict) -> None:
    res = plat.judge_iommu(groups, log, "BOOT_IMAGE=/vmlinuz intel_iommu=on", [GPU, NIC],
                           limits())
    assert res.verdict is verdict, res.summary
    assert res.facts["cmdline_iommu"] == ["intel_iommu=on"]


def test_iommu_groups_are_read_from_sysfs(tmp_path: Path) -> None:
    g = tmp_path / "41"
    (g / "devices" / GPU).mkdir(parents=True)
    (g / "type").write_text("DMA-FQ\n")
    assert plat.read_iommu_groups(str(tmp_path)) == {"41": {"type": "DMA-FQ",
                                                           "devices": [GPU]}}
    assert plat.read_iommu_groups(str(tmp_path / "none")) is None


# --- the CPU governor ------------------------------------------------------------------------

def test_the_real_cpupower_output_reads_its_governor_across_the_wrapped_policy() -> None:
    assert system.parse_cpupower_governors(CPUPOWER) == {0: "performance"}
    assert plat.judge_governor({0: "performance"}, "cpupower", limits()).verdict \
        is Verdict.PASS


def test_a_powersave_cpu_fails_naming_it_and_no_cpufreq_is_not_a_pass() -> None:
    res = plat.judge_governor({0: "performance", 1: "powersave"}, "sysfs", limits())
    assert res.verdict is Verdict.FAIL and res.summary.startswith("CPU 1: governor")
    assert plat.judge_governor({}, "sysfs", limits()).verdict is Verdict.WARN


@given(st.lists(st.sampled_from(["performance", "powersave", "schedutil"]), min_size=1,
                max_size=6))
def test_cpupower_all_cpus_round_trip(govs: list[str]) -> None:
    text = "".join(f"analyzing CPU {i}:\n  current policy: frequency should be within 800 "
                   f"MHz and 3.90 GHz.\n                  The governor \"{g}\" may decide "
                   "which speed to use\n                  within this range.\n"
                   for i, g in enumerate(govs))
    assert system.parse_cpupower_governors(text) == dict(enumerate(govs))


def test_cpupower_without_a_cpu_block_is_refused() -> None:
    with pytest.raises(ParseError):
        system.parse_cpupower_governors("cpupower: command not supported\n")


def test_sysfs_governors(tmp_path: Path) -> None:
    for cpu, gov in ((0, "performance"), (12, "powersave")):
        d = tmp_path / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
    (tmp_path / "cpufreq").mkdir()  # not a CPU
    assert plat.read_sysfs_governors(str(tmp_path)) == {0: "performance", 12: "powersave"}


# --- NUMA balancing, GPUDirect ---------------------------------------------------------------

@pytest.mark.parametrize(("value", "verdict"), [("0\n", Verdict.PASS), ("1\n", Verdict.FAIL),
                                                ("2\n", Verdict.FAIL), (None, Verdict.PASS),
                                                ("on", Verdict.ERROR)])
def test_numa_balancing(value: str | None, verdict: Verdict) -> None:
    assert plat.judge_numa_balancing(value, limits()).verdict is verdict


def test_the_real_lsmod_shows_peermem_loaded() -> None:
    mods = system.parse_lsmod(LSMOD)
    assert mods["ib_uverbs"] == ["nvidia_peermem", "rdma_ucm", "mlx5_ib"]
    res = plat.judge_gpudirect(mods, None, True, limits())
    assert res.verdict is Verdict.PASS and "nvidia_peermem" in res.summary


def _without_peermem(text: str) -> str:
    """The listing of a node whose nvidia_peermem is not loaded: no row, and no module
    naming it as a user."""
    return text.replace("nvidia_peermem         16384  0\n", "").replace("nvidia_peermem,", "")


def test_no_gpudirect_path_fails_where_a_fabric_is_ordered_only() -> None:
    mods = system.parse_lsmod(_without_peermem(LSMOD))
    assert "nvidia_peermem" not in system.loaded_modules(mods)
    assert plat.judge_gpudirect(mods, "proprietary", True, limits()).verdict is Verdict.FAIL
    assert plat.judge_gpudirect(mods, "open", True, limits()).verdict is Verdict.PASS
    assert plat.judge_gpudirect(mods, None, False, limits()).verdict is Verdict.PASS


@pytest.mark.parametrize("listing", [
    # the real listing without its own nvidia_peermem row: ib_uverbs and nvidia name it
    LSMOD.replace("nvidia_peermem         16384  0\n", ""),
    # `lsmod | grep ib_` on the same node: only the RDMA core's row, naming its users
    next(line for line in LSMOD.splitlines() if line.startswith("ib_uverbs")) + "\n",
    # the users column wrapped onto the next line (a narrow terminal or a paste)
    "Module                  Size  Used by\nnvidia              54292480  63 nvidia_uvm,\n"
    "nvidia_peermem,nvidia_modeset\n"])
def test_peermem_named_only_as_a_user_is_loaded(listing: str) -> None:
    """A module another module lists as its user is loaded: a filtered or wrapped lsmod
    that shows nvidia_peermem only in a Used-by column passes (with the nvidia module
    shown, or the open driver read beside it)."""
    mods = system.parse_lsmod(listing)
    assert "nvidia_peermem" in system.loaded_modules(mods)
    res = plat.judge_gpudirect(mods, "proprietary", True, limits())
    assert res.verdict is Verdict.PASS and "nvidia_peermem" in res.summary, res.summary


PROC_MODULES = (  # /proc/modules' row format, as the kernel writes it
    "nvidia_uvm 4956160 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
    "ib_uverbs 200704 3 nvidia_peermem,rdma_ucm,mlx5_ib, Live 0x0000000000000000\n"
    "nvidia 54292480 63 nvidia_uvm,nvidia_peermem,nvidia_modeset, Live 0x0000000000000000 "
    "(POE)\n")


def test_proc_modules_and_sysfs_are_evidence_equal_to_lsmod() -> None:
    proc = system.parse_proc_modules(PROC_MODULES)
    assert proc["ib_uverbs"] == ["nvidia_peermem", "rdma_ucm", "mlx5_ib"]
    assert proc["nvidia_peermem"] == []
    empty_lsmod = system.parse_lsmod("Module                  Size  Used by\n")
    # lsmod filtered to nothing, /proc/modules shows it: loaded
    assert plat.judge_gpudirect(empty_lsmod, None, True, limits(),
                                proc).verdict is Verdict.PASS
    # /sys/module's directories alone (no users known)
    sysfs = {"nvidia": [], "nvidia_peermem": []}
    assert plat.judge_gpudirect(empty_lsmod, None, True, limits(),
                                sysfs).verdict is Verdict.PASS
    with pytest.raises(ParseError, match="/proc/modules: not a module row"):
        system.parse_proc_modules("nvidia_peermem 16384\n")


def test_a_listing_that_cannot_show_peermem_is_error_never_fail() -> None:
    """A listing that shows no nvidia module at all (filtered to other modules, or
    empty) cannot show whether nvidia_peermem is loaded: ERROR. With the nvidia module
    shown and no peermem anywhere, FAIL."""
    other = system.parse_lsmod("video                  73728  2 dell_wmi,i915\n")
    res = plat.judge_gpudirect(other, "proprietary", True, limits())
    assert res.verdict is Verdict.ERROR and "cannot show" in res.summary
    shown = system.parse_lsmod(_without_peermem(LSMOD))
    assert plat.judge_gpudirect(shown, "proprietary", True, limits()).verdict is Verdict.FAIL


def test_an_lsmod_row_that_is_no_module_is_refused() -> None:
    with pytest.raises(ParseError, match="not a module row"):
        system.parse_lsmod("nvidia_peermem  lots  0\n")


# --- against the simulator: each fault fails exactly its check --------------------------------

CHECKS = ("platform.pcie_acs", "platform.iommu", "platform.cpu_governor",
          "platform.numa_balancing", "platform.gpudirect")


def _failing(node: SimNode) -> dict[str, str]:
    out = {}
    for c in CHECKS:
        r = node.check(c)
        if r.verdict is not Verdict.PASS:
            out[c] = r.summary
    return out


@pytest.mark.integration
def test_a_healthy_simulated_node_passes_every_platform_check(tmp_path: Path) -> None:
    assert _failing(SimNode(tmp_path, "h200-sxm-8")) == {}


@pytest.mark.integration
@pytest.mark.parametrize(("fault", "check", "words"), [
    ({"kind": "pcie_acs", "gpu": 2}, "platform.pcie_acs", "in front of 0000:3a:00.0"),
    ({"kind": "iommu_translated"}, "platform.iommu", "the IOMMU translates DMA for 0000:18"),
    ({"kind": "cpu_powersave", "cpus": 4}, "platform.cpu_governor", "CPU 0, 1, 2, 3: governor"),
    ({"kind": "numa_balancing"}, "platform.numa_balancing", "measured 1"),
    ({"kind": "peermem_missing"}, "platform.gpudirect", "measured 0 paths"),
])
def test_each_platform_fault_fails_exactly_its_check(tmp_path: Path, fault: dict[str, Any],
                                                     check: str, words: str) -> None:
    got = _failing(SimNode(tmp_path, "h200-sxm-8", faults=[fault]))
    assert list(got) == [check], got
    assert words in got[check]


@pytest.mark.integration
def test_what_a_role_sets_holds_until_a_later_fault_changes_it(tmp_path: Path) -> None:
    """The lab's kernel view: sysctl -w, cpupower frequency-set and modprobe (what the
    platform role runs) fix their settings; a fault applied after them wins again."""
    import os
    import subprocess
    import time

    wrong = [{"kind": "numa_balancing"}, {"kind": "cpu_powersave"},
             {"kind": "peermem_missing"}]
    node = SimNode(tmp_path, "h200-sxm-8", faults=wrong)
    assert set(_failing(node)) == {"platform.numa_balancing", "platform.cpu_governor",
                                   "platform.gpudirect"}
    for argv in (["sysctl", "-w", "kernel.numa_balancing=0"],
                 ["cpupower", "-c", "all", "frequency-set", "-g", "performance"],
                 ["modprobe", "nvidia-peermem"]):
        done = subprocess.run([str(node.bin / argv[0]), *argv[1:]], env=node.env(),
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
    assert _failing(node) == {}
    time.sleep(0.01)
    node.hw.write_text(node.hw.read_text())  # the faults applied again, after the fix
    os.utime(node.hw)
    assert set(_failing(node)) == {"platform.numa_balancing", "platform.cpu_governor",
                                   "platform.gpudirect"}
