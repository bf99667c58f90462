"""nvidia-smi: -L, -q (and -d POWER), -q -x, topo -m, nvlink -s and the summary table, in
the real tool's formats, each reproduced field by field from recorded real outputs
(tests/fixtures/real); --query-gpu (csv, -lms streaming) is smiquery's.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import os
import re
import sys
import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.smiquery import smi_query
from nodecert_simhw.smixml import xml_tag
from nodecert_simhw.state import (
    DRIVER_CUDA,
    GpuState,
    bus_id,
    driver_version,
    fmt_speed,
    gpu_identity,
    installed,
    load_hw,
    select_gpus,
    visible_gpus,
)
from nodecert_simhw.topo import smi_topo


def _driver_or_exit():
    inst = installed()
    drv = driver_version(inst)
    if drv is None:
        # What a node with the userspace tool but no kernel driver prints.
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")
        sys.exit(9)
    return inst, drv


def cuda_for(drv):
    return DRIVER_CUDA.get(int(drv.split(".")[0]), "12.0")


def _timestamp(now=None):
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))


def smi_list(hw):
    for n, i in enumerate(visible_gpus(hw)):
        print(f"GPU {n}: {hw['profile']['gpu']['product_name']} "
              f"(UUID: {gpu_identity(hw, i)['uuid']})")


def _fabric_lines(hw, i):
    """The NVLink fabric registration: an HGX board's (Completed, no clique), or a rack
    tray's (its rack's clique and cluster, health as R570+ prints it for GB200)."""
    rack = hw.get("rack")
    if not rack:
        return [(2, "State", "Completed" if hw["profile"].get("nvswitch") else "N/A"),
                (2, "Status", "Success" if hw["profile"].get("nvswitch") else "N/A"),
                (2, "CliqueId", "0"), (2, "ClusterUUID", "00000000-0000-0000-0000-000000000000"),
                (2, "Health", None), (3, "Bandwidth", "N/A")]
    faults = Faults(hw)
    bad = faults.fabric_degraded(i)
    return [(2, "State", "Completed"), (2, "Status", "Success"),
            (2, "CliqueId", faults.clique(str(rack["clique_id"]))),
            (2, "ClusterUUID", rack["cluster_uuid"]), (2, "Health", None),
            (3, "Summary", "Unhealthy" if bad else "Healthy"),
            (3, "Bandwidth", "Degraded" if bad else "Full"),
            (3, "Route Recovery in progress", "False"), (3, "Route Unhealthy", "False"),
            (3, "Access Timeout Recovery", "False"), (3, "Incorrect Configuration", "N/A"),
            (3, "Partition Assigned", "N/A")]


def _q_lines(hw, i, n, drv):
    """(depth, label, value) lines of one GPU's -q section, in the R5xx layout."""
    g = hw["profile"]["gpu"]
    s = GpuState(hw, i)
    ident = gpu_identity(hw, i)
    bus = hw["profile"]["pci_buses"][i].upper()
    reasons = s.reasons

    def act(bit):
        return "Active" if reasons & bit else "Not Active"

    L = [
        (1, "Product Name", g["product_name"]), (1, "Product Brand", "NVIDIA"),
        (1, "Product Architecture", g["architecture"]), (1, "Display Mode", "Enabled"),
        (1, "Display Active", "Disabled"), (1, "Persistence Mode", "Enabled"),
        (1, "Addressing Mode", "None"), (1, "MIG Mode", None), (2, "Current", "Disabled"),
        (2, "Pending", "Disabled"), (1, "Accounting Mode", "Disabled"),
        (1, "Accounting Mode Buffer Size", "4000"), (1, "Driver Model", None),
        (2, "Current", "N/A"), (2, "Pending", "N/A"), (1, "Serial Number", ident["serial"]),
        (1, "GPU UUID", ident["uuid"]), (1, "Minor Number", str(n)),
        (1, "VBIOS Version", Faults(hw).vbios(g["vbios"])), (1, "MultiGPU Board", "No"),
        (1, "Board ID", f"0x{int(bus, 16):x}00"), (1, "Board Part Number", g["board_part"]),
        (1, "GPU Part Number", g["gpu_part"]), (1, "FRU Part Number", "N/A"),
        (1, "Platform Info", None), (2, "RACK Serial Number", "N/A"),
        (2, "Chassis Physical Slot Number", "N/A"), (2, "Compute Slot Index", "N/A"),
        (2, "Node Index", "N/A"), (2, "Peer Type", "N/A"), (2, "Module Id", str(i + 1)),
        (1, "Inforom Version", None), (2, "Image Version", g["inforom"]),
        (2, "OEM Object", "2.1"), (2, "ECC Object", "7.16"),
        (2, "Power Management Object", "N/A"), (1, "Inforom BBX Object Flush", None),
        (2, "Latest Timestamp", "N/A"), (2, "Latest Duration", "N/A"),
        (1, "GPU Operation Mode", None),
        (2, "Current", "N/A"), (2, "Pending", "N/A"), (1, "GPU C2C Mode", "Disabled"),
        (1, "GPU Virtualization Mode", None), (2, "Virtualization Mode", "None"),
        (2, "Host VGPU Mode", "N/A"), (2, "vGPU Heterogeneous Mode", "N/A"),
        (1, "GPU Reset Status", None), (2, "Reset Required", "No"),
        (2, "Drain and Reset Recommended", "No"), (1, "GPU Recovery Action", "None"),
        (1, "GSP Firmware Version", drv), (1, "IBMNPU", None),
        (2, "Relaxed Ordering Mode", "N/A"), (1, "PCI", None), (2, "Bus", f"0x{bus}"),
        (2, "Device", "0x00"), (2, "Domain", "0x0000"), (2, "Base Classcode", "0x3"),
        (2, "Sub Classcode", "0x2"), (2, "Device Id", f"0x{g['pci_device_id'].upper()}10DE"),
        (2, "Bus Id", bus_id(hw, i)),
        (2, "Sub System Id", f"0x{g['pci_subsystem_id'].upper()}10DE"),
        (2, "GPU Link Info", None), (3, "PCIe Generation", None),
        (4, "Max", str(g["pcie_gen"])), (4, "Current", str(s.pcie_gen)),
        (4, "Device Current", str(s.pcie_gen)), (4, "Device Max", str(g["pcie_gen"])),
        (4, "Host Max", str(g["pcie_gen"])), (3, "Link Width", None),
        (4, "Max", f"{g['pcie_width']}x"), (4, "Current", f"{s.pcie_width}x"),
        (2, "Bridge Chip", None), (3, "Type", "N/A"), (3, "Firmware", "N/A"),
        (2, "Replays Since Reset", "0"), (2, "Replay Number Rollovers", "0"),
        (2, "Tx Throughput", f"{(900000 if s.busy else 560) + i} KB/s"),
        (2, "Rx Throughput", f"{(880000 if s.busy else 550) + i} KB/s"),
        (2, "Atomic Caps Outbound", "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64 "),
        (2, "Atomic Caps Inbound", "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64 "),
        (1, "Fan Speed", "N/A"), (1, "Performance State", "P0"),
        (1, "Clocks Event Reasons", None), (2, "Idle", act(0x1)),
        (2, "Applications Clocks Setting", act(0x2)), (2, "SW Power Cap", act(0x4)),
        (2, "HW Slowdown", act(0x8)), (3, "HW Thermal Slowdown", act(0x40)),
        (3, "HW Power Brake Slowdown", act(0x80)), (2, "Sync Boost", act(0x10)),
        (2, "SW Thermal Slowdown", act(0x20)), (2, "Display Clock Setting", act(0x100)),
        (1, "Sparse Operation Mode", "Disabled"), (1, "FB Memory Usage", None),
        (2, "Total", f"{g['memory_mib']} MiB"), (2, "Reserved", f"{g['memory_reserved_mib']} MiB"),
        (2, "Used", f"{s.mem_used} MiB"),
        (2, "Free", f"{g['memory_mib'] - g['memory_reserved_mib'] - s.mem_used} MiB"),
        (1, "BAR1 Memory Usage", None), (2, "Total", f"{g['bar1_mib']} MiB"),
        (2, "Used", "1 MiB"), (2, "Free", f"{g['bar1_mib'] - 1} MiB"),
        (1, "Conf Compute Protected Memory Usage", None), (2, "Total", "0 MiB"),
        (2, "Used", "0 MiB"), (2, "Free", "0 MiB"), (1, "Compute Mode", "Default"),
        (1, "Utilization", None), (2, "Gpu", f"{s.util} %"),
        (2, "Memory", f"{s.util // 2} %"), (2, "Encoder", "0 %"), (2, "Decoder", "0 %"),
        (2, "JPEG", "0 %"), (2, "OFA", "0 %"), (1, "Encoder Stats", None),
        (2, "Active Sessions", "0"), (2, "Average FPS", "0"), (2, "Average Latency", "0"),
        (1, "FBC Stats", None), (2, "Active Sessions", "0"), (2, "Average FPS", "0"),
        (2, "Average Latency", "0"), (1, "ECC Mode", None), (2, "Current", "Enabled"),
        (2, "Pending", "Enabled"), (1, "ECC Errors", None), (2, "Volatile", None),
        (3, "SRAM Correctable", "0"), (3, "SRAM Uncorrectable Parity", "0"),
        (3, "SRAM Uncorrectable SEC-DED", "0"), (3, "DRAM Correctable", "0"),
        (3, "DRAM Uncorrectable", str(s.dram_uncorrectable)), (2, "Aggregate", None),
        (3, "SRAM Correctable", "0"), (3, "SRAM Uncorrectable Parity", "0"),
        (3, "SRAM Uncorrectable SEC-DED", "0"), (3, "DRAM Correctable", "0"),
        (3, "DRAM Uncorrectable", str(s.dram_uncorrectable)),
        (3, "SRAM Threshold Exceeded", "No"), (2, "Aggregate Uncorrectable SRAM Sources", None),
        (3, "SRAM L2", "0"), (3, "SRAM SM", "0"), (3, "SRAM Microcontroller", "0"),
        (3, "SRAM PCIE", "0"), (3, "SRAM Other", "0"), (1, "Retired Pages", None),
        (2, "Single Bit ECC", "N/A"), (2, "Double Bit ECC", "N/A"),
        (2, "Pending Page Blacklist", "N/A"), (1, "Remapped Rows", None),
        (2, "Correctable Error", "0"), (2, "Uncorrectable Error", str(s.remap_uncorrectable)),
        (2, "Pending", "Yes" if s.remap_pending else "No"),
        (2, "Remapping Failure Occurred", "Yes" if s.remap_failure else "No"),
        (2, "Bank Remap Availability Histogram", None),
        (3, "Max", f"{g['remap_banks'] - s.remap_uncorrectable} bank(s)"),
        (3, "High", f"{s.remap_uncorrectable} bank(s)" if s.remap_uncorrectable else "0 bank(s)"),
        (3, "Partial", "0 bank(s)"), (3, "Low", "0 bank(s)"), (3, "None", "0 bank(s)"),
        (1, "Temperature", None), (2, "GPU Current Temp", f"{s.temp} C"),
    ]
    if g.get("temp_format") == "absolute":  # Ampere reports absolute thresholds
        L += [(2, "GPU T.Limit Temp", "N/A"),
              (2, "GPU Shutdown Temp", f"{s.max_op + g['shutdown_offset_c']} C"),
              (2, "GPU Slowdown Temp", f"{s.max_op + g['slowdown_offset_c']} C"),
              (2, "GPU Max Operating Temp", f"{s.max_op} C"),
              (2, "GPU Target Temperature", "N/A"),
              (2, "Memory Current Temp", f"{s.mem_temp} C"),
              (2, "Memory Max Operating Temp", f"{g['mem_max_operating_temp_c']} C")]
    else:  # Hopper/Ada on R535+: margins relative to T.Limit
        L += [(2, "GPU T.Limit Temp", f"{s.tlimit} C"),
              (2, "GPU Shutdown T.Limit Temp", f"-{g['shutdown_offset_c']} C"),
              (2, "GPU Slowdown T.Limit Temp", f"-{g['slowdown_offset_c']} C"),
              (2, "GPU Max Operating T.Limit Temp", "0 C"), (2, "GPU Target Temperature", "N/A"),
              (2, "Memory Current Temp", f"{s.mem_temp} C"),
              (2, "Memory Max Operating T.Limit Temp", "0 C")]
    L += [
        (1, "GPU Power Readings", None),
        (2, "Power Draw", f"{s.power:.2f} W"),
        (2, "Current Power Limit", f"{g['power_limit_w']:.2f} W"),
        (2, "Requested Power Limit", f"{g['power_limit_w']:.2f} W"),
        (2, "Default Power Limit", f"{g['power_limit_w']:.2f} W"),
        (2, "Min Power Limit", f"{g['power_min_w']:.2f} W"),
        (2, "Max Power Limit", f"{g['power_limit_w']:.2f} W"),
        (1, "GPU Memory Power Readings ", None),
        (2, "Power Draw", f"{s.power * 0.12:.2f} W"), (1, "Module Power Readings", None),
        (2, "Power Draw", "N/A"), (2, "Current Power Limit", "N/A"),
        (2, "Requested Power Limit", "N/A"), (2, "Default Power Limit", "N/A"),
        (2, "Min Power Limit", "N/A"), (2, "Max Power Limit", "N/A"), (1, "Clocks", None),
        (2, "Graphics", f"{s.sm_clock} MHz"), (2, "SM", f"{s.sm_clock} MHz"),
        (2, "Memory", f"{g['mem_clock_mhz']} MHz"),
        (2, "Video", f"{g['video_clock_mhz'] if s.busy else 765} MHz"),
        (1, "Applications Clocks", None), (2, "Graphics", f"{g['max_sm_clock_mhz']} MHz"),
        (2, "Memory", f"{g['mem_clock_mhz']} MHz"), (1, "Default Applications Clocks", None),
        (2, "Graphics", f"{g['max_sm_clock_mhz']} MHz"),
        (2, "Memory", f"{g['mem_clock_mhz']} MHz"), (1, "Deferred Clocks", None),
        (2, "Memory", "N/A"), (1, "Max Clocks", None),
        (2, "Graphics", f"{g['max_sm_clock_mhz']} MHz"),
        (2, "SM", f"{g['max_sm_clock_mhz']} MHz"), (2, "Memory", f"{g['mem_clock_mhz']} MHz"),
        (2, "Video", f"{g['video_clock_mhz']} MHz"), (1, "Max Customer Boost Clocks", None),
        (2, "Graphics", f"{g['max_sm_clock_mhz']} MHz"), (1, "Clock Policy", None),
        (2, "Auto Boost", "N/A"), (2, "Auto Boost Default", "N/A"), (1, "Voltage", None),
        (2, "Graphics", "685.000 mV"), (1, "Fabric", None), *_fabric_lines(hw, i),
        (1, "Processes", "None" if not s.busy else None),
    ]
    if s.busy:
        L += [(2, "GPU instance ID", "N/A"), (2, "Compute instance ID", "N/A"),
              (2, "Process ID", str(os.getpid())), (2, "Type", "C"),
              (2, "Name", "gpu_burn"), (2, "Used GPU Memory", f"{s.mem_used - 1} MiB")]
    L += [(1, "Capabilities", None), (2, "EGM", "disabled")]
    return L


def smi_q(hw, drv, argv):
    sel = select_gpus(hw, argv)
    width = 42  # the label column of the R5xx layout, indentation included
    out = ["", "==============NVSMI LOG==============", "",
           f"{'Timestamp':<{width}}: {_timestamp()}", f"{'Driver Version':<{width}}: {drv}",
           f"{'CUDA Version':<{width}}: {cuda_for(drv)}", "",
           f"{'Attached GPUs':<{width}}: {len(visible_gpus(hw))}"]
    vis = visible_gpus(hw)
    # -d TYPE[,TYPE]: only those sections, as nvidia-smi prints them (POWER: the three
    # power-readings sections).
    shown = None
    if "-d" in argv and argv.index("-d") + 1 < len(argv):
        kinds = argv[argv.index("-d") + 1].upper().split(",")
        shown = {"POWER": ("GPU Power Readings", "GPU Memory Power Readings ",
                           "Module Power Readings")}.get(kinds[0], ())
    for i in sel:
        out.append(f"GPU {bus_id(hw, i)}")
        keep = True
        for depth, label, value in _q_lines(hw, i, vis.index(i), drv):
            if shown is not None:
                if depth == 1:
                    keep = label in shown
                if not keep or depth == 0:
                    continue
            pad = " " * (4 * depth)
            if value is None:
                out.append(f"{pad}{label}")
            else:
                out.append(f"{pad}{label:<{width - 4 * depth}}: {value}")
        out.append("")
    print("\n".join(out))
    return 0


def _xml_tag(label):
    return re.sub(r"[^a-z0-9]+", "_", label.strip().lower()).strip("_")


def smi_qx(hw, drv, argv):
    sel = select_gpus(hw, argv)
    vis = visible_gpus(hw)
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
           "<nvidia_smi_log>", f"\t<timestamp>{_timestamp()}</timestamp>",
           f"\t<driver_version>{drv}</driver_version>",
           f"\t<cuda_version>{cuda_for(drv)}</cuda_version>",
           f"\t<attached_gpus>{len(vis)}</attached_gpus>"]
    for i in sel:
        out.append(f'\t<gpu id="{bus_id(hw, i)}">')
        stack = []
        for depth, label, value in _q_lines(hw, i, vis.index(i), drv):
            while stack and stack[-1][0] >= depth:
                out.append("\t" * (stack[-1][0] + 1) + f"</{stack.pop()[1]}>")
            tag = xml_tag(stack[-1][1] if stack else "gpu", _xml_tag(label))
            if value is not None and "/" in tag:  # a section in the XML, a line in -q
                section, tag = tag.split("/")
                val = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                out += ["\t" * (depth + 1) + f"<{section}>",
                        "\t" * (depth + 2) + f"<{tag}>{val}</{tag}>",
                        "\t" * (depth + 1) + f"</{section}>"]
            elif value is None:
                out.append("\t" * (depth + 1) + f"<{tag}>")
                stack.append((depth, tag))
            else:
                val = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                out.append("\t" * (depth + 1) + f"<{tag}>{val}</{tag}>")
        while stack:
            out.append("\t" * (stack[-1][0] + 1) + f"</{stack.pop()[1]}>")
        out.append("\t</gpu>")
    out.append("</nvidia_smi_log>")
    print("\n".join(out))
    return 0


def smi_nvlink(hw, argv):
    sel = select_gpus(hw, argv)
    vis = visible_gpus(hw)
    g = hw["profile"]["gpu"]
    for i in sel:
        print(f"GPU {vis.index(i)}: {g['product_name']} (UUID: {gpu_identity(hw, i)['uuid']})")
        if not g.get("nvlink_links"):
            print("Device does not have or support Nvlink")
            continue
        links = GpuState(hw, i, load={}).nvlinks()
        if all(s is None for _, s in links):
            print("NVML: Unable to retrieve NVLink information as all links are inactive")
            continue
        for k, speed in links:
            print(f"\t Link {k}: " + ("<inactive>" if speed is None else f"{fmt_speed(speed)} GB/s"))
    return 0


def cmd_nvidia_smi(argv):
    hw = load_hw()
    inst, drv = _driver_or_exit()
    del inst
    if not argv:
        return smi_table(hw, drv)
    if argv[0] == "topo":
        return smi_topo(hw, argv[1:])
    if argv[0] == "nvlink":
        return smi_nvlink(hw, argv[1:])
    if "-L" in argv or "--list-gpus" in argv:
        smi_list(hw)
        return 0
    if any(a.startswith("--query-gpu") for a in argv):
        return smi_query(hw, drv, argv)
    if any(a.startswith("--query-compute-apps") for a in argv):
        # No user job runs on simulated GPUs: with csv,noheader the real tool prints
        # nothing then (a job would be one "pid, name" row per process).
        if not any(a.startswith("--format") for a in argv):
            print('"--format" must be specified with --query-compute-apps. Use '
                  '"--format=csv".')
            return 2
        return 0
    if "-q" in argv or "--query" in argv:
        if "-x" in argv or "--xml-format" in argv:
            return smi_qx(hw, drv, argv)
        return smi_q(hw, drv, argv)
    print("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.")
    return 2


def smi_table(hw, drv):
    g = hw["profile"]["gpu"]
    print(_timestamp())
    print("+-----------------------------------------------------------------------------------------+")
    print(f"| NVIDIA-SMI {drv:<18} Driver Version: {drv:<14} CUDA Version: {cuda_for(drv):<9}|")
    print("|-----------------------------------------+------------------------+----------------------+")
    print("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    print("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    print("|=========================================+========================+======================|")
    for n, i in enumerate(visible_gpus(hw)):
        s = GpuState(hw, i)
        name = g["product_name"][:20]
        print(f"| {n:>3}  {name:<20}           On  | {bus_id(hw, i):<16} Off |"
              f" {s.dram_uncorrectable:>20} |")
        pw = f"{s.power:.0f}W / {g['power_limit_w']}W"
        mem = f"{s.mem_used}MiB / {g['memory_mib']}MiB"
        print(f"| N/A   {s.temp:>2}C    P0  {pw:>24} | {mem:>22} | {s.util:>6}%      Default |")
        print("|                                         |                        |             Disabled |")
        print("+-----------------------------------------+------------------------+----------------------+")
    return 0
