"""A node's figures as fleet samples: which GPU model, which metric, which GPU or pair.

Figures come from the contract's headline figures (the same the drift check, the
report and the node's metrics use); the node-wide worst-GPU aggregates are left out
where the per-GPU figures are there, so no GPU counts twice.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.core.errors import NodecertError
from nodecert_node.contract import all_figures

POLICY = Path(__file__).with_name("peer-metrics.yml")
# Aggregates of per-GPU figures (their worst GPU): the GPUs are judged themselves.
AGGREGATES = {"gemm_tflops_min", "h2d_gbs_min", "soak_peak_temp"}
_LABELLED = re.compile(r"^(?P<metric>[a-z0-9_]+)\{(?P<key>[a-z]+)=(?P<label>[^}]*)\}$")


class FleetDataError(NodecertError):
    """A fleet data file (metrics policy, baseline) that cannot be used."""


@dataclass(frozen=True)
class MetricPolicy:
    name: str
    verdict: str  # FAIL | WARN
    source: str  # the rendered source (policy text)
    title: str


@dataclass(frozen=True)
class Sample:
    metric: str  # "gemm_tflops", "storage /scratch seq_read_mbps"
    label: str  # "gpu=3", "pair=0-1", "" for a node-wide figure
    value: float
    unit: str
    better: str


@functools.lru_cache(maxsize=8)
def load_policy(path: Path = POLICY) -> dict[str, MetricPolicy]:
    """The metrics policy (read once per process: a fleet's judgement reads it per node)."""
    doc = yamldoc.load(path).value
    sources = doc.get("sources") or {}
    out = {}
    for name, m in (doc.get("metrics") or {}).items():
        src = sources.get(m.get("source"))
        if m.get("verdict") not in ("FAIL", "WARN") or not isinstance(src, dict):
            raise FleetDataError(f"{path}: metric {name!r} needs verdict FAIL or WARN and a "
                                 "source listed under sources")
        text = src.get("policy") or f"{src.get('title')} ({src.get('url')})"
        out[str(name)] = MetricPolicy(str(name), str(m["verdict"]),
                                      f"{m['source']}: nodecert policy: {text}"
                                      if "policy" in src else f"{m['source']}: {text}",
                                      str(m.get("title") or name))
    return out


def policy_for(metric: str, policy: dict[str, MetricPolicy]) -> MetricPolicy | None:
    if metric in policy:
        return policy[metric]
    if metric.startswith("storage "):
        return policy.get("storage *")
    return None


def samples(results: list[dict[str, Any]]) -> list[Sample]:
    """The fleet samples of one host's results (ERROR results have no figures)."""
    out = []
    for name, f in sorted(all_figures(results).items()):
        if name in AGGREGATES or not math.isfinite(f.value):
            continue
        m = _LABELLED.match(name)
        metric, label = (m["metric"], f"{m['key']}={m['label']}") if m else (name, "")
        out.append(Sample(metric, label, f.value, f.unit, f.better))
    return out


def gpu_model(results: list[dict[str, Any]]) -> str | None:
    """The node's GPU model as hardware.inventory read it (None: not measured)."""
    for r in results:
        if r.get("check") == "hardware.inventory" and isinstance(r.get("value"), dict):
            model = r["value"].get("gpu_model")
            return str(model) if model else None
    return None


__all__ = [
    "AGGREGATES",
    "POLICY",
    "FleetDataError",
    "MetricPolicy",
    "Sample",
    "gpu_model",
    "load_policy",
    "policy_for",
    "samples",
]
