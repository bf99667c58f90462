"""Scaling worker: real training steps of a GPT-style decoder in the stack's PyTorch.

    <env>/bin/python scaling.py single --gpus 8 --layers 9 --d-model 4096 ...
    <env>/bin/python scaling.py ddp --gpus 8 [--nodes 2 --node-rank 0 --master h1:29600]

single: one process per GPU, each training its own copy (no communication): every
GPU's tokens/s alone, measured at the same moment so the GPUs share the host as they
will in training. ddp: one process per GPU on this node (and --nodes nodes started
alike, one task each, as torchrun would), DistributedDataParallel over NCCL; the
global rank 0 prints the throughput of the whole job.

The model is sized by the caller (from the GPU's memory); tokens are synthetic from a
fixed seed; bf16 autocast, AdamW. Throughput counts only the steps after --warmup,
each step timed from its start to the synchronised end of the optimizer step.
Events (one JSON object per line): ready, gpu (single), result (ddp), done, error.
`--cpu` runs the same code on the CPU with gloo (the project's tests). Python 3.8+.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import sys
import time
from typing import Any

if not __package__:  # run as a script by the stack's python: its package is put on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))))
from nodecert_node.workers.frame import emit, start_torch

VOCAB = 32000
SEED = 20261130


def params(layers: int, d_model: int) -> int:
    """Parameters of the model below (tied embedding, biases and norms included)."""
    block = 12 * d_model * d_model + 13 * d_model
    return layers * block + VOCAB * d_model + 2048 * d_model + 2 * d_model


def build(args: Any) -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads
                                                 ).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):  # type: ignore[misc]
        def __init__(self, layers: int, d: int, heads: int) -> None:
            super().__init__()
            self.emb, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(2048, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, idx: Any) -> Any:
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.emb(idx) + self.pos(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.emb.weight.t()  # tied output projection
    return GPT(args.layers, args.d_model, args.heads)


def train(args: Any, device: Any, rank: int, ddp: bool) -> list[float]:
    """Step times (seconds) of args.steps steps after args.warmup, on this process."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(SEED)  # identical initial weights everywhere
    model = build(args).to(device)
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=None if args.cpu else [device])
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if cuda else {}))
    gen = torch.Generator(device="cpu").manual_seed(SEED + rank)
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=gen).to(device)
    dtype = torch.bfloat16

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)
    times: list[float] = []
    for k in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=dtype):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if k >= args.warmup:
            times.append(time.perf_counter() - t0)
    if not math.isfinite(float(loss.detach())):
        raise FloatingPointError(f"the loss is {float(loss.detach())} (wrong results)")
    return times


def _summary(times: list[float], tokens_per_step: int) -> dict[str, Any]:
    ms = sorted(t * 1e3 for t in times)
    return {"tokens_s": round(tokens_per_step * len(times) / sum(times), 2),
            "step_ms_median": round(statistics.median(ms), 3),
            "step_ms_min": round(ms[0], 3), "step_ms_max": round(ms[-1], 3),
            "steps": len(times)}


def _single(local: int, args: Any) -> None:
    import torch
    device = torch.device("cpu") if args.cpu else torch.device(f"cuda:{local}")
    if not args.cpu:
        torch.cuda.set_device(local)
    try:
        times = train(args, device, local, ddp=False)
        emit("gpu", gpu=local, **_summary(times, args.batch * args.seq))
    except Exception as exc:  # one GPU's failure is reported as its own
        emit("error", gpu=local, message=f"{type(exc).__name__}: {exc}"[:2000])


def _ddp(local: int, args: Any) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    world = args.gpus * args.nodes
    rank = args.node_rank * args.gpus + local
    host, _, port = args.master.rpartition(":")
    # The rendezvous store is the job's own, its server in rank 0: it outlives the process
    # group, so that rank 0 can leave last (below).
    store = dist.TCPStore(host, int(port), world, rank == 0, timedelta(seconds=300))
    dist.init_process_group("gloo" if args.cpu else "nccl", store=store, rank=rank,
                            world_size=world)
    device = torch.device("cpu") if args.cpu else torch.device(f"cuda:{local}")
    if not args.cpu:
        torch.cuda.set_device(local)
    times = train(args, device, rank, ddp=True)
    # A synchronous step ends when the slowest rank's ends: the job's step time.
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        emit("result", world=world, nodes=args.nodes,
             **_summary([float(x) for x in t.cpu()], world * args.batch * args.seq))
    # Every rank past its last collective before any tears down: a rank that closes its
    # connections while a peer's transport still uses them makes gloo abort the peer.
    dist.barrier()
    dist.destroy_process_group()
    # Tearing down still speaks to the store, whose server is rank 0's: rank 0 leaves only
    # once every other rank has torn down (one that found the server gone aborted).
    store.set(f"nodecert-down-{rank}", "1")
    if rank == 0:
        store.wait([f"nodecert-down-{r}" for r in range(1, world)])
    # The rank's work is done and said. Its exit skips the interpreter's teardown: the
    # store client's destructor still met a server already gone at times (a rank aborted
    # with SIGABRT after the result was in, in a CI rehearsal on a busy machine), and
    # nothing is left to close that the process's end does not close.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("single", "ddp"))
    ap.add_argument("--gpus", type=int, required=True, help="GPUs (processes) on this node")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2, help="sequences per GPU per step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", default="bf16", choices=("bf16",))
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--node-rank", type=int, default=0)
    ap.add_argument("--master", default="", help="HOST:PORT of node rank 0 (ddp)")
    ap.add_argument("--cpu", action="store_true", help="the CPU with gloo (tests)")
    args = ap.parse_args(argv)
    if args.d_model % args.heads or args.seq > 2048 or min(args.gpus, args.steps) < 1:
        emit("error", message="invalid sizes: d_model must divide by heads, seq <= 2048, "
                              "gpus and steps >= 1")
        return 2
    torch, done = start_torch("scaling", vars(args))
    if done is not None:
        return done
    import torch.multiprocessing as mp
    if not args.cpu and torch.cuda.device_count() < args.gpus:
        emit("error", message=f"{args.gpus} GPUs asked for, PyTorch sees "
                              f"{torch.cuda.device_count()}")
        return 2
    # One node: the rendezvous on a free loopback port. A port found free can be taken by
    # another program before rank 0 binds it (any outgoing connection may draw it), so
    # a rendezvous that finds its port in use is tried again on a new one.
    own_port = args.mode == "ddp" and not args.master
    emit("ready", mode=args.mode, gpus=args.gpus, nodes=args.nodes, node_rank=args.node_rank,
         params=params(args.layers, args.d_model), layers=args.layers, d_model=args.d_model,
         seq=args.seq, batch=args.batch, dtype=args.dtype, torch=torch.__version__,
         cuda=torch.version.cuda)
    for attempt in range(3 if own_port else 1):
        if own_port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                args.master = f"127.0.0.1:{s.getsockname()[1]}"
        try:
            mp.spawn(_single if args.mode == "single" else _ddp, args=(args,),
                     nprocs=args.gpus, join=True)
            break
        except Exception as exc:  # NCCL/CUDA errors, a rank that died: report, exit non-zero
            text = f"{type(exc).__name__}: {exc}"
            # Which rank dies first is a race: rank 0 failing to bind, or another rank
            # that met a stranger at the port (aborted). The port still held by another
            # program after the ranks are gone tells the two apart from a real failure.
            if own_port and attempt < 2 and ("address already in use" in text.lower()
                                             or "EADDRINUSE" in text
                                             or _listening(args.master)):
                continue
            emit("error", message=text[:2000])
            return 2
    emit("done")
    return 0


def _listening(master: str) -> bool:
    """Whether something listens at host:port now (SO_REUSEADDR: our own connections'
    TIME_WAIT does not count, a listening socket does)."""
    host, _, port = master.rpartition(":")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return True
    return False


if __name__ == "__main__":
    sys.exit(main())
