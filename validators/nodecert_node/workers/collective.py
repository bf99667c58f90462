"""Fabric worker: all-reduce and copy bandwidth in the stack's PyTorch, for nodes
without nccl-tests or nvbandwidth. JSON events on stdout; Python 3.8+.

    <env>/bin/python collective.py allreduce --max-bytes 8G --iters 20
    <env>/bin/python collective.py copy --bytes 1G [--d2d]

allreduce: one process per GPU (torch.multiprocessing), NCCL, sizes doubling from
8 B; each rank's tensor holds rank+1, so every element of the sum must equal
n(n+1)/2 -- any other value is counted as wrong. Bus bandwidth uses nccl-tests'
formula (algbw x 2(n-1)/n), so the judge and its thresholds are the same. The
rendezvous is a file, and NCCL's bootstrap is kept on loopback.
copy: per GPU, pinned host <-> device copies timed with CUDA events (median of 3),
and with --d2d every ordered GPU pair (device to device), in GB/s.
`--cpu` runs the same code on the CPU (gloo; the project's tests).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from typing import Any

if not __package__:  # run as a script by the stack's python: its package is put on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))
from nodecert_node.workers.frame import emit, start_torch


def size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t[-1:] in units else int(t)


def busbw(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


def _rank(rank: int, world: int, args: Any, rdv: str) -> None:
    import torch
    import torch.distributed as dist
    cpu = args.cpu
    dist.init_process_group("gloo" if cpu else "nccl", init_method=f"file://{rdv}",
                            rank=rank, world_size=world)
    dev = torch.device("cpu") if cpu else torch.device(f"cuda:{rank}")
    if not cpu:
        torch.cuda.set_device(rank)
    expect = world * (world + 1) / 2

    def sync() -> None:
        if not cpu:
            torch.cuda.synchronize(rank)
    size = 8
    while size <= args.max_bytes:
        n = max(size // 4, 1)
        buf = torch.empty(n, dtype=torch.float32, device=dev)
        for _ in range(args.warmup):
            buf.fill_(rank + 1)
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        elapsed, wrong = 0.0, 0
        for _ in range(args.iters):
            buf.fill_(rank + 1)
            if args.inject_fault and rank == world - 1:
                buf[-1] = -1000.0  # testing only: one rank contributes a corrupted value
            sync()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            sync()
            elapsed += time.perf_counter() - t0
            wrong += int((buf != expect).sum())
        t = torch.tensor([elapsed, float(wrong)], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time, any wrong
        if rank == 0:
            time_us = float(t[0]) / args.iters * 1e6
            alg = n * 4 / (time_us * 1e-6) / 1e9
            emit("row", size=n * 4, time_us=round(time_us, 2), algbw=round(alg, 4),
                 busbw=round(busbw(alg, world), 4), wrong=int(t[1]))
        size *= 2
    dist.barrier()
    dist.destroy_process_group()


def allreduce(args: Any) -> int:
    import torch
    import torch.multiprocessing as mp
    world = args.ranks if args.cpu else torch.cuda.device_count()
    if world < 1:
        emit("error", message="no GPU visible to PyTorch")
        return 2
    nccl = "" if args.cpu else ".".join(str(x) for x in torch.cuda.nccl.version())
    emit("start", ranks=world, nccl=nccl, torch=torch.__version__,
         **({"inject_fault": True} if args.inject_fault else {}))
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")  # bootstrap never leaves the node
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_rank, args=(world, args, os.path.join(d, "rendezvous")), nprocs=world,
                 join=True)
    emit("done")
    return 0


def copy(args: Any) -> int:
    import torch
    n = args.bytes // 4
    gpus = [] if args.cpu else list(range(torch.cuda.device_count()))
    if not args.cpu and not gpus:
        emit("error", message="no GPU visible to PyTorch")
        return 2
    emit("start", gpus=len(gpus), bytes=n * 4, torch=torch.__version__)

    def timed(fn: Any, dev: int | None) -> float:
        """GB/s of one copy of n floats: the median of 3 after a warm-up."""
        fn()
        rates = []
        for _ in range(3):
            if dev is None:
                t0 = time.perf_counter()
                fn()
                s = time.perf_counter() - t0
            else:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                s = start.elapsed_time(end) / 1e3
            rates.append(n * 4 / s / 1e9)
        return float(round(statistics.median(rates), 2))
    targets: list[int | None] = list(gpus) or [None]
    for g in targets:
        host = torch.empty(n, dtype=torch.float32, pin_memory=g is not None)
        dst = torch.empty(n, dtype=torch.float32, device="cpu" if g is None else f"cuda:{g}")
        emit("h2d", gpu=0 if g is None else g,
             gbs=timed(functools.partial(dst.copy_, host, non_blocking=True), g))
        emit("d2h", gpu=0 if g is None else g,
             gbs=timed(functools.partial(host.copy_, dst, non_blocking=True), g))
    if args.d2d and len(gpus) > 1:
        bufs = {g: torch.empty(n, dtype=torch.float32, device=f"cuda:{g}") for g in gpus}
        for a in gpus:
            for b in gpus:
                if a != b:  # a reads from b, as nvbandwidth's *_read_ce
                    emit("d2d", src=b, dst=a,
                         gbs=timed(functools.partial(bufs[a].copy_, bufs[b]), a))
    emit("done")
    return 0


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("allreduce")
    a.add_argument("--max-bytes", type=size_bytes, default=size_bytes("8G"))
    a.add_argument("--iters", type=int, default=20)
    a.add_argument("--warmup", type=int, default=5)
    a.add_argument("--cpu", action="store_true", help="gloo on the CPU (tests)")
    a.add_argument("--ranks", type=int, default=2, help="with --cpu: processes")
    a.add_argument("--inject-fault", action="store_true",
                   help="testing only: the last rank contributes one corrupted element")
    c = sub.add_parser("copy")
    c.add_argument("--bytes", type=size_bytes, default=size_bytes("1G"))
    c.add_argument("--d2d", action="store_true")
    c.add_argument("--cpu", action="store_true")
    args = ap.parse_args(argv)
    _, done = start_torch(args.mode, vars(args))
    if done is not None:
        return done
    try:
        return allreduce(args) if args.mode == "allreduce" else copy(args)
    except Exception as exc:  # NCCL/CUDA errors: report, exit non-zero
        emit("error", message=f"{type(exc).__name__}: {exc}"[:2000])
        return 2


if __name__ == "__main__":
    sys.exit(main())
