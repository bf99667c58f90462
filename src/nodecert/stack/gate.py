"""The stack compatibility gate: is this pinned stack safe for this GPU and OS?

Each rule is a small pure function over (stack, GPU, OS, date, matrix) that
returns a RuleResult with a verdict, a sentence a human can act on, and the
source keys of the facts it used. ``evaluate`` runs them all; ``provision``
calls it before touching any host. Rules never guess: where the sourced data
says nothing, the rule is reported as not evaluated (and why), not as PASS.

This module is long because it holds every rule side by side (about a dozen, each
short): a reviewer checks the gate's verdicts against the compatibility matrix in
one place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from nodecert.core.errors import UnknownNameError, VersionError
from nodecert.core.verdict import Verdict, worst
from nodecert.stack import advisories
from nodecert.stack.compat import GpuModel, Matrix, default_matrix
from nodecert.stack.manifest import SUPPORTED_OS, Stack
from nodecert.stack.versions import DriverVersion


@dataclass(frozen=True)
class RuleResult:
    rule: str
    verdict: Verdict
    message: str
    sources: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "verdict": str(self.verdict), "message": self.message,
                "sources": list(self.sources)}


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


@dataclass(frozen=True)
class _Ctx:
    stack: Stack
    gpu: GpuModel | None
    os: str | None
    today: dt.date
    m: Matrix
    # What else provisioning installs beside the stack's pins (component -> version: the
    # container toolkit the role pins), and the advisories the site accepted.
    others: tuple[tuple[str, str], ...] = ()
    allowed: frozenset[str] = frozenset()


class _NotEvaluated(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _r(rule: str, verdict: Verdict, message: str, *sources: str) -> RuleResult:
    return RuleResult(rule, verdict, message, tuple(sources))


def _need_gpu(c: _Ctx) -> GpuModel:
    if c.gpu is None:
        raise _NotEvaluated("needs a GPU model (--gpu)")
    return c.gpu


# --- driver ------------------------------------------------------------------------------

def rule_cuda_min_driver(c: _Ctx) -> RuleResult:
    rule = "driver.cuda-min"
    row = next((r for r in c.m.cuda_min_driver if r.cuda == c.stack.cuda), None)
    if row is None:
        return _r(rule, Verdict.FAIL,
                  f"CUDA {c.stack.cuda} is not in the compatibility data, so no driver can be "
                  "shown to support it; add its sourced row to stacks/compat/matrix.yml", "S1")
    text = (f"CUDA {c.stack.cuda} needs driver >= {row.min_driver}; "
            f"stack pins {c.stack.driver}")
    if c.stack.driver >= row.min_driver:
        return _r(rule, Verdict.PASS, text, row.source)
    compat = c.stack.cuda_compat
    fc = c.m.forward_compat
    if compat is None or compat.prefix(2) != c.stack.cuda.prefix(2):
        return _r(rule, Verdict.FAIL, text + " and no matching cuda-compat package", row.source)
    text += f" -- relies on forward compatibility ({fc.package_prefix}{compat})"
    if c.gpu is None:
        return _r(rule, Verdict.WARN,
                  text + ", supported on data-center GPUs only; pass --gpu to decide",
                  row.source, fc.source)
    if c.gpu.datacenter or not fc.requires_datacenter_gpu:
        return _r(rule, Verdict.PASS, text + f", supported on data-center GPU {c.gpu.key}",
                  row.source, fc.source)
    return _r(rule, Verdict.FAIL,
              text + f", which is not supported on {c.gpu.key} (not a data-center GPU)",
              row.source, fc.source)


def rule_branch_lifecycle(c: _Ctx) -> RuleResult:
    rule = "driver.branch-lifecycle"
    b = c.m.driver_branches.get(c.stack.driver_branch)
    if b is None:
        return _r(rule, Verdict.WARN,
                  f"R{c.stack.driver_branch} is not in the lifecycle data; its support window "
                  "is unknown", "S3")
    name = f"R{b.branch} ({b.designation})"
    if b.eol_past:
        return _r(rule, Verdict.WARN,
                  f"{name} is end-of-life: no further security or bug fixes", b.source)
    assert b.eol is not None  # loader guarantees a date unless eol_past
    if b.eol < c.today:
        return _r(rule, Verdict.WARN,
                  f"{name} reached end of life on {b.eol}: no further security or bug fixes",
                  b.source)
    days = (b.eol - c.today).days
    if days <= c.m.driver_eol_warning_days:
        return _r(rule, Verdict.WARN,
                  f"{name} reaches end of life on {b.eol}, in {days} days", b.source)
    return _r(rule, Verdict.PASS, f"{name} is supported until {b.eol}", b.source)


def rule_fabric_manager(c: _Ctx) -> RuleResult:
    rule = "fabric-manager.version"
    srcs = c.m.rule_sources.get(rule, ())
    fm, nscq, drv = c.stack.fabric_manager, c.stack.nscq, c.stack.driver
    if fm is None and nscq is None:
        if c.gpu is not None and c.gpu.nvswitch:
            return _r(rule, Verdict.FAIL,
                      f"{c.gpu.key} systems have NVSwitches and need Fabric Manager + NSCQ; "
                      "the stack pins neither", *srcs)
        if c.gpu is None:
            return _r(rule, Verdict.WARN,
                      "stack pins no Fabric Manager: unusable on NVSwitch (HGX/DGX) systems",
                      *srcs)
        return _r(rule, Verdict.PASS,
                  f"no Fabric Manager pinned; {c.gpu.key} has no NVSwitch", *srcs)
    problems = []
    for label, v in (("Fabric Manager", fm), ("libnvidia-nscq", nscq)):
        if v is None:
            problems.append(f"{label} is not pinned")
        elif v != drv:
            problems.append(f"{label} {v} != driver {drv}")
    if problems:
        return _r(rule, Verdict.FAIL,
                  "; ".join(problems) + " -- Fabric Manager refuses to start on a driver "
                  "version other than its own", *srcs)
    return _r(rule, Verdict.PASS, f"Fabric Manager and NSCQ equal the driver ({drv})", *srcs)


def rule_imex(c: _Ctx) -> RuleResult:
    """IMEX (nvidia-imex) on the compute trays of an NVLink domain: pinned at exactly the
    driver's version, as NVIDIA's own install pins it (=<driver>-1)."""
    rule = "imex.version"
    srcs = c.m.rule_sources.get(rule, ())
    imex, drv = c.stack.imex, c.stack.driver
    if imex is None:
        if c.gpu is not None and c.gpu.imex:
            return _r(rule, Verdict.FAIL,
                      f"{c.gpu.key} compute trays share memory across the NVLink domain "
                      "through IMEX; the stack pins no nvidia-imex", *srcs)
        return _r(rule, Verdict.PASS, "no IMEX pinned"
                  + (f"; {c.gpu.key} is not a compute tray of an NVLink domain"
                     if c.gpu is not None else ""), *srcs)
    if imex != drv:
        return _r(rule, Verdict.FAIL,
                  f"IMEX {imex} != driver {drv} -- the IMEX daemon ships with the driver "
                  "and is installed at exactly its version", *srcs)
    return _r(rule, Verdict.PASS,
              f"IMEX equals the driver ({drv})"
              + ("" if c.gpu is None or c.gpu.imex
                 else f"; installed only on compute trays of an NVLink domain, not on "
                      f"{c.gpu.key} hosts"), *srcs)


# --- GPU ---------------------------------------------------------------------------------

def rule_gpu_driver_min(c: _Ctx) -> RuleResult:
    rule = "gpu.driver-min"
    gpu = _need_gpu(c)
    flavour = c.stack.kernel_modules
    first: DriverVersion | None
    if flavour == "proprietary" and gpu.first_driver_proprietary is not None:
        first, basis = gpu.first_driver_proprietary, "proprietary modules"
    else:
        # Without a proprietary-specific fact, the open-module table's first
        # listing is the best sourced floor for either flavour.
        first, basis = gpu.first_driver_open, "first listed in the open-module support table"
    if first is None:
        raise _NotEvaluated(f"no sourced first-supporting driver for {gpu.key}")
    text = f"{gpu.key} is supported from driver {first} ({basis}); stack pins {c.stack.driver}"
    verdict = Verdict.PASS if c.stack.driver >= first else Verdict.FAIL
    return _r(rule, verdict, text, gpu.source)


def rule_gpu_kernel_modules(c: _Ctx) -> RuleResult:
    rule = "gpu.kernel-modules"
    gpu = _need_gpu(c)
    srcs = c.m.rule_sources.get(rule, ())
    flavour = c.stack.kernel_modules
    if gpu.open_modules == "required" and flavour == "proprietary":
        return _r(rule, Verdict.FAIL,
                  f"{gpu.key} ({gpu.architecture}) requires the open kernel modules; the "
                  "proprietary modules are unsupported there", *srcs)
    if gpu.open_modules == "unsupported" and flavour == "open":
        return _r(rule, Verdict.FAIL,
                  f"{gpu.key} ({gpu.architecture}) predates Turing/GSP and cannot use the open "
                  "kernel modules", *srcs)
    return _r(rule, Verdict.PASS,
              f"{flavour} kernel modules are supported on {gpu.key} (open modules: "
              f"{gpu.open_modules})", *srcs)


def rule_gpu_practical_branch(c: _Ctx) -> RuleResult:
    rule = "gpu.practical-branch"
    gpu = _need_gpu(c)
    srcs = c.m.rule_sources.get(rule, ())
    if gpu.practical_min_branch is None:
        raise _NotEvaluated(f"no recommended minimum branch recorded for {gpu.key}")
    ok = int(c.stack.driver_branch) >= int(gpu.practical_min_branch)
    text = (f"recommended minimum for {gpu.key} is R{gpu.practical_min_branch}; stack is on "
            f"R{c.stack.driver_branch}")
    return _r(rule, Verdict.PASS if ok else Verdict.WARN, text, *srcs)


# --- libraries ---------------------------------------------------------------------------

def rule_cudnn_cuda(c: _Ctx) -> RuleResult:
    rule = "cudnn.cuda"
    s = c.stack
    wrong_names = sorted({p.name for pins in s.os.values() for p in pins.for_component("cudnn")
                          if not p.name.endswith(f"-cuda-{s.cuda.major}")})
    if wrong_names:
        return _r(rule, Verdict.FAIL,
                  f"cuDNN package(s) {', '.join(wrong_names)} are not the CUDA {s.cuda.major} "
                  f"build (name should end in -cuda-{s.cuda.major})", "S8")
    rows = [r for r in c.m.cudnn_cuda if r.covers(s.cudnn, s.cuda)]
    if not rows:
        return _r(rule, Verdict.FAIL,
                  f"no sourced support-matrix row pairs cuDNN {s.cudnn} with CUDA "
                  f"{s.cuda.major_minor}", "S8")
    floors = [r.min_driver for r in rows if r.min_driver is not None]
    floor = min(floors) if floors else None
    srcs = tuple(dict.fromkeys(r.source for r in rows))
    if floor is not None and s.driver < floor:
        return _r(rule, Verdict.FAIL,
                  f"cuDNN {s.cudnn} for CUDA {s.cuda.major_minor} needs driver >= {floor}; "
                  f"stack pins {s.driver}", *srcs)
    extra = f", driver floor {floor}" if floor else ""
    return _r(rule, Verdict.PASS,
              f"cuDNN {s.cudnn} supports CUDA {s.cuda.major_minor}{extra}", *srcs)


def rule_nccl_suffix(c: _Ctx) -> RuleResult:
    rule = "nccl.cuda-suffix"
    srcs = c.m.rule_sources.get(rule, ())
    n, cuda = c.stack.nccl, c.stack.cuda
    text = f"NCCL {n} is built for CUDA {n.cuda}; stack CUDA is {cuda.major_minor}"
    if n.cuda_major != cuda.major:
        return _r(rule, Verdict.FAIL, text + " (different major)", *srcs)
    if n.cuda != cuda.major_minor:
        return _r(rule, Verdict.WARN,
                  text + " (same major: runs through minor-version compatibility, but the "
                  "build does not match the toolkit)", *srcs)
    return _r(rule, Verdict.PASS, text, *srcs)


def rule_dcgm_cuda(c: _Ctx) -> RuleResult:
    rule = "dcgm.cuda-major"
    major = c.stack.cuda.major
    bad = sorted({p.name for pins in c.stack.os.values() for p in pins.for_component("dcgm")
                  if "-cuda" in p.name and not p.name.endswith(f"-cuda{major}")})
    if bad:
        return _r(rule, Verdict.FAIL,
                  f"DCGM package(s) {', '.join(bad)} are built for another CUDA major than "
                  f"the stack's CUDA {major}", "DC")
    return _r(rule, Verdict.PASS, f"DCGM {c.stack.dcgm} packages match CUDA {major}", "DC")


# --- framework ---------------------------------------------------------------------------

def _minor_compat_floor(c: _Ctx, cuda_major: int) -> tuple[DriverVersion, str] | None:
    row = next((r for r in c.m.minor_version_compat if r.cuda_major == cuda_major), None)
    return (row.min_driver, row.source) if row else None


def rule_pytorch_build(c: _Ctx) -> RuleResult:
    rule = "framework.pytorch-build"
    t = c.stack.framework.pytorch
    if t is None:
        raise _NotEvaluated("stack pins no PyTorch")
    row = c.m.torch_builds.get(t.release)
    if row is None:
        return _r(rule, Verdict.FAIL,
                  f"PyTorch {t.release} is not in the release matrix; its CUDA builds are "
                  "unknown", "S9a")
    if t.cuda in row.stable:
        return _r(rule, Verdict.PASS,
                  f"PyTorch {t.release} ships a stable CUDA {t.cuda} build", row.source)
    if t.cuda in row.experimental:
        return _r(rule, Verdict.WARN,
                  f"PyTorch {t.release}'s CUDA {t.cuda} build is experimental (stable: "
                  f"{', '.join(row.stable)})", row.source)
    return _r(rule, Verdict.FAIL,
              f"PyTorch {t.release} publishes no CUDA {t.cuda} build (stable: "
              f"{', '.join(row.stable)}; experimental: {', '.join(row.experimental) or '-'})",
              row.source)


def rule_pytorch_driver(c: _Ctx) -> RuleResult:
    rule = "framework.pytorch-driver"
    t = c.stack.framework.pytorch
    if t is None:
        raise _NotEvaluated("stack pins no PyTorch")
    floor = _minor_compat_floor(c, t.cuda_major)
    if floor is None:
        return _r(rule, Verdict.FAIL, f"no driver floor known for CUDA {t.cuda_major}.x wheels",
                  "S2")
    text = (f"PyTorch {t} bundles CUDA {t.cuda}: needs driver >= {floor[0]}; stack pins "
            f"{c.stack.driver}")
    return _r(rule, Verdict.PASS if c.stack.driver >= floor[0] else Verdict.FAIL, text, floor[1])


def rule_pytorch_arch(c: _Ctx) -> RuleResult:
    rule = "framework.pytorch-arch"
    t = c.stack.framework.pytorch
    if t is None:
        raise _NotEvaluated("stack pins no PyTorch")
    gpu = _need_gpu(c)
    floor = next((f for f in c.m.torch_arch_floor if f.cuda_major == t.cuda_major), None)
    if floor is None:
        raise _NotEvaluated(f"no architecture floor recorded for CUDA {t.cuda_major} wheels")
    ok = c.m.arch_rank(gpu.architecture) >= c.m.arch_rank(floor.min_architecture)
    text = (f"CUDA {t.cuda_major} PyTorch wheels support {floor.min_architecture} and newer; "
            f"{gpu.key} is {gpu.architecture}")
    return _r(rule, Verdict.PASS if ok else Verdict.FAIL, text, floor.source)


def rule_tensorflow(c: _Ctx) -> RuleResult:
    rule = "framework.tensorflow"
    tf = c.stack.framework.tensorflow
    if tf is None:
        raise _NotEvaluated("stack pins no TensorFlow")
    row = c.m.tensorflow_builds.get(tf)
    if row is None:
        return _r(rule, Verdict.WARN,
                  f"TensorFlow {tf} has no tested-configuration row; its CUDA build is "
                  "unknown", "S10")
    floor = _minor_compat_floor(c, row.cuda.major)
    if floor is None:
        return _r(rule, Verdict.FAIL, f"no driver floor known for CUDA {row.cuda.major}.x",
                  row.source)
    text = (f"TensorFlow {tf} is tested with CUDA {row.cuda} / cuDNN {row.cudnn}: needs "
            f"driver >= {floor[0]}; stack pins {c.stack.driver}")
    verdict = Verdict.PASS if c.stack.driver >= floor[0] else Verdict.FAIL
    return _r(rule, verdict, text, row.source, floor[1])


# --- OS ------------------------------------------------------------------------------------

def _os_names(c: _Ctx) -> list[str]:
    return [c.os] if c.os else list(c.stack.os)


def rule_os_supported(c: _Ctx) -> list[RuleResult]:
    rule = "os.supported"
    if c.os is None:
        return [_r(rule, Verdict.PASS, f"stack pins packages for {', '.join(c.stack.os)}")]
    if c.os in c.stack.os:
        n = len(c.stack.os[c.os].packages)
        return [_r(rule, Verdict.PASS, f"stack pins {n} packages for {c.os}")]
    return [_r(rule, Verdict.FAIL,
               f"stack pins no packages for {c.os}; it supports {', '.join(c.stack.os)}")]


def rule_pins_confirmed(c: _Ctx) -> list[RuleResult]:
    out = []
    for os_name in _os_names(c):
        pins = c.stack.os.get(os_name)
        if pins is None:
            continue
        rule = f"os.pins-confirmed[{os_name}]"
        unconfirmed = [p for p in pins.packages if not p.confirmed]
        srcs = tuple(dict.fromkeys(s for p in unconfirmed for s in p.sources))
        if unconfirmed:
            listed = ", ".join(p.pin for p in unconfirmed)
            out.append(_r(rule, Verdict.WARN,
                          f"{len(unconfirmed)} of {len(pins.packages)} pins were not seen "
                          f"published: {listed}; confirm each with `apt-cache madison <name>` "
                          "before freezing", *srcs))
        else:
            srcs = tuple(dict.fromkeys(s for p in pins.packages for s in p.sources))
            out.append(_r(rule, Verdict.PASS,
                          f"all {len(pins.packages)} pins on {os_name} are confirmed", *srcs))
    return out


# --- security ------------------------------------------------------------------------------

def rule_advisories(c: _Ctx) -> list[RuleResult]:
    """Every installed component against the security bulletins' fixed releases
    (stacks/compat/advisories.yml): below one is FAIL unless the site accepted it."""
    out = []
    for component, version in (("driver", str(c.stack.driver)), *c.others):
        rule = f"security.advisories[{component}]"
        try:
            findings = advisories.judge(component, version, allowed=c.allowed)
        except VersionError as exc:
            out.append(_r(rule, Verdict.WARN, f"{component} {version}: {exc}; not judged "
                          "against the security bulletins"))
            continue
        srcs = tuple(dict.fromkeys(s for f in findings for s in f.sources))
        bad = [f for f in findings if f.verdict > Verdict.PASS]
        if bad:
            out.append(_r(rule, advisories.worst_findings(findings),
                          "; ".join(f.message for f in bad), *srcs))
        else:
            out.append(_r(rule, Verdict.PASS,
                          f"{component} {version} includes every fixed release of "
                          f"{len(findings)} bulletins ({', '.join(f.advisory for f in findings)})"
                          if findings else f"no bulletin names {component}", *srcs))
    return out


# (rule id, function): the id is what a skipped rule is reported as.
RULES: tuple[tuple[str, Callable[[_Ctx], RuleResult]], ...] = (
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
MULTI_RULES: tuple[Callable[[_Ctx], list[RuleResult]], ...] = (
    rule_os_supported, rule_pins_confirmed, rule_advisories,
)


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
    ctx = _Ctx(stack, model, os_name, today or dt.date.today(), m,
               tuple(sorted((others or {}).items())), allow_advisories)
    results: list[RuleResult] = []
    skipped: list[tuple[str, str]] = []
    for multi in MULTI_RULES:
        results.extend(multi(ctx))
    for rule_id, rule in RULES:
        try:
            results.append(rule(ctx))
        except _NotEvaluated as why:
            skipped.append((rule_id, why.reason))
    return GateReport(stack.name, model.key if model else None, os_name, ctx.today,
                      tuple(results), tuple(skipped))
