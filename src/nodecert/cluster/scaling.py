"""The cluster's scaling stage: the reference training job on every node alone (each
node's load.scaling, run through validate), then over all nodes at once through the
engine, one task a node, each starting its GPUs' processes as torchrun would.

  per node   each node's own verdict (a slow GPU, poor scaling inside the node) and its
             all-GPU tokens/s against the best node's (scaling.peer_fraction_min);
  all nodes  efficiency = tokens/s(N nodes) / (N x GPUs x the median tokens/s of one GPU
             alone over every node), against scaling.cluster_efficiency_min_<link layer>.
The curve (GPUs -> efficiency) goes into the report: 1 GPU, one node, all nodes.
"""

from __future__ import annotations

import re
import shlex
import statistics
from dataclasses import dataclass
from typing import Any

from nodecert.cluster.judge import prelude
from nodecert_node.contract import Result, Threshold, Verdict
from nodecert_node.parse.events import events

# What a node may name as its framework python and scaling worker: the job runs them on
# every node, so a path outside these shapes (a node's text is untrusted) is refused.
_PYTHON = re.compile(r"^/opt/nodecert/envs/[A-Za-z0-9][A-Za-z0-9._+-]*/bin/python3?$")
_WORKER = re.compile(r"^/opt/nodecert/node/[0-9a-f]{16}/nodecert_node/workers/scaling\.py$")


@dataclass(frozen=True)
class NodeScaling:
    """A node's load.scaling result, as the cluster needs it."""

    verdict: str
    summary: str
    tokens_s_1: float | None
    tokens_s_n: float | None
    efficiency: float | None
    python: str
    model: dict[str, Any]
    worker: str = ""

    @classmethod
    def of(cls, r: dict[str, Any]) -> NodeScaling:
        v, f = r.get("value") or {}, r.get("facts") or {}
        return cls(str(r.get("verdict", "ERROR")), str(r.get("summary", "")),
                   v.get("tokens_s_1"), v.get("tokens_s_n"), v.get("efficiency"),
                   str(f.get("python") or ""), dict(f.get("model") or {}),
                   str(f.get("worker") or ""))

    def launch_problem(self) -> str:
        """Why the cluster's job cannot start this node's worker ("" when it can)."""
        if not _PYTHON.match(self.python):
            return f"unexpected framework python {self.python[:120]!r}"
        if not _WORKER.match(self.worker):
            return f"unexpected scaling worker path {self.worker[:120]!r}"
        if not all(isinstance(self.model.get(k), int) for k in ("layers", "d_model", "seq",
                                                                 "batch")):
            return "the node's run reported no model size"
        return ""


def job_script(first: str, port: int, node: NodeScaling, *, gpus: int,
               nodes: int, steps: tuple[int, int]) -> str:
    """Every node runs the worker in ddp mode; NCCL's rendezvous at rank 0's node."""
    m = node.model
    args = ["ddp", "--gpus", str(gpus), "--nodes", str(nodes), "--layers", str(m["layers"]),
            "--d-model", str(m["d_model"]), "--heads", str(int(m["d_model"]) // 128),
            "--seq", str(m["seq"]), "--batch", str(m["batch"]), "--steps", str(steps[0]),
            "--warmup", str(steps[1])]
    return (f"{prelude(first, port)}; exec {shlex.quote(node.python)} "
            f"{shlex.quote(node.worker)} {' '.join(args)} --node-rank \"$r\" "
            f"--master \"$first:{port}\"")


def _nodes(per_node: dict[str, NodeScaling], peer: Threshold, gpus: int) -> tuple[
        list[str], list[str]]:
    """(findings, the nodes named): each node whose own run FAILed, and each whose
    throughput on its GPUs is below its fraction of the best node's."""
    findings: list[str] = []
    named: list[str] = []
    for n, s in sorted(per_node.items()):
        if s.verdict == "FAIL":
            named.append(n)
            findings.append(f"{n}: {s.summary}")
    rates = {n: float(s.tokens_s_n) for n, s in per_node.items() if s.tokens_s_n}
    best = max(rates.values(), default=0.0)
    for n, v in sorted(rates.items()):
        out = peer.check(round(v / best, 3))
        if not out:
            named.append(n)
            findings.append(f"{n}: {v:.0f} tokens/s on its {gpus} GPUs as a fraction of the "
                            f"best node's ({best:.0f}): {out.message}")
    return findings, named


def judge(per_node: dict[str, NodeScaling], rank0: str, job_error: str, *, gpus: int,
          limits: dict[str, Threshold], link_layer: str, simulated: bool) -> tuple[Result,
                                                                                  list[str]]:
    """(cluster.scaling, the nodes it names) from every node's own run and the job's
    rank-0 output (pure)."""
    peer = limits["scaling.peer_fraction_min"]
    floor = limits[f"scaling.cluster_efficiency_min_{link_layer.lower()}"]
    errors = [f"{n}: {s.summary}" for n, s in sorted(per_node.items())
              if s.verdict == "ERROR" or s.tokens_s_n is None]
    findings, named = _nodes(per_node, peer, gpus)
    singles = [float(s.tokens_s_1) for s in per_node.values() if s.tokens_s_1]
    evs = events(rank0)
    res = next((e for e in evs if e["event"] == "result"), None)
    world = gpus * len(per_node)
    value: dict[str, Any] = {"nodes": len(per_node), "gpus": world}
    curve: list[list[float]] = [[1, 1.0]]
    node_eff = [float(s.efficiency) for s in per_node.values() if s.efficiency]
    if node_eff:
        curve.append([gpus, round(statistics.median(node_eff), 4)])
    if res is None or not singles:
        why = job_error or next((str(e.get("message")) for e in evs if e["event"] == "error"),
                                "the job reported no result (hung or killed?)")
        errors.append(f"the job over {len(per_node)} nodes: {why}"[:600])
    else:
        one = statistics.median(singles)
        eff = float(res["tokens_s"]) / (world * one)
        curve.append([world, round(eff, 4)])
        out = floor.check(round(eff, 3))
        value.update({"efficiency": round(eff, 4), "tokens_s": float(res["tokens_s"]),
                      "tokens_s_1": round(one, 2), "step_ms_median": res.get("step_ms_median"),
                      "step_spread": round((res["step_ms_max"] - res["step_ms_min"])
                                           / res["step_ms_median"], 4)
                      if res.get("step_ms_median") else None})
        if not out:
            findings.append(f"efficiency over {len(per_node)} nodes ({world} GPUs, "
                            f"{res['tokens_s']:.0f} tokens/s vs {world} x {one:.0f}): "
                            f"{out.message}")
    v = Verdict.FAIL if findings else Verdict.PASS
    if errors:
        v = max(v, Verdict.ERROR)
    summary = (f"{len(per_node)} nodes x {gpus} GPUs: efficiency {value['efficiency']:.3f} "
               f"({floor.describe()}), every node within {peer.describe()} of the best"
               if "efficiency" in value and v == Verdict.PASS
               else (findings or errors)[0][:300])
    value["per_node"] = {n: {"verdict": s.verdict, "tokens_s_1": s.tokens_s_1,
                             "tokens_s_n": s.tokens_s_n, "efficiency": s.efficiency}
                         for n, s in sorted(per_node.items())}
    return (Result("cluster.scaling", v, summary, value=value, unit="ratio",
                   thresholds={"efficiency": floor, "peer": peer},
                   findings=tuple(findings + errors), facts={"curve": curve},
                   fault_code="NC-SCALING" if v == Verdict.FAIL else "",
                   simulated=simulated), sorted(set(named)))


__all__ = ["NodeScaling", "job_script", "judge"]
