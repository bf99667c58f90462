"""The order's fabric (`nodecert_fabric` in the inventory): what each node's RDMA ports
must be. Read once on the control side and sent to the node in the plan's spec.

    nodecert_fabric:
      link_layer: InfiniBand     # or Ethernet (RoCE)
      ports: 8                   # compute ports of that link layer
      rate_gbps: 400             # per port (NDR: 400; HDR: 200; 400GbE: 400)
      width: 4X                  # optional
      firmware: 28.41.1000       # optional: the site's golden HCA firmware
      devices: [mlx5_0, ...]     # optional: the compute HCAs (others, e.g. a front-end
                                 # bond or a DPU, are not judged)
      gpu_nic_affinity: PIX      # optional: every GPU has a compute NIC at least this
                                 # close in `nvidia-smi topo -m` (PIX, PXB, PHB, NODE)
      gpudirect: true            # optional (default true): the order has GPUDirect RDMA,
                                 # so a multi-node NCCL run without it FAILs
      roce:                      # optional, Ethernet: the lossless settings the site runs
        gid_type: v2             # every compute port has a routable RoCE v2 GID
        pfc_priorities: [3]      # PFC enabled on exactly these priorities (mlnx_qos)
        trust: dscp              # the ports' priority trust state
        ecn_priorities: [3]      # ECN (notification and reaction point) on these
"""

from __future__ import annotations

import re
from typing import Any

from nodecert.core.yamldoc import keyed

KEYS = {"link_layer", "ports", "rate_gbps", "width", "firmware", "devices", "gpu_nic_affinity",
        "roce", "gpudirect"}
ROCE_KEYS = {"gid_type", "pfc_priorities", "trust", "ecn_priorities"}
AFFINITIES = ("PIX", "PXB", "PHB", "NODE")
LINK_LAYERS = ("InfiniBand", "Ethernet")


def parse_fabric(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(spec, None) or (None, what is wrong)."""
    raw, why = keyed(raw, KEYS)
    if raw is None:
        return None, why
    missing = sorted({"link_layer", "ports", "rate_gbps"} - set(raw))
    if missing:
        return None, f"lacks {', '.join(missing)}"
    layer = str(raw["link_layer"])
    if layer not in LINK_LAYERS:
        return None, f"link_layer {layer!r} is not one of {', '.join(LINK_LAYERS)}"
    out: dict[str, Any] = {"link_layer": layer}
    for key in ("ports", "rate_gbps"):
        try:
            value = float(raw[key])
        except (TypeError, ValueError):
            return None, f"{key} must be a number, got {raw[key]!r}"
        if value <= 0 or (key == "ports" and value != int(value)):
            return None, f"{key} must be a positive {'integer' if key == 'ports' else 'number'}"
        out[key] = int(value) if key == "ports" else value
    if "width" in raw:
        width = str(raw["width"]).upper()
        if not re.fullmatch(r"(1|2|4|8|12)X", width):
            return None, f"width {raw['width']!r} is not 1X, 2X, 4X, 8X or 12X"
        out["width"] = width
    if "firmware" in raw:
        out["firmware"] = str(raw["firmware"])
    if "gpu_nic_affinity" in raw:
        near = str(raw["gpu_nic_affinity"]).upper()
        if near not in AFFINITIES:
            return None, (f"gpu_nic_affinity {raw['gpu_nic_affinity']!r} is not one of "
                          f"{', '.join(AFFINITIES)}")
        out["gpu_nic_affinity"] = near
    if "devices" in raw:
        devices = raw["devices"]
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            return None, f"devices must be a list of HCA names, got {devices!r}"
        out["devices"] = list(devices)
    if "gpudirect" in raw:
        if not isinstance(raw["gpudirect"], bool):
            return None, f"gpudirect must be true or false, got {raw['gpudirect']!r}"
        out["gpudirect"] = raw["gpudirect"]
    if "roce" in raw:
        roce, why = _parse_roce(raw["roce"])
        if roce is None:
            return None, f"roce: {why}"
        out["roce"] = roce
    return out, None


def _parse_roce(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The RoCE settings the site requires: {gid_type: v2, pfc_priorities: [3],
    trust: dscp, ecn_priorities: [3]} (each optional)."""
    raw, why = keyed(raw, ROCE_KEYS)
    if raw is None:
        return None, why
    out: dict[str, Any] = {}
    if "gid_type" in raw:
        gid = str(raw["gid_type"]).lower().replace("roce", "").strip()
        if gid not in ("v1", "v2"):
            return None, f"gid_type {raw['gid_type']!r} is not RoCE v1 or RoCE v2"
        out["gid_type"] = gid
    if "trust" in raw:
        if str(raw["trust"]).lower() not in ("dscp", "pcp"):
            return None, f"trust {raw['trust']!r} is not dscp or pcp"
        out["trust"] = str(raw["trust"]).lower()
    for key in ("pfc_priorities", "ecn_priorities"):
        if key in raw:
            v = raw[key]
            if not isinstance(v, list) or not all(
                    isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= 7 for p in v):
                return None, f"{key} must be a list of priorities 0..7, got {v!r}"
            out[key] = sorted(set(v))
    return out, None


__all__ = ["AFFINITIES", "KEYS", "LINK_LAYERS", "ROCE_KEYS", "parse_fabric"]
