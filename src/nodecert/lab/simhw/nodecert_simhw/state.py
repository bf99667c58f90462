"""The simulated host's state: its hardware description, installed packages, load, and
the readings of each GPU at a moment (temperatures, clocks, power follow the load).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sys
import time
import zlib
from pathlib import Path

from nodecert_simhw.faults import Faults

HW_FILE = Path(os.environ.get("NODECERT_LAB_HW", "/etc/nodecert-lab/hardware.json"))
INSTALLED_DIR = Path(os.environ.get("NODECERT_LAB_INSTALLED", "/usr/share/nodecert-lab/installed"))
RUN_DIR = Path(os.environ.get("NODECERT_LAB_RUN", "/run/nodecert-lab"))
LOAD_FILE = RUN_DIR / "load.json"
THERMAL_TAU_S = 20.0  # time constant of the simulated heat-up under load

# Driver branch -> the CUDA version its nvidia-smi reports (toolkit release notes, A1).
DRIVER_CUDA = {535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6", 565: "12.7",
               570: "12.8", 575: "12.9", 580: "13.0", 590: "13.1", 595: "13.2"}




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


def visible_gpus(hw):
    missing = Faults(hw).missing_gpus()
    return [i for i in range(hw["profile"]["gpu_count"]) if i not in missing]


def cuda_devices(hw):
    """The GPUs a CUDA program sees: CUDA_VISIBLE_DEVICES (indices into the visible
    GPUs, as CUDA reads it: the list ends at the first entry that names none), else all."""
    vis = visible_gpus(hw)
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return vis
    out = []
    for entry in spec.split(","):
        item = entry.strip()
        if not item.isdigit() or int(item) >= len(vis) or vis[int(item)] in out:
            break
        out.append(vis[int(item)])
    return out


def bus_id(hw, i, width=8):
    bus = hw["profile"]["pci_buses"][i]
    return ("0" * (width - 4) + "0000" if width == 8 else "0000") + ":" + bus.upper() + ":00.0"


def gpu_identity(hw, i):
    return Faults(hw).gpu_identity(hw["identity"]["gpus"][i], i)


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
        flt = Faults(hw)
        after = flt.thermal_throttle_after(i)
        if busy and after is not None and self.load_s >= after:
            self.temp = self.max_op + 3 + round(jitter(i, sec, "tt"))
            self.sm_clock = int(g["max_sm_clock_mhz"] * 0.45)
            self.reasons |= 0x8 | 0x40  # HW slowdown + HW thermal slowdown
        if flt.power_brake(i) and busy:
            self.sm_clock = int(g["max_sm_clock_mhz"] * 0.5)
            self.reasons |= 0x8 | 0x80
        self.pcie_gen, self.pcie_width = flt.pcie_link(i, g["pcie_gen"], g["pcie_width"])
        self.dram_uncorrectable = flt.ecc_uncorrectable(i)
        self.remap_pending = flt.row_remap_pending(i)
        self.remap_uncorrectable = self.dram_uncorrectable
        self.remap_failure = flt.row_remap_failure(i)

    @property
    def tlimit(self):
        return self.max_op - self.temp

    def nvlinks(self):
        """List of (link, GB/s or None when inactive)."""
        n = self.hw["profile"]["gpu"].get("nvlink_links", 0)
        speed = self.hw["profile"]["gpu"].get("nvlink_link_gbs")
        down = Faults(self.hw).nvlinks_down(self.i, n)
        return [(k, None if k in down else speed) for k in range(n)]


def nvlink_ok(hw, i):
    return bool(hw["profile"]["gpu"].get("nvlink_links")) and any(
        s is not None for _, s in GpuState(hw, i, load={}).nvlinks())


def fmt_speed(v):
    return f"{v:g}" if isinstance(v, float) else str(v)


def take_options(argv, opts):
    """Fill opts (option -> value) from argv's "-x VALUE" pairs, the way the real tools'
    getopt reads them; what is left (other flags, operands) is returned in order."""
    rest, k = [], 0
    while k < len(argv):
        if argv[k] in opts and k + 1 < len(argv):
            opts[argv[k]] = argv[k + 1]
            k += 2
        else:
            rest.append(argv[k])
            k += 1
    return rest


def select_gpus(hw, argv):
    """The GPUs nvidia-smi's -i/--id selects (index, UUID or bus ID), all visible ones
    without it; exits 6 with nvidia-smi's words when none matches."""
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
