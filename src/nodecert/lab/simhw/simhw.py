#!/usr/bin/python3
"""Simulated NVIDIA GPU hardware for nodecert lab hosts. SIMULATED -- NOT REAL HARDWARE.

Runs inside a lab host with its own python3 (3.8+, standard library only). It
plays the hardware boundary: given the host's hardware description
(/etc/nodecert-lab/hardware.json: profile + injected faults) and the packages
installed (/usr/share/nodecert-lab/installed/*.json, dropped by the simulated
NVIDIA packages), it prints what the real tools print, in their exact formats:

  lspci, nvidia-smi (-L, -q, -q -x, --query-gpu with csv options and -lms,
  topo -m, nvlink -s), all_reduce_perf (nccl-tests), nvbandwidth, dcgmi diag,
  gpu_burn (the workload runner), dmesg (kernel log with NVRM Xid lines).

GPU temperatures, clocks and power follow the load: gpu_burn marks its GPUs as
busy in /run/nodecert-lab/load.json, and readings rise with an exponential
approach to the profile's steady state, so a soak sees a realistic curve.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import signal
import sys
import time
import zlib
from pathlib import Path

HW_FILE = Path(os.environ.get("NODECERT_LAB_HW", "/etc/nodecert-lab/hardware.json"))
INSTALLED_DIR = Path(os.environ.get("NODECERT_LAB_INSTALLED", "/usr/share/nodecert-lab/installed"))
RUN_DIR = Path(os.environ.get("NODECERT_LAB_RUN", "/run/nodecert-lab"))
LOAD_FILE = RUN_DIR / "load.json"
THERMAL_TAU_S = 20.0  # time constant of the simulated heat-up under load

# Driver branch -> the CUDA version its nvidia-smi reports (toolkit release notes, A1).
DRIVER_CUDA = {535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6", 565: "12.7",
               570: "12.8", 575: "12.9", 580: "13.0", 590: "13.1", 595: "13.2"}


# --- state ---------------------------------------------------------------------------

def load_hw():
    with HW_FILE.open() as f:
        return json.load(f)


def installed():
    """component -> (package, version) for the simulated NVIDIA packages installed."""
    out = {}
    if INSTALLED_DIR.is_dir():
        for p in sorted(INSTALLED_DIR.glob("*.json")):
            try:
                d = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            out.setdefault(d["component"], (d["package"], d["version"]))
    return out


def upstream(version):
    v = version.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def driver_version(inst):
    if "driver" not in inst:
        return None
    return upstream(inst["driver"][1])


def faults(hw, kind, gpu=None):
    out = []
    for f in hw.get("faults", []):
        if f.get("kind") != kind:
            continue
        if gpu is not None and "gpu" in f and int(f["gpu"]) != gpu:
            continue
        out.append(f)
    return out


def visible_gpus(hw):
    missing = {int(f["gpu"]) for f in faults(hw, "gpu_missing")}
    return [i for i in range(hw["profile"]["gpu_count"]) if i not in missing]


def bus_id(hw, i, width=8):
    bus = hw["profile"]["pci_buses"][i]
    return ("0" * (width - 4) + "0000" if width == 8 else "0000") + ":" + bus.upper() + ":00.0"


def gpu_identity(hw, i):
    ident = hw["identity"]["gpus"][i]
    if faults(hw, "gpu_swapped", i):  # another board in this slot
        return dict(ident, serial=ident["serial"][:-4] + "7777",
                    uuid=ident["uuid"][:-4] + "7777")
    return ident


def jitter(*key, spread=1.0):
    """Deterministic noise in [-spread, spread] from a key (stable within one second)."""
    h = zlib.crc32(repr(key).encode()) / 0xFFFFFFFF
    return (h * 2 - 1) * spread


def read_load():
    try:
        data = json.loads(LOAD_FILE.read_text())
    except (OSError, ValueError):
        return {}
    now = time.time()
    return {int(k): v for k, v in data.items() if v.get("until", 0) > now
            and _pid_alive(v.get("pid"))}


def _pid_alive(pid):
    if not pid:
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_load(gpus, seconds, pid):
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    now = time.time()
    data = {str(g): {"start": now, "until": now + seconds, "pid": pid} for g in gpus}
    tmp = LOAD_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(LOAD_FILE)


def clear_load():
    with contextlib.suppress(OSError):
        LOAD_FILE.unlink()


@contextlib.contextmanager
def _load_locked():
    """Read-modify-write of load.json by concurrent per-GPU workers."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with (RUN_DIR / "load.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(LOAD_FILE.read_text())
        except (OSError, ValueError):
            data = {}
        yield data
        tmp = LOAD_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(LOAD_FILE)


def add_load(gpu, seconds, pid):
    now = time.time()
    with _load_locked() as data:
        data[str(gpu)] = {"start": now, "until": now + seconds, "pid": pid}


def drop_load(gpu, pid):
    with _load_locked() as data:
        if data.get(str(gpu), {}).get("pid") == pid:
            del data[str(gpu)]


class GpuState:
    """Readings of one simulated GPU at time `now`."""

    def __init__(self, hw, i, now=None, load=None):
        g = hw["profile"]["gpu"]
        self.hw, self.i, self.g = hw, i, g
        now = time.time() if now is None else now
        load = read_load() if load is None else load
        sec = int(now)
        busy = load.get(i)
        self.busy = busy is not None
        self.load_s = now - busy["start"] if busy else 0.0
        rise = 1 - math.exp(-self.load_s / THERMAL_TAU_S) if busy else 0.0
        self.max_op = g["max_operating_temp_c"]
        self.temp = round(g["idle_temp_c"] + (g["load_temp_c"] - g["idle_temp_c"]) * rise
                          + jitter(i, sec, "t"))
        self.mem_temp = round(g["mem_idle_temp_c"] + (g["mem_load_temp_c"] - g["mem_idle_temp_c"])
                              * rise + jitter(i, sec, "m"))
        self.sm_clock = g["max_sm_clock_mhz"] if busy else g["idle_sm_clock_mhz"]
        self.power = (g["power_limit_w"] * (0.93 + jitter(i, sec, "p", spread=0.02)) if busy
                      else g["idle_power_w"] + jitter(i, sec, "p", spread=1.5))
        self.util = 100 if busy else 0
        self.mem_used = int(g["memory_mib"] * 0.9) if busy else 0
        self.reasons = 0x0 if busy else 0x1  # GpuIdle when idle
        for f in faults(hw, "thermal_throttle", i):
            if busy and self.load_s >= float(f.get("after_s", 0)):
                self.temp = self.max_op + 3 + round(jitter(i, sec, "tt"))
                self.sm_clock = int(g["max_sm_clock_mhz"] * 0.45)
                self.reasons |= 0x8 | 0x40  # HW slowdown + HW thermal slowdown
        if faults(hw, "power_brake", i) and busy:
            self.sm_clock = int(g["max_sm_clock_mhz"] * 0.5)
            self.reasons |= 0x8 | 0x80
        pcie = faults(hw, "pcie_degraded", i)
        self.pcie_gen = int(pcie[0].get("gen", g["pcie_gen"])) if pcie else g["pcie_gen"]
        self.pcie_width = int(pcie[0].get("width", g["pcie_width"])) if pcie else g["pcie_width"]
        ecc = faults(hw, "ecc_uncorrectable", i)
        self.dram_uncorrectable = sum(int(f.get("count", 1)) for f in ecc)
        self.remap_pending = bool(faults(hw, "row_remap_pending", i))
        self.remap_uncorrectable = self.dram_uncorrectable
        self.remap_failure = bool(faults(hw, "row_remap_failure", i))

    @property
    def tlimit(self):
        return self.max_op - self.temp

    def nvlinks(self):
        """List of (link, GB/s or None when inactive)."""
        n = self.hw["profile"]["gpu"].get("nvlink_links", 0)
        speed = self.hw["profile"]["gpu"].get("nvlink_link_gbs")
        down = set()
        for f in faults(self.hw, "nvlink_down", self.i):
            links = f.get("links")
            down |= set(range(n)) if links is None else {int(x) for x in links}
        return [(k, None if k in down else speed) for k in range(n)]


def nvlink_ok(hw, i):
    return bool(hw["profile"]["gpu"].get("nvlink_links")) and any(
        s is not None for _, s in GpuState(hw, i, load={}).nvlinks())


def fmt_speed(v):
    return f"{v:g}" if isinstance(v, float) else str(v)


# --- lspci ---------------------------------------------------------------------------

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


# --- nvidia-smi ----------------------------------------------------------------------

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


def _select(hw, argv):
    ids = None
    for k, a in enumerate(argv):
        if a in ("-i", "--id") and k + 1 < len(argv):
            ids = argv[k + 1]
        elif a.startswith("--id="):
            ids = a.split("=", 1)[1]
    vis = visible_gpus(hw)
    if ids is None:
        return vis
    out = []
    for raw in ids.split(","):
        tok = raw.strip()
        if tok.isdigit() and int(tok) < len(vis):
            out.append(vis[int(tok)])
        else:
            for i in vis:
                if tok in (gpu_identity(hw, i)["uuid"], bus_id(hw, i)):
                    out.append(i)
    if not out:
        print(f"No devices were found matching the identifier {ids!r}.")
        sys.exit(6)
    return out


def smi_list(hw):
    for n, i in enumerate(visible_gpus(hw)):
        print(f"GPU {n}: {hw['profile']['gpu']['product_name']} "
              f"(UUID: {gpu_identity(hw, i)['uuid']})")


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
        (1, "VBIOS Version", g["vbios"]), (1, "MultiGPU Board", "No"),
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
        (2, "Graphics", "685.000 mV"), (1, "Fabric", None),
        (2, "State", "Completed" if hw["profile"].get("nvswitch") else "N/A"),
        (2, "Status", "Success" if hw["profile"].get("nvswitch") else "N/A"),
        (2, "CliqueId", "0"), (2, "ClusterUUID", "00000000-0000-0000-0000-000000000000"),
        (2, "Health", None), (3, "Bandwidth", "N/A"),
        (1, "Processes", "None" if not s.busy else None),
    ]
    if s.busy:
        L += [(2, "GPU instance ID", "N/A"), (2, "Compute instance ID", "N/A"),
              (2, "Process ID", str(os.getpid())), (2, "Type", "C"),
              (2, "Name", "gpu_burn"), (2, "Used GPU Memory", f"{s.mem_used - 1} MiB")]
    L += [(1, "Capabilities", None), (2, "EGM", "disabled")]
    return L


def smi_q(hw, drv, argv):
    sel = _select(hw, argv)
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
    sel = _select(hw, argv)
    vis = visible_gpus(hw)
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
           "<nvidia_smi_log>", f"\t<timestamp>{_timestamp()}</timestamp>",
           f"\t<driver_version>{drv}</driver_version>",
           f"\t<cuda_version>{cuda_for(drv)}</cuda_version>",
           f"\t<attached_gpus>{len(vis)}</attached_gpus>"]
    renames = {"product_name": "product_name", "serial_number": "serial", "gpu_uuid": "uuid",
               "gpu_current_temp": "gpu_temp", "gpu_t_limit_temp": "gpu_temp_tlimit",
               "gpu_shutdown_t_limit_temp": "gpu_temp_max_tlimit_threshold",
               "gpu_slowdown_t_limit_temp": "gpu_temp_slow_tlimit_threshold",
               "gpu_max_operating_t_limit_temp": "gpu_temp_max_gpu_tlimit_threshold",
               "memory_current_temp": "memory_temp", "power_draw": "power_draw",
               "performance_state": "performance_state", "bus_id": "pci_bus_id",
               "device_id": "pci_device_id", "sub_system_id": "pci_sub_system_id",
               "fb_memory_usage": "fb_memory_usage", "dram_uncorrectable": "dram_uncorrectable"}
    for i in sel:
        out.append(f'\t<gpu id="{bus_id(hw, i)}">')
        stack = []
        for depth, label, value in _q_lines(hw, i, vis.index(i), drv):
            while stack and stack[-1][0] >= depth:
                out.append("\t" * (stack[-1][0] + 1) + f"</{stack.pop()[1]}>")
            tag = renames.get(_xml_tag(label), _xml_tag(label))
            if value is None:
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
        "vbios_version": (None, lambda hw, i, s, n, d: g(hw)["vbios"]),
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
    sel = _select(hw, argv)
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


def smi_topo(hw, argv):
    vis = visible_gpus(hw)
    n = len(vis)
    links = hw["profile"]["gpu"].get("nvlink_links", 0)
    half = hw["profile"]["gpu_count"] // 2
    head = "\t" + "\t".join(f"GPU{k}" for k in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    lines = [head]
    cores = hw["profile"]["host"]["cores_per_socket"] * (2 if hw["profile"]["host"]["sockets"] > 1 else 1)
    for a_n, a in enumerate(vis):
        cells = []
        for b in vis:
            if a == b:
                cells.append(" X ")
            elif links and nvlink_ok(hw, a) and nvlink_ok(hw, b):
                active = min(sum(1 for _, s in GpuState(hw, x, load={}).nvlinks() if s)
                             for x in (a, b))
                cells.append(f"NV{active}")
            else:
                cells.append("NODE" if (a < half) == (b < half) else "SYS")
        numa = 0 if a < half or hw["profile"]["host"]["sockets"] == 1 else 1
        per = hw["profile"]["host"]["cores_per_socket"]
        aff = f"{numa * per}-{numa * per + per - 1}"
        lines.append(f"GPU{a_n}\t" + "\t".join(cells) + f"\t{aff}\t{numa}\t\tN/A")
    del cores
    lines += ["", "Legend:", "",
              "  X    = Self",
              "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA "
              "nodes (e.g., QPI/UPI)",
              "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
              "Bridges within a NUMA node",
              "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
              "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe "
              "Host Bridge)",
              "  PIX  = Connection traversing at most a single PCIe bridge",
              "  NV#  = Connection traversing a bonded set of # NVLinks", ""]
    print("\n".join(lines))
    return 0


def smi_nvlink(hw, argv):
    sel = _select(hw, argv)
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


# --- nccl-tests all_reduce_perf --------------------------------------------------------

def _size(text):
    m = re.match(r"^(\d+)([KMG]?)$", text.upper())
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def _nccl_version(inst):
    if "nccl" not in inst:
        return None
    full = inst["nccl"][1]  # e.g. 2.27.7-1+cuda13.0
    m = re.match(r"^(\d+\.\d+\.\d+)-\d+\+(cuda\d+\.\d+)", full)
    return f"{m.group(1)}+{m.group(2)}" if m else full


def busbw_peak(hw, gpus):
    """Large-message bus bandwidth the simulated fabric delivers for these GPUs."""
    fab = hw["profile"]["fabric"]
    peak = fab["allreduce_busbw_gbs"] if len(gpus) > 1 else 0.0
    if hw["profile"]["gpu"].get("nvlink_links") and not all(nvlink_ok(hw, i) for i in gpus):
        peak = fab["pcie_allreduce_busbw_gbs"]  # NVLink gone: traffic falls back to PCIe
    for f in faults(hw, "busbw_low"):
        peak *= float(f.get("factor", 0.7))
    return peak


def cmd_all_reduce_perf(argv):
    hw = load_hw()
    inst = installed()
    nccl = _nccl_version(inst)
    if nccl is None:
        sys.stderr.write("all_reduce_perf: error while loading shared libraries: libnccl.so.2: "
                         "cannot open shared object file: No such file or directory\n")
        return 127
    if driver_version(inst) is None:
        print(f"{os.uname().nodename}: Test CUDA failure common.cu:892 'CUDA driver version is "
              "insufficient for CUDA runtime version'")
        return 2
    opts = {"-b": "8", "-e": "128M", "-f": "2", "-g": "1", "-n": "20", "-w": "5", "-c": "1"}
    k = 0
    while k < len(argv):
        a = argv[k]
        if a in opts and k + 1 < len(argv):
            opts[a] = argv[k + 1]
            k += 2
            continue
        k += 1
    lo, hi, factor = _size(opts["-b"]), _size(opts["-e"]), int(opts["-f"])
    ngpus = int(opts["-g"])
    vis = visible_gpus(hw)
    host = os.uname().nodename
    a, b, c = (int(x) for x in nccl.split("+")[0].split("."))
    code = a * 10000 + b * 100 + c  # NCCL_VERSION_CODE
    print(f"# nccl-tests version 2.17.8 nccl-headers={code} nccl-library={code}")
    print("# Collective test starting: all_reduce_perf")
    print(f"# nThread 1 nGpus {ngpus} minBytes {lo} maxBytes {hi} step: {factor}(factor) "
          f"warmup iters: {opts['-w']} iters: {opts['-n']} agg iters: 1 validation: "
          f"{opts['-c']} graph: 0")
    print("#")
    print("# Using devices")
    if ngpus > len(vis):
        print(f"{host}: Test CUDA failure common.cu:1304 'invalid device ordinal'")
        print(f" .. {host} pid {os.getpid()}: Test failure common.cu:1189")
        return 2
    gpus = vis[:ngpus]
    name = hw["profile"]["gpu"]["product_name"]
    for r, i in enumerate(gpus):
        print(f"#  Rank {r:2d} Group  0 Pid {os.getpid():6d} on {host:>10} device {r:2d} "
              f"[{bus_id(hw, i, width=4)[:-2].lower()}] {name}")
    print(f"NCCL version {nccl}")
    print("#")
    sys.stdout.flush()
    if faults(hw, "nccl_hang"):
        # A hung collective: no output, no exit, until the caller's timeout kills it.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        while True:
            signal.pause()
    print("#                                                              out-of-place     "
          "                  in-place          ")
    print("#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong     time   algbw   busbw #wrong")
    print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
          "          (us)  (GB/s)  (GB/s)       ")
    peak = busbw_peak(hw, gpus)
    ratio = 2 * (ngpus - 1) / ngpus if ngpus > 1 else 1.0
    wrong = 1 if faults(hw, "nccl_wrong") else 0
    size, total, rows = lo, 0.0, 0
    while size <= hi:
        count = max(size // 4, 0)
        cells = []
        for place in (0, 1):
            bw = peak * size / (size + (32 << 20)) * (1 + jitter(size, place, spread=0.004))
            t_us = 12.0 + (size / (bw / ratio * 1e9) * 1e6 if bw > 0 else 0.0)
            algbw = size / (t_us * 1e-6) / 1e9
            busbw = algbw * ratio if ngpus > 1 else 0.0
            tstr = f"{t_us:.1f}" if t_us < 10000 else f"{t_us:.0f}"
            cells.append(f"{tstr:>8} {algbw:7.2f} {busbw:7.2f} {wrong if size == hi else 0:6d}")
            if place == 0:
                total += busbw
        print(f"{size:12d} {count:13d}     float     sum      -1 " + " ".join(cells))
        rows += 1
        size *= factor
        if factor <= 1:
            break
    oob = wrong
    print(f"# Out of bounds values : {oob} {'OK' if not oob else 'FAILED'}")
    print(f"# Avg bus bandwidth    : {total / max(rows, 1):.4g}")
    print("#")
    print()
    return 1 if oob else 0


# --- nvbandwidth ---------------------------------------------------------------------

NVB_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
             "device_to_device_memcpy_read_ce", "device_to_device_memcpy_write_ce")


def cmd_nvbandwidth(argv):
    hw = load_hw()
    inst = installed()
    drv = driver_version(inst)
    if drv is None or "cuda" not in inst:
        sys.stderr.write("nvbandwidth: error while loading shared libraries: libcudart.so: "
                         "cannot open shared object file: No such file or directory\n")
        return 127
    if "-l" in argv or "--list" in argv:
        for k, t in enumerate(NVB_TESTS):
            print(f"{k}, {t}:")
        return 0
    tests = []
    for k, a in enumerate(argv):
        if a in ("-t", "--testcase") and k + 1 < len(argv):
            tests.append(argv[k + 1])
    tests = tests or list(NVB_TESTS)
    rt = ".".join(upstream(inst["cuda"][1]).split(".")[:2])
    dv = cuda_for(drv)

    def code(v):
        a, b = v.split(".")
        return int(a) * 1000 + int(b) * 10
    print("nvbandwidth Version: v0.10.0")
    print("Built from Git version: v0.10.0")
    print()
    print(f"CUDA Runtime Version: {rt} ({code(rt)})")
    print(f"CUDA Driver Version (API): {dv} ({code(dv)})")
    print(f"Driver Version: {drv}")
    print()
    vis = visible_gpus(hw)
    fab = hw["profile"]["fabric"]
    for t in tests:
        if t not in NVB_TESTS:
            print(f"ERROR: Testcase {t} not found!")
            return 1
        print(f"Running {t}.")
        cols = "".join(f"{k:>10}" for k in range(len(vis)))
        values = []
        if t.startswith(("host", "device_to_host")):
            src = "CPU(row) -> GPU(column)" if t.startswith("host") else "CPU(row) <- GPU(column)"
            print(f"memcpy CE {src} bandwidth (GB/s)")
            print(f"  {cols}")
            row = []
            for i in vis:
                s = GpuState(hw, i, load={})
                base = fab["h2d_gbs"] * (s.pcie_width / hw["profile"]["gpu"]["pcie_width"])
                base *= 2 ** (s.pcie_gen - hw["profile"]["gpu"]["pcie_gen"])
                v = base * (1 + jitter(t, i, spread=0.001))
                row.append(v)
            values = row
            print(f" 0{''.join(f'{v:10.2f}' for v in row)}")
        else:
            print(f"memcpy CE CPU(row) {'->' if 'write' in t else '<-'} GPU(column) bandwidth "
                  "(GB/s)".replace("CPU(row)", "GPU(row)"))
            print(f"  {cols}")
            for r, a in enumerate(vis):
                row = []
                for b in vis:
                    if a == b:
                        row.append(None)
                        continue
                    nv = (hw["profile"]["gpu"].get("nvlink_links") and nvlink_ok(hw, a)
                          and nvlink_ok(hw, b))
                    v = (fab["d2d_gbs"] if nv else fab["pcie_d2d_gbs"]) * (
                        1 + jitter(t, a, b, spread=0.002))
                    row.append(v)
                    values.append(v)
                print(f"{r:2d}" + "".join("       N/A" if v is None else f"{v:10.2f}"
                                          for v in row))
        print()
        mean = sum(values) / len(values) if values else 0.0
        var = sum((v - mean) ** 2 for v in values) / len(values) if values else 0.0
        print(f"SUM {t} {sum(values):.2f}")
        print(f"COEFFICIENT_OF_VARIATION {t} {math.sqrt(var) / mean if mean else 0:.2f}")
        print()
    print("NOTE: The reported results may not reflect the full capabilities of the platform.")
    print("Performance can vary with software drivers, hardware clocks, and system topology.")
    return 0


# --- dcgmi diag ----------------------------------------------------------------------

def cmd_dcgmi(argv):
    hw = load_hw()
    inst = installed()
    if not argv or argv[0] != "diag":
        print("Usage: dcgmi diag -r <level>   (only 'diag' is simulated in the lab)")
        return 2
    level = 1
    for k, a in enumerate(argv):
        if a in ("-r", "--run") and k + 1 < len(argv):
            level = {"short": 1, "quick": 1, "medium": 2, "long": 3, "xlong": 4}.get(
                argv[k + 1], int(argv[k + 1]) if argv[k + 1].isdigit() else 1)
    drv = driver_version(inst)
    if drv is None:
        print("Error: Unable to complete diagnostic for group 2147483647. Return: (-17) "
              "Host engine is not valid any longer.")
        return 255
    dcgm = upstream(inst["dcgm"][1]) if "dcgm" in inst else "unknown"
    vis = visible_gpus(hw)
    g = hw["profile"]["gpu"]

    def row(a, b):
        return f"| {a:<25} | {b:<46} |"

    def fail_gpus(kinds):
        return sorted({vis.index(int(f["gpu"])) for k in kinds for f in faults(hw, k)
                       if "gpu" in f and int(f["gpu"]) in vis})

    lines = ["Successfully ran diagnostic for group.",
             "+---------------------------+------------------------------------------------+",
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+",
             "|-----  Metadata  ----------+------------------------------------------------|",
             row("DCGM Version", dcgm), row("Driver Version Detected", drv),
             row("GPU Device IDs Detected", ",".join(g["pci_device_id"] for _ in vis)),
             "|-----  Deployment  --------+------------------------------------------------|"]
    remap = fail_gpus(["row_remap_pending", "row_remap_failure", "ecc_uncorrectable"])
    for name in ("Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
                 "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
                 "Graphics Processes", "Inforom"):
        if name == "Page Retirement/Row Remap" and remap:
            lines.append(row(name, "Fail"))
            for b in remap:
                lines.append(row("Warning", f"GPU {b} has uncorrectable/pending row remaps"))
        else:
            lines.append(row(name, "Pass"))
    if hw["profile"].get("nvswitch") and "fabric_manager" not in inst:
        lines.append(row("Fabric Manager", "Fail"))
        lines.append(row("Warning", "Fabric Manager is not running"))
    status = 1 if remap else 0

    def section(title, tests):
        nonlocal status
        lines.append(f"+-----  {title}  " + "-" * (19 - len(title)) +
                     "+------------------------------------------------+")
        for name, kinds in tests:
            bad = fail_gpus(kinds)
            if bad:
                status = 1
                lines.append(row(name, "Fail - GPU: " + ", ".join(str(b) for b in bad)))
                for b in bad:
                    lines.append(row("Warning", f"GPU {b} failed the {name} test"))
            else:
                lines.append(row(name, "Pass - All"))
    if level >= 2:
        section("Integration", [("PCIe", ["pcie_degraded", "nvlink_down"])])
        section("Hardware", [("GPU Memory", ["ecc_uncorrectable"])])
    if level >= 3:
        section("Stress", [("Targeted Stress", ["thermal_throttle", "sdc"]),
                           ("Targeted Power", ["power_brake"]),
                           ("Memory Bandwidth", []), ("Diagnostic", ["sdc", "tflops_low"])])
    else:
        lines.append("+-----  Stress  ------------+------------------------------------------------+")
    lines.append("+---------------------------+------------------------------------------------+")
    print("\n".join(lines))
    return 226 if status else 0


# --- gpu_burn (the workload runner) ----------------------------------------------------

def cmd_gpu_burn(argv):
    hw = load_hw()
    inst = installed()
    if driver_version(inst) is None or "cuda" not in inst:
        print("Couldn't init a GPU test: Error in \"init\": CUDA_ERROR_NO_DEVICE")
        return 1
    seconds, mode, report_s = 10, "FLOATS", 10.0
    args = list(argv)
    if "-d" in args:
        mode = "DOUBLES"
        args.remove("-d")
    if "-tc" in args:
        mode = "FLOATS using Tensor Cores"
        args.remove("-tc")
    for k, a in enumerate(args):
        if a == "-i" and k + 1 < len(args):
            pass
        elif a.lstrip("-").isdigit():
            seconds = int(a)
    report_env = os.environ.get("NODECERT_LAB_BURN_REPORT_S")
    if report_env:
        report_s = float(report_env)
    vis = visible_gpus(hw)
    g = hw["profile"]["gpu"]
    print("Using compare file: compare.ptx")
    print(f"Burning for {seconds} seconds.")
    for n, i in enumerate(vis):
        print(f"GPU {n}: {g['product_name']} (UUID: {gpu_identity(hw, i)['uuid']})")
    for n, _ in enumerate(vis):
        avail = g["memory_mib"] - g["memory_reserved_mib"]
        print(f"Initialized device {n} with {g['memory_mib']} MB of memory ({avail} MB "
              f"available, using {int(avail * 0.9)} MB of it), using {mode}")
    print("Results are 268435456 bytes each, thus performing "
          f"{max(int(g['memory_mib'] * 0.9 / 256) - 2, 1)} iterations")
    sys.stdout.flush()
    write_load(vis, seconds + 5, os.getpid())
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    start = time.time()
    errors = dict.fromkeys(vis, 0)
    procd = dict.fromkeys(vis, 0)
    last = start
    try:
        while not stop["now"]:
            now = time.time()
            elapsed = now - start
            done = elapsed >= seconds
            if now - last >= report_s or done:
                load = read_load()
                parts, errs, temps = [], [], []
                for i in vis:
                    s = GpuState(hw, i, now=now, load=load)
                    tf = g["bf16_tflops"] * 1000 * 0.3  # FP32 GEMM ~30% of dense BF16
                    for f in faults(hw, "tflops_low", i):
                        tf *= float(f.get("factor", 0.7))
                    if s.reasons & 0x40:
                        tf *= 0.45
                    tf *= 1 + jitter(i, int(now), "f", spread=0.005)
                    procd[i] += max(int(tf / 1000 * (now - last) / 2.2), 1)
                    if faults(hw, "sdc", i):
                        errors[i] += 3
                    parts.append(f"{procd[i]} ({tf:.0f} Gflop/s)")
                    errs.append(str(errors[i]))
                    temps.append(f"{s.temp} C")
                pct = min(elapsed / seconds * 100, 100.0)
                print(f"{pct:.1f}%  proc'd: {' - '.join(parts)}   errors: {' - '.join(errs)}   "
                      f"temps: {' - '.join(temps)} ")
                if not done:
                    print(f"        Summary at:   {time.strftime('%a %b %d %I:%M:%S %p %Z %Y')}")
                    print()
                sys.stdout.flush()
                last = now
            if done:
                break
            time.sleep(min(0.2, max(seconds - elapsed, 0.01)))
    finally:
        clear_load()
    print("Killing processes with SIGTERM (soft kill)")
    for n, _ in enumerate(vis):
        print(f"Freed memory for dev {n}")
    print("Uninitted cublas")
    print("done")
    print()
    print(f"Tested {len(vis)} GPUs:")
    for n, i in enumerate(vis):
        print(f"        GPU {n}: {'FAULTY' if errors[i] else 'OK'}")
    print()
    return 0


# --- the framework workers (SIMULATED torch / tensorflow) -----------------------------

def _emit(event, **kw):
    print(json.dumps(dict(event=event, **kw), sort_keys=True), flush=True)


def torch_gemm(args, module_version, cuda):
    """nodecert's gemm.py worker, for the lab's simulated torch: same events, the
    throughput from the GPU profile (C3) and the injected faults (sdc, tflops_low,
    thermal_throttle through the GPU's state)."""
    hw = load_hw()
    inst = installed()
    vis = visible_gpus(hw)
    dev = str(args.get("device"))
    if driver_version(inst) is None or not dev.isdigit() or int(dev) >= len(vis):
        _emit("error", message="RuntimeError: CUDA error: invalid device ordinal")
        return 2
    i = vis[int(dev)]
    g = hw["profile"]["gpu"]
    dtype, n = args.get("dtype", "bf16"), int(args.get("size", 8192))
    seconds, report_s = float(args.get("seconds", 60)), float(args.get("report_s", 5))
    scale = {"bf16": 1.0, "fp16": 1.0, "tf32": 0.5, "fp32": 0.06, "fp8": 1.75}.get(dtype, 1.0)
    tol = {"bf16": 2e-2, "fp16": 4e-3, "tf32": 4e-3, "fp32": 1e-5, "fp8": 1.5e-1}[dtype]
    _emit("ready", device=dev, name=g["product_name"], dtype=dtype, n=n, torch=module_version,
          cuda=cuda, ref_bad=0, ref_max_rel=0.002, tolerance=tol, ref_digest="5151515151515151")
    add_load(i, seconds + 5, os.getpid())
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    start = last = time.time()
    it = checks = mismatches = bad = 0
    windows = []
    try:
        while not stop["now"]:
            time.sleep(min(0.2, report_s))
            now = time.time()
            if now - last >= report_s or now - start >= seconds:
                s = GpuState(hw, i, now=now)
                # Sustained at the power limit: 84% of the burst figure (nodecert's H200
                # recording, tests/fixtures/recorded/h200-device-2026-11-29).
                tf = g["bf16_tflops"] * 0.84 * scale
                for f in faults(hw, "tflops_low", i):
                    tf *= float(f.get("factor", 0.7))
                if s.reasons & 0x40:
                    tf *= 0.45
                tf *= 1 + jitter(i, int(now), "f", spread=0.005)
                k = max(int(tf * 1e12 * (now - last) / (2.0 * n ** 3)), 1)
                it += k
                checks += max(k // 10, 1)
                if faults(hw, "sdc", i):
                    mismatches += 1
                    bad += 3
                    _emit("mismatch", iter=it, differing=3, bad=3, max_abs=412.0, max_rel=1.7)
                windows.append(round(tf, 4))
                _emit("window", t=round(now - start, 2), iters=it, tflops=round(tf, 4))
                last = now
                if now - start >= seconds:
                    break
    finally:
        drop_load(i, os.getpid())
    _emit("done", iters=it, seconds=round(time.time() - start, 2), checks=checks,
          mismatches=mismatches, bad_elements=bad, windows=windows,
          tflops=round(sum(windows) / max(len(windows), 1), 4))
    return 0


def framework_smoke(args, module_version, cuda, cudnn, nccl):
    hw = load_hw()
    inst = installed()
    fw = args.get("framework", "torch")
    vis = visible_gpus(hw) if driver_version(inst) is not None else []
    names = [hw["profile"]["gpu"]["product_name"]] * len(vis)
    _emit("framework", framework=fw, version=module_version, cuda=cuda, cudnn=cudnn,
          nccl=nccl if fw == "torch" else "", cuda_available=bool(vis), gpus=names)
    steps = int(args.get("steps", 30))
    for n, _ in enumerate(vis):
        losses = [round(1.09 * 0.9 ** k, 6) for k in range(steps)]
        _emit("train", framework=fw, device=f"cuda:{n}" if fw == "torch" else f"/GPU:{n}",
              losses=losses, seconds=0.05)
    return 0


def torch_collective(kind, args):
    """nodecert's collective.py worker (all-reduce / copy bandwidth) for the simulated
    torch: the same fabric model as the simulated all_reduce_perf and nvbandwidth."""
    hw = load_hw()
    if driver_version(installed()) is None:
        _emit("error", message="RuntimeError: No CUDA GPUs are available")
        return 2
    vis = visible_gpus(hw)
    fab = hw["profile"]["fabric"]
    g = hw["profile"]["gpu"]
    if kind == "allreduce":
        _emit("start", ranks=len(vis), nccl="SIMULATED", torch="SIMULATED")
        peak, size = busbw_peak(hw, vis), 8
        while size <= int(args.get("max_bytes", 1 << 33)):
            bw = peak * size / (size + (4 << 20))  # latency-bound small messages
            n = len(vis)
            alg = bw * n / (2 * (n - 1)) if n > 1 else 0.0
            t_us = size / (alg * 1e3) if alg else 10.0
            _emit("row", size=size, time_us=round(t_us, 2), algbw=round(alg, 4),
                  busbw=round(bw, 4), wrong=0)
            size *= 2
        _emit("done")
        return 0
    _emit("start", gpus=len(vis), bytes=int(args.get("bytes", 1 << 30)), torch="SIMULATED")
    for n, i in enumerate(vis):
        st = GpuState(hw, i, load={})
        base = fab["h2d_gbs"] * (st.pcie_width / g["pcie_width"]) * 2 ** (st.pcie_gen
                                                                           - g["pcie_gen"])
        _emit("h2d", gpu=n, gbs=round(base * (1 + jitter("h2d", i, spread=0.001)), 2))
        _emit("d2h", gpu=n, gbs=round(base * (1 + jitter("d2h", i, spread=0.001)), 2))
    if args.get("d2d"):
        for a, ia in enumerate(vis):
            for b, ib in enumerate(vis):
                if a != b:
                    nv = g.get("nvlink_links") and nvlink_ok(hw, ia) and nvlink_ok(hw, ib)
                    v = (fab["d2d_gbs"] if nv else fab["pcie_d2d_gbs"]) * (
                        1 + jitter("d2d", ia, ib, spread=0.002))
                    _emit("d2d", src=b, dst=a, gbs=round(v, 2))
    _emit("done")
    return 0


def cmd_torch_worker(argv):
    """simhw.py torch-worker KIND JSON_ARGS [VERSION CUDA CUDNN NCCL] (the simulated
    framework wheels exec this)."""
    kind, args = argv[0], json.loads(argv[1])
    if kind == "gemm":
        return torch_gemm(args, *argv[2:4])
    if kind in ("allreduce", "copy"):
        return torch_collective(kind, args)
    return framework_smoke(args, *argv[2:6])


# --- dmesg (the simulated kernel log) ------------------------------------------------

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
    if installed().get("driver"):
        drv = driver_version(installed())
        lines.append((4.2, "nvidia: module license 'NVIDIA' taints kernel."))
        lines.append((4.9, f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {drv}  "
                      "Release Build  (dvs-builder@U16-I3-B03-4-1)  Thu Jan  1 00:00:00 UTC 1970"))
    for f in faults(hw, "xid"):
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
            stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(boot + ts))
            print(f"[{stamp}] {msg}")
        else:
            print(f"[{ts:12.6f}] {msg}")
    return 0


# --- host hardware: dmidecode, lscpu, lsblk --------------------------------------------

def cmd_dmidecode(argv):
    """dmidecode 3.4 text for types 1 (system), 2 (baseboard), 17 (memory devices)."""
    hw = load_hw()
    ident = hw["identity"]
    host = hw["profile"]["host"]
    types = [int(argv[k + 1]) for k, a in enumerate(argv[:-1]) if a in ("-t", "--type")
             and argv[k + 1].isdigit()] or [1, 2, 17]
    print("# dmidecode 3.4\nGetting SMBIOS data from sysfs.\nSMBIOS 3.3.0 present.\n")
    if 1 in types:
        print("Handle 0x0001, DMI type 1, 27 bytes\nSystem Information\n"
              "\tManufacturer: nodecert lab (SIMULATED)\n"
              f"\tProduct Name: SIMULATED {hw['profile_name']}\n\tVersion: Not Specified\n"
              f"\tSerial Number: {ident['system_serial']}\n\tUUID: {ident['system_uuid']}\n"
              "\tWake-up Type: Power Switch\n\tSKU Number: Not Specified\n"
              "\tFamily: Not Specified\n")
    if 2 in types:
        print("Handle 0x0002, DMI type 2, 15 bytes\nBase Board Information\n"
              "\tManufacturer: nodecert lab (SIMULATED)\n\tProduct Name: SIMULATED board\n"
              f"\tVersion: A00\n\tSerial Number: {ident['baseboard_serial']}\n")
    if 17 in types:
        dimm_gb = 64
        for n in range(int(host["ram_gb"]) // dimm_gb):
            print(f"Handle 0x{0x1100 + n:04X}, DMI type 17, 92 bytes\nMemory Device\n"
                  "\tTotal Width: 80 bits\n\tData Width: 64 bits\n"
                  f"\tSize: {dimm_gb} GB\n\tForm Factor: DIMM\n"
                  f"\tLocator: DIMM_{chr(65 + n // 8)}{n % 8 + 1}\n\tType: DDR5\n"
                  "\tSpeed: 4800 MT/s\n\tManufacturer: SIMULATED\n"
                  f"\tSerial Number: SIMDIMM{n:04d}\n")
    return 0


def cmd_lscpu(argv):
    host = load_hw()["profile"]["host"]
    sockets, cores = int(host["sockets"]), int(host["cores_per_socket"])
    threads = sockets * cores * 2
    rows = [("Architecture", "x86_64"), ("CPU op-mode(s)", "32-bit, 64-bit"),
            ("Byte Order", "Little Endian"), ("CPU(s)", str(threads)),
            ("On-line CPU(s) list", f"0-{threads - 1}"),
            ("Vendor ID", "AuthenticAMD" if "AMD" in host["cpu_model"] else "GenuineIntel"),
            ("Model name", host["cpu_model"]), ("Thread(s) per core", "2"),
            ("Core(s) per socket", str(cores)), ("Socket(s)", str(sockets)),
            ("NUMA node(s)", str(sockets))]
    for k, v in rows:
        print(f"{k + ':':<34}{v}")
    return 0


def cmd_lsblk(argv):
    """`lsblk -J -b -d -o ...` lists the simulated NVMe drives; anything else is the real lsblk."""
    if not ("-J" in argv and "-d" in argv):
        os.execv("/usr/bin/lsblk", ["lsblk", *argv])
    cols = ["name", "size", "model", "serial", "tran", "type"]
    for k, a in enumerate(argv[:-1]):
        if a in ("-o", "--output"):
            cols = [c.lower() for c in argv[k + 1].split(",")]
    devs = []
    for n, d in enumerate(load_hw()["identity"]["nvme"]):
        full = {"name": f"nvme{n}n1", "size": int(d["size_gb"]) * 10**9 // 512 * 512,
                "model": "SIMULATED NVMe (nodecert lab)", "serial": d["serial"], "tran": "nvme",
                "type": "disk"}
        devs.append({c: full.get(c) for c in cols})
    print(json.dumps({"blockdevices": devs}, indent=3))
    return 0


TOOLS = {"lspci": cmd_lspci, "dmidecode": cmd_dmidecode, "lscpu": cmd_lscpu, "lsblk": cmd_lsblk, "nvidia-smi": cmd_nvidia_smi, "all_reduce_perf": cmd_all_reduce_perf,
         "nvbandwidth": cmd_nvbandwidth, "dcgmi": cmd_dcgmi, "gpu_burn": cmd_gpu_burn,
         "dmesg": cmd_dmesg, "torch-worker": cmd_torch_worker}


def main(argv):
    if len(argv) < 2 or argv[1] not in TOOLS:
        sys.stderr.write(f"usage: simhw.py {{{','.join(TOOLS)}}} [args...]\n")
        return 2
    try:
        return TOOLS[argv[1]](argv[2:])
    except BrokenPipeError:
        return 0
    except FileNotFoundError as exc:
        sys.stderr.write(f"{argv[1]}: simulated hardware description missing: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
