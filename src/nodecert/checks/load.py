"""load.*: the soak's series, the scaling curve and the burn-in's throughput drawn on
the page; the burn-in's energy in the summary; the parameters the burn-in must echo."""

from __future__ import annotations

import math
import statistics
from typing import Any

from nodecert.certs import svgplot
from nodecert.certs.html import scaling_chart
from nodecert.certs.i18n import N_
from nodecert.core.checks import Voice, declare, result_of

DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8", "fp64")


def _soak(p: dict[str, Any], tr: Voice) -> list[str]:
    soak = result_of(p["results"], "load.thermal_soak") or {}
    series = (soak.get("facts") or {}).get("series") or {}
    if not series:
        return []
    out = []
    fields = soak["facts"].get("series_fields") or []
    for col, title, unit in (("temp_c", N_("GPU temperature during the soak"), "C"),
                             ("sm_mhz", N_("SM clock during the soak"), "MHz"),
                             ("power_w", N_("Power draw during the soak"), "W")):
        if col not in fields:
            continue
        k = fields.index(col)
        out.append(svgplot.line_chart(
            tr(title), [(f"GPU{g}", [(float(row[0]), float(row[k] or 0)) for row in rows])
                        for g, rows in sorted(series.items(), key=lambda x: int(x[0]))],
            xlabel=tr("seconds (one sample per second)"), ylabel=unit, kind=f"soak-{col}"))
    return out


def _scaling(p: dict[str, Any], tr: Voice) -> list[str]:
    chart = scaling_chart(result_of(p["results"], "load.scaling"), tr)
    return [chart] if chart else []


def _burnin(p: dict[str, Any], tr: Voice) -> list[str]:
    burn = result_of(p["results"], "load.burnin") or {}
    value = burn.get("value") or {}
    if value.get("tflops_per_gpu"):
        # an enumeration from the node: only known values reach the page
        raw = value.get("dtype", "bf16")
        dtype = raw if raw in DTYPES else "unknown dtype"
        key = f"burnin.tflops_min_{dtype}"
        floor = burn.get("thresholds", {}).get(key, {}).get("value")
        return [svgplot.bar_chart(
            tr("Sustained %(dtype)s GEMM TFLOPS per GPU") % {"dtype": dtype},
            [(f"GPU{g}", float(v)) for g, v in sorted(value["tflops_per_gpu"].items(),
                                                       key=lambda x: int(x[0]))],
            ylabel="TFLOPS", floor=float(floor) if floor is not None else None,
            kind="burnin-tflops")]
    if value.get("gflops_per_gpu"):
        return [svgplot.bar_chart(
            tr("gpu_burn FP32 Gflop/s per GPU"),
            [(f"GPU{g}", float(v)) for g, v in enumerate(value["gflops_per_gpu"])],
            ylabel="Gflop/s", kind="burnin-gflops")]
    return []


def _finite(values: Any) -> list[float]:
    if not isinstance(values, dict):
        return []
    out = []
    for v in values.values():
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _energy(p: dict[str, Any], tr: Voice) -> list[tuple[str, str]]:
    """Throughput per watt at the burn-in's plateau draw, the power limit in force and
    the energy the burn-in used. Only what was measured: no line for a figure not
    reported."""
    burn = result_of(p["results"], "load.burnin") or {}
    e = (burn.get("value") or {}).get("energy") if isinstance(burn.get("value"), dict) else None
    out: list[tuple[str, str]] = []
    if not isinstance(e, dict):
        return out
    n = tr.localize
    per_w = _finite(e.get("tflops_per_w_per_gpu"))
    unit = "TFLOPS/W"
    if not per_w:
        per_w, unit = _finite(e.get("gflops_per_w_per_gpu")), "Gflop/s/W"
    power, limit = _finite(e.get("power_w_per_gpu")), _finite(e.get("power_limit_w_per_gpu"))
    if per_w:
        out.append((tr("throughput per watt"),
                    tr("%(low)s to %(high)s %(unit)s per GPU at %(watts)s W") % {
                        "low": n(f"{min(per_w):.3f}"), "high": n(f"{max(per_w):.3f}"),
                        "unit": unit, "watts": n(f"{statistics.median(power):.0f}")
                        if power else "?"}))
    if limit:
        out.append((tr("power limit in force"), tr("%(watts)s W per GPU") % {
            "watts": " / ".join(sorted({n(f"{x:.0f}") for x in limit}))}))
    used = e.get("energy_wh")
    if isinstance(used, int | float) and not isinstance(used, bool):
        out.append((tr("energy of the burn-in"), tr("%(wh)s Wh (GPUs)") % {
            "wh": n(f"{used:.2f}")}))
    return out


declare("load.thermal_soak", module=__name__, order=20, plots=_soak)
declare("load.scaling", module=__name__, order=40, plots=_scaling)
declare("load.burnin", module=__name__, order=50, summary_order=10, plots=_burnin,
        summary=_energy,
        # what the node must report it ran with: (value key, the plan's load option,
        # its default, how they compare); a run may last a moment longer, never shorter
        echoes=(("dtype", "dtype", "bf16", "equal"), ("n", "gemm_size", 8192, "equal"),
                ("seconds", "burnin_s", 60, "at_least")))
