"""A node's hardware identity: its canonical form, digest, and what changed between two.

The certificate's subject is the digest; verify and drift compare identities. Pure
functions, no I/O: importing this loads neither SSH nor the validation code.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from nodecert.certs.signing import canonical_json


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


def identifies(identity: dict[str, Any]) -> bool:
    """Does the identity name this node's hardware at all: at least one non-empty
    serial, UUID or MAC? An identity of empty strings digests the same for every node."""
    c = canonical_identity(identity)
    return any(c[k] for k in ("system_serial", "system_uuid", "baseboard_serial", "nic_macs")) \
        or any(g["serial"] or g["uuid"] for g in c["gpus"]) \
        or any(d["serial"] for d in c["nvme"])


def identity_digest(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(canonical_identity(identity))).hexdigest()


def certificate_identity(identity: dict[str, Any]) -> dict[str, Any]:
    """What a certificate shows: the canonical identity, with the GPUs as rows in slot
    order (index as the driver enumerates them, PCI bus) so a reader finds GPU 3 in row
    3. The slot and bus are shown, not hashed: the digest is of canonical_identity."""
    out = canonical_identity(identity)
    out["gpus"] = [{"index": i, "bus_id": str(g.get("bus_id") or ""),
                    "serial": str(g.get("serial") or ""), "uuid": str(g.get("uuid") or "")}
                   for i, g in enumerate(identity.get("gpus") or [])]
    return out


def _gpu_key(g: dict[str, Any]) -> tuple[str, str]:
    return str(g.get("serial") or ""), str(g.get("uuid") or "")


def _bus_key(bus: Any) -> str:
    """'00000000:3B:00.0' and '0000:3b:00.0' name the same slot."""
    parts = str(bus or "").lower().split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


def _slot(g: dict[str, Any], index: int | None) -> str:
    where = [f"slot {index}"] if index is not None else []
    if g.get("bus_id"):
        where.append(f"bus {g['bus_id']}")
    return f" in {', '.join(where)}" if where else ""


def _gpu_changes(certified: list[dict[str, Any]], live: list[dict[str, Any]]) -> list[str]:
    """GPUs that differ, named by slot and bus: matched by serial/UUID first (a renumbered
    bus is no change), then what is left by bus (the same slot, another GPU)."""
    live_keys = {_gpu_key(g) for g in live}
    cert_keys = {_gpu_key(g) for g in certified}
    gone = [(i, g) for i, g in enumerate(certified) if _gpu_key(g) not in live_keys]
    came = [(i, g) for i, g in enumerate(live) if _gpu_key(g) not in cert_keys]
    out = []

    def label(g: dict[str, Any]) -> str:
        return f"serial {g.get('serial') or '(none)'} ({g.get('uuid') or 'no UUID'})"
    for i, g in list(gone):
        idx = g.get("index", i)
        twin = next(((j, h) for j, h in came if g.get("bus_id") and
                     _bus_key(h.get("bus_id")) == _bus_key(g.get("bus_id"))), None)
        if twin is None and len(gone) == len(came) == 1:
            twin = came[0]
        if twin is not None:
            out.append(f"GPU replaced{_slot(g, idx)}: {label(g)} -> {label(twin[1])}")
            came.remove(twin)
            gone.remove((i, g))
    out += [f"GPU no longer present{_slot(g, g.get('index', i))}: {label(g)}"
            for i, g in gone]
    out += [f"GPU not in the certificate{_slot(g, i)}: {label(g)}" for i, g in came]
    return out


def identity_changes(certified: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """What differs between the certified identity and the live one, in words."""
    a, b = canonical_identity(certified), canonical_identity(live)
    out = []
    for k in ("system_serial", "system_uuid", "baseboard_serial"):
        if a[k] != b[k]:
            out.append(f"{k.replace('_', ' ')} {a[k] or '(none)'} -> {b[k] or '(none)'}")
    out += _gpu_changes(list(certified.get("gpus") or []), list(live.get("gpus") or []))
    for k, label in (("nvme", "NVMe"), ("nic_macs", "NIC")):
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


__all__ = ["canonical_identity", "certificate_identity", "identity_changes",
           "identity_digest"]
