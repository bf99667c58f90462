"""fabric.nccl_allreduce: its bandwidth curve on the page; fabric.cabling: the fabric
against the cable plan, stated in the cluster's certificate."""

from __future__ import annotations

from typing import Any

from nodecert.certs import svgplot
from nodecert.core.checks import Voice, declare, result_of


def _curve(p: dict[str, Any], tr: Voice) -> list[str]:
    nccl = result_of(p["results"], "fabric.nccl_allreduce")
    curve = ((nccl or {}).get("value") or {}).get("curve") if nccl else None
    if not curve:
        return []
    return [svgplot.line_chart(
        tr("NCCL all-reduce bus bandwidth vs message size"),
        [("busbw", [(float(c["size"]), float(c["busbw"])) for c in curve])],
        xlabel=tr("message size (bytes)"), ylabel="GB/s", log_x=True, kind="nccl-busbw")]


declare("fabric.nccl_allreduce", module=__name__, order=30, plots=_curve)
declare("fabric.cabling", module=__name__, roles=("cabling",))
