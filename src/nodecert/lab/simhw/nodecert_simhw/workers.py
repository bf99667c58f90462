"""The SIMULATED framework workers: nodecert's GEMM, smoke and collective workers
answered in their own event format by the hardware model.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json
import os
import signal
import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.nccl import busbw_peak
from nodecert_simhw.scaling import cmd_scaling
from nodecert_simhw.state import (
    GpuState,
    add_load,
    driver_version,
    drop_load,
    installed,
    jitter,
    load_hw,
    nvlink_ok,
    visible_gpus,
)


def _emit(event, **kw):
    print(json.dumps(dict(event=event, **kw), sort_keys=True), flush=True)


def torch_gemm(args, module_version, cuda):
    """nodecert's gemm.py worker, for the lab's simulated torch: same events, the
    throughput from the GPU profile (C3) and the injected faults (sdc, tflops_low,
    thermal_throttle through the GPU's state)."""
    hw = load_hw()
    inst = installed()
    vis = visible_gpus(hw)
    dev = str(args.get("device"))
    if driver_version(inst) is None or not dev.isdigit() or int(dev) >= len(vis):
        _emit("error", message="RuntimeError: CUDA error: invalid device ordinal")
        return 2
    i = vis[int(dev)]
    g = hw["profile"]["gpu"]
    dtype, n = args.get("dtype", "bf16"), int(args.get("size", 8192))
    seconds, report_s = float(args.get("seconds", 60)), float(args.get("report_s", 5))
    scale = {"bf16": 1.0, "fp16": 1.0, "tf32": 0.5, "fp32": 0.06, "fp8": 1.75}.get(dtype, 1.0)
    tol = {"bf16": 2e-2, "fp16": 4e-3, "tf32": 4e-3, "fp32": 1e-5, "fp8": 1.5e-1}[dtype]
    _emit("ready", device=dev, name=g["product_name"], dtype=dtype, n=n, torch=module_version,
          cuda=cuda, ref_bad=0, ref_max_rel=0.002, tolerance=tol, ref_digest="5151515151515151")
    add_load(i, seconds + 5, os.getpid())
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    start = last = time.time()
    it = checks = mismatches = bad = 0
    windows = []
    try:
        while not stop["now"]:
            time.sleep(min(0.2, report_s))
            now = time.time()
            if now - last >= report_s or now - start >= seconds:
                s = GpuState(hw, i, now=now)
                # Sustained at the power limit: 84% of the burst figure (nodecert's H200
                # recording, tests/fixtures/recorded/h200-device-2026-11-29).
                tf = g["bf16_tflops"] * 0.84 * scale
                tf *= Faults(hw).gemm_factor(i)
                if s.reasons & 0x40:
                    tf *= 0.45
                tf *= 1 + jitter(i, int(now), "f", spread=0.005)
                k = max(int(tf * 1e12 * (now - last) / (2.0 * n ** 3)), 1)
                it += k
                checks += max(k // 10, 1)
                if Faults(hw).corrupts_results(i):
                    mismatches += 1
                    bad += 3
                    _emit("mismatch", iter=it, differing=3, bad=3, max_abs=412.0, max_rel=1.7)
                windows.append(round(tf, 4))
                _emit("window", t=round(now - start, 2), iters=it, tflops=round(tf, 4))
                last = now
                if now - start >= seconds:
                    break
    finally:
        drop_load(i, os.getpid())
    _emit("done", iters=it, seconds=round(time.time() - start, 2), checks=checks,
          mismatches=mismatches, bad_elements=bad, windows=windows,
          tflops=round(sum(windows) / max(len(windows), 1), 4))
    return 0


def framework_smoke(args, module_version, cuda, cudnn, nccl):
    hw = load_hw()
    inst = installed()
    fw = args.get("framework", "torch")
    vis = visible_gpus(hw) if driver_version(inst) is not None else []
    names = [hw["profile"]["gpu"]["product_name"]] * len(vis)
    _emit("framework", framework=fw, version=module_version, cuda=cuda, cudnn=cudnn,
          nccl=nccl if fw == "torch" else "", cuda_available=bool(vis), gpus=names)
    steps = int(args.get("steps", 30))
    for n, _ in enumerate(vis):
        losses = [round(1.09 * 0.9 ** k, 6) for k in range(steps)]
        _emit("train", framework=fw, device=f"cuda:{n}" if fw == "torch" else f"/GPU:{n}",
              losses=losses, seconds=0.05)
    return 0


def torch_collective(kind, args):
    """nodecert's collective.py worker (all-reduce / copy bandwidth) for the simulated
    torch: the same fabric model as the simulated all_reduce_perf and nvbandwidth."""
    hw = load_hw()
    if driver_version(installed()) is None:
        _emit("error", message="RuntimeError: No CUDA GPUs are available")
        return 2
    vis = visible_gpus(hw)
    fab = hw["profile"]["fabric"]
    g = hw["profile"]["gpu"]
    if kind == "allreduce":
        _emit("start", ranks=len(vis), nccl="SIMULATED", torch="SIMULATED")
        peak, size = busbw_peak(hw, vis), 8
        while size <= int(args.get("max_bytes", 1 << 33)):
            bw = peak * size / (size + (4 << 20))  # latency-bound small messages
            n = len(vis)
            alg = bw * n / (2 * (n - 1)) if n > 1 else 0.0
            t_us = size / (alg * 1e3) if alg else 10.0
            _emit("row", size=size, time_us=round(t_us, 2), algbw=round(alg, 4),
                  busbw=round(bw, 4), wrong=0)
            size *= 2
        _emit("done")
        return 0
    _emit("start", gpus=len(vis), bytes=int(args.get("bytes", 1 << 30)), torch="SIMULATED")
    for n, i in enumerate(vis):
        st = GpuState(hw, i, load={})
        base = fab["h2d_gbs"] * (st.pcie_width / g["pcie_width"]) * 2 ** (st.pcie_gen
                                                                           - g["pcie_gen"])
        _emit("h2d", gpu=n, gbs=round(base * (1 + jitter("h2d", i, spread=0.001)), 2))
        _emit("d2h", gpu=n, gbs=round(base * (1 + jitter("d2h", i, spread=0.001)), 2))
    if args.get("d2d"):
        for a, ia in enumerate(vis):
            for b, ib in enumerate(vis):
                if a != b:
                    nv = g.get("nvlink_links") and nvlink_ok(hw, ia) and nvlink_ok(hw, ib)
                    v = (fab["d2d_gbs"] if nv else fab["pcie_d2d_gbs"]) * (
                        1 + jitter("d2d", ia, ib, spread=0.002))
                    _emit("d2d", src=b, dst=a, gbs=round(v, 2))
    _emit("done")
    return 0


def cmd_torch_worker(argv):
    """simhw.py torch-worker KIND JSON_ARGS [VERSION CUDA CUDNN NCCL] (the simulated
    framework wheels exec this)."""
    kind, args = argv[0], json.loads(argv[1])
    if kind == "gemm":
        return torch_gemm(args, *argv[2:4])
    if kind in ("allreduce", "copy"):
        return torch_collective(kind, args)
    if kind == "scaling":
        return cmd_scaling(args, *argv[2:4])
    return framework_smoke(args, *argv[2:6])
