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


def _nvlink_grid(p: dict[str, Any], tr: Voice) -> list[str]:
    """The NVLink domain's wiring: for each tray and switch chip, its GPUs linked there as
    the kind is wired (a cell short of the tray's GPUs is red); nothing where not judged."""
    value = (result_of(p["results"], "rack.nvlink_map") or {}).get("value") or {}
    grid = value.get("grid") or {}
    if not grid:
        return []
    cols = sorted({c for row in grid.values() for c in row})
    return [svgplot.heat_map(
        tr("NVLink domain wiring: each tray's GPUs linked to each switch chip"),
        [(t, [grid[t].get(c) for c in cols]) for t in sorted(grid, key=node_order)],
        columns=cols, unit="GPUs", low=value.get("gpus_per_tray"), kind="nvlink-map")]


declare("rack.nvlink_map", module=__name__, page="rack", plots=_nvlink_grid)
declare("rack.allreduce", module=__name__, roles=("domain-load",))
declare("rack.sweep", module=__name__, roles=("domain-load",), page="rack", plots=_heatmap)
declare("rack.firmware", module=__name__, roles=("rack-firmware",))
