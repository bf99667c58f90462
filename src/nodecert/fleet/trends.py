"""Trends over a node's own runs: a figure that gets worse at every one of its last
runs is flagged before it crosses a floor.

* a figure where higher is better (TFLOPS, bandwidth, clocks): lower at each of the
  last fleet.trend_runs runs, and in all by more than fleet.trend_drop_fraction_max;
* a temperature: higher at each of those runs, in all by more than fleet.trend_rise_c_max;
* a count (corrected ECC errors): higher at each of those runs.

Pure: the runs are given oldest first; a run without the figure (not measured, ERROR)
breaks nothing and counts for nothing.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from nodecert.fleet.samples import samples, where
from nodecert_node.contract import Limits, Result, Verdict

CHECK = "fleet.trend"
KEYS = ("fleet.trend_runs", "fleet.trend_drop_fraction_max", "fleet.trend_rise_c_max")


@dataclass(frozen=True)
class Trend:
    """A host's figure over its last runs, oldest first, to see it drift before it fails."""

    metric: str
    label: str
    unit: str
    values: tuple[float, ...]  # the last runs' figures, oldest first
    runs: tuple[str, ...]

    @property
    def change(self) -> float:
        return self.values[-1] - self.values[0]

    def message(self) -> str:
        at = f" {where(self.label)}" if self.label else ""
        path = " -> ".join(f"{v:g}" for v in self.values)
        if self.unit in ("C", "errors"):
            return (f"{self.metric}{at} rose at each of the last {len(self.values)} runs: "
                    f"{path} {self.unit}")
        return (f"{self.metric}{at} fell at each of the last {len(self.values)} runs: {path} "
                f"{self.unit} ({abs(self.change) / self.values[0]:.1%} in all)")

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "label": self.label, "unit": self.unit,
                "values": list(self.values), "runs": list(self.runs)}


def series(history: list[tuple[str, list[Result]]]) -> dict[
        tuple[str, str], list[tuple[str, float, str, str]]]:
    """(metric, label) -> [(run id, value, unit, better)] oldest first."""
    out: dict[tuple[str, str], list[tuple[str, float, str, str]]] = defaultdict(list)
    for run_id, results in history:
        for s in samples(results):
            out[(s.metric, s.label)].append((run_id, s.value, s.unit, s.better))
    return out


def find(history: list[tuple[str, list[Result]]], limits: Limits) -> list[Trend]:
    """The figures whose last runs each got worse, beyond the limits (see the module)."""
    n = int(limits.get("fleet.trend_runs").value)
    drop, rise = limits.get("fleet.trend_drop_fraction_max"), limits.get("fleet.trend_rise_c_max")
    out = []
    for (metric, label), pts in sorted(series(history).items()):
        last = pts[-n:]
        if n < 2 or len(last) < n:
            continue
        vals = [v for _, v, _, _ in last]
        unit, better = last[-1][2], last[-1][3]
        steps = list(itertools.pairwise(vals))
        worse = all(b < a for a, b in steps) if better == "higher" else \
            all(b > a for a, b in steps)
        if not worse:
            continue
        if better == "higher":
            if vals[0] <= 0 or drop.check(round((vals[0] - vals[-1]) / vals[0], 4)).ok:
                continue
        elif unit == "C" and rise.check(round(vals[-1] - vals[0], 2)).ok:
            continue
        elif unit not in ("C", "errors"):
            continue  # other lower-is-better figures (power) vary with load, not with wear
        out.append(Trend(metric, label, unit, tuple(vals), tuple(r for r, _, _, _ in last)))
    return out


def judge(history: list[tuple[str, list[Result]]], limits: Limits) -> Result:
    """fleet.trend: WARN naming each figure that got worse run after run (a floor not
    crossed yet is the point: this is the warning before it), PASS when none did."""
    n = int(limits.get("fleet.trend_runs").value)
    thresholds = limits.pick(*KEYS)
    measured = [h for h in history if samples(h[1])]
    if len(measured) < n:
        return Result(CHECK, Verdict.PASS, f"{len(measured)} run(s) with figures: a trend "
                      f"needs {n}; nothing to judge yet", value={"runs": len(measured)},
                      thresholds=thresholds)
    trends = find(history, limits)
    value = {"runs": len(measured), "trends": [t.as_dict() for t in trends]}
    if not trends:
        return Result(CHECK, Verdict.PASS, f"no figure got worse at each of the last {n} runs",
                      value=value, thresholds=thresholds)
    msgs = tuple(t.message() for t in trends)
    return Result(CHECK, Verdict.WARN, msgs[0] + (f" (+{len(msgs) - 1} more)"
                                                  if len(msgs) > 1 else ""),
                  value=value, thresholds=thresholds, findings=msgs, fault_code="NC-FLEET-TREND",
                  remediation="The figure has not crossed its floor yet. Look at it now: "
                              "compare the GPU's clocks, temperatures and error counters with "
                              "a peer's, check its cooling, and plan a loaded re-test "
                              "(nodecert revalidate --after-repair) after any service.")


__all__ = ["CHECK", "KEYS", "Trend", "find", "judge", "series"]
