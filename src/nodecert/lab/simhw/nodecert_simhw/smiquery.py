"""nvidia-smi --query-gpu: every field the checks and the telemetry sampler ask for, in
the real tool's CSV (units in the header and after each value unless nounits, streaming
with -lms/-l), reproduced from recorded real outputs (tests/fixtures/real).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import (
    GpuState,
    bus_id,
    gpu_identity,
    load_hw,
    read_load,
    select_gpus,
    visible_gpus,
)


# query-gpu fields: name -> (unit or None, function(hw, i, state, n, drv) -> value text)
def _qf():
    def g(hw):
        return hw["profile"]["gpu"]

    def reasons_hex(v):
        return f"0x{v:016X}"

    def act(bit):
        return lambda hw, i, s, n, d: "Active" if s.reasons & bit else "Not Active"

    return {
        "timestamp": (None, lambda hw, i, s, n, d: time.strftime("%Y/%m/%d %H:%M:%S.")
                      + f"{int(time.time() * 1000) % 1000:03d}"),
        "driver_version": (None, lambda hw, i, s, n, d: d),
        "count": (None, lambda hw, i, s, n, d: str(len(visible_gpus(hw)))),
        "name": (None, lambda hw, i, s, n, d: g(hw)["product_name"]),
        "serial": (None, lambda hw, i, s, n, d: gpu_identity(hw, i)["serial"]),
        "uuid": (None, lambda hw, i, s, n, d: gpu_identity(hw, i)["uuid"]),
        "pci.bus_id": (None, lambda hw, i, s, n, d: bus_id(hw, i)),
        "pci.domain": (None, lambda hw, i, s, n, d: "0x0000"),
        "pci.bus": (None, lambda hw, i, s, n, d: "0x" + hw["profile"]["pci_buses"][i].upper()),
        "pci.device": (None, lambda hw, i, s, n, d: "0x00"),
        "pci.device_id": (None, lambda hw, i, s, n, d: f"0x{g(hw)['pci_device_id'].upper()}10DE"),
        "pci.sub_device_id": (None, lambda hw, i, s, n, d:
                              f"0x{g(hw)['pci_subsystem_id'].upper()}10DE"),
        "pcie.link.gen.current": (None, lambda hw, i, s, n, d: str(s.pcie_gen)),
        "pcie.link.gen.gpucurrent": (None, lambda hw, i, s, n, d: str(s.pcie_gen)),
        "pcie.link.gen.max": (None, lambda hw, i, s, n, d: str(g(hw)["pcie_gen"])),
        "pcie.link.gen.gpumax": (None, lambda hw, i, s, n, d: str(g(hw)["pcie_gen"])),
        "pcie.link.width.current": (None, lambda hw, i, s, n, d: str(s.pcie_width)),
        "pcie.link.width.max": (None, lambda hw, i, s, n, d: str(g(hw)["pcie_width"])),
        "index": (None, lambda hw, i, s, n, d: str(n)),
        "persistence_mode": (None, lambda hw, i, s, n, d: "Enabled"),
        "vbios_version": (None, lambda hw, i, s, n, d: Faults(hw).vbios(g(hw)["vbios"])),
        "pstate": (None, lambda hw, i, s, n, d: "P0"),
        "clocks_event_reasons.supported": (None, lambda hw, i, s, n, d: reasons_hex(0x1FF)),
        "clocks_event_reasons.active": (None, lambda hw, i, s, n, d: reasons_hex(s.reasons)),
        "clocks_throttle_reasons.active": (None, lambda hw, i, s, n, d: reasons_hex(s.reasons)),
        "clocks_event_reasons.gpu_idle": (None, act(0x1)),
        "clocks_event_reasons.sw_power_cap": (None, act(0x4)),
        "clocks_event_reasons.hw_slowdown": (None, act(0x8)),
        "clocks_event_reasons.hw_thermal_slowdown": (None, act(0x40)),
        "clocks_event_reasons.hw_power_brake_slowdown": (None, act(0x80)),
        "clocks_event_reasons.sw_thermal_slowdown": (None, act(0x20)),
        "memory.total": ("MiB", lambda hw, i, s, n, d: str(g(hw)["memory_mib"])),
        "memory.reserved": ("MiB", lambda hw, i, s, n, d: str(g(hw)["memory_reserved_mib"])),
        "memory.used": ("MiB", lambda hw, i, s, n, d: str(s.mem_used)),
        "memory.free": ("MiB", lambda hw, i, s, n, d: str(
            g(hw)["memory_mib"] - g(hw)["memory_reserved_mib"] - s.mem_used)),
        "compute_cap": (None, lambda hw, i, s, n, d: g(hw)["compute_cap"]),
        "utilization.gpu": ("%", lambda hw, i, s, n, d: str(s.util)),
        "utilization.memory": ("%", lambda hw, i, s, n, d: str(s.util // 2)),
        "ecc.mode.current": (None, lambda hw, i, s, n, d: "Enabled"),
        "ecc.errors.uncorrected.volatile.dram": (None, lambda hw, i, s, n, d:
                                                  str(s.dram_uncorrectable)),
        "ecc.errors.uncorrected.volatile.total": (None, lambda hw, i, s, n, d:
                                                   str(s.dram_uncorrectable)),
        "ecc.errors.uncorrected.aggregate.total": (None, lambda hw, i, s, n, d:
                                                    str(s.dram_uncorrectable)),
        "ecc.errors.corrected.volatile.total": (None, lambda hw, i, s, n, d: "0"),
        "ecc.errors.corrected.aggregate.total": (None, lambda hw, i, s, n, d: "0"),
        "remapped_rows.correctable": (None, lambda hw, i, s, n, d: "0"),
        "remapped_rows.uncorrectable": (None, lambda hw, i, s, n, d: str(s.remap_uncorrectable)),
        "remapped_rows.pending": (None, lambda hw, i, s, n, d: "Yes" if s.remap_pending
                                  else "No"),
        "remapped_rows.failure": (None, lambda hw, i, s, n, d: "Yes" if s.remap_failure
                                  else "No"),
        "temperature.gpu": (None, lambda hw, i, s, n, d: str(s.temp)),
        "temperature.gpu.tlimit": (None, lambda hw, i, s, n, d: "[N/A]"
                                   if g(hw).get("temp_format") == "absolute" else str(s.tlimit)),
        "temperature.memory": (None, lambda hw, i, s, n, d: str(s.mem_temp)),
        "power.draw": ("W", lambda hw, i, s, n, d: f"{s.power:.2f}"),
        "power.draw.average": ("W", lambda hw, i, s, n, d: f"{s.power:.2f}"),
        "power.draw.instant": ("W", lambda hw, i, s, n, d: f"{s.power:.2f}"),
        "power.limit": ("W", lambda hw, i, s, n, d: f"{g(hw)['power_limit_w']:.2f}"),
        "enforced.power.limit": ("W", lambda hw, i, s, n, d: f"{g(hw)['power_limit_w']:.2f}"),
        "power.default_limit": ("W", lambda hw, i, s, n, d: f"{g(hw)['power_limit_w']:.2f}"),
        "power.max_limit": ("W", lambda hw, i, s, n, d: f"{g(hw)['power_limit_w']:.2f}"),
        "clocks.current.graphics": ("MHz", lambda hw, i, s, n, d: str(s.sm_clock)),
        "clocks.current.sm": ("MHz", lambda hw, i, s, n, d: str(s.sm_clock)),
        "clocks.sm": ("MHz", lambda hw, i, s, n, d: str(s.sm_clock)),
        "clocks.current.memory": ("MHz", lambda hw, i, s, n, d: str(g(hw)["mem_clock_mhz"])),
        "clocks.max.graphics": ("MHz", lambda hw, i, s, n, d: str(g(hw)["max_sm_clock_mhz"])),
        "clocks.max.sm": ("MHz", lambda hw, i, s, n, d: str(g(hw)["max_sm_clock_mhz"])),
        "clocks.max.memory": ("MHz", lambda hw, i, s, n, d: str(g(hw)["mem_clock_mhz"])),
        "mig.mode.current": (None, lambda hw, i, s, n, d: "Disabled"),
        "fabric.state": (None, lambda hw, i, s, n, d: "Completed"
                         if hw["profile"].get("nvswitch") else "N/A"),
        "fabric.status": (None, lambda hw, i, s, n, d: "Success"
                          if hw["profile"].get("nvswitch") else "N/A"),
    }


QUERY_FIELDS = _qf()


def smi_query(hw, drv, argv):
    fields, fmt, loop_ms = None, None, None
    for k, a in enumerate(argv):
        if a.startswith("--query-gpu="):
            fields = a.split("=", 1)[1]
        elif a == "--query-gpu" and k + 1 < len(argv):
            fields = argv[k + 1]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a in ("-lms", "--loop-ms") and k + 1 < len(argv):
            loop_ms = int(argv[k + 1])
        elif a.startswith("--loop-ms="):
            loop_ms = int(a.split("=", 1)[1])
        elif a in ("-l", "--loop") and k + 1 < len(argv):
            loop_ms = int(argv[k + 1]) * 1000
    if not fmt or not fmt.startswith("csv"):
        print('"--format" must be specified with --query-gpu. Use "--format=csv".')
        return 2
    opts = set(fmt.split(",")[1:])
    names = [f.strip() for f in fields.split(",") if f.strip()]
    for name in names:
        if name not in QUERY_FIELDS:
            print(f'Field "{name}" is not a valid field to query.')
            print()
            return 2
    sel = select_gpus(hw, argv)
    vis = visible_gpus(hw)
    if "noheader" not in opts:
        heads = []
        for name in names:
            unit = QUERY_FIELDS[name][0]
            heads.append(name if unit is None or "nounits" in opts else f"{name} [{unit}]")
        print(", ".join(heads), flush=True)
    while True:
        load = read_load()
        now = time.time()
        for i in sel:
            s = GpuState(hw, i, now=now, load=load)
            vals = []
            for name in names:
                unit, fn = QUERY_FIELDS[name]
                v = fn(hw, i, s, vis.index(i), drv)
                vals.append(v if unit is None or "nounits" in opts else f"{v} {unit}")
            print(", ".join(vals), flush=True)
        if loop_ms is None:
            return 0
        time.sleep(loop_ms / 1000.0)
        hw = load_hw()  # faults may be changed while streaming
