"""nodecert's scaling worker (training steps of a GPT-style decoder) for the lab's
simulated torch: throughput from the hardware model, in the worker's own events.

The model of one synchronous data-parallel step:
  compute  = 6 x params x tokens per GPU / the GPU's training rate, where the rate is
             the GPU's dense bf16 figure x SUSTAINED x MFU (x its tflops_low factor, and
             x 0.45 while it throttles); every GPU waits for the slowest one;
  exposed  = (1 - OVERLAP) x the all-reduce of the fp32 gradients (4 bytes a parameter)
             at the all-reduce's algorithm bandwidth: the node's NVLink or PCIe figure,
             across nodes the slowest rail's channels (the all_reduce_perf model);
  step     = compute + exposed; tokens/s = GPUs x tokens per GPU / step.
Efficiency is then compute(one GPU) / step, what expected() returns; each step's time
carries +-0.5% of deterministic jitter, so the measured figure sits within 1% of it.

SIMULATED -- NOT REAL HARDWARE. Runs inside lab hosts (python3 3.8+, stdlib only).
"""

from __future__ import annotations

import json
import os
import statistics
import time

from nodecert_simhw import multinode, state
from nodecert_simhw.faults import Faults
from nodecert_simhw.nccl import busbw_peak, combined_peak

SUSTAINED = 0.84  # sustained share of the burst bf16 figure (the lab's GEMM model)
MFU = 0.45  # share of that a decoder's training step reaches (attention, norms, optimizer)
OVERLAP = 0.7  # share of the gradient all-reduce DDP hides behind the backward pass
VOCAB = 32000


def emit(event, **kw):
    print(json.dumps(dict(event=event, **kw), sort_keys=True), flush=True)


def params(layers, d_model):
    """The worker's parameter count (workers/scaling.py params())."""
    return layers * (12 * d_model * d_model + 13 * d_model) + VOCAB * d_model \
        + 2048 * d_model + 2 * d_model


def gpu_tflops(hw, i):
    """The training rate of physical GPU i (TFLOPS)."""
    rate = hw["profile"]["gpu"]["bf16_tflops"] * SUSTAINED * MFU * Faults(hw).gemm_factor(i)
    if state.GpuState(hw, i, now=time.time()).reasons & 0x40:
        rate *= 0.45
    return rate


def step_s(tflops, n_params, tokens, busbw_gbs, ranks):
    """Seconds of one synchronous step over `ranks` GPUs whose rates are `tflops`."""
    compute = max(6.0 * n_params * tokens / (t * 1e12) for t in tflops)
    if ranks <= 1:
        return compute
    algbw = busbw_gbs * ranks / (2.0 * (ranks - 1))
    comm = 4.0 * n_params / (algbw * 1e9) if algbw else float("inf")
    return compute + (1 - OVERLAP) * comm


def expected(single_tflops, tflops, n_params, tokens, busbw_gbs, *, ranks):
    """The model's efficiency: a step alone on a GPU of single_tflops / the job's step."""
    return step_s([single_tflops], n_params, tokens, 0, 1) / step_s(
        tflops, n_params, tokens, busbw_gbs, ranks)


def _times(step, steps, key):
    return [step * (1 + state.jitter(key, k, spread=0.005)) for k in range(steps)]


def _summary(times, tokens):
    ms = sorted(t * 1e3 for t in times)
    return {"tokens_s": round(tokens * len(times) / sum(times), 2),
            "step_ms_median": round(statistics.median(ms), 3), "step_ms_min": round(ms[0], 3),
            "step_ms_max": round(ms[-1], 3), "steps": len(times)}


def cmd_scaling(args, module_version, cuda):
    hw = state.load_hw()
    if state.driver_version(state.installed()) is None:
        emit("error", message="RuntimeError: No CUDA GPUs are available")
        return 2
    vis = state.visible_gpus(hw)
    k = int(args["gpus"])
    if k > len(vis):
        emit("error", message=f"{k} GPUs asked for, PyTorch sees {len(vis)}")
        return 2
    gpus = vis[:k]
    n_params = params(int(args["layers"]), int(args["d_model"]))
    tokens = int(args["batch"]) * int(args["seq"])
    steps, nodes = int(args["steps"]), int(args.get("nodes") or 1)
    emit("ready", mode=args["mode"], gpus=k, nodes=nodes, node_rank=args.get("node_rank", 0),
         params=n_params, layers=args["layers"], d_model=args["d_model"], seq=args["seq"],
         batch=args["batch"], dtype=args.get("dtype", "bf16"), torch=module_version, cuda=cuda,
         simulated=True)
    host = os.uname().nodename
    time.sleep(min(1.0, 0.02 * steps))  # the run takes time; its figures come from the model
    if args["mode"] == "single":
        for n, i in enumerate(gpus):
            step = step_s([gpu_tflops(hw, i)], n_params, tokens, 0, 1)
            emit("gpu", gpu=n, **_summary(_times(step, steps, (host, i)), tokens))
        emit("done")
        return 0
    mine = {"tflops": [gpu_tflops(hw, i) for i in gpus], "peak": busbw_peak(hw, gpus),
            "rails": multinode.rail_gbps(hw), "host": host}
    boot = None
    if nodes > 1:
        boot = multinode.Bootstrap(str(args.get("master") or ""), int(args["node_rank"]), nodes)
        try:
            ranks = boot.gather(mine)
        except (OSError, TimeoutError) as exc:
            emit("error", message=f"RuntimeError: DistNetworkError: {exc}")
            return 2
        if ranks is None:
            rc = boot.finish()
            emit("done")
            return rc
    else:
        ranks = [mine]
    world = k * nodes
    busbw = combined_peak(ranks)
    tflops = [t for r in ranks for t in r["tflops"]]
    step = step_s(tflops, n_params, tokens, busbw, world)
    emit("result", world=world, nodes=nodes,
         **_summary(_times(step, steps, ("ddp", host, world)), world * tokens))
    emit("done")
    return boot.finish(0) if boot else 0
