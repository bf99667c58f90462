"""stack.conformance: gathered here, judged on the control side.

The judge is the post-provision conformance logic (nodecert.conformance.judge),
which needs the stack manifest; rather than duplicate it on the node, the node
runs the same gathering script (sent in the plan) and returns its raw output.
The control side always replaces this provisional Result with the judged one;
if it cannot, the check stays ERROR, never PASS.
"""

from __future__ import annotations

from nodecert_node.checks import Ctx, check
from nodecert_node.result import Result, Verdict
from nodecert_node.tools import run


@check("stack.conformance")
def stack_conformance(ctx: Ctx) -> Result:
    spec = ctx.plan.get("conformance") or {}
    script = spec.get("script")
    if not script:
        return Result("stack.conformance", Verdict.ERROR,
                      "no stack assigned to this host, so conformance cannot be judged",
                      fault_code="NC-NO-STACK",
                      remediation="Give the host a stack (nodecert_stack in the inventory or "
                                  "--stack) and re-run.")
    out = run(["/bin/sh", "-c", script], timeout=ctx.timeout, name="conformance facts")
    return Result("stack.conformance", Verdict.ERROR, "gathered; awaiting the control-side judge",
                  evidence=(out.evidence,), facts={"conformance_output": out.text,
                                                   "stack": spec.get("stack")},
                  fault_code="NC-NOT-JUDGED")
