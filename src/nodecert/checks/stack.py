"""stack.conformance (against the stack manifest) and stack.advisories (against the
security bulletins): gathered on the node, judged here, for a live run and a collected
scheduled run alike."""

from __future__ import annotations

from nodecert.core.checks import JudgeContext, declare
from nodecert.stack import advisories, conformance
from nodecert_node.contract import Result


def _conformance(res: Result, ctx: JudgeContext) -> Result:
    return conformance.judge_result(res, ctx.host, ctx.stack,
                                    imex=conformance.imex_expected(dict(ctx.spec)))


def _advisories(res: Result, ctx: JudgeContext) -> Result:
    return advisories.judge_result(res, frozenset(ctx.spec.get("allow_advisories") or ()))


declare("stack.conformance", module=__name__, judge=_conformance, roles=("stack-record",))
declare("stack.advisories", module=__name__, judge=_advisories)
