"""power.limit: each GPU's enforced power limit against its default.

A GPU left with its power limit below NVIDIA's default (a test setting, a capped
rack profile) delivers less than the ordered performance while every health check
passes. The measure is the ratio enforced / default per GPU, judged against
`power.limit_fraction_min`; a GPU that reports no limit (N/A) is noted, not judged.
"""

from __future__ import annotations

from nodecert_node import gpu
from nodecert_node.context import Ctx, judge_findings, within
from nodecert_node.contract import Limits, Result
from nodecert_node.parse.smi import power_limits
from nodecert_node.registry import check


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


@check("power.limit", order=22, suites=("quick", "standard", "full", "lab"), tools=(gpu.SMI,),
       description="each GPU's enforced power limit against its default")
def power_limit(ctx: Ctx) -> Result:
    _, _, ev = gpu.inventory(ctx)  # no GPU or no driver: FAIL, as every GPU check
    limits_w, power_ev = gpu.backend(ctx).power_limits(ctx)
    return judge_power(limits_w, ctx.limits).with_(evidence=(*ev, power_ev))


__all__ = ["judge_power", "power_limit", "power_limits"]
