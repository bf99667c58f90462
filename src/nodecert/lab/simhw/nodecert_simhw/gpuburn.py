"""gpu_burn: the workload runner (marks GPUs busy, reports Gflop/s and errors).

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from nodecert_simhw.faults import Faults
from nodecert_simhw.state import (
    GpuState,
    clear_load,
    driver_version,
    gpu_identity,
    installed,
    jitter,
    load_hw,
    read_load,
    visible_gpus,
    write_load,
)


def cmd_gpu_burn(argv):
    hw = load_hw()
    inst = installed()
    if driver_version(inst) is None or "cuda" not in inst:
        print("Couldn't init a GPU test: Error in \"init\": CUDA_ERROR_NO_DEVICE")
        return 1
    seconds, mode, report_s = 10, "FLOATS", 10.0
    args = list(argv)
    if "-d" in args:
        mode = "DOUBLES"
        args.remove("-d")
    if "-tc" in args:
        mode = "FLOATS using Tensor Cores"
        args.remove("-tc")
    for k, a in enumerate(args):
        if a == "-i" and k + 1 < len(args):
            pass
        elif a.lstrip("-").isdigit():
            seconds = int(a)
    report_env = os.environ.get("NODECERT_LAB_BURN_REPORT_S")
    if report_env:
        report_s = float(report_env)
    vis = visible_gpus(hw)
    g = hw["profile"]["gpu"]
    print("Using compare file: compare.ptx")
    print(f"Burning for {seconds} seconds.")
    for n, i in enumerate(vis):
        print(f"GPU {n}: {g['product_name']} (UUID: {gpu_identity(hw, i)['uuid']})")
    for n, _ in enumerate(vis):
        avail = g["memory_mib"] - g["memory_reserved_mib"]
        print(f"Initialized device {n} with {g['memory_mib']} MB of memory ({avail} MB "
              f"available, using {int(avail * 0.9)} MB of it), using {mode}")
    print("Results are 268435456 bytes each, thus performing "
          f"{max(int(g['memory_mib'] * 0.9 / 256) - 2, 1)} iterations")
    sys.stdout.flush()
    write_load(vis, seconds + 5, os.getpid())
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    start = time.time()
    errors = dict.fromkeys(vis, 0)
    procd = dict.fromkeys(vis, 0)
    last = start
    try:
        while not stop["now"]:
            now = time.time()
            elapsed = now - start
            done = elapsed >= seconds
            if now - last >= report_s or done:
                load = read_load()
                parts, errs, temps = [], [], []
                for i in vis:
                    s = GpuState(hw, i, now=now, load=load)
                    tf = g["bf16_tflops"] * 1000 * 0.3  # FP32 GEMM ~30% of dense BF16
                    tf *= Faults(hw).gemm_factor(i)
                    if s.reasons & 0x40:
                        tf *= 0.45
                    tf *= 1 + jitter(i, int(now), "f", spread=0.005)
                    procd[i] += max(int(tf / 1000 * (now - last) / 2.2), 1)
                    if Faults(hw).corrupts_results(i):
                        errors[i] += 3
                    parts.append(f"{procd[i]} ({tf:.0f} Gflop/s)")
                    errs.append(str(errors[i]))
                    temps.append(f"{s.temp} C")
                pct = min(elapsed / seconds * 100, 100.0)
                print(f"{pct:.1f}%  proc'd: {' - '.join(parts)}   errors: {' - '.join(errs)}   "
                      f"temps: {' - '.join(temps)} ")
                if not done:
                    print(f"        Summary at:   {time.strftime('%a %b %d %I:%M:%S %p %Z %Y')}")
                    print()
                sys.stdout.flush()
                last = now
            if done:
                break
            time.sleep(min(0.2, max(seconds - elapsed, 0.01)))
    finally:
        clear_load()
    print("Killing processes with SIGTERM (soft kill)")
    for n, _ in enumerate(vis):
        print(f"Freed memory for dev {n}")
    print("Uninitted cublas")
    print("done")
    print()
    print(f"Tested {len(vis)} GPUs:")
    for n, i in enumerate(vis):
        print(f"        GPU {n}: {'FAULTY' if errors[i] else 'OK'}")
    print()
    return 0
