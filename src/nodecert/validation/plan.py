"""The plan for one host: what the control side sends the node (contract.Plan).

Built from the host's order spec, the suite, the resolved thresholds (with origin
and source) and the stack; serialised only by contract.Plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodecert.inventory.reader import HostSpec
from nodecert.inventory.variables import BY_NAME, PLAN
from nodecert.profiles import catalog, thresholds
from nodecert.stack import conformance
from nodecert.stack.compat import load_matrix
from nodecert.stack.manifest import Stack
from nodecert_node.contract import Plan

DEFAULT_SCRATCH = str(BY_NAME["nodecert_storage_targets"].default)

# How a host's order spec says it is what a check needs (contract.NEEDS): a compute tray
# (nodecert_rack), in a rack with an IMEX domain, GPU attestation asked for (it needs
# NVIDIA's verifier and GPUs in confidential-computing mode).
HAS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "rack": lambda v: bool(v.get("rack")),
    "rack-imex": lambda v: bool((v.get("rack") or {}).get("imex")),
    "attestation": lambda v: bool(v.get("attestation")),
}


def build_plan(spec: HostSpec, suite: thresholds.Suite, stack: Stack | None, run_id: str, *,
               cli_thresholds: dict[str, Any], scratch: str | None,
               checks: tuple[str, ...] = (), host_timeout_s: float | None = None,
               option_overrides: dict[str, dict[str, Any]] | None = None) -> Plan:
    v = spec.validation
    over = option_overrides or {}
    storage = {**suite.storage, **over.get("storage", {})}
    storage["targets"] = [scratch] if scratch else list(v.get("storage_targets")
                                                          or [DEFAULT_SCRATCH])
    storage["allow_raw_devices"] = list(v.get("allow_raw_devices") or [])
    plan_spec: dict[str, Any] = {"gpu_model": spec.gpu_model, "gpu_count": spec.gpu_count,
                 "threshold_profile": spec.gpu_model if thresholds.has_profile(spec.gpu_model)
                 else None,
                 "cpu_cores": spec.cpu_cores, "ram_gb": spec.ram_gb,
                 "nvme_count": spec.nvme_count, "nvme_min_gb": spec.nvme_min_gb,
                 **{var.key: v[var.key] for var in PLAN if var.key in v}}
    # A check applies where the host is what it needs (its declaration): a server in no
    # rack is never judged on the NVLink domain's checks.
    applicable = [c for c in suite.checks if all(HAS[n](v) for n in catalog.needs_of(c))]
    chosen = [c for c in applicable if not checks or c in checks]  # suite order
    limits = thresholds.resolve(spec.gpu_model, inventory=v.get("thresholds"),
                                cli=cli_thresholds, host=spec.name)
    plan_spec["threshold_gaps"] = thresholds.gaps(spec.gpu_model, limits)
    if stack is not None:  # the node reads its GPUs through this vendor's backend
        plan_spec["gpu_vendor"] = stack.vendor
    return Plan(
        run_id=run_id, host=spec.name, suite=suite.name, checks=chosen,
        check_timeout_s=suite.check_timeout_s, tool_timeout_s=60,
        # The whole host: every check at its limit, plus connection and set-up.
        host_timeout_s=host_timeout_s or suite.check_timeout_s * len(chosen) + 120,
        simulated=spec.simulated, spec=plan_spec,
        thresholds=limits,
        options={"storage": storage, "fabric": {**suite.fabric, **over.get("fabric", {})},
                 "load": {**suite.load, **over.get("load", {})}},
        conformance={"stack": stack.name, "script": conformance.script_for(stack)}
        if stack else {},
        framework=framework_plan(stack) if stack else {},
        partial=len(chosen) < len(applicable),
    )


def framework_plan(stack: Stack) -> dict[str, Any]:
    """What the framework checks need: the environment's python and the pinned versions."""
    fw = stack.framework
    tf_cuda = ""
    if fw.tensorflow:
        build = load_matrix().tensorflow_builds.get(fw.tensorflow)
        tf_cuda = str(build.cuda) if build else ""
    return {"python": f"{conformance.env_dir(stack)}/bin/python",
            "torch": str(fw.pytorch) if fw.pytorch else "",
            "torch_cuda": fw.pytorch.cuda if fw.pytorch else "",
            "tensorflow": fw.tensorflow or "", "tensorflow_cuda": tf_cuda,
            "cudnn": str(stack.cudnn), "nccl": str(stack.nccl)}


__all__ = ["DEFAULT_SCRATCH", "HAS", "build_plan", "framework_plan"]
