"""lspci: the profile's GPUs, NVSwitches and NICs with their real PCI ids and link status.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

from nodecert_simhw.state import GpuState, installed, load_hw, visible_gpus


def cmd_lspci(argv):
    hw = load_hw()
    p = hw["profile"]
    g = p["gpu"]
    numeric = "-nn" in argv or "-n" in argv
    verbose = any(a.startswith("-v") for a in argv)
    domain = "-D" in argv
    devices = []
    for i in visible_gpus(hw):
        devices.append((p["pci_buses"][i], "3D controller", "0302",
                        f"NVIDIA Corporation {g['pci_ids_name']}", g["pci_device_id"], i))
    for bus in (p.get("nvswitch") or {}).get("pci_buses", []):
        sw = p["nvswitch"]
        devices.append((bus, "Bridge", "0680", f"NVIDIA Corporation {sw['pci_ids_name']}",
                        sw["pci_device_id"], None))
    for bus, cls, code, name, dev, gi in sorted(devices):
        addr = (f"0000:{bus}:00.0" if domain else f"{bus}:00.0")
        if numeric:
            line = f"{addr} {cls} [{code}]: {name} [10de:{dev}] (rev a1)"
        else:
            line = f"{addr} {cls}: {name} (rev a1)"
        print(line)
        if verbose and gi is not None:
            st = GpuState(hw, gi, load={})
            speed = {3: "8GT/s", 4: "16GT/s", 5: "32GT/s"}
            cap_s, sta_s = speed[g["pcie_gen"]], speed[st.pcie_gen]
            sta_w = f"x{st.pcie_width}"
            print(f"\tSubsystem: NVIDIA Corporation Device {g['pci_subsystem_id']}")
            print("\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- "
                  "Stepping- SERR- FastB2B- DisINTx+")
            print(f"\tNUMA node: {0 if gi < p['gpu_count'] // 2 else 1}")
            print("\tCapabilities: [60] Express (v2) Endpoint, MSI 00")
            print(f"\t\tLnkCap:\tPort #0, Speed {cap_s}, Width x{g['pcie_width']}, ASPM L1, "
                  "Exit Latency L1 <4us")
            print("\t\t\tClockPM+ Surprise- LLActRep- BwNot- ASPMOptComp+")
            s_ok = "ok" if st.pcie_gen == g["pcie_gen"] else "downgraded"
            w_ok = "ok" if st.pcie_width == g["pcie_width"] else "downgraded"
            print(f"\t\tLnkSta:\tSpeed {sta_s} ({s_ok}), Width {sta_w} ({w_ok})")
            print("\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-")
            if installed().get("driver"):
                print("\tKernel driver in use: nvidia")
            print("\tKernel modules: nvidia" if installed().get("driver") else
                  "\tKernel modules: nouveau")
            print()
    return 0
