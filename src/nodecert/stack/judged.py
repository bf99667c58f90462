"""The checks a node gathers and the control side judges: stack.conformance (against the
stack manifest) and stack.advisories (against the security bulletins). One entry point
for a live run and for a collected scheduled run alike."""

from __future__ import annotations

from typing import Any

from nodecert.stack import advisories, conformance
from nodecert.stack.manifest import Stack
from nodecert_node.contract import Result

JUDGED_HERE = ("stack.conformance", "stack.advisories")


def judge_gathered(res: Result, host: str, stack: Stack | None, spec: dict[str, Any]
                   ) -> Result:
    """`res` judged where the node only gathered it; any other result as it is. `spec`:
    the host's plan spec (its rack, its accepted advisories)."""
    if res.check == "stack.conformance":
        return conformance.judge_result(res, host, stack,
                                        imex=conformance.imex_expected(spec))
    if res.check == "stack.advisories":
        return advisories.judge_result(res, frozenset(spec.get("allow_advisories") or ()))
    return res


__all__ = ["JUDGED_HERE", "judge_gathered"]
