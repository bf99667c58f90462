"""The lab's Ethernet leaf switches as LLDP sees them: IEEE 802.1AB frames sent every
second on each switch-side interface of the lab's Ethernet fabric, saying which switch
(system name) and which of its ports (interface name) the cable reaches. The hosts run
Debian's lldpd, which receives them as from a real switch; `lldpctl -f json` on a host
is the real tool's output. SIMULATED SWITCHES (the frames say so in their system
description); the lab has no switch to run lldpd on.

  python -m nodecert.lab.lldpsim --config FILE   (in the lab's management namespace)

FILE: {"<interface>": {"system": "leaf-00", "port": "swp3", "mac": "02:..."}, ...},
re-read every second (the lab's faults rewrite it); an interface not listed is silent.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

LLDP_MULTICAST = bytes.fromhex("0180c200000e")  # nearest bridge
ETH_P_LLDP = 0x88CC
INTERVAL_S = 1.0
TTL_S = 4  # a cable pulled (the interface silent) is forgotten within seconds


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", (kind << 9) | len(value)) + value


def _mac(text: str) -> bytes:
    raw = bytes.fromhex(text.replace(":", ""))
    if len(raw) != 6:
        raise ValueError(f"{text!r} is not a MAC address")
    return raw


def frame(src_mac: str, system: str, port: str, ttl: int = TTL_S) -> bytes:
    """One LLDPDU in its Ethernet frame: chassis ID (the switch's MAC), port ID (its
    interface name), TTL, port description, system name, system description, end."""
    chassis = _mac(src_mac)
    tlvs = (_tlv(1, b"\x04" + chassis)  # chassis ID, subtype 4: MAC address
            + _tlv(2, b"\x05" + port.encode())  # port ID, subtype 5: interface name
            + _tlv(3, struct.pack("!H", ttl))
            + _tlv(4, port.encode())  # port description
            + _tlv(5, system.encode())  # system name
            + _tlv(6, b"nodecert lab leaf switch (SIMULATED)")
            + _tlv(0, b""))
    return LLDP_MULTICAST + chassis + struct.pack("!H", ETH_P_LLDP) + tlvs


def _load(path: Path) -> dict[str, dict[str, str]]:
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): {str(a): str(b) for a, b in v.items()} for k, v in data.items()
            if isinstance(v, dict)} if isinstance(data, dict) else {}


def serve(config: Path) -> None:
    """Send every configured interface's frame each second until SIGTERM."""
    running = True

    def stop(*_: Any) -> None:
        nonlocal running
        running = False
    signal.signal(signal.SIGTERM, stop)
    socks: dict[str, socket.socket] = {}
    while running:
        want = _load(config)
        for iface in list(socks):
            if iface not in want:
                socks.pop(iface).close()
        for iface, port in want.items():
            try:
                s = socks.get(iface)
                if s is None:
                    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                    s.bind((iface, 0))
                    socks[iface] = s
                s.send(frame(port["mac"], port["system"], port["port"]))
            except (OSError, KeyError, ValueError) as exc:  # an interface down or gone
                socks.pop(iface, None)
                print(f"lldpsim: {iface}: {exc}", file=sys.stderr, flush=True)
        time.sleep(INTERVAL_S)  # LLDP's own pace: a frame per interface per interval


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, required=True)
    serve(ap.parse_args().config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
