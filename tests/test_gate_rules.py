"""Every compatibility rule, shown to pass and to fail on real version pairs."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

import pytest

from nodecert.core.verdict import Verdict
from nodecert.stack.compat import default_matrix
from nodecert.stack.gate import GateReport, RuleResult, evaluate
from nodecert.stack.manifest import Stack
from support.env import TODAY

BuildStack = Callable[..., Stack]
PASS, WARN, FAIL = Verdict.PASS, Verdict.WARN, Verdict.FAIL


def rule(report: GateReport, rule_id: str) -> RuleResult:
    hits = [r for r in report.results if r.rule == rule_id]
    assert len(hits) == 1, f"{rule_id} not evaluated: {report.not_evaluated}"
    return hits[0]


def check(stack: Stack, gpu: str | None = None, os_name: str | None = None,
          today: dt.date = TODAY) -> GateReport:
    return evaluate(stack, gpu=gpu, os_name=os_name, today=today)


# --- driver.cuda-min (A1) --------------------------------------------------------------

@pytest.mark.parametrize(("cuda", "driver", "verdict"), [
    ("13.0.0", "580.65.06", PASS),    # exactly the documented minimum
    ("13.0.2", "580.95.05", PASS),
    ("13.0.2", "580.82.07", FAIL),    # 13.0 U2 needs 580.95.05
    ("12.8.1", "570.124.06", PASS),
    ("12.8.1", "570.86.15", FAIL),    # 570.86.15 predates 12.8 U1
    ("12.8.0", "570.86.15", PASS),    # 12.8 GA needs only 570.26
    ("12.4.1", "550.54.15", PASS),
    ("12.4.1", "550.54.14", FAIL),
])
def test_cuda_min_driver(build_stack: BuildStack, cuda: str, driver: str,
                         verdict: Verdict) -> None:
    major = cuda.split(".", maxsplit=1)[0]
    cudnn = "9.17.0.1" if major == "13" else "9.10.2.21"
    stack = build_stack(driver=driver, cuda=cuda, cudnn=cudnn,
                        nccl=f"2.27.7-1+cuda{'.'.join(cuda.split('.')[:2])}",
                        torch=None, tensorflow="2.18.0")
    r = rule(check(stack), "driver.cuda-min")
    assert r.verdict is verdict
    assert r.sources == ("S1",)


def test_cuda_min_driver_message_names_both_versions(build_stack: BuildStack) -> None:
    stack = build_stack(driver="570.133.20", cuda="13.0.0", cudnn="9.17.0.1", torch=None,
                        tensorflow="2.18.0")
    r = rule(check(stack), "driver.cuda-min")
    assert r.verdict is FAIL
    assert "CUDA 13.0.0 needs driver >= 580.65.06; stack pins 570.133.20" in r.message


def test_cuda_not_in_matrix_fails(build_stack: BuildStack) -> None:
    stack = build_stack(cuda="13.0.7", cudnn="9.17.0.1")
    r = rule(check(stack), "driver.cuda-min")
    assert r.verdict is FAIL
    assert "not in the compatibility data" in r.message


# --- forward compatibility (A2) ----------------------------------------------------------

def _compat_stack(build_stack: BuildStack) -> Stack:
    # CUDA 12.8 U1 on an R550 kernel driver through cuda-compat-12-8.
    return build_stack(driver="550.163.01", cuda="12.8.1", cudnn="9.10.2.21",
                       nccl="2.25.1-1+cuda12.8", torch="2.8.0+cu128", cuda_compat="12.8")


def test_forward_compat_passes_on_datacenter_gpu(build_stack: BuildStack) -> None:
    r = rule(check(_compat_stack(build_stack), gpu="H100-SXM"), "driver.cuda-min")
    assert r.verdict is PASS
    assert "forward compatibility" in r.message
    assert "S2" in r.sources


def test_forward_compat_warns_without_gpu(build_stack: BuildStack) -> None:
    r = rule(check(_compat_stack(build_stack)), "driver.cuda-min")
    assert r.verdict is WARN


def test_forward_compat_fails_on_non_datacenter_gpu(build_stack: BuildStack) -> None:
    geforce = dataclasses.replace(default_matrix().gpu("L40S"), key="RTX-TEST", datacenter=False)
    report = evaluate(_compat_stack(build_stack), gpu=geforce, today=TODAY)
    r = rule(report, "driver.cuda-min")
    assert r.verdict is FAIL
    assert "not a data-center GPU" in r.message


def test_below_minimum_without_compat_fails(build_stack: BuildStack) -> None:
    stack = build_stack(driver="550.163.01", cuda="12.8.1", cudnn="9.10.2.21",
                        nccl="2.25.1-1+cuda12.8", torch="2.8.0+cu128")
    r = rule(check(stack, gpu="H100-SXM"), "driver.cuda-min")
    assert r.verdict is FAIL
    assert "no matching cuda-compat" in r.message


# --- driver.branch-lifecycle (A3) --------------------------------------------------------

@pytest.mark.parametrize(("driver", "cuda", "today", "verdict", "phrase"), [
    ("580.173.02", "13.0.0", TODAY, PASS, "supported until 2028-08-31"),
    ("570.211.01", "12.8.1", TODAY, WARN, "reached end of life on 2026-02-28"),
    ("570.211.01", "12.8.1", dt.date(2026, 1, 15), WARN, "in 44 days"),
    ("570.211.01", "12.8.1", dt.date(2025, 6, 1), PASS, "supported until 2026-02-28"),
    ("550.163.01", "12.4.1", TODAY, WARN, "is end-of-life"),
])
def test_branch_lifecycle(build_stack: BuildStack, driver: str, cuda: str, today: dt.date,
                          verdict: Verdict, phrase: str) -> None:
    mm = ".".join(cuda.split(".")[:2])
    stack = build_stack(driver=driver, cuda=cuda, cudnn="9.10.2.21" if mm != "13.0" else
                        "9.17.0.1", nccl=f"2.27.7-1+cuda{mm}", torch=None, tensorflow="2.18.0")
    r = rule(check(stack, today=today), "driver.branch-lifecycle")
    assert r.verdict is verdict
    assert phrase in r.message


def test_unknown_branch_warns(build_stack: BuildStack) -> None:
    stack = build_stack(driver="595.45.04", cuda="13.0.0", cudnn="9.17.0.1")
    r = rule(check(stack), "driver.branch-lifecycle")
    assert r.verdict is WARN
    assert "not in the lifecycle data" in r.message


# --- fabric-manager.version --------------------------------------------------------------

def test_fabric_manager_equal_to_driver_passes(build_stack: BuildStack) -> None:
    assert rule(check(build_stack(), gpu="H200-SXM"), "fabric-manager.version").verdict is PASS


def test_fabric_manager_version_mismatch_fails(build_stack: BuildStack) -> None:
    # Canonical's noble archive once carried FM 580.159.03 next to driver 580.173.02.
    stack = build_stack(fm="580.159.03")
    r = rule(check(stack, gpu="H200-SXM"), "fabric-manager.version")
    assert r.verdict is FAIL
    assert "Fabric Manager 580.159.03 != driver 580.173.02" in r.message


def test_nscq_version_mismatch_fails(build_stack: BuildStack) -> None:
    r = rule(check(build_stack(nscq="580.159.03")), "fabric-manager.version")
    assert r.verdict is FAIL
    assert "libnvidia-nscq 580.159.03 != driver" in r.message


@pytest.mark.parametrize(("gpu", "verdict"), [("H200-SXM", FAIL), ("L40S", PASS), (None, WARN)])
def test_missing_fabric_manager(build_stack: BuildStack, gpu: str | None,
                                verdict: Verdict) -> None:
    r = rule(check(build_stack(fm=None, nscq=None), gpu=gpu), "fabric-manager.version")
    assert r.verdict is verdict


# --- imex.version ------------------------------------------------------------------------

@pytest.mark.parametrize(("imex", "gpu", "verdict", "says"), [
    ("same", "GB200", PASS, "IMEX equals the driver (580.173.02)"),
    ("580.159.03", "GB200", FAIL, "IMEX 580.159.03 != driver 580.173.02"),
    (None, "GB200", FAIL, "GB200 compute trays share memory across the NVLink domain"),
    (None, "H200-SXM", PASS, "no IMEX pinned; H200-SXM is not a compute tray"),
    ("same", "H200-SXM", PASS, "installed only on compute trays of an NVLink domain"),
    (None, None, PASS, "no IMEX pinned"),
])
def test_imex_pinned_at_the_driver_for_nvlink_domain_trays(
        build_stack: BuildStack, imex: str | None, gpu: str | None, verdict: Verdict,
        says: str) -> None:
    r = rule(check(build_stack(imex=imex), gpu=gpu), "imex.version")
    assert r.verdict is verdict and says in r.message, r.message


# --- gpu.driver-min / kernel modules / practical branch ---------------------------------

@pytest.mark.parametrize(("gpu", "driver", "cuda", "verdict"), [
    ("H200-SXM", "550.90.07", "12.4.1", PASS),   # first listed release
    ("H200-SXM", "550.54.15", "12.4.1", FAIL),   # before H200 support
    ("B200", "570.86.15", "12.8.0", PASS),
    ("B200", "565.57.01", "12.6.3", FAIL),
    ("H200-NVL", "560.35.05", "12.6.3", FAIL),   # H200 NVL from 565.57.01
])
def test_gpu_driver_min(build_stack: BuildStack, gpu: str, driver: str, cuda: str,
                        verdict: Verdict) -> None:
    mm = ".".join(cuda.split(".")[:2])
    stack = build_stack(driver=driver, cuda=cuda, cudnn="9.10.2.21",
                        nccl=f"2.27.7-1+cuda{mm}", torch=None, tensorflow="2.18.0")
    r = rule(check(stack, gpu=gpu), "gpu.driver-min")
    assert r.verdict is verdict


def test_gpu_driver_min_not_evaluated_without_data(build_stack: BuildStack) -> None:
    report = check(build_stack(), gpu="A100-SXM4-80GB")
    assert "gpu.driver-min" in dict(report.not_evaluated)
    assert all(r.rule != "gpu.driver-min" for r in report.results)


@pytest.mark.parametrize(("gpu", "modules", "verdict"), [
    ("B200", "proprietary", FAIL),          # Blackwell: open modules required
    ("GH200", "proprietary", FAIL),         # Grace Hopper: open modules required
    ("V100-SXM2-32GB", "open", FAIL),       # pre-Turing: no GSP, no open modules
    ("V100-SXM2-32GB", "proprietary", PASS),
    ("H100-SXM", "proprietary", PASS),
    ("B200", "open", PASS),
])
def test_kernel_modules(build_stack: BuildStack, gpu: str, modules: str,
                        verdict: Verdict) -> None:
    r = rule(check(build_stack(modules=modules), gpu=gpu), "gpu.kernel-modules")
    assert r.verdict is verdict
    assert r.sources == ("S5", "S6")


def test_practical_branch(build_stack: BuildStack) -> None:
    ok = rule(check(build_stack(), gpu="B200"), "gpu.practical-branch")
    assert ok.verdict is PASS
    old = build_stack(driver="565.57.01", cuda="12.6.3", cudnn="9.5.1.17",
                      nccl="2.23.4-1+cuda12.6", torch=None, tensorflow="2.18.0")
    low = rule(check(old, gpu="B200"), "gpu.practical-branch")
    assert low.verdict is WARN
    assert "R570" in low.message


# --- cudnn.cuda (A4) ---------------------------------------------------------------------

@pytest.mark.parametrize(("cudnn", "cuda", "driver", "verdict"), [
    ("9.17.0.1", "13.0.0", "580.65.06", PASS),
    ("9.12.0.46", "13.0.0", "580.65.06", PASS),  # NVIDIA's own 13.0.0 image pairing
    ("9.5.1.17", "12.8.1", "570.124.06", FAIL),  # 9.0-9.5 builds cover CUDA 12.0-12.6 only
    ("9.5.1.17", "12.6.3", "560.35.05", PASS),
    ("9.12.0.46", "12.8.1", "570.124.06", FAIL),  # no sourced row pairs 9.12 with 12.8
])
def test_cudnn_cuda(build_stack: BuildStack, cudnn: str, cuda: str, driver: str,
                    verdict: Verdict) -> None:
    mm = ".".join(cuda.split(".")[:2])
    stack = build_stack(driver=driver, cuda=cuda, cudnn=cudnn, nccl=f"2.27.7-1+cuda{mm}",
                        torch=None, tensorflow="2.18.0")
    assert rule(check(stack), "cudnn.cuda").verdict is verdict


def test_cudnn_package_for_wrong_cuda_major_fails(build_stack: BuildStack) -> None:
    r = rule(check(build_stack(cudnn_cuda_major=12)), "cudnn.cuda")
    assert r.verdict is FAIL
    assert "libcudnn9-cuda-12" in r.message


# --- nccl.cuda-suffix (A5) ---------------------------------------------------------------

@pytest.mark.parametrize(("nccl", "cuda", "verdict"), [
    ("2.21.5-1+cuda12.4", "12.4.1", PASS),
    ("2.21.5-1+cuda12.5", "12.4.1", WARN),   # what an unpinned 2.21.* resolved to (S12c)
    ("2.27.7-1+cuda13.0", "12.8.1", FAIL),
])
def test_nccl_suffix(build_stack: BuildStack, nccl: str, cuda: str, verdict: Verdict) -> None:
    driver = "570.124.06" if cuda.startswith("12.8") else "550.54.15"
    stack = build_stack(driver=driver, cuda=cuda, cudnn="9.1.0.70", nccl=nccl, torch=None,
                        tensorflow="2.18.0")
    assert rule(check(stack), "nccl.cuda-suffix").verdict is verdict


# --- dcgm.cuda-major ---------------------------------------------------------------------

def test_dcgm_package_cuda_major(build_stack: BuildStack) -> None:
    assert rule(check(build_stack()), "dcgm.cuda-major").verdict is PASS
    r = rule(check(build_stack(dcgm_cuda_major=12)), "dcgm.cuda-major")
    assert r.verdict is FAIL
    assert "datacenter-gpu-manager-4-cuda12" in r.message


# --- framework (A6, A7) ------------------------------------------------------------------

@pytest.mark.parametrize(("torch", "verdict"), [
    ("2.10.0+cu128", PASS),   # stable build
    ("2.9.1+cu130", WARN),    # experimental build in 2.9
    ("2.5.1+cu128", FAIL),    # 2.5 published no 12.8 build
    ("2.99.0+cu130", FAIL),   # release not in the matrix
])
def test_pytorch_build(build_stack: BuildStack, torch: str, verdict: Verdict) -> None:
    assert rule(check(build_stack(torch=torch)), "framework.pytorch-build").verdict is verdict


def test_pytorch_driver_floor(build_stack: BuildStack) -> None:
    # A cu130 wheel needs an R580 driver even if the host toolkit is 12.8.
    stack = build_stack(driver="570.211.01", cuda="12.8.1", cudnn="9.10.2.21",
                        nccl="2.25.1-1+cuda12.8", torch="2.11.0+cu130")
    r = rule(check(stack), "framework.pytorch-driver")
    assert r.verdict is FAIL
    assert "needs driver >= 580.65.06" in r.message
    ok = build_stack(driver="570.211.01", cuda="12.8.1", cudnn="9.10.2.21",
                     nccl="2.25.1-1+cuda12.8", torch="2.8.0+cu128")
    assert rule(check(ok), "framework.pytorch-driver").verdict is PASS


def test_pytorch_cu13_drops_volta(build_stack: BuildStack) -> None:
    stack = build_stack(modules="proprietary")
    assert rule(check(stack, gpu="V100-SXM2-32GB"), "framework.pytorch-arch").verdict is FAIL
    assert rule(check(stack, gpu="H100-SXM"), "framework.pytorch-arch").verdict is PASS


@pytest.mark.parametrize(("tf", "driver", "cuda", "verdict"), [
    ("2.18.0", "570.211.01", "12.8.1", PASS),
    ("2.14.0", "520.61.05", "11.8.0", PASS),    # CUDA 11.8 build on an 11.8-capable driver
    ("2.18.0", "520.61.05", "11.8.0", FAIL),    # a CUDA 12.5 build needs >= 525.60.13
    ("2.21.0", "580.173.02", "13.0.0", WARN),   # no tested-configuration row
])
def test_tensorflow(build_stack: BuildStack, tf: str, driver: str, cuda: str,
                    verdict: Verdict) -> None:
    mm = ".".join(cuda.split(".")[:2])
    cudnn = {"12.8": "9.10.2.21", "11.8": "9.1.0.70", "13.0": "9.17.0.1"}[mm]
    stack = build_stack(driver=driver, cuda=cuda, cudnn=cudnn, nccl=f"2.21.5-1+cuda{mm}",
                        torch=None, tensorflow=tf)
    assert rule(check(stack), "framework.tensorflow").verdict is verdict


# --- os ----------------------------------------------------------------------------------

def test_os_supported(build_stack: BuildStack) -> None:
    stack = build_stack(os_names=("ubuntu-22.04",))
    assert rule(check(stack, os_name="ubuntu-22.04"), "os.supported").verdict is PASS
    r = rule(check(stack, os_name="debian-12"), "os.supported")
    assert r.verdict is FAIL
    assert "pins no packages for debian-12" in r.message


def test_unconfirmed_pins_warn_and_list_each_pin(build_stack: BuildStack) -> None:
    report = check(build_stack(confirmed=False), os_name="ubuntu-24.04")
    r = rule(report, "os.pins-confirmed[ubuntu-24.04]")
    assert r.verdict is WARN
    assert "libnccl2=2.27.7-1+cuda13.0" in r.message
    assert "apt-cache madison" in r.message
    clean = check(build_stack(), os_name="ubuntu-24.04")
    assert rule(clean, "os.pins-confirmed[ubuntu-24.04]").verdict is PASS


def test_overall_verdict_is_the_worst(build_stack: BuildStack) -> None:
    report = check(build_stack(fm="580.159.03"), gpu="H200-SXM")
    assert report.verdict is FAIL
    assert check(build_stack(), gpu="H200-SXM").verdict in (PASS, WARN)
