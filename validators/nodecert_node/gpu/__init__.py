"""The GPU backend seam: checks read GPUs (inventory and identity, health counters,
telemetry, topology, power, the driver, the compute processes) only through
`backend(ctx)`, never by running a vendor's tool themselves. NVIDIA (nvidia.py) is
today's implementation; another vendor is one module here that registers a Backend.
"""

from __future__ import annotations

from typing import Any

from nodecert_node.gpu import nvidia as _nvidia  # registers NVIDIA's tools
from nodecert_node.gpu.base import (
    BACKENDS,
    DEFAULT_VENDOR,
    Backend,
    Inventory,
    register,
    withdraw,
)
from nodecert_node.tools import ToolError


def backend(ctx: Any) -> Backend:
    """The backend of the vendor the node's plan names (NVIDIA where it names none)."""
    vendor = str((getattr(ctx, "spec", None) or {}).get("gpu_vendor") or DEFAULT_VENDOR)
    found = BACKENDS.get(vendor)
    if found is None:
        raise ToolError(f"no GPU backend for vendor {vendor!r} (known: "
                        f"{', '.join(sorted(BACKENDS))})", kind="missing")
    return found


def default() -> Backend:
    """The backend where no plan says (the load guard, between runs)."""
    return BACKENDS[DEFAULT_VENDOR]


def inventory(ctx: Any) -> Inventory:
    """The common first step of every GPU check: every GPU's record; NoGpu (a FAIL)
    where there is no GPU or no working driver."""
    return backend(ctx).inventory(ctx)


SMI = _nvidia.NVIDIA.tool  # the default vendor's management tool, for check declarations

__all__ = ["BACKENDS", "DEFAULT_VENDOR", "SMI", "Backend", "Inventory", "backend", "default",
           "inventory", "register", "withdraw"]
