"""lspci: device listing (-nn), PCIe link capability/status (-vv), and for bridges the
buses behind them, their port type and their ACS control (-vvv)."""

from __future__ import annotations

import re
from typing import Any

from nodecert_node.parse import ParseError

# Transfer rate per lane -> PCIe generation (PCI-SIG base specifications).
GT_TO_GEN = {"2.5GT/s": 1, "5GT/s": 2, "8GT/s": 3, "16GT/s": 4, "32GT/s": 5, "64GT/s": 6}

_DEV = re.compile(r"^(?:Card: )?((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
                  r"([^:]+?)(?: \[([0-9a-fA-F]{4})\])?: (.*)$")
_IDS = re.compile(r"\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
_BUS = re.compile(r"Bus: primary=([0-9a-fA-F]{2}), secondary=([0-9a-fA-F]{2}), "
                  r"subordinate=([0-9a-fA-F]{2})")
_PORT = re.compile(r"Express \(v\d\) ([A-Za-z ]+?Port)\b")
_FLAG = re.compile(r"([A-Za-z]+)([+-])")
# The ACS controls that send peer-to-peer requests up to the root complex (and through
# the IOMMU) instead of across the switch: any of them on halves GPU<->NIC bandwidth.
ACS_REDIRECT = ("SrcValid", "ReqRedir", "CmpltRedir")
_LINK = re.compile(r"Speed ([\d.]+GT/s)(?: \((ok|downgraded)\))?, Width x(\d+)"
                   r"(?: \((ok|downgraded)\))?")


def _slot(raw: str) -> str:
    return (raw if raw.count(":") == 2 else "0000:" + raw).lower()


def parse_lspci(text: str) -> list[dict[str, Any]]:
    """Devices with slot, class, ids and (for -vv) link capability and status."""
    devices: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _DEV.match(line.strip()) if not raw[:1].isspace() else None
        if m:
            ids = _IDS.findall(m.group(4))
            name = _IDS.sub("", m.group(4)).replace("(rev", " (rev").strip()
            dev = re.search(r"NVIDIA Corporation Device ([0-9a-fA-F]{4})\b", m.group(4))
            vendor = ids[-1][0] if ids else ("10de" if name.startswith("NVIDIA") else "")
            device = ids[-1][1] if ids else (dev.group(1) if dev else "")
            cur = {"slot": _slot(m.group(1)), "class": m.group(2).strip(),
                   "class_id": (m.group(3) or "").lower(), "name": re.sub(r"\s+", " ", name),
                   "vendor_id": vendor.lower(), "device_id": device.lower(),
                   "cap_gen": None, "cap_width": None, "sta_gen": None, "sta_width": None,
                   "sta_flags": [], "buses": None, "port": None, "acs_ctl": None}
            devices.append(cur)
            continue
        if cur is None:
            continue
        s = line.strip()
        if s.startswith("Bus: primary="):
            bm = _BUS.search(s)
            if bm:
                cur["buses"] = (int(bm.group(2), 16), int(bm.group(3), 16))
        elif "Express (v" in s and cur["port"] is None:
            pm = _PORT.search(s)
            cur["port"] = pm.group(1) if pm else None
        elif s.startswith("ACSCtl:"):
            flags = dict(_FLAG.findall(s.split(":", 1)[1]))
            if not set(ACS_REDIRECT) <= set(flags):
                raise ParseError(f"{cur['slot']}: ACSCtl without {', '.join(ACS_REDIRECT)}: "
                                 f"{s!r}")
            cur["acs_ctl"] = {k: v == "+" for k, v in flags.items()}
        for tag, gen_key, width_key in (("LnkCap:", "cap_gen", "cap_width"),
                                        ("LnkSta:", "sta_gen", "sta_width")):
            if s.startswith(tag):
                lm = _LINK.search(s)
                if not lm:
                    raise ParseError(f"{cur['slot']}: cannot read link speed/width from {s!r}")
                cur[gen_key] = GT_TO_GEN.get(lm.group(1))
                cur[width_key] = int(lm.group(3))
                if tag == "LnkSta:":
                    cur["sta_flags"] = [f for f in (lm.group(2), lm.group(4)) if f]
    return devices


def _bus(slot: str) -> int:
    return int(slot.split(":")[-2], 16)


def acs_redirecting(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PCIe switch ports (upstream or downstream: not root ports) with an ACS redirect
    on whose buses hold a GPU or a NIC: each sends that device's peer-to-peer traffic up
    to the root complex. Each entry: the port and the devices behind it."""
    ends = nvidia_gpus(devices) + nics(devices)
    out = []
    for d in devices:
        ctl = d.get("acs_ctl")
        if not ctl or not d.get("buses") or "Root Port" in (d.get("port") or ""):
            continue
        if not (d.get("port") or "").endswith("Port"):
            continue
        on = [f for f in ACS_REDIRECT if ctl.get(f)]
        lo, hi = d["buses"]
        behind = [e["slot"] for e in ends if lo <= _bus(e["slot"]) <= hi]
        if on and behind:
            out.append({"slot": d["slot"], "name": d["name"], "port": d["port"],
                        "redirect": on, "behind": behind})
    return out


def nvidia_gpus(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NVIDIA display/3D controllers (class 03xx), whatever pci.ids calls them."""
    out = []
    for d in devices:
        is_nv = d["vendor_id"] == "10de" or d["name"].startswith("NVIDIA")
        is_gpu = d["class_id"].startswith("03") or d["class"] in (
            "3D controller", "VGA compatible controller", "Display controller")
        if is_nv and is_gpu:
            out.append(d)
    return out


def nvswitches(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in devices if (d["vendor_id"] == "10de" or d["name"].startswith("NVIDIA"))
            and (d["class_id"] == "0680" or d["class"] == "Bridge" or "NVSwitch" in d["name"])]


def nics(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ethernet / InfiniBand controllers (class 0200 / 0207)."""
    return [d for d in devices if d["class_id"] in ("0200", "0207")
            or d["class"] in ("Ethernet controller", "Infiniband controller",
                              "Network controller")]
