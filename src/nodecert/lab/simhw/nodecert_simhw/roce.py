"""show_gids and mlnx_qos (NVIDIA's mlnx-tools) for the profile's RoCE ports: the GID
table with link-local and IPv4 GIDs in RoCE v1 and v2, and each port's QoS (trust dscp,
PFC on priority 3, the lossless setting RoCE fabrics run).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import re

from nodecert_simhw.faults import Faults
from nodecert_simhw.ib import hca_ports
from nodecert_simhw.state import load_hw


def netdev(n):
    return f"ens{n + 1}f0np0"


def _ipv4(hw, n):
    host = int(re.sub(r"\D", "", str(hw.get("host", ""))) or 0)
    return f"10.{200 + n}.{host // 250}.{host % 250 + 1}"


def cmd_show_gids(argv):
    hw = load_hw()
    faults = Faults(hw)
    rows = []
    for p in hca_ports(hw):
        if p["layer"] != "Ethernet" or (argv and argv[0] != p["ca"]):
            continue
        g = p["guid"][2:]
        local = f"fe80:0000:0000:0000:{g[0:4]}:{g[4:8]}:{g[8:12]}:{g[12:16]}"
        ip = _ipv4(hw, p["n"])
        a, b, c, d = (int(x) for x in ip.split("."))
        mapped = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
        versions = ("v1",) if faults.hca("roce_gid_v1", p["n"]) else ("v1", "v2")
        k = 0
        for gid, addr in ((local, ""), (mapped, ip)):
            for ver in versions:
                rows.append(f"{p['ca']}\t1\t{k}\t{gid}\t{addr + '  ' if addr else ''}\t"
                            f"{'' if addr else chr(9)}{ver}\t{netdev(p['n'])}")
                k += 1
    print("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV")
    print("---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---")
    for r in rows:
        print(r)
    print(f"n_gids_found={len(rows)}")
    return 0


def cmd_mlnx_qos(argv):
    hw = load_hw()
    iface = argv[argv.index("-i") + 1] if "-i" in argv and argv.index("-i") + 1 < len(argv) \
        else None
    port = next((p for p in hca_ports(hw) if netdev(p["n"]) == iface), None)
    if port is None:
        print(f"Netlink error: interface {iface} not found")  # what mlnx_qos says
        return 1
    faults = Faults(hw)
    trust = "pcp" if faults.hca("roce_trust_pcp", port["n"]) else "dscp"
    pfc = [0] * 8 if faults.hca("roce_pfc_off", port["n"]) else [0, 0, 0, 1, 0, 0, 0, 0]
    print("DCBX mode: OS controlled")
    print(f"Priority trust state: {trust}")
    if trust == "dscp":
        print("dscp2prio mapping:")
        for prio in range(8):
            dscps = ",".join(f"{d:02d}" for d in range(prio * 8 + 7, prio * 8 - 1, -1))
            print(f"\tprio:{prio} dscp:{dscps},")
    print("Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,")
    print("Cable len: 7")
    print("PFC configuration:")
    print("\tpriority    " + "   ".join(str(k) for k in range(8)))
    print("\tenabled     " + "   ".join(str(v) for v in pfc))
    print("\tbuffer      " + "   ".join("0" if not v else "1" for v in pfc))
    for tc in range(8):
        print(f"tc: {tc} ratelimit: unlimited, tsa: vendor")
        print(f"\t priority:  {tc}")
    return 0
