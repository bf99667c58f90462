"""power.limit: each GPU's enforced power limit against its default.

A GPU left with its power limit below NVIDIA's default (a test setting, a capped
rack profile) delivers less than the ordered performance while every health check
passes. The measure is the ratio enforced / default per GPU, judged against
`power.limit_fraction_min`; a GPU that reports no limit (N/A) is noted, not judged.
"""

from __future__ import annotations

from nodecert_node.context import Ctx, judge_findings, nvidia_smi_q, within
from nodecert_node.contract import Limits, Result
from nodecert_node.parse import smi
from nodecert_node.registry import check
from nodecert_node.tools import run

# Section and label names across driver generations: R535+ "GPU Power Readings"
# with "Current Power Limit"; older drivers "Power Readings" with "Enforced Power Limit".
CURRENT = ("GPU Power Readings/Current Power Limit", "Power Readings/Enforced Power Limit",
           "Power Readings/Power Limit")
DEFAULT = ("GPU Power Readings/Default Power Limit", "Power Readings/Default Power Limit")


def _watts(d: dict[str, str], labels: tuple[str, ...]) -> float | None:
    for label in labels:
        raw = d.get(label, "")
        number = raw[:-1].strip() if raw.endswith("W") else ""
        try:
            return float(number)
        except ValueError:
            continue
    return None


def power_limits(q_text: str) -> dict[str, dict[str, float | None]]:
    """`nvidia-smi -q` -> {bus id: {"current_w", "default_w"}} (None where N/A). Pure."""
    _, blocks = smi.q_tree(q_text)
    return {bus: {"current_w": _watts(d, CURRENT), "default_w": _watts(d, DEFAULT)}
            for bus, d in blocks}


def judge_power(limits_w: dict[str, dict[str, float | None]], limits: Limits) -> Result:
    warns: list[str] = []
    notes: list[str] = []
    ratios: dict[str, float] = {}
    for bus, w in sorted(limits_w.items()):
        cur, default = w["current_w"], w["default_w"]
        if cur is None or not default:
            notes.append(f"GPU {bus}: no power limit reported (N/A): not judged")
            continue
        ratios[bus] = round(cur / default, 3)
        within(limits, "power.limit_fraction_min", ratios[bus],
               f"GPU {bus} power limit {cur:g} W of its default {default:g} W", warns)
    res = judge_findings(
        "power.limit", [], warns,
        f"{len(ratios)} GPUs at their default power limit" if ratios else
        "no GPU reports a power limit", value={"limits_w": limits_w, "ratio": ratios},
        unit="ratio", thresholds=limits.pick("power.limit_fraction_min"),
        remediation="Restore the default limit (`nvidia-smi -pl <default> -i <gpu>`, or the "
                    "site's power profile), or record the cap in the order." if warns else "")
    return res.with_(findings=res.findings + tuple(notes))


@check("power.limit", order=22, suites=("quick", "standard", "full", "lab"), tools=("nvidia-smi",),
       description="each GPU's enforced power limit against its default")
def power_limit(ctx: Ctx) -> Result:
    _, _, ev = nvidia_smi_q(ctx)  # no GPU or no driver: FAIL, as every GPU check
    out = run(["nvidia-smi", "-q", "-d", "POWER"], timeout=ctx.timeout, name="nvidia-smi power")
    return judge_power(power_limits(out.text), ctx.limits).with_(
        evidence=(*ev, out.evidence))
