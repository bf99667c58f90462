"""The gate's rules on the libraries and frameworks: cuDNN, NCCL and DCGM against CUDA;
PyTorch's build, driver and architectures; TensorFlow's build."""

from __future__ import annotations

from nodecert.core.verdict import Verdict
from nodecert.stack.gate_rule import NotEvaluated, RuleContext, RuleResult, need_gpu, rule_result
from nodecert.stack.versions import DriverVersion

# --- libraries ---------------------------------------------------------------------------

def rule_cudnn_cuda(c: RuleContext) -> RuleResult:
    rule = "cudnn.cuda"
    s = c.stack
    wrong_names = sorted({p.name for pins in s.os.values() for p in pins.for_component("cudnn")
                          if not p.name.endswith(f"-cuda-{s.cuda.major}")})
    if wrong_names:
        return rule_result(rule, Verdict.FAIL,
                  f"cuDNN package(s) {', '.join(wrong_names)} are not the CUDA {s.cuda.major} "
                  f"build (name should end in -cuda-{s.cuda.major})", "S8")
    rows = [r for r in c.m.cudnn_cuda if r.covers(s.cudnn, s.cuda)]
    if not rows:
        return rule_result(rule, Verdict.FAIL,
                  f"no sourced support-matrix row pairs cuDNN {s.cudnn} with CUDA "
                  f"{s.cuda.major_minor}", "S8")
    floors = [r.min_driver for r in rows if r.min_driver is not None]
    floor = min(floors) if floors else None
    srcs = tuple(dict.fromkeys(r.source for r in rows))
    if floor is not None and s.driver < floor:
        return rule_result(rule, Verdict.FAIL,
                  f"cuDNN {s.cudnn} for CUDA {s.cuda.major_minor} needs driver >= {floor}; "
                  f"stack pins {s.driver}", *srcs)
    extra = f", driver floor {floor}" if floor else ""
    return rule_result(rule, Verdict.PASS,
              f"cuDNN {s.cudnn} supports CUDA {s.cuda.major_minor}{extra}", *srcs)


def rule_nccl_suffix(c: RuleContext) -> RuleResult:
    rule = "nccl.cuda-suffix"
    srcs = c.m.rule_sources.get(rule, ())
    n, cuda = c.stack.nccl, c.stack.cuda
    text = f"NCCL {n} is built for CUDA {n.cuda}; stack CUDA is {cuda.major_minor}"
    if n.cuda_major != cuda.major:
        return rule_result(rule, Verdict.FAIL, text + " (different major)", *srcs)
    if n.cuda != cuda.major_minor:
        return rule_result(rule, Verdict.WARN,
                  text + " (same major: runs through minor-version compatibility, but the "
                  "build does not match the toolkit)", *srcs)
    return rule_result(rule, Verdict.PASS, text, *srcs)


def rule_dcgm_cuda(c: RuleContext) -> RuleResult:
    rule = "dcgm.cuda-major"
    major = c.stack.cuda.major
    bad = sorted({p.name for pins in c.stack.os.values() for p in pins.for_component("dcgm")
                  if "-cuda" in p.name and not p.name.endswith(f"-cuda{major}")})
    if bad:
        return rule_result(rule, Verdict.FAIL,
                  f"DCGM package(s) {', '.join(bad)} are built for another CUDA major than "
                  f"the stack's CUDA {major}", "DC")
    return rule_result(rule, Verdict.PASS, f"DCGM {c.stack.dcgm} packages match CUDA {major}", "DC")



# --- framework ---------------------------------------------------------------------------

def _minor_compat_floor(c: RuleContext, cuda_major: int) -> tuple[DriverVersion, str] | None:
    row = next((r for r in c.m.minor_version_compat if r.cuda_major == cuda_major), None)
    return (row.min_driver, row.source) if row else None


def rule_pytorch_build(c: RuleContext) -> RuleResult:
    rule = "framework.pytorch-build"
    t = c.stack.framework.pytorch
    if t is None:
        raise NotEvaluated("stack pins no PyTorch")
    row = c.m.torch_builds.get(t.release)
    if row is None:
        return rule_result(rule, Verdict.FAIL,
                  f"PyTorch {t.release} is not in the release matrix; its CUDA builds are "
                  "unknown", "S9a")
    if t.cuda in row.stable:
        return rule_result(rule, Verdict.PASS,
                  f"PyTorch {t.release} ships a stable CUDA {t.cuda} build", row.source)
    if t.cuda in row.experimental:
        return rule_result(rule, Verdict.WARN,
                  f"PyTorch {t.release}'s CUDA {t.cuda} build is experimental (stable: "
                  f"{', '.join(row.stable)})", row.source)
    return rule_result(rule, Verdict.FAIL,
              f"PyTorch {t.release} publishes no CUDA {t.cuda} build (stable: "
              f"{', '.join(row.stable)}; experimental: {', '.join(row.experimental) or '-'})",
              row.source)


def rule_pytorch_driver(c: RuleContext) -> RuleResult:
    rule = "framework.pytorch-driver"
    t = c.stack.framework.pytorch
    if t is None:
        raise NotEvaluated("stack pins no PyTorch")
    floor = _minor_compat_floor(c, t.cuda_major)
    if floor is None:
        return rule_result(
            rule, Verdict.FAIL, f"no driver floor known for CUDA {t.cuda_major}.x wheels",
                  "S2")
    text = (f"PyTorch {t} bundles CUDA {t.cuda}: needs driver >= {floor[0]}; stack pins "
            f"{c.stack.driver}")
    return rule_result(
        rule, Verdict.PASS if c.stack.driver >= floor[0] else Verdict.FAIL, text, floor[1])


def rule_pytorch_arch(c: RuleContext) -> RuleResult:
    rule = "framework.pytorch-arch"
    t = c.stack.framework.pytorch
    if t is None:
        raise NotEvaluated("stack pins no PyTorch")
    gpu = need_gpu(c)
    floor = next((f for f in c.m.torch_arch_floor if f.cuda_major == t.cuda_major), None)
    if floor is None:
        raise NotEvaluated(f"no architecture floor recorded for CUDA {t.cuda_major} wheels")
    ok = c.m.arch_rank(gpu.architecture) >= c.m.arch_rank(floor.min_architecture)
    text = (f"CUDA {t.cuda_major} PyTorch wheels support {floor.min_architecture} and newer; "
            f"{gpu.key} is {gpu.architecture}")
    return rule_result(rule, Verdict.PASS if ok else Verdict.FAIL, text, floor.source)


def rule_tensorflow(c: RuleContext) -> RuleResult:
    rule = "framework.tensorflow"
    tf = c.stack.framework.tensorflow
    if tf is None:
        raise NotEvaluated("stack pins no TensorFlow")
    row = c.m.tensorflow_builds.get(tf)
    if row is None:
        return rule_result(rule, Verdict.WARN,
                  f"TensorFlow {tf} has no tested-configuration row; its CUDA build is "
                  "unknown", "S10")
    floor = _minor_compat_floor(c, row.cuda.major)
    if floor is None:
        return rule_result(rule, Verdict.FAIL, f"no driver floor known for CUDA {row.cuda.major}.x",
                  row.source)
    text = (f"TensorFlow {tf} is tested with CUDA {row.cuda} / cuDNN {row.cudnn}: needs "
            f"driver >= {floor[0]}; stack pins {c.stack.driver}")
    verdict = Verdict.PASS if c.stack.driver >= floor[0] else Verdict.FAIL
    return rule_result(rule, verdict, text, row.source, floor[1])


__all__ = [
    "rule_cudnn_cuda",
    "rule_dcgm_cuda",
    "rule_nccl_suffix",
    "rule_pytorch_arch",
    "rule_pytorch_build",
    "rule_pytorch_driver",
    "rule_tensorflow",
]
