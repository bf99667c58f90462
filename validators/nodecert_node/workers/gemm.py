"""GEMM burn-in worker: one device, the stack's own PyTorch, JSON events on stdout.

Run with the provisioned environment's python (not the node runner's), one
process per GPU so a GPU that hangs or crashes takes only its own worker down:

    <env>/bin/python gemm.py --device 0 --dtype bf16 --size 8192 --seconds 120

Correctness: the first product on the device is the reference. It is checked
once against a float64 product of its first rows (a GPU that is wrong from the
start), then every --check-every iterations the new product is compared with it
bit for bit. A repeated GEMM with the same inputs, kernel and stream gives the
same bits on healthy hardware, so any element outside the dtype's tolerance is
silent data corruption; bit differences inside it are reported, not failed.

Events (one JSON object per line): ready, window (throughput every
--report-s seconds), mismatch, done, error. Standard library + torch only;
Python 3.8+ (it runs under whatever python the stack's environment has).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from typing import Any

if not __package__:  # run as a script by the stack's python: its package is put on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))
from nodecert_node.workers.frame import emit, start_torch

# Relative tolerance of the reference check and the repeat comparison, per dtype:
# several output ULPs (bf16 has 8 significant bits, fp16 11, tf32 11, fp8 e4m3 4).
TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3, "tf32": 4e-3, "fp32": 1e-5, "fp8": 1.5e-1}
REF_ROWS = 64  # rows of the reference checked against float64


def compare(c: Any, ref: Any, tol: float) -> dict[str, Any]:
    """How far product c is from the reference (torch tensors of one shape).

    bad: elements whose difference exceeds tol relative to the reference's
    largest magnitude (corruption); differing: elements not bit-identical."""
    import torch
    if torch.equal(c, ref):
        return {"differing": 0, "bad": 0, "max_abs": 0.0, "max_rel": 0.0}
    diff = (c.float() - ref.float()).abs()
    scale = max(float(ref.float().abs().max()), 1e-30)
    nan = int(torch.isnan(c.float()).sum())
    return {"differing": int((c != ref).sum()), "bad": int((diff > tol * scale).sum()) + nan,
            "max_abs": float(diff.nan_to_num(float("inf")).max()),
            "max_rel": float(diff.nan_to_num(float("inf")).max()) / scale}


def setup(device: str, dtype: str, n: int) -> tuple[Any, Any, Any]:
    """Inputs (identical on every device: same seed) and the GEMM as a callable."""
    import torch
    dev = torch.device(device if device == "cpu" else f"cuda:{device}")
    gen = torch.Generator(device="cpu").manual_seed(20261129)
    a32 = torch.randn(n, n, generator=gen).to(dev)
    b32 = torch.randn(n, n, generator=gen).to(dev)
    if dtype == "fp8":
        f8 = torch.float8_e4m3fn
        one = torch.ones((), device=dev)
        a8, b8 = a32.to(f8), b32.t().contiguous().to(f8)  # mat2 must be column-major

        def mm_fp8(out: Any = None) -> Any:
            return torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16)
        return a8.float(), b8.t().float(), mm_fp8
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    a, b = a32.to(tdt), b32.to(tdt)

    def mm(out: Any = None) -> Any:
        return torch.matmul(a, b, out=out)
    return a.float(), b.float(), mm


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", required=True, help="CUDA device index, or 'cpu' (tests)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(TOLERANCE))
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--check-every", type=int, default=10)
    ap.add_argument("--report-s", type=float, default=5)
    ap.add_argument("--inject-fault", type=int, default=0, metavar="ITER",
                    help="testing only: corrupt one output element at the first checked "
                         "iteration >= ITER to prove the comparison catches it (recorded in "
                         "every event)")
    args = ap.parse_args(argv)
    torch, done = start_torch("gemm", vars(args))
    if done is not None:
        return done
    n, tol = args.size, TOLERANCE[args.dtype]
    cuda = args.device != "cpu"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(int(args.device))
    injected = {"inject_fault": args.inject_fault} if args.inject_fault else {}
    try:
        if cuda:
            torch.cuda.set_device(int(args.device))
        a, b, mm = setup(args.device, args.dtype, n)
        ref = mm()
        sync()
        # The reference itself against float64 (first rows): a GPU wrong from the start.
        exact = a[:REF_ROWS].double() @ b.double()
        ref_err = compare(ref[:REF_ROWS].double(), exact, tol)
        step = max(n // 64, 1)  # a 64x64 sample: same inputs, so same on every healthy GPU
        digest = hashlib.sha256(repr(ref[::step, ::step].float().cpu().tolist()).encode()
                                ).hexdigest()[:16]
        name = torch.cuda.get_device_name(int(args.device)) if cuda else "cpu"
        emit("ready", device=args.device, name=name, dtype=args.dtype, n=n,
             torch=torch.__version__, cuda=torch.version.cuda, ref_bad=ref_err["bad"],
             ref_max_rel=ref_err["max_rel"], tolerance=tol, ref_digest=digest, **injected)
        del exact
        burn(args, mm, ref, sync, injected)
        return 0
    except Exception as exc:  # CUDA errors (Xid, ECC) surface here: report, exit non-zero
        emit("error", message=f"{type(exc).__name__}: {exc}"[:2000])
        return 2


def burn(args: Any, mm: Any, ref: Any, sync: Any, injected: dict[str, Any]) -> None:
    """GEMMs until --seconds: compare every --check-every, a window event every --report-s."""
    import torch
    n, tol = args.size, TOLERANCE[args.dtype]
    out = torch.empty_like(ref) if args.dtype != "fp8" else None
    flops = 2.0 * n ** 3
    start = time.perf_counter()
    t_win, it_win, it, checks, mismatches, bad_total = start, 0, 0, 0, 0, 0
    windows = []
    while True:
        c = mm(out) if out is not None else mm()
        it += 1
        it_win += 1
        if it % args.check_every == 0:
            if args.inject_fault and it >= args.inject_fault and not mismatches:
                c.view(-1)[n + 1] = c.view(-1)[n + 1] * 2 + 1000
            sync()
            checks += 1
            cmp = compare(c, ref, tol)
            if cmp["differing"]:
                mismatches += 1
                bad_total += cmp["bad"]
                emit("mismatch", iter=it, **cmp, **injected)
            now = time.perf_counter()
            if now - t_win >= args.report_s or now - start >= args.seconds:
                tflops = flops * it_win / (now - t_win) / 1e12
                windows.append(round(tflops, 4))
                emit("window", t=round(now - start, 2), iters=it, tflops=round(tflops, 4))
                t_win, it_win = now, 0
            if now - start >= args.seconds:
                break
    elapsed = time.perf_counter() - start
    emit("done", iters=it, seconds=round(elapsed, 2), checks=checks,
         mismatches=mismatches, bad_elements=bad_total, windows=windows,
         tflops=round(flops * it / elapsed / 1e12, 4), **injected)


if __name__ == "__main__":
    sys.exit(main())
