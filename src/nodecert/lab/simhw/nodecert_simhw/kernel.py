"""dmesg: the simulated kernel log, with NVRM lines and the injected Xids.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import driver_version, installed, load_hw

XID_TEXT = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) "
            "has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
            63: "Row remapping event: Row Remapper Success", 64: "Row remapping event: "
            "Row Remapper Failure", 94: "Contained ECC error.", 95: "Uncontained ECC error.",
            74: "NVLink: fatal error detected on link 5(0x0, 0x0, 0x0, 0x10000, 0x0, 0x0, 0x0)",
            13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
            31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 "
            "faulted @ 0x7f0d_a0000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"}


def cmd_dmesg(argv):
    hw = load_hw()
    boot = float(hw.get("boot_time", time.time()))
    lines = [(0.0, "Linux version 6.1.0-nodecert-lab (SIMULATED kernel log of a nodecert lab "
              "host)")]
    domain = "Translated" if Faults(hw).setting("iommu_translated") is not None else \
        "Passthrough (set via kernel command line)"
    lines.append((0.41, f"iommu: Default domain type: {domain}"))
    if installed().get("driver"):
        drv = driver_version(installed())
        lines.append((4.2, "nvidia: module license 'NVIDIA' taints kernel."))
        arch = hw["profile"]["host"].get("arch", "x86_64")
        lines.append((4.9, f"NVRM: loading NVIDIA UNIX Open Kernel Module for {arch}  {drv}  "
                      "Release Build  (dvs-builder@U16-I3-B03-4-1)  Thu Jan  1 00:00:00 UTC 1970"))
    for f in Faults(hw).xids():
        i = int(f.get("gpu", 0))
        code = int(f.get("code", 79))
        bus = hw["profile"]["pci_buses"][i].lower()
        text = f.get("text") or XID_TEXT.get(code, "Unknown error.")
        lines.append((float(f.get("at_s", 120.0)),
                      f"NVRM: Xid (PCI:0000:{bus}:00): {code}, pid={f.get('pid', 2024)}, "
                      f"name={f.get('process', 'python3')}, {text}"))
    human = "-T" in argv or "--ctime" in argv
    for ts, msg in sorted(lines):
        if human:
            # util-linux prints ctime stamps: the day padded with a space ("Feb  2")
            stamp = time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(boot + ts))
            print(f"[{stamp}] {msg}")
        else:
            print(f"[{ts:12.6f}] {msg}")
    return 0
