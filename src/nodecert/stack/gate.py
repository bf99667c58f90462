"""The stack compatibility gate: is this pinned stack safe for this GPU and OS?

Each rule is a small pure function over (stack, GPU, OS, date, matrix) that
returns a RuleResult with a verdict, a sentence a human can act on, and the
source keys of the facts it used. ``evaluate`` runs them all; ``provision``
calls it before touching any host. Rules never guess: where the sourced data
says nothing, the rule is reported as not evaluated (and why), not as PASS.

The rules live by subject (gate_driver.py, gate_libraries.py, gate_platform.py; what
a rule is given and answers: gate_rule.py); this module lists them and runs them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from nodecert.core.errors import UnknownNameError
from nodecert.core.verdict import Verdict, worst
from nodecert.stack import advisories
from nodecert.stack.compat import GpuModel, Matrix, default_matrix
from nodecert.stack.gate_driver import (
    rule_branch_lifecycle,
    rule_cuda_min_driver,
    rule_fabric_manager,
    rule_gpu_driver_min,
    rule_gpu_kernel_modules,
    rule_gpu_practical_branch,
    rule_imex,
)
from nodecert.stack.gate_libraries import (
    rule_cudnn_cuda,
    rule_dcgm_cuda,
    rule_nccl_suffix,
    rule_pytorch_arch,
    rule_pytorch_build,
    rule_pytorch_driver,
    rule_tensorflow,
)
from nodecert.stack.gate_platform import rule_advisories, rule_os_supported, rule_pins_confirmed
from nodecert.stack.gate_rule import NotEvaluated, RuleContext, RuleResult
from nodecert.stack.manifest import SUPPORTED_OS, Stack


@dataclass(frozen=True)
class GateReport:
    stack: str
    gpu: str | None
    os: str | None
    date: dt.date
    results: tuple[RuleResult, ...]
    not_evaluated: tuple[tuple[str, str], ...] = field(default=())

    @property
    def verdict(self) -> Verdict:
        return worst(r.verdict for r in self.results)

    def as_dict(self) -> dict[str, object]:
        return {
            "stack": self.stack, "gpu": self.gpu, "os": self.os,
            "date": self.date.isoformat(), "verdict": str(self.verdict),
            "results": [r.as_dict() for r in self.results],
            "not_evaluated": [{"rule": r, "reason": why} for r, why in self.not_evaluated],
        }


# (rule id, function): the id is what a skipped rule is reported as.
RULES: tuple[tuple[str, Callable[[RuleContext], RuleResult]], ...] = (
    ("driver.cuda-min", rule_cuda_min_driver),
    ("driver.branch-lifecycle", rule_branch_lifecycle),
    ("fabric-manager.version", rule_fabric_manager),
    ("imex.version", rule_imex),
    ("gpu.driver-min", rule_gpu_driver_min),
    ("gpu.kernel-modules", rule_gpu_kernel_modules),
    ("gpu.practical-branch", rule_gpu_practical_branch),
    ("cudnn.cuda", rule_cudnn_cuda),
    ("nccl.cuda-suffix", rule_nccl_suffix),
    ("dcgm.cuda-major", rule_dcgm_cuda),
    ("framework.pytorch-build", rule_pytorch_build),
    ("framework.pytorch-driver", rule_pytorch_driver),
    ("framework.pytorch-arch", rule_pytorch_arch),
    ("framework.tensorflow", rule_tensorflow),
)
MULTI_RULES: tuple[Callable[[RuleContext], list[RuleResult]], ...] = (
    rule_os_supported, rule_pins_confirmed, rule_advisories,
)
# Each vendor's rules: a stack is judged by its vendor's (stack.vendor).
RULES_BY_VENDOR: dict[str, tuple[tuple[tuple[str, Callable[[RuleContext], RuleResult]], ...],
                                 tuple[Callable[[RuleContext], list[RuleResult]], ...]]] = {
    "nvidia": (RULES, MULTI_RULES),
}


def evaluate(stack: Stack, *, gpu: str | GpuModel | None = None, os_name: str | None = None,
             today: dt.date | None = None, matrix: Matrix | None = None,
             others: dict[str, str] | None = None,
             allow_advisories: frozenset[str] = frozenset()) -> GateReport:
    """Run every rule; raises UnknownNameError for an unknown GPU or OS name, or an
    accepted advisory the table does not list. `others`: components installed beside
    the stack's pins (component -> version), judged against the security bulletins."""
    m = matrix or default_matrix()
    model = m.gpu(gpu) if isinstance(gpu, str) else gpu
    if os_name is not None and os_name not in SUPPORTED_OS:
        raise UnknownNameError(f"unknown OS {os_name!r}",
                               hint=f"use one of: {', '.join(SUPPORTED_OS)}")
    unknown = sorted(allow_advisories - advisories.default_advisories().ids())
    if unknown:
        raise UnknownNameError(f"unknown advisory {', '.join(unknown)}",
                               hint="name one of `nodecert stack advisories`")
    ctx = RuleContext(stack, model, os_name, today or dt.date.today(), m,
               tuple(sorted((others or {}).items())), allow_advisories)
    results: list[RuleResult] = []
    skipped: list[tuple[str, str]] = []
    if stack.vendor not in RULES_BY_VENDOR:
        raise UnknownNameError(f"no compatibility rules for {stack.vendor} stacks",
                               hint=f"the gate knows: {', '.join(sorted(RULES_BY_VENDOR))}")
    rules, multi_rules = RULES_BY_VENDOR[stack.vendor]
    for multi in multi_rules:
        results.extend(multi(ctx))
    for rule_id, rule in rules:
        try:
            results.append(rule(ctx))
        except NotEvaluated as why:
            skipped.append((rule_id, why.reason))
    return GateReport(stack.name, model.key if model else None, os_name, ctx.today,
                      tuple(results), tuple(skipped))


__all__ = ["RULES_BY_VENDOR", "GateReport", "RuleResult", "evaluate"]
