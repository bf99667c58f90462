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
"""

from __future__ import annotations

import re
from typing import Any

KEYS = {"link_layer", "ports", "rate_gbps", "width", "firmware", "devices", "gpu_nic_affinity"}
AFFINITIES = ("PIX", "PXB", "PHB", "NODE")
LINK_LAYERS = ("InfiniBand", "Ethernet")


def parse_fabric(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(spec, None) or (None, what is wrong)."""
    if not isinstance(raw, dict):
        return None, f"must be a mapping ({', '.join(sorted(KEYS))}), got {raw!r}"
    unknown = sorted(set(map(str, raw)) - KEYS)
    if unknown:
        return None, f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})"
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
    return out, None


__all__ = ["AFFINITIES", "KEYS", "LINK_LAYERS", "parse_fabric"]
