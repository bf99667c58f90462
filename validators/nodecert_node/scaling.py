"""Scaling efficiency: how much of its GPUs' work a real training job gets (load.scaling,
and the cluster's scaling stage).

A GPT-style decoder sized from the GPU's memory trains on synthetic tokens in the
stack's PyTorch (workers/scaling.py): first every GPU alone, all at the same moment
(each GPU's tokens/s), then all GPUs together under DistributedDataParallel over NCCL.
efficiency = tokens/s(all) / (GPUs x tokens/s(1)), where tokens/s(1) is the median of
the GPUs alone (one bad GPU does not move it). Judged: efficiency against the floor for
the node's topology (NVLink/NVSwitch, or PCIe only), and every GPU alone against the
node's best (load.peer_fraction_min): a slow GPU is named, not just felt.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from nodecert_node.context import judge_findings, within
from nodecert_node.contract import Evidence, Limits, Result, Verdict
from nodecert_node.framework import WORKERS
from nodecert_node.parse.events import events
from nodecert_node.tools import ToolError, run
from nodecert_node.workers.scaling import params

GiB = 1024 ** 3


def model_size(memory_mib: float) -> dict[str, int]:
    """The reference decoder for a GPU with this much memory (pure).

    Weights, gradients and AdamW state take 16 bytes a parameter; a fifth of the GPU's
    memory goes to them, the rest to activations (seq 2048, 4 sequences a GPU) and the
    allocator: a model a real job of this GPU would train, not a toy that hides the
    gradient all-reduce behind nothing."""
    mem = max(float(memory_mib), 1.0) * 1024 * 1024
    d = 4096 if mem >= 60 * GiB else 2048
    layers = round(mem * 0.2 / 16 / (12 * d * d))
    return {"layers": min(max(layers, 2), 48), "d_model": d, "heads": d // 128,
            "seq": 2048, "batch": 4}


def checkpoint_mb(size: dict[str, int]) -> int:
    """The reference model's checkpoint (weights and AdamW state, 16 bytes a parameter)."""
    return max(int(16 * params(size["layers"], size["d_model"]) / 2 ** 20), 64)


def topology(limits: Limits) -> str:
    """nvlink where the model's profile expects GPU-to-GPU NVLink, else pcie."""
    t = limits.opt("nvlink.links_per_gpu")
    return "nvlink" if t is not None and isinstance(t.value, (int, float)) and t.value > 0 \
        else "pcie"


def scaling_argv(py: str, mode: str, gpus: int, size: dict[str, int], load: dict[str, Any],
                 *, extra: tuple[str, ...] = ()) -> list[str]:
    return [py, os.path.join(WORKERS, "scaling.py"), mode, "--gpus", str(gpus),
            "--layers", str(size["layers"]), "--d-model", str(size["d_model"]),
            "--heads", str(size["heads"]), "--seq", str(size["seq"]),
            "--batch", str(size["batch"]),
            "--steps", str(load.get("scaling_steps", 30)),
            "--warmup", str(load.get("scaling_warmup", 10)), *extra]


def judge_scaling(single: list[dict[str, Any]], ddp: list[dict[str, Any]], gpus: int,
                  topo: str, limits: Limits) -> Result:
    """The worker's events of both phases -> the verdict (pure)."""
    fails: list[str] = []
    errors = [f"GPU{e['gpu']}: {e.get('message', '')}" if "gpu" in e
              else str(e.get("message", "")) for e in single + ddp if e["event"] == "error"]
    alone = {int(e["gpu"]): float(e["tokens_s"]) for e in single if e["event"] == "gpu"}
    result = next((e for e in ddp if e["event"] == "result"), None)
    missing = sorted(set(range(gpus)) - set(alone))
    if missing and not errors:
        errors.append(f"GPU{', GPU'.join(map(str, missing))}: no single-GPU figure reported")
    if result is None and not errors:
        errors.append("the all-GPU run reported no result (hung or killed?)")
    key = f"scaling.node_efficiency_min_{topo}"
    thresholds = {**limits.pick(key), **limits.pick("load.peer_fraction_min")}
    ready = next((e for e in single + ddp if e["event"] == "ready"), {})
    value: dict[str, Any] = {"gpus": gpus, "topology": topo,
                             "tokens_s_per_gpu": {str(g): v for g, v in sorted(alone.items())},
                             "params": ready.get("params")}
    if errors:
        return Result("load.scaling", Verdict.ERROR, errors[0] if len(errors) == 1 else
                      f"{errors[0]} (+{len(errors) - 1} more)", value=value,
                      thresholds=thresholds, findings=tuple(errors),
                      fault_code="NC-LOAD-ERROR",
                      remediation="Read the worker's output in the evidence (CUDA or NCCL "
                                  "errors, Xids in dmesg); fix the cause and re-run.")
    assert result is not None
    one = statistics.median(alone.values())
    best = max(alone.values())
    eff = float(result["tokens_s"]) / (gpus * one) if one else 0.0
    for g, v in sorted(alone.items()):
        within(limits, "load.peer_fraction_min", round(v / best, 3),
               f"GPU{g} alone {v:.0f} tokens/s as a fraction of the node's best GPU "
               f"({best:.0f})", fails)
    within(limits, key, round(eff, 3), f"scaling efficiency over {gpus} GPUs "
           f"({result['tokens_s']:.0f} tokens/s vs {gpus} x {one:.0f})", fails)
    value.update({"tokens_s_1": round(one, 2), "tokens_s_n": float(result["tokens_s"]),
                  "efficiency": round(eff, 4),
                  "step_ms": {k: result[k] for k in ("step_ms_median", "step_ms_min",
                                                     "step_ms_max")},
                  "step_spread": round((result["step_ms_max"] - result["step_ms_min"])
                                       / result["step_ms_median"], 4)
                  if result["step_ms_median"] else None})
    return judge_findings(
        "load.scaling", fails, [],
        f"{gpus} GPUs ({topo}): {result['tokens_s']:.0f} tokens/s, efficiency "
        f"{eff:.3f} of {gpus} x {one:.0f} tokens/s alone",
        value=value, unit="ratio", thresholds=thresholds,
        facts={"curve": [[1, 1.0], [gpus, round(eff, 4)]],
               "model": {k: ready.get(k) for k in ("params", "layers", "d_model", "seq",
                                                    "batch", "dtype", "torch", "cuda")}},
        fault_code="NC-SCALING" if fails else "",
        remediation="A GPU slower than its peers, or GPUs that scale poorly together, "
                    "hold back every synchronous training step: check the slow GPU's clocks "
                    "(load.thermal_soak), NVLink/NVSwitch (hardware.topology, "
                    "fabric.nccl_allreduce) and the PCIe placement." if fails else "")


def phase(argv: list[str], timeout: float, name: str) -> tuple[list[dict[str, Any]],
                                                                 Evidence | None]:
    try:
        out = run(argv, timeout=timeout, name=name, ok_codes=(0, 2, 3))
        return events(out.text), out.evidence
    except ToolError as exc:
        text = exc.evidence.output if exc.evidence else ""
        return [*events(text), {"event": "error", "message": str(exc)}], exc.evidence
