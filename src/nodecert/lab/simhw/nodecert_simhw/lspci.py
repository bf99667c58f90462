"""lspci: the profile's GPUs, NVSwitches and NICs with their real PCI ids and link status.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import GpuState, installed, load_hw, visible_gpus


def _bridge(bus, name, code, info, *, numeric, verbose, domain):
    _, secondary, acs_on = info
    addr = f"0000:{bus}:00.0" if domain else f"{bus}:00.0"
    ids = " [1000:c030]" if numeric else ""
    cls = f"PCI bridge [{code}]" if numeric else "PCI bridge"
    print(f"{addr} {cls}: {name}{ids} (rev b0) (prog-if 00 [Normal decode])")
    if not verbose:
        return
    sign = "+" if acs_on else "-"
    print("\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- "
          "SERR+ FastB2B- DisINTx+")
    print(f"\tBus: primary={int(bus, 16) - 1:02x}, secondary={secondary}, "
          f"subordinate={secondary}, sec-latency=0")
    print("\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00")
    print("\t\tLnkCap:\tPort #1, Speed 32GT/s, Width x16, ASPM L1, Exit Latency L1 <4us")
    print("\t\tLnkSta:\tSpeed 32GT/s, Width x16")
    print("\tCapabilities: [1d0 v1] Access Control Services")
    print("\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- "
          "DirectTrans+")
    print(f"\t\tACSCtl:\tSrcValid{sign} TransBlk- ReqRedir{sign} CmpltRedir{sign} "
          f"UpstreamFwd{sign} EgressCtrl- DirectTrans-")
    print("\tKernel driver in use: pcieport")
    print()


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
    # Each GPU sits behind a downstream port of a PCIe switch, as on HGX baseboards.
    acs = Faults(hw).setting("pcie_acs")
    acs_gpu = int(acs.get("gpu", 0)) if acs is not None else None
    for i in visible_gpus(hw):
        bus = p["pci_buses"][i]
        devices.append((f"{int(bus, 16) - 1:02x}", "PCI bridge", "0604",
                        "Broadcom / LSI PEX890xx PCIe Gen 5 Switch", "c030",
                        ("bridge", bus, i == acs_gpu)))
    for bus, cls, code, name, dev, gi in sorted(devices):
        if isinstance(gi, tuple):
            _bridge(bus, name, code, gi, numeric=numeric, verbose=verbose, domain=domain)
            continue
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
