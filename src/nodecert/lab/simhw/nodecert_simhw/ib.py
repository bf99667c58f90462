"""ibstat, ibstatus, perfquery: the profile's HCAs in infiniband-diags' own formats
(ibstat and ibstatus as rdma-core 44 prints them, perfquery -x with its dotted columns).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import hashlib
import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import load_hw

_RATE = {("NDR", "4X"): 400, ("NDR", "2X"): 200, ("NDR", "1X"): 100, ("HDR", "4X"): 200,
         ("HDR", "2X"): 100, ("HDR", "1X"): 50, ("EDR", "4X"): 100, ("EDR", "2X"): 50,
         ("EDR", "1X"): 25}


def hca_ports(hw):
    """Per HCA: name, guid, firmware, state, phys, width, speed, rate, lid."""
    h = hw["profile"].get("hcas") or {}
    faults = Faults(hw)
    out = []
    for n in range(int(h.get("count", 0))):
        if faults.hca("hca_missing", n):
            continue
        guid = hashlib.sha256(f"{hw.get('host')}/{hw['identity']['system_uuid']}/hca{n}"
                              .encode()).hexdigest()[:16]
        width, speed = h["width"], h["speed"]
        wd = faults.hca("width_degraded", n)
        if wd:
            width = str(wd.get("width", "2X"))
        sd = faults.hca("speed_degraded", n)
        if sd:
            speed = str(sd.get("speed", "HDR"))
        rate = _RATE.get((speed, width), int(h["rate_gbps"]))
        fw = faults.hca("hca_firmware", n)
        down = faults.hca("port_down", n)
        out.append({"ca": f"mlx5_{n}", "guid": f"0x{guid}", "type": h["ca_type"],
                    "firmware": str(fw.get("version", "28.39.1002")) if fw else h["firmware"],
                    "state": "Down" if down else "Active",
                    "phys": "Polling" if down else "LinkUp",
                    "width": width, "speed": speed, "rate": 40 if down else rate,
                    "lid": 0 if down or h["link_layer"] != "InfiniBand" else 100 + n,
                    "layer": h["link_layer"], "n": n})
    fe = h.get("frontend") or {}
    for m in range(int(fe.get("count", 0))):  # front-end Ethernet ports after the rails
        n = int(h["count"]) + m
        guid = hashlib.sha256(f"{hw.get('host')}/{hw['identity']['system_uuid']}/hca{n}"
                              .encode()).hexdigest()[:16]
        out.append({"ca": f"mlx5_{n}", "guid": f"0x{guid}", "type": h["ca_type"],
                    "firmware": h["firmware"], "state": "Active", "phys": "LinkUp",
                    "width": "4X", "speed": "HDR", "rate": int(fe.get("rate_gbps", 200)),
                    "lid": 0, "layer": "Ethernet", "n": n})
    return out


def cmd_ibstat(argv):
    hw = load_hw()
    for p in hca_ports(hw):
        if argv and argv[0] not in (p["ca"],):
            continue
        eth = p["layer"] == "Ethernet"
        print(f"CA '{p['ca']}'\n\tCA type: {p['type']}\n\tNumber of ports: 1\n"
              f"\tFirmware version: {p['firmware']}\n\tHardware version: 0\n"
              f"\tNode GUID: {p['guid']}\n\tSystem image GUID: {p['guid']}\n\tPort 1:\n"
              f"\t\tState: {p['state']}\n\t\tPhysical state: {p['phys']}\n"
              f"\t\tRate: {p['rate']}\n\t\tBase lid: {p['lid']}\n\t\tLMC: 0\n"
              f"\t\tSM lid: {0 if eth else 1}\n\t\tCapability mask: "
              f"{'0x00010000' if eth else '0xa751e848'}\n"
              f"\t\tPort GUID: {'0x0000000000000000' if eth else p['guid']}\n"
              f"\t\tLink layer: {p['layer']}")
    return 0


def cmd_ibstatus(argv):
    hw = load_hw()
    blocks = []
    for p in hca_ports(hw):
        state = "4: ACTIVE" if p["state"] == "Active" else "1: DOWN"
        phys = "5: LinkUp" if p["phys"] == "LinkUp" else "2: Polling"
        blocks.append(f"Infiniband device '{p['ca']}' port 1 status:\n"
                      f"\tdefault gid:\t fe80:0000:0000:0000:{p['guid'][2:6]}:{p['guid'][6:10]}:"
                      f"{p['guid'][10:14]}:{p['guid'][14:18]}\n"
                      f"\tbase lid:\t 0x{p['lid']:x}\n\tsm lid:\t\t 0x1\n\tstate:\t\t {state}\n"
                      f"\tphys state:\t {phys}\n"
                      f"\trate:\t\t {p['rate']} Gb/sec ({p['width']} {p['speed']})\n"
                      f"\tlink_layer:\t {p['layer']}\n")
    print("\n".join(blocks), end="")
    return 0


_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter",
             "PortRcvErrors", "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors",
             "PortXmitDiscards", "PortXmitConstraintErrors", "PortRcvConstraintErrors",
             "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors", "VL15Dropped",
             "PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait")


def cmd_perfquery(argv):
    """perfquery [-x] -C CA -P PORT: the port's counters (growing symbol errors under the
    symbol_errors fault)."""
    hw = load_hw()
    ca = argv[argv.index("-C") + 1] if "-C" in argv else "mlx5_0"
    port = next((p for p in hca_ports(hw) if p["ca"] == ca), None)
    if port is None:
        print(f"ibwarn: [1] mad_rpc_open_port: can't open UMAD port ({ca}:1)")
        return 255
    up_s = max(0.0, time.time() - float(hw.get("boot_time", time.time())))
    values = dict.fromkeys(_COUNTERS, 0)
    values["PortXmitData"] = values["PortRcvData"] = int(up_s * 1000)
    values["PortXmitPkts"] = values["PortRcvPkts"] = int(up_s * 10)
    se = Faults(hw).hca("symbol_errors", port["n"])
    if se:
        values["SymbolErrorCounter"] = int(up_s * float(se.get("per_s", 20)))
    ext = "-x" in argv
    print(f"# Port {'extended ' if ext else ''}counters: Lid {port['lid']} port 1 "
          "(CapMask: 0x5A00)")
    print(f"{'PortSelect:':.<33}1\n{'CounterSelect:':.<33}0x0000")
    for k, v in values.items():
        print(f"{k + ':':.<33}{v}")
    return 0
