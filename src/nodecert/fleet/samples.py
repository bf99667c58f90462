"""A node's figures as fleet samples: which GPU model, which metric, which GPU or pair.

Figures come from the contract's headline figures (the same the drift check, the
report and the node's metrics use); the node-wide worst-GPU aggregates are left out
where the per-GPU figures are there, so no GPU counts twice.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.core.errors import NodecertError
from nodecert_node.contract import Result, all_figures

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


def samples(results: Iterable[Result]) -> list[Sample]:
    """The fleet samples of one host's results (ERROR results have no figures)."""
    out = []
    # the figures as the report and drift read them: from the results as recorded
    for name, f in sorted(all_figures(r.as_dict() for r in results).items()):
        if name in AGGREGATES or not math.isfinite(f.value):
            continue
        m = _LABELLED.match(name)
        metric, label = (m["metric"], f"{m['key']}={m['label']}") if m else (name, "")
        out.append(Sample(metric, label, f.value, f.unit, f.better))
    return out


def _num(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def where(label: str) -> str:
    """A sample's label as a reader says it: "GPU3", "GPU pair 0-1", "rail mlx5_0"."""
    key, _, value = label.partition("=")
    return {"gpu": f"GPU{value}", "pair": f"GPU pair {value}"}.get(key, f"{key} {value}") \
        if label else ""


def pair_samples(pairs: list[dict[str, Any]]) -> dict[str, list[Sample]]:
    """node -> its figures from a cluster run's pairings (each node meets two partners or
    more): the median two-node all-reduce bus bandwidth of its pairs (`pair_busbw`) and,
    per rail, the median RDMA write bandwidth (`rail_gbps{rail=DEV}`). A pairing that
    failed to run gives no figure."""
    busbw: dict[str, list[float]] = {}
    rails: dict[tuple[str, str], list[float]] = {}
    for p in pairs:
        nodes = p.get("nodes")
        if p.get("error") or not isinstance(nodes, list):
            continue
        bw = _num(p.get("busbw"))
        raw = p.get("rails")
        got: dict[str, Any] = raw if isinstance(raw, dict) else {}
        for n in map(str, nodes):
            if bw is not None:
                busbw.setdefault(n, []).append(bw)
            for rail, g in got.items():
                if _num(g) is not None:
                    rails.setdefault((n, str(rail)), []).append(float(g))
    out: dict[str, list[Sample]] = {}
    for n, vs in busbw.items():
        out.setdefault(n, []).append(Sample("pair_busbw", "", statistics.median(vs), "GB/s",
                                            "higher"))
    for (n, rail), vs in sorted(rails.items()):
        out.setdefault(n, []).append(Sample("rail_gbps", f"rail={rail}",
                                            statistics.median(vs), "Gb/s", "higher"))
    return out


def gpu_model(results: Iterable[Result]) -> str | None:
    """The node's GPU model as hardware.inventory read it (None: not measured)."""
    for r in results:
        if r.check == "hardware.inventory" and isinstance(r.value, dict):
            model = r.value.get("gpu_model")
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
    "pair_samples",
    "policy_for",
    "samples",
    "where",
]
