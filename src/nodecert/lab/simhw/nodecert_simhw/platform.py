"""The kernel's platform settings of a lab host: lsmod, sysctl (the keys the platform
checks read) and cpupower, in their real formats. The lab host's own kernel is this
machine's, so what the checks read about it is played here from the host's hardware
description: its faults decide the settings.

sysctl answers the simulated keys and hands every other one to the real sysctl;
`sysctl -w` on a simulated key, `cpupower frequency-set -g` and `modprobe
nvidia-peermem` are kept in RUN_DIR (what a provisioning role sets stays set, until a
fault applied after it changes the setting again).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json
import os
import sys

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import HW_FILE, RUN_DIR, installed, load_hw

REAL_SYSCTL = "/usr/sbin/sysctl"
REAL_MODPROBE = "/usr/sbin/modprobe"
SIM_MODULES = ("nvidia-peermem", "nvidia_peermem")
SIM_KEYS = ("kernel.numa_balancing",)


def _state(name):
    """What a provisioning role set (sysctl -w, cpupower frequency-set, modprobe), where
    it was set after the host's faults last changed: a fault applied later wins."""
    try:
        if os.stat(RUN_DIR / name).st_mtime < os.stat(HW_FILE).st_mtime:
            return {}
        with open(RUN_DIR / name) as f:
            data = json.load(f)
            return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _keep(name, data):
    os.makedirs(RUN_DIR, exist_ok=True)
    with open(RUN_DIR / (name + ".tmp"), "w") as f:
        json.dump(data, f)
    os.replace(RUN_DIR / (name + ".tmp"), RUN_DIR / name)


def _set_keys():
    return _state("sysctl.json")


def sysctl_value(hw, key):
    got = _set_keys()
    if key in got:
        return str(got[key])
    if key == "kernel.numa_balancing":
        return "1" if Faults(hw).setting("numa_balancing") is not None else "0"
    raise KeyError(key)


def cmd_sysctl(argv):
    hw = load_hw()
    args = [a for a in argv if not a.startswith("-")]
    flags = "".join(a[1:] for a in argv if a.startswith("-") and not a.startswith("--"))
    if "w" in flags:
        keep = _set_keys()
        for a in args:
            key, _, value = a.partition("=")
            if key in SIM_KEYS:
                keep[key] = value.strip()
                print(f"{key} = {value.strip()}")
            else:
                os.execv(REAL_SYSCTL, [REAL_SYSCTL, *argv])
        _keep("sysctl.json", keep)
        return 0
    if not args or any(a not in SIM_KEYS for a in args):
        os.execv(REAL_SYSCTL, [REAL_SYSCTL, *argv])
    for key in args:
        value = sysctl_value(hw, key)
        print(value if "n" in flags else f"{key} = {value}")
    return 0


def cmd_lsmod(argv):
    hw = load_hw()
    rows = [("Module", "Size", "Used by")]
    if installed().get("driver"):
        peermem = (Faults(hw).setting("peermem_missing") is None
                   or bool(_state("modules.json").get("nvidia_peermem")))
        fabric = bool((hw["profile"].get("hcas") or {}).get("count"))
        if peermem and fabric:
            rows.append(("nvidia_peermem", "16384", "0"))
        rows += [("nvidia_uvm", "4956160", "0"), ("nvidia_drm", "122880", "0"),
                 ("nvidia_modeset", "1355776", "1 nvidia_drm"),
                 ("nvidia", "54292480", "63 nvidia_uvm," + ("nvidia_peermem," if peermem
                                                            and fabric else "")
                  + "nvidia_modeset")]
        if fabric:
            rows.append(("ib_uverbs", "200704", "3 " + ("nvidia_peermem," if peermem else "")
                         + "rdma_ucm,mlx5_ib"))
    for name, size, used in rows:
        print(f"{name:<19} {size:>8}  {used}" if name != "Module" else
              "Module                  Size  Used by")
    return 0


def cmd_modprobe(argv):
    """modprobe: nvidia-peermem is the simulated driver's (loaded where the driver is
    installed); every other module is the real modprobe's."""
    names = [a for a in argv if not a.startswith("-")]
    if not names or names[0] not in SIM_MODULES:
        os.execv(REAL_MODPROBE, [REAL_MODPROBE, *argv])
    if not installed().get("driver"):
        sys.stderr.write(f"modprobe: FATAL: Module {names[0]} not found in directory "
                         "/lib/modules (SIMULATED: no NVIDIA driver installed)\n")
        return 1
    _keep("modules.json", {**_state("modules.json"), "nvidia_peermem": "-r" not in argv})
    return 0


def cmd_cpupower(argv):
    hw = load_hw()
    host = hw["profile"]["host"]
    threads = int(host["sockets"]) * int(host["cores_per_socket"]) * (
        1 if host.get("arch") == "aarch64" else 2)
    slow = Faults(hw).setting("cpu_powersave")
    n_slow = threads if slow is None or "cpus" not in slow else int(slow["cpus"])
    cpus = range(threads) if "all" in argv else range(1)
    if "frequency-set" in argv and "-g" in argv:
        _keep("cpupower.json", {"governor": argv[argv.index("-g") + 1]})
        return 0
    if "frequency-info" not in argv:
        sys.stderr.write("cpupower (SIMULATED): only frequency-info and frequency-set -g "
                         "are played\n")
        return 1
    chosen = _state("cpupower.json").get("governor")
    for cpu in cpus:
        gov = chosen or ("powersave" if slow is not None and cpu < n_slow else "performance")
        print(f"analyzing CPU {cpu}:")
        print("  current policy: frequency should be within 800 MHz and 3.90 GHz.")
        print(f'                  The governor "{gov}" may decide which speed to use')
        print("                  within this range.")
    return 0
