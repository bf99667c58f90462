"""What a load cost in energy, from nvidia-smi's power samples taken while it ran.

The samples (index, power.draw, enforced.power.limit, about one a second) and the
load's length in, per GPU out: the plateau draw (median of the second half, as the soak
reads it), the power limit in force, the energy (mean draw x the load's seconds), and
the throughput per watt at the plateau. A GPU with no reading has no figure -- never 0.
"""

from __future__ import annotations

import statistics
from typing import Any

from nodecert_node.contract import Evidence, Result
from nodecert_node.parse import smi

ENERGY_FIELDS = ["index", "power.draw", "enforced.power.limit"]


def _by_gpu(rows: list[dict[str, str]], field: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for row in rows:
        g = smi.csv_number(row.get("index", ""))
        x = smi.csv_number(row.get(field, ""))
        if g is None:
            continue
        out.setdefault(int(g), [])
        if x is not None and x > 0:
            out[int(g)].append(float(x))
    return out


def summarize(rows: list[dict[str, str]], seconds: float,
              throughput: dict[str, float], unit: str = "tflops") -> dict[str, Any]:
    """The energy figures of a load: {"power_w_per_gpu", "power_limit_w_per_gpu",
    "energy_wh_per_gpu", "energy_wh", "<unit>_per_w_per_gpu", "samples"}; a figure a
    GPU gave no reading for is left out."""
    power = _by_gpu(rows, "power.draw")
    limits = _by_gpu(rows, "enforced.power.limit")
    plateau = {g: round(statistics.median(xs[len(xs) // 2:]), 1)
               for g, xs in power.items() if xs[len(xs) // 2:]}
    energy = {g: round(statistics.fmean(xs) * seconds / 3600.0, 3)
              for g, xs in power.items() if xs and seconds > 0}
    limit = {g: xs[-1] for g, xs in limits.items() if xs}
    per_w = {}
    for g, w in plateau.items():
        t = throughput.get(str(g))
        if t is not None and w > 0:
            per_w[str(g)] = round(float(t) / w, 4)
    out: dict[str, Any] = {
        "power_w_per_gpu": {str(g): w for g, w in sorted(plateau.items())},
        "power_limit_w_per_gpu": {str(g): w for g, w in sorted(limit.items())},
        "energy_wh_per_gpu": {str(g): e for g, e in sorted(energy.items())},
        f"{unit}_per_w_per_gpu": per_w, "samples": len(rows)}
    if energy:
        out["energy_wh"] = round(sum(energy.values()), 3)
    return out


def with_energy(res: Result, rows: list[dict[str, str]], raw: list[str], elapsed: float,
                 rc: int | None, *, command: str = "telemetry sampler") -> Result:
    """The burn-in's result with what it drew: power per GPU, the limit in force, the
    energy, throughput per watt (reported, not judged), and the samples as evidence."""
    value = dict(res.value) if isinstance(res.value, dict) else None
    if value is None:
        return res
    per_gpu = value.get("tflops_per_gpu") or {
        str(g): v for g, v in enumerate(value.get("gflops_per_gpu") or [])}
    unit = "tflops" if value.get("tflops_per_gpu") else "gflops"
    value["energy"] = summarize(rows, elapsed, per_gpu, unit)
    tel = Evidence.of("power", command, rc, "".join(raw), elapsed)
    return res.with_(value=value, evidence=(*res.evidence, tel))


__all__ = ["ENERGY_FIELDS", "summarize", "with_energy"]
