"""A node's hardware identity: its canonical form, digest, and what changed between two.

The certificate's subject is the digest; verify and drift compare identities. Pure
functions, no I/O: importing this loads neither SSH nor the validation code.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from nodecert.signing import canonical_json


def canonical_identity(identity: dict[str, Any]) -> dict[str, Any]:
    """The parts of the hardware that make the node this node, in a stable order.

    Device names (nvme0n1) and PCI bus ids can renumber without a hardware
    change, so serials, UUIDs and MACs are what count."""
    gpus = [{"serial": str(g.get("serial") or ""), "uuid": str(g.get("uuid") or "")}
            for g in identity.get("gpus") or []]
    nvme = [{"serial": str(d.get("serial") or ""), "model": str(d.get("model") or "")}
            for d in identity.get("nvme") or []]
    return {
        "system_serial": str(identity.get("system_serial") or ""),
        "system_uuid": str(identity.get("system_uuid") or "").lower(),
        "baseboard_serial": str(identity.get("baseboard_serial") or ""),
        "gpus": sorted(gpus, key=lambda g: (g["uuid"], g["serial"])),
        "nic_macs": sorted(str(m).lower() for m in identity.get("nic_macs") or []),
        "nvme": sorted(nvme, key=lambda d: (d["serial"], d["model"])),
    }


def identity_digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(canonical_identity(identity))).hexdigest()


def identity_changes(certified: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """What differs between the certified identity and the live one, in words."""
    a, b = canonical_identity(certified), canonical_identity(live)
    out = []
    for k in ("system_serial", "system_uuid", "baseboard_serial"):
        if a[k] != b[k]:
            out.append(f"{k.replace('_', ' ')} {a[k] or '(none)'} -> {b[k] or '(none)'}")
    for k, label in (("gpus", "GPU"), ("nvme", "NVMe"), ("nic_macs", "NIC")):
        old = [json.dumps(x, sort_keys=True) for x in a[k]]
        new = [json.dumps(x, sort_keys=True) for x in b[k]]
        gone = [x for x in old if x not in new]
        came = [x for x in new if x not in old]
        if len(gone) == len(came) == 1:
            out.append(f"{label} replaced: {gone[0]} -> {came[0]}")
            continue
        if gone:
            out.append(f"{label} no longer present: {', '.join(gone)}")
        if came:
            out.append(f"{label} not in the certificate: {', '.join(came)}")
    return out


__all__ = ["canonical_identity", "identity_changes", "identity_digest"]
