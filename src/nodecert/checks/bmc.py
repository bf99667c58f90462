"""bmc.power: what the BMC read while the node's checks ran, drawn on the page and
summed up in its summary; bmc.bios: the BMC's BIOS settings (and those pending at the
next reset) against the host's BIOS profile, judged once the run is over."""

from __future__ import annotations

import statistics
from typing import Any

from nodecert.certs import svgplot
from nodecert.core.checks import HostReadings, Voice, declare, result_of
from nodecert.stack import bios
from nodecert_node.contract import Result


def bmc_charts(r: dict[str, Any] | None, tr: Voice) -> list[str]:
    """The system's draw and the chassis temperatures (the burn-in and the soak among
    them), over the run's seconds."""
    samples = ((r or {}).get("facts") or {}).get("samples") or []
    try:
        t0 = float(samples[0]["t"])
        power = [(float(s["t"]) - t0, float(s["power_w"])) for s in samples
                 if s.get("power_w") is not None]
        names = sorted({str(n) for s in samples for n in (s.get("temps") or {})})[:12]
        temps = [(n, [(float(s["t"]) - t0, float(s["temps"][n])) for s in samples
                      if n in (s.get("temps") or {})]) for n in names]
    except (TypeError, ValueError, KeyError, IndexError):  # a malformed series is not drawn
        return []
    out = []
    if len(power) >= 2:
        out.append(svgplot.line_chart(tr("System power draw read by the BMC during the run"),
                                      [(tr("draw"), power)], xlabel=tr("seconds"),
                                      ylabel="W", kind="bmc-power"))
    if temps and len(temps[0][1]) >= 2:
        out.append(svgplot.line_chart(tr("Temperatures read by the BMC during the run"),
                                      temps, xlabel=tr("seconds"), ylabel="C",
                                      kind="bmc-temps"))
    return out


def _draw(p: dict[str, Any], tr: Voice) -> list[tuple[str, str]]:
    """The system's draw the BMC read while the checks ran."""
    bmc = result_of(p["results"], "bmc.power") or {}
    draw = [float(x["power_w"]) for x in ((bmc.get("facts") or {}).get("samples") or [])
            if isinstance(x, dict) and isinstance(x.get("power_w"), int | float)]
    if not draw:
        return []
    return [(tr("system draw (BMC)"), tr("mean %(mean)s W, peak %(peak)s W") % {
        "mean": tr.localize(f"{statistics.fmean(draw):.0f}"),
        "peak": tr.localize(f"{max(draw):.0f}")})]


def _bios(h: HostReadings) -> Result | None:
    if h.bios is None:
        return None
    m = h.monitor
    return bios.judge_bios(h.bios, m.bios if m else None,
                           bmc_error=m.bios_error if m else h.no_bmc)


declare("bmc.bios", module=__name__, after_bmc=_bios, order=20)
declare("bmc.power", module=__name__, order=10, summary_order=20,
        plots=lambda p, tr: bmc_charts(result_of(p["results"], "bmc.power"), tr),
        summary=_draw)
