"""What a rule of the compatibility gate is given (the stack, GPU, OS, date and matrix) and
what it answers (a verdict, a sentence a human can act on, the source keys of the facts
it used); a rule that cannot be judged raises NotEvaluated with the reason."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from nodecert.core.verdict import Verdict
from nodecert.stack.compat import GpuModel, Matrix
from nodecert.stack.manifest import Stack


@dataclass(frozen=True)
class RuleResult:
    """What one gate rule answered: its verdict, a sentence an operator can act on and
    the source keys of the facts behind it."""

    rule: str
    verdict: Verdict
    message: str
    sources: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "verdict": str(self.verdict), "message": self.message,
                "sources": list(self.sources)}


@dataclass(frozen=True)
class RuleContext:
    """Everything a gate rule may look at: the stack, the GPU model (None when
    none was named: rules that depend on it WARN), the OS, the day and the matrix."""

    stack: Stack
    gpu: GpuModel | None
    os: str | None
    today: dt.date
    m: Matrix
    # What else provisioning installs beside the stack's pins (component -> version: the
    # container toolkit the role pins), and the advisories the site accepted.
    others: tuple[tuple[str, str], ...] = ()
    allowed: frozenset[str] = frozenset()


class NotEvaluated(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def rule_result(rule: str, verdict: Verdict, message: str, *sources: str) -> RuleResult:
    return RuleResult(rule, verdict, message, tuple(sources))


def need_gpu(c: RuleContext) -> GpuModel:
    if c.gpu is None:
        raise NotEvaluated("needs a GPU model (--gpu)")
    return c.gpu


__all__ = ["NotEvaluated", "RuleContext", "RuleResult", "need_gpu", "rule_result"]
