"""What a node says back about the test it ran, held against what the plan asked.

A load check reports the data type, matrix size and duration it ran with. Those come
from the node (untrusted): a result whose echo differs from the plan measured another
test than the one planned (a different dtype is judged against another floor; a shorter
run proves less), so it FAILs, whatever its figures say. A result that echoes nothing is
left as it is: the check's own judge decides what an absent figure means.
"""

from __future__ import annotations

from nodecert.core import checks
from nodecert.core.textsafe import clean
from nodecert_node.contract import Plan, Result, Verdict

# What each check echoes is declared with the check (nodecert.core.checks: the result's
# value key, the plan's load option, its default, how they compare: "equal", the same
# value; "at_least", a run may last a moment longer, never shorter).
# The gpu_burn engine reports no dtype or size: only its duration is compared.
ENGINE_KEYS = {"gpu_burn": {"seconds"}}
# gpu_burn reports whole seconds and the GEMM worker stops at the first step past the
# planned time; a run reported shorter than this share of the plan stopped early.
DURATION_SHARE_MIN = 0.98


def mismatches(res: Result, plan: Plan) -> list[str]:
    """What res echoes differently from plan (pure); empty when all agree."""
    value = res.value if isinstance(res.value, dict) else {}
    load = plan.options.get("load") or {}
    engine = value.get("load")
    out: list[str] = []
    for key, option, default, how in checks.echoes(res.check):
        if key not in value or value[key] is None:
            continue
        if engine in ENGINE_KEYS and key not in ENGINE_KEYS[engine]:
            continue
        planned, got = load.get(option, default), value[key]
        if how == "equal":
            same = str(got) == str(planned)
        else:
            same = (isinstance(got, (int, float)) and not isinstance(got, bool)
                    and float(got) >= float(planned) * DURATION_SHARE_MIN)
        if not same:
            shown = clean(repr(got))[:80]
            out.append(f"the node reported {key} {shown}, the plan asked {planned!r} "
                       f"(load.{option})")
    return out


def held_to_plan(res: Result, plan: Plan) -> Result:
    """res, or res failed when its echoes differ from the plan."""
    wrong = mismatches(res, plan)
    if not wrong:
        return res
    return res.with_(verdict=max(res.verdict, Verdict.FAIL),
                     summary=f"not the planned test: {wrong[0]}",
                     findings=(*wrong, f"the node's own summary: {clean(res.summary)[:300]}",
                               *res.findings),
                     fault_code="NC-PLAN-MISMATCH",
                     remediation="The node ran another test than the one sent to it: check "
                                 "its nodecert code (it is reinstalled when it differs) and "
                                 "run the check again.")


__all__ = ["held_to_plan", "mismatches"]
