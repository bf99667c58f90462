"""A node judged against its peers: each of its figures beside the fleet baseline's
median and robust spread for its GPU model.

A figure is an outlier when it lies on the worse side of the median by more than
fleet.robust_deviations_max robust deviations AND by more than fleet.shortfall_fraction_max
of the median: the first says it is beyond the fleet's own spread, the second that the
difference matters (a fleet of near-identical figures has a tiny spread). A group
with fewer than fleet.min_peers nodes is not judged, and the result says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodecert.fleet import stats
from nodecert.fleet.baseline import Baseline, MetricStats
from nodecert.fleet.samples import (
    MetricPolicy,
    Sample,
    gpu_model,
    load_policy,
    policy_for,
    samples,
    where,
)
from nodecert_node.contract import Limits, Result, Threshold, Verdict, worst

CHECK = "fleet.peers"
KEYS = ("fleet.robust_deviations_max", "fleet.shortfall_fraction_max", "fleet.min_peers")


@dataclass(frozen=True)
class Outlier:
    """One figure of a host that falls outside its peers' spread: the figure, the
    fleet's median and robust spread, and how far on the worse side it lies."""

    metric: str
    label: str
    value: float
    unit: str
    better: str
    median: float
    sigma: float
    deviations: float  # robust deviations on the worse side (positive)
    fraction: float  # how far on the worse side, as a fraction of the median
    verdict: Verdict
    source: str

    def message(self, peers: int) -> str:
        at = f" {where(self.label)}" if self.label else ""
        side = "below" if self.better == "higher" else "above"
        return (f"{self.metric}{at} {self.value:g} {self.unit} is {abs(self.fraction):.1%} "
                f"{side} the fleet median {self.median:g} {self.unit} ({self.deviations:.1f} "
                f"robust deviations; spread {self.sigma:.3g} {self.unit}, {peers} peer nodes)")

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "label": self.label, "value": self.value,
                "unit": self.unit, "median": self.median, "sigma": self.sigma,
                "deviations": round(self.deviations, 2), "fraction": round(self.fraction, 4),
                "verdict": str(self.verdict)}


def _limit(limits: Limits, key: str) -> Threshold:
    t = limits.opt(key)
    if t is None:
        raise KeyError(f"threshold {key} is not set: the fleet judge needs "
                       f"{', '.join(KEYS)} (validators/profiles/common.yml)")
    return t


def _compare(figures: list[Sample], group: dict[str, MetricStats],
             policy: dict[str, MetricPolicy],
             limits: Limits) -> tuple[list[Outlier], dict[str, int], dict[str, str]]:
    """(outliers, metric -> peers it was judged among, metric -> why not judged): each
    figure against its model group's median and spread; a figure is an outlier only
    when it misses both limits (deviations and fraction) on its worse side."""
    k_max, frac_min, peers_min = (_limit(limits, k) for k in KEYS)
    outliers: list[Outlier] = []
    judged: dict[str, int] = {}
    not_judged: dict[str, str] = {}
    for s in figures:
        pol = policy_for(s.metric, policy)
        st = group.get(s.metric)
        if pol is None:
            continue
        if st is None:
            not_judged[s.metric] = "not in the baseline"
            continue
        if not peers_min.check(st.nodes).ok:
            not_judged[s.metric] = f"{st.nodes} peer nodes, " + peers_min.check(st.nodes).message
            continue
        judged[s.metric] = st.nodes
        sign = 1.0 if st.better == "higher" else -1.0  # worse side: below for higher-better
        dev = -sign * stats.deviations(s.value, st.median, st.sigma)
        frac = -sign * (s.value - st.median) / st.median if st.median else 0.0
        # Both limits passed by the figure = within the fleet; both missed = an outlier.
        if dev > 0 and not k_max.check(round(dev, 2)).ok and \
                not frac_min.check(round(frac, 4)).ok:
            outliers.append(Outlier(s.metric, s.label, s.value, s.unit, st.better, st.median,
                                    st.sigma,
                                    dev, frac, Verdict[pol.verdict], pol.source))
    return outliers, judged, not_judged


def judge(results: list[Result], baseline: Baseline, limits: Limits, *,
          host: str = "", policy: dict[str, MetricPolicy] | None = None,
          extra: Iterable[Sample] = ()) -> Result:
    """fleet.peers for one node's results (and `extra` figures measured elsewhere: its
    cluster pairings). Only figures the node measured are judged;
    a metric the baseline lacks, or whose group has too few peers, is listed as not judged."""
    policy = policy if policy is not None else load_policy()
    model = gpu_model(results)
    thresholds = {k: _limit(limits, k) for k in KEYS}
    base = {"baseline": baseline.version, "gpu_model": model}
    if not model:
        return Result(CHECK, Verdict.WARN, "not judged against the fleet: the node's GPU model "
                      "was not read (hardware.inventory)", value=base, thresholds=thresholds,
                      fault_code="NC-FLEET-NOT-JUDGED")
    group = baseline.groups.get(model)
    if not group:
        return Result(CHECK, Verdict.WARN, f"not judged against the fleet: baseline "
                      f"{baseline.version} has no {model} nodes", value=base,
                      thresholds=thresholds, fault_code="NC-FLEET-NOT-JUDGED",
                      remediation="Build a baseline from runs of this model's nodes "
                                  "(nodecert fleet baseline).")
    outliers, judged, not_judged = _compare([*samples(results), *extra], group, policy,
                                            limits)
    value = {**base, "judged": judged, "not_judged": not_judged,
             "outliers": [o.as_dict() for o in outliers]}
    if not judged:
        why = "; ".join(f"{m}: {w}" for m, w in sorted(not_judged.items())[:3]) or \
            "the node has no figure the fleet is judged on (run a suite that measures)"
        return Result(CHECK, Verdict.WARN, f"not judged against the fleet: {why}", value=value,
                      thresholds=thresholds, fault_code="NC-FLEET-NOT-JUDGED")
    if not outliers:
        peers = max(judged.values())
        return Result(CHECK, Verdict.PASS, f"{len(judged)} figure(s) within the fleet's "
                      f"spread ({model}, {peers} peer nodes, baseline {baseline.version})"
                      + (f"; not judged: {', '.join(sorted(not_judged))}" if not_judged else ""),
                      value=value, thresholds=thresholds)
    outliers.sort(key=lambda o: (-int(o.verdict), -o.deviations))
    msgs = tuple(o.message(judged[o.metric]) for o in outliers)
    verdict = worst(o.verdict for o in outliers)
    return Result(CHECK, verdict, msgs[0] + (f" (+{len(msgs) - 1} more)" if len(msgs) > 1
                                             else ""),
                  value=value, thresholds=thresholds, findings=msgs,
                  fault_code="NC-FLEET-OUTLIER",
                  remediation="The node passes its absolute floors but is clearly slower than "
                              "identical peers: every job it joins runs at its pace. Compare "
                              "the named GPU's clocks, power and temperatures (load.thermal_soak),"
                              " its PCIe link (hardware.pcie) and its firmware with a peer's; "
                              "reseat or service it, then re-test with load.")


__all__ = ["CHECK", "KEYS", "Outlier", "judge"]
