"""rack.*: the NVLink domain's jobs (without them a rack is not ready), the sweep drawn
as a heat-map on the rack's page, the firmware across the domain."""

from __future__ import annotations

from typing import Any

from nodecert.certs import svgplot
from nodecert.certs.cablingdraw import node_order
from nodecert.core.checks import Voice, declare, result_of


def _heatmap(p: dict[str, Any], tr: Voice) -> list[str]:
    """Each GPU's best pair in the sweep; nothing without one."""
    sweep = result_of(p["results"], "rack.sweep") or {}
    value = sweep.get("value") or {}
    heat = value.get("heatmap") or {}
    if not heat:
        return []
    cols = sorted({g for row in heat.values() for g in row}, key=int)
    mid, peer = value.get("median_gbs"), value.get("peer_fraction_min")
    low = float(mid) * float(peer) if mid and peer else None  # a slow pair's bound
    return [svgplot.heat_map(
        tr("NVLink domain sweep: each GPU's best pair bus bandwidth"),
        [(t, [heat[t].get(g) for g in cols]) for t in sorted(heat, key=node_order)],
        columns=[f"GPU {g}" for g in cols], unit="GB/s", low=low, kind="sweep")]


declare("rack.allreduce", module=__name__, roles=("domain-load",))
declare("rack.sweep", module=__name__, roles=("domain-load",), page="rack", plots=_heatmap)
declare("rack.firmware", module=__name__, roles=("rack-firmware",))
