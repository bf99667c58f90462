"""The gate's rules on the driver and the GPU: CUDA's minimum driver, the branch's
lifecycle, Fabric Manager and IMEX against the driver, the GPU's first driver, kernel
modules and practical branch."""

from __future__ import annotations

from nodecert.core.verdict import Verdict
from nodecert.stack.gate_rule import NotEvaluated, RuleContext, RuleResult, need_gpu, rule_result
from nodecert.stack.versions import DriverVersion

# --- driver ------------------------------------------------------------------------------

def rule_cuda_min_driver(c: RuleContext) -> RuleResult:
    rule = "driver.cuda-min"
    row = next((r for r in c.m.cuda_min_driver if r.cuda == c.stack.cuda), None)
    if row is None:
        return rule_result(rule, Verdict.FAIL,
                  f"CUDA {c.stack.cuda} is not in the compatibility data, so no driver can be "
                  "shown to support it; add its sourced row to stacks/compat/matrix.yml", "S1")
    text = (f"CUDA {c.stack.cuda} needs driver >= {row.min_driver}; "
            f"stack pins {c.stack.driver}")
    if c.stack.driver >= row.min_driver:
        return rule_result(rule, Verdict.PASS, text, row.source)
    compat = c.stack.cuda_compat
    fc = c.m.forward_compat
    if compat is None or compat.prefix(2) != c.stack.cuda.prefix(2):
        return rule_result(
            rule, Verdict.FAIL, text + " and no matching cuda-compat package", row.source)
    text += f" -- relies on forward compatibility ({fc.package_prefix}{compat})"
    if c.gpu is None:
        return rule_result(rule, Verdict.WARN,
                  text + ", supported on data-center GPUs only; pass --gpu to decide",
                  row.source, fc.source)
    if c.gpu.datacenter or not fc.requires_datacenter_gpu:
        return rule_result(rule, Verdict.PASS, text + f", supported on data-center GPU {c.gpu.key}",
                  row.source, fc.source)
    return rule_result(rule, Verdict.FAIL,
              text + f", which is not supported on {c.gpu.key} (not a data-center GPU)",
              row.source, fc.source)


def rule_branch_lifecycle(c: RuleContext) -> RuleResult:
    rule = "driver.branch-lifecycle"
    b = c.m.driver_branches.get(c.stack.driver_branch)
    if b is None:
        return rule_result(rule, Verdict.WARN,
                  f"R{c.stack.driver_branch} is not in the lifecycle data; its support window "
                  "is unknown", "S3")
    name = f"R{b.branch} ({b.designation})"
    if b.eol_past:
        return rule_result(rule, Verdict.WARN,
                  f"{name} is end-of-life: no further security or bug fixes", b.source)
    assert b.eol is not None  # loader guarantees a date unless eol_past
    if b.eol < c.today:
        return rule_result(rule, Verdict.WARN,
                  f"{name} reached end of life on {b.eol}: no further security or bug fixes",
                  b.source)
    days = (b.eol - c.today).days
    if days <= c.m.driver_eol_warning_days:
        return rule_result(rule, Verdict.WARN,
                  f"{name} reaches end of life on {b.eol}, in {days} days", b.source)
    return rule_result(rule, Verdict.PASS, f"{name} is supported until {b.eol}", b.source)


def rule_fabric_manager(c: RuleContext) -> RuleResult:
    rule = "fabric-manager.version"
    srcs = c.m.rule_sources.get(rule, ())
    fm, nscq, drv = c.stack.fabric_manager, c.stack.nscq, c.stack.driver
    if fm is None and nscq is None:
        if c.gpu is not None and c.gpu.nvswitch:
            return rule_result(rule, Verdict.FAIL,
                      f"{c.gpu.key} systems have NVSwitches and need Fabric Manager + NSCQ; "
                      "the stack pins neither", *srcs)
        if c.gpu is None:
            return rule_result(rule, Verdict.WARN,
                      "stack pins no Fabric Manager: unusable on NVSwitch (HGX/DGX) systems",
                      *srcs)
        return rule_result(rule, Verdict.PASS,
                  f"no Fabric Manager pinned; {c.gpu.key} has no NVSwitch", *srcs)
    problems = []
    for label, v in (("Fabric Manager", fm), ("libnvidia-nscq", nscq)):
        if v is None:
            problems.append(f"{label} is not pinned")
        elif v != drv:
            problems.append(f"{label} {v} != driver {drv}")
    if problems:
        return rule_result(rule, Verdict.FAIL,
                  "; ".join(problems) + " -- Fabric Manager refuses to start on a driver "
                  "version other than its own", *srcs)
    return rule_result(
        rule, Verdict.PASS, f"Fabric Manager and NSCQ equal the driver ({drv})", *srcs)


def rule_imex(c: RuleContext) -> RuleResult:
    """IMEX (nvidia-imex) on the compute trays of an NVLink domain: pinned at exactly the
    driver's version, as NVIDIA's own install pins it (=<driver>-1)."""
    rule = "imex.version"
    srcs = c.m.rule_sources.get(rule, ())
    imex, drv = c.stack.imex, c.stack.driver
    if imex is None:
        if c.gpu is not None and c.gpu.imex:
            return rule_result(rule, Verdict.FAIL,
                      f"{c.gpu.key} compute trays share memory across the NVLink domain "
                      "through IMEX; the stack pins no nvidia-imex", *srcs)
        return rule_result(rule, Verdict.PASS, "no IMEX pinned"
                  + (f"; {c.gpu.key} is not a compute tray of an NVLink domain"
                     if c.gpu is not None else ""), *srcs)
    if imex != drv:
        return rule_result(rule, Verdict.FAIL,
                  f"IMEX {imex} != driver {drv} -- the IMEX daemon ships with the driver "
                  "and is installed at exactly its version", *srcs)
    return rule_result(rule, Verdict.PASS,
              f"IMEX equals the driver ({drv})"
              + ("" if c.gpu is None or c.gpu.imex
                 else f"; installed only on compute trays of an NVLink domain, not on "
                      f"{c.gpu.key} hosts"), *srcs)



# --- GPU ---------------------------------------------------------------------------------

def rule_gpu_driver_min(c: RuleContext) -> RuleResult:
    rule = "gpu.driver-min"
    gpu = need_gpu(c)
    flavour = c.stack.kernel_modules
    first: DriverVersion | None
    if flavour == "proprietary" and gpu.first_driver_proprietary is not None:
        first, basis = gpu.first_driver_proprietary, "proprietary modules"
    else:
        # Without a proprietary-specific fact, the open-module table's first
        # listing is the best sourced floor for either flavour.
        first, basis = gpu.first_driver_open, "first listed in the open-module support table"
    if first is None:
        raise NotEvaluated(f"no sourced first-supporting driver for {gpu.key}")
    text = f"{gpu.key} is supported from driver {first} ({basis}); stack pins {c.stack.driver}"
    verdict = Verdict.PASS if c.stack.driver >= first else Verdict.FAIL
    return rule_result(rule, verdict, text, gpu.source)


def rule_gpu_kernel_modules(c: RuleContext) -> RuleResult:
    rule = "gpu.kernel-modules"
    gpu = need_gpu(c)
    srcs = c.m.rule_sources.get(rule, ())
    flavour = c.stack.kernel_modules
    if gpu.open_modules == "required" and flavour == "proprietary":
        return rule_result(rule, Verdict.FAIL,
                  f"{gpu.key} ({gpu.architecture}) requires the open kernel modules; the "
                  "proprietary modules are unsupported there", *srcs)
    if gpu.open_modules == "unsupported" and flavour == "open":
        return rule_result(rule, Verdict.FAIL,
                  f"{gpu.key} ({gpu.architecture}) predates Turing/GSP and cannot use the open "
                  "kernel modules", *srcs)
    return rule_result(rule, Verdict.PASS,
              f"{flavour} kernel modules are supported on {gpu.key} (open modules: "
              f"{gpu.open_modules})", *srcs)


def rule_gpu_practical_branch(c: RuleContext) -> RuleResult:
    rule = "gpu.practical-branch"
    gpu = need_gpu(c)
    srcs = c.m.rule_sources.get(rule, ())
    if gpu.practical_min_branch is None:
        raise NotEvaluated(f"no recommended minimum branch recorded for {gpu.key}")
    ok = int(c.stack.driver_branch) >= int(gpu.practical_min_branch)
    text = (f"recommended minimum for {gpu.key} is R{gpu.practical_min_branch}; stack is on "
            f"R{c.stack.driver_branch}")
    return rule_result(rule, Verdict.PASS if ok else Verdict.WARN, text, *srcs)


__all__ = [
    "rule_branch_lifecycle",
    "rule_cuda_min_driver",
    "rule_fabric_manager",
    "rule_gpu_driver_min",
    "rule_gpu_kernel_modules",
    "rule_gpu_practical_branch",
    "rule_imex",
]
