"""dmidecode, lscpu, lsblk: the host side of the hardware description.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json
import os

from nodecert_simhw.state import load_hw


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
    if host.get("arch") == "aarch64":  # Grace: one thread per core, lscpu's ARM layout
        threads = sockets * cores
        rows = [("Architecture", "aarch64"), ("CPU op-mode(s)", "64-bit"),
                ("Byte Order", "Little Endian"), ("CPU(s)", str(threads)),
                ("On-line CPU(s) list", f"0-{threads - 1}"), ("Vendor ID", "ARM"),
                ("Model name", host["cpu_model"]), ("Model", "0"),
                ("Thread(s) per core", "1"), ("Core(s) per socket", str(cores)),
                ("Socket(s)", str(sockets)), ("NUMA node(s)", str(sockets))]
    else:
        threads = sockets * cores * 2
        rows = [("Architecture", "x86_64"), ("CPU op-mode(s)", "32-bit, 64-bit"),
                ("Byte Order", "Little Endian"), ("CPU(s)", str(threads)),
                ("On-line CPU(s) list", f"0-{threads - 1}"),
                ("Vendor ID", "AuthenticAMD" if "AMD" in host["cpu_model"]
                 else "GenuineIntel"),
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
