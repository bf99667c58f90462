"""The one table of lab faults: each kind's parameters, its effect, the check that must
fail because of it, and the DCGM tests it fails; and `Faults`, the only place the
simulator's tools learn which faults are injected.

The control side reads FAULT_KINDS to validate fault files (nodecert.lab.hardware)
and to generate docs/lab.md; the emulators ask `Faults` questions (is GPU i missing?
what is its link?) and never look a fault kind up by name themselves.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FaultKind:
    required: frozenset[str]
    optional: frozenset[str]
    effect: str
    caught_by: str  # the check that must fail because of it
    dcgm_tests: tuple[str, ...] = ()  # dcgmi diag tests that fail on the faulty GPU


def _k(required: set[str], optional: set[str], effect: str, caught_by: str,
       dcgm_tests: tuple[str, ...] = ()) -> FaultKind:
    return FaultKind(frozenset(required), frozenset(optional), effect, caught_by, dcgm_tests)


FAULT_KINDS: dict[str, FaultKind] = {
    "gpu_missing": _k({"gpu"}, set(), "the GPU is gone from lspci and nvidia-smi",
                      "hardware.inventory"),
    "pcie_degraded": _k({"gpu"}, {"width", "gen"}, "the GPU's link trains at the given "
                        "width and/or generation (default: unchanged); lower host<->GPU "
                        "bandwidth", "hardware.pcie", ("PCIe",)),
    "nvlink_down": _k(set(), {"gpu", "gpus", "links"}, "all (or the listed) NVLinks of the "
                      "GPU(s) inactive; topo -m and all-reduce bandwidth drop",
                      "hardware.topology", ("PCIe",)),
    "thermal_throttle": _k({"gpu"}, {"after_s"}, "HW thermal slowdown under load, from "
                           "after_s seconds into the load (default 0)", "load.thermal_soak",
                           ("Targeted Stress",)),
    "power_brake": _k({"gpu"}, set(), "HW power-brake slowdown under load",
                      "load.thermal_soak", ("Targeted Power",)),
    "ecc_uncorrectable": _k({"gpu"}, {"count"}, "volatile uncorrectable ECC errors "
                            "(default 1)", "health.gpu",
                            ("Page Retirement/Row Remap", "GPU Memory")),
    "row_remap_pending": _k({"gpu"}, set(), "a row remapping pending (needs a reset)",
                            "health.gpu", ("Page Retirement/Row Remap",)),
    "row_remap_failure": _k({"gpu"}, set(), "row remapping failed", "health.gpu",
                            ("Page Retirement/Row Remap",)),
    "xid": _k({"gpu", "code"}, {"at_s", "text", "pid", "process"}, "an NVRM Xid line in "
              "the kernel log at_s seconds after boot (default 120); text, pid and process "
              "fill the message", "health.xid"),
    "busbw_low": _k(set(), {"factor"}, "all-reduce bus bandwidth times factor (default 0.7)",
                    "fabric.nccl_allreduce"),
    "nccl_hang": _k(set(), set(), "all_reduce_perf never finishes", "fabric.nccl_allreduce"),
    "nccl_wrong": _k(set(), set(), "all_reduce_perf reports #wrong and out-of-bounds values",
                     "fabric.nccl_allreduce"),
    "tflops_low": _k({"gpu"}, {"factor"}, "the GPU's GEMM rate times factor (default 0.7)",
                     "load.burnin", ("Diagnostic",)),
    "sdc": _k({"gpu"}, set(), "corrupted GEMM results (the torch worker's mismatches, "
              "gpu_burn FAULTY)", "load.burnin", ("Targeted Stress", "Diagnostic")),
    "gpu_swapped": _k({"gpu"}, set(), "another physical GPU in that slot: new serial and UUID",
                      "drift.identity"),
    "hca_missing": _k({"hca"}, set(), "the HCA is gone (ibstat, ibstatus, perfquery)",
                      "net.ib"),
    "port_down": _k({"hca"}, set(), "the HCA's port is Down/Polling (a pulled cable)",
                    "net.ib"),
    "width_degraded": _k({"hca"}, {"width"}, "the port trains at the given width (default "
                         "2X): half the rate", "net.ib"),
    "speed_degraded": _k({"hca"}, {"speed"}, "the port trains at a lower speed (default HDR "
                         "on NDR): half the rate", "net.ib"),
    "symbol_errors": _k({"hca"}, {"per_s"}, "the port's SymbolErrorCounter grows by per_s a "
                        "second (default 20): a marginal cable or transceiver", "net.ib"),
    "hca_firmware": _k({"hca"}, {"version"}, "the HCA runs other firmware (default "
                       "28.39.1002)", "net.ib"),
    # --- a cluster lab's fabric (InfiniBand: ibsim, lab/ibfabric.py; Ethernet: the
    # switches' LLDP to lldpd, lab/ethfabric.py): the wiring changes, the plan does not
    "cable_swapped": _k({"hca", "with"}, set(), "the host's cables of HCAs `hca` and `with` "
                        "exchanged at the leaves", "fabric.cabling"),
    "cable_wrong_leaf": _k({"hca"}, {"leaf"}, "the HCA's cable lands on leaf `leaf` (default "
                           "the next rail's), a free port there", "fabric.cabling"),
    "cable_width": _k({"hca"}, {"width"}, "the HCA's InfiniBand link trains at `width` "
                      "(default 2X) instead of 4X", "fabric.cabling"),
    "cable_missing": _k({"hca"}, set(), "no cable on the HCA", "fabric.cabling"),
    "link_flapping": _k({"hca"}, set(), "the HCA's link is down while the fabric is read "
                        "(a flapping link caught down)", "fabric.cabling"),
    "roce_gid_v1": _k({"hca"}, set(), "the RoCE port has RoCE v1 GIDs only (no routable v2 "
                      "GID: traffic cannot cross a router)", "net.roce"),
    "roce_pfc_off": _k({"hca"}, set(), "PFC disabled on every priority of the RoCE port "
                       "(mlnx_qos): the fabric is not lossless", "net.roce"),
    "roce_trust_pcp": _k({"hca"}, set(), "the RoCE port trusts PCP (VLAN priority) instead "
                         "of the site's DSCP", "net.roce"),
    "rail_slow": _k({"hca"}, {"factor"}, "the HCA's rail moves data at factor (default 0.5) of "
                    "its rate while the port looks healthy (a congested or mis-cabled rail): "
                    "ib_write_bw on that rail and every multi-node collective slow down",
                    "cluster.pairs"),
    "port_fails_under_load": _k({"hca"}, set(), "the HCA's port reads Active but drops "
                                "during a multi-node collective (a flapping cable): NCCL "
                                "fails the run, or with port failover on (NCCL 2.29+) rides "
                                "it out on the other ports and says so", "cluster.pairs"),
    "node_fabric_slow": _k(set(), {"factor"}, "every rail of the node moves data at factor "
                           "(default 0.5) of its rate (a misconfigured node: wrong NUMA or "
                           "PCIe placement, no GPUDirect): ports look healthy",
                           "cluster.pairs"),
    "nvme_slow": _k(set(), {"read_mbps", "write_mbps", "iops"}, "the host's block I/O is "
                    "really throttled (cgroup blkio; MB/s, IOPS, 0 = unlimited): real fio "
                    "measures a slow disk", "storage.fio"),
    "shared_fs_slow": _k(set(), {"read_mbps"}, "what the host receives over the lab "
                         "network is really limited (tc on its link; MB/s, default 8): its "
                         "reads from the lab's NFS server are slow, the others' are not",
                         "cluster.storage"),
    "toolkit_missing": _k(set(), set(), "the NVIDIA Container Toolkit's CLI is gone from a "
                          "provisioned host (nvidia-ctk set aside)", "container.gpu_smoke"),
    "cdi_missing": _k(set(), set(), "a provisioned host's CDI spec is gone (set aside)",
                      "container.gpu_smoke"),
    "cdi_stale": _k(set(), set(), "a provisioned host's CDI spec names an older driver "
                    "(570.211.01) than the one installed, as after a driver upgrade without "
                    "regenerating it", "container.gpu_smoke"),
    "psu_failed": _k(set(), {"psu"}, "the BMC reports power supply psu (default 1) failed "
                     "and the supplies' redundancy lost", "bmc.power"),
    "fan_failed": _k(set(), {"fan"}, "fan number fan (default 1) stops: 0 RPM, below its "
                     "lower critical threshold", "bmc.sensors"),
    "temp_critical": _k(set(), set(), "the inlet temperature rises past its upper critical "
                        "threshold (an IPMI BMC logs the crossing in its SEL)", "bmc.sensors"),
    "sel_critical_event": _k(set(), {"text"}, "a critical entry in the BMC's event log, "
                             "logged when the fault is applied (default: an uncorrectable "
                             "ECC error on a DIMM)", "bmc.sel"),
    "bmc_unreachable": _k(set(), set(), "the host's BMC does not answer (its emulators are "
                          "stopped): every bmc.* check is ERROR", "bmc.sensors"),
    "bmc_bad_credentials": _k(set(), set(), "the BMC accepts another password than the "
                              "inventory's: every bmc.* check is ERROR", "bmc.sensors"),
    "bmc_firmware": _k(set(), {"version"}, "the BMC runs other firmware than the site's "
                       "golden version (default 1.17)", "bmc.inventory"),
    # --- the platform's settings (the kernel and the PCIe switches)
    "pcie_acs": _k(set(), {"gpu"}, "ACS redirect (SrcValid+ ReqRedir+ CmpltRedir+) on the "
                   "PCIe switch port in front of GPU `gpu` (default 0)", "platform.pcie_acs"),
    "iommu_translated": _k(set(), set(), "the kernel boots with the IOMMU translating DMA "
                           "(default domain Translated)", "platform.iommu"),
    "cpu_powersave": _k(set(), {"cpus"}, "the CPUs (all, or the first `cpus`) run the "
                        "powersave governor", "platform.cpu_governor"),
    "numa_balancing": _k(set(), set(), "automatic NUMA balancing is on "
                         "(kernel.numa_balancing = 1)", "platform.numa_balancing"),
    "peermem_missing": _k(set(), set(), "nvidia_peermem is not loaded: no GPUDirect RDMA "
                          "path (a host with an RDMA fabric)", "platform.gpudirect"),
    "firmware_old": _k({"component"}, {"version"}, "the BMC's firmware inventory reports "
                       "recipe component `component` at `version` (default 0.0.1)",
                       "firmware.recipe"),
    "bios_attr": _k({"attribute"}, {"value"}, "the BMC reports BIOS attribute `attribute` "
                    "at `value` (default Disabled)", "bmc.bios"),
    "fw_task_stuck": _k(set(), {"percent"}, "the BMC's firmware update tasks stop at "
                        "`percent` (default 40) and never end", "firmware apply"),
    "fw_busy": _k(set(), set(), "the BMC answers every poll of an update task with HTTP 503",
                  "firmware apply"),
    "fw_not_applied": _k(set(), set(), "the BMC's update tasks reach Completed but its "
                         "firmware inventory keeps the old version", "firmware apply"),
    # --- a rack tray's NVLink domain (hosts of a lab rack)
    "fabric_clique": _k(set(), {"clique"}, "the tray's GPUs register in another NVLink "
                        "clique (default 9) than the rest of its rack", "rack.domain"),
    "nvlink_insufficient": _k(set(), {"gpu"}, "a GPU's fabric health reports insufficient "
                              "NVLinks: bandwidth Degraded, summary Unhealthy",
                              "domain.fabric"),
    "imex_node_down": _k(set(), {"node"}, "IMEX node `node` (default 0) is DOWN in the "
                         "domain every tray reports", "domain.imex"),
    "imex_hang": _k(set(), set(), "nvidia-imex-ctl never answers (a hung IMEX query)",
                    "domain.imex"),
    "nvlink_slow": _k({"gpu"}, {"factor"}, "the GPU's NVLinks carry `factor` (default 0.5) "
                      "of their bandwidth while every link and the fabric's health read "
                      "healthy: only traffic across the NVLink domain shows it", "rack.sweep"),
    "tray_vbios": _k(set(), {"version"}, "the tray's GPUs run another VBIOS (default "
                     "97.00.88.00.01) than the rest of the rack", "rack.firmware"),
    # --- a lab rack's management endpoints (`part`: nvsw-01..09, ps-01, ps-02, cdu-01)
    "rack_part_down": _k({"part"}, set(), "the switch tray, power shelf or CDU `part` does "
                         "not answer (its Redfish endpoint is not started)",
                         "rack.switch_trays"),
    "rack_port_down": _k({"part"}, {"switch", "port"}, "NVLink port `port` (default 1) of "
                         "switch `switch` (default 0) of switch tray `part` is down",
                         "rack.switch_trays"),
    "rack_nvlink_crossed": _k({"part"}, {"switch", "port", "to"}, "the NVLink cable of "
                              "port `port` (default 1) of switch `switch` (default 0) of "
                              "switch tray `part` lands on the GPU planned for port `to` "
                              "(default the next): that GPU has two links to the switch chip, "
                              "the port's own GPU none", "rack.nvlink_map"),
    "rack_psu_failed": _k({"part"}, {"bay"}, "supply `bay` (default 1) of power shelf `part` "
                          "failed, its input lost", "rack.power"),
    "rack_shelf_failed": _k({"part"}, set(), "power shelf `part` itself fails (Critical)",
                            "rack.power"),
    "rack_leak": _k(set(), {"detector"}, "the CDU's leak detector (Moisture, default, or "
                    "Overflow) trips", "rack.cooling"),
    "rack_coolant_hot": _k(set(), set(), "the CDU's coolant supply temperature stays above "
                           "its critical threshold", "rack.cooling"),
    "rack_firmware": _k({"part"}, {"version"}, "switch tray, shelf or CDU `part` runs other "
                        "firmware (default 0.0.1) than the rest of the rack", "rack.firmware"),
}


class Faults:
    """The faults injected into one host (its hardware description's "faults")."""

    def __init__(self, hw: dict[str, Any]) -> None:
        self._faults: list[dict[str, Any]] = list(hw.get("faults", []))

    def _of(self, kind: str, gpu: int | None = None) -> list[dict[str, Any]]:
        assert kind in FAULT_KINDS, kind
        return [f for f in self._faults if f.get("kind") == kind
                and (gpu is None or "gpu" not in f or int(f["gpu"]) == gpu)]

    # --- the BMC (read by the lab's BMC emulators on the control machine)
    def bmc(self, kind: str) -> dict[str, Any] | None:
        """The parameters of BMC fault `kind` on this host, or None."""
        found = self._of(kind)
        return dict(found[-1]) if found else None

    def old_firmware(self) -> dict[str, str]:
        """Recipe component -> the version the BMC reports for it instead."""
        return {str(f["component"]): str(f.get("version", "0.0.1"))
                for f in self._of("firmware_old")}

    def bios(self) -> dict[str, str]:
        """BIOS attribute -> the value the BMC reports instead."""
        return {str(f["attribute"]): str(f.get("value", "Disabled"))
                for f in self._of("bios_attr")}

    def setting(self, kind: str) -> dict[str, Any] | None:
        """The parameters of platform fault `kind` on this host, or None."""
        return self.bmc(kind)

    # --- GPU presence and identity
    def missing_gpus(self) -> set[int]:
        return {int(f["gpu"]) for f in self._of("gpu_missing")}

    def swapped(self, gpu: int) -> bool:
        return bool(self._of("gpu_swapped", gpu))

    def gpu_identity(self, ident: dict[str, Any], gpu: int) -> dict[str, Any]:
        """The GPU's identity as the hardware reports it: another board in a swapped
        slot (the switch trays' ports see the same board as the tray)."""
        if self.swapped(gpu):
            return dict(ident, serial=ident["serial"][:-4] + "7777",
                        uuid=ident["uuid"][:-4] + "7777")
        return ident

    # --- links
    def pcie_link(self, gpu: int, gen: int, width: int) -> tuple[int, int]:
        """(generation, width) the GPU's link trains at."""
        for f in self._of("pcie_degraded", gpu):
            return int(f.get("gen", gen)), int(f.get("width", width))
        return gen, width

    def nvlinks_down(self, gpu: int, links: int) -> set[int]:
        down: set[int] = set()
        for f in self._of("nvlink_down", gpu):
            listed = f.get("links")
            down |= set(range(links)) if listed is None else {int(x) for x in listed}
        return down

    # --- the NVLink domain of a rack tray
    def clique(self, rack_clique: str) -> str:
        for f in self._of("fabric_clique"):
            return str(f.get("clique", 9))
        return rack_clique

    def fabric_degraded(self, gpu: int) -> bool:
        return bool(self._of("nvlink_insufficient", gpu))

    def nvlink_factor(self, gpu: int) -> float:
        """The share of its NVLink bandwidth the GPU's traffic gets (nvlink_slow)."""
        factor = 1.0
        for f in self._of("nvlink_slow", gpu):
            factor *= float(f.get("factor", 0.5))
        return factor

    def imex_down(self) -> set[int]:
        return {int(f.get("node", 0)) for f in self._of("imex_node_down")}

    def imex_hang(self) -> bool:
        return bool(self._of("imex_hang"))

    def rack_parts(self) -> dict[str, dict[str, Any]]:
        """part -> its endpoint's faults (as nodecert.lab.rackmodel reads them), and
        "down": True for a part whose endpoint is not started."""
        out: dict[str, dict[str, Any]] = {}
        for f in self._faults:
            kind, part = f.get("kind"), f.get("part", "cdu-01")
            if kind == "rack_part_down":
                out.setdefault(part, {})["down"] = True
            elif kind == "rack_port_down":
                out.setdefault(part, {})["port_down"] = {"switch": int(f.get("switch", 0)),
                                                         "port": int(f.get("port", 1))}
            elif kind == "rack_nvlink_crossed":
                port = int(f.get("port", 1))
                out.setdefault(part, {})["nvlink_crossed"] = {
                    "switch": int(f.get("switch", 0)), "port": port,
                    "to": int(f.get("to", port + 1))}
            elif kind == "rack_psu_failed":
                out.setdefault(part, {})["psu_failed"] = {"bay": int(f.get("bay", 1))}
            elif kind == "rack_shelf_failed":
                out.setdefault(part, {})["shelf_failed"] = True
            elif kind == "rack_leak":
                out.setdefault(part, {})["leak"] = {"detector": f.get("detector", "Moisture")}
            elif kind == "rack_coolant_hot":
                out.setdefault(part, {})["coolant_hot"] = True
            elif kind == "rack_firmware":
                out.setdefault(part, {})["firmware"] = {"version": str(f.get("version",
                                                                              "0.0.1"))}
        return out

    def vbios(self, version: str) -> str:
        for f in self._of("tray_vbios"):
            return str(f.get("version", "97.00.88.00.01"))
        return version

    # --- health
    def ecc_uncorrectable(self, gpu: int) -> int:
        return sum(int(f.get("count", 1)) for f in self._of("ecc_uncorrectable", gpu))

    def row_remap_pending(self, gpu: int) -> bool:
        return bool(self._of("row_remap_pending", gpu))

    def row_remap_failure(self, gpu: int) -> bool:
        return bool(self._of("row_remap_failure", gpu))

    def xids(self) -> list[dict[str, Any]]:
        return self._of("xid")

    # --- under load
    def thermal_throttle_after(self, gpu: int) -> float | None:
        """Seconds into a load after which the GPU throttles thermally (None: never)."""
        after = [float(f.get("after_s", 0)) for f in self._of("thermal_throttle", gpu)]
        return min(after) if after else None

    def power_brake(self, gpu: int) -> bool:
        return bool(self._of("power_brake", gpu))

    def gemm_factor(self, gpu: int) -> float:
        factor = 1.0
        for f in self._of("tflops_low", gpu):
            factor *= float(f.get("factor", 0.7))
        return factor

    def corrupts_results(self, gpu: int) -> bool:
        return bool(self._of("sdc", gpu))

    # --- fabric
    def busbw_factor(self) -> float:
        factor = 1.0
        for f in self._of("busbw_low"):
            factor *= float(f.get("factor", 0.7))
        return factor

    def nccl_hangs(self) -> bool:
        return bool(self._of("nccl_hang"))

    def nccl_wrong(self) -> bool:
        return bool(self._of("nccl_wrong"))

    # --- RDMA fabric (HCA n = mlx5_n)
    def hca(self, kind: str, hca: int) -> dict[str, Any] | None:
        """The first injected fault of this kind on HCA n, or None."""
        hit = [f for f in self._of(kind) if int(f.get("hca", -1)) == hca]
        return hit[0] if hit else None

    def ports_failing_under_load(self) -> list[int]:
        """The HCAs whose port drops during a multi-node collective."""
        return sorted({int(f["hca"]) for f in self._of("port_fails_under_load")})

    def rail_factor(self, hca: int) -> float:
        """The share of its rate the HCA's rail delivers (rail_slow x node_fabric_slow)."""
        factor = 1.0
        for f in self._of("rail_slow"):
            if int(f.get("hca", -1)) == hca:
                factor *= float(f.get("factor", 0.5))
        for f in self._of("node_fabric_slow"):
            factor *= float(f.get("factor", 0.5))
        return factor

    # --- DCGM
    def dcgm_failing_gpus(self, test: str) -> set[int]:
        """The GPUs (physical indices) whose injected faults fail this DCGM test."""
        return {int(f["gpu"]) for f in self._faults if "gpu" in f
                and test in FAULT_KINDS[str(f.get("kind"))].dcgm_tests}
