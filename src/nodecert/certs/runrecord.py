"""The Minimum Run Record every node certificate carries: what NVIDIA's Vera-Rubin NVL72
tuning guide asks to keep with every benchmark result (platform image, kernel, driver,
CUDA, NCCL, firmware and fabric manager versions; page size; GPU inventory and
topology; network inventory; the exact settings of the run), gathered from what the run
recorded. A field the run did not record is None and named in `not_recorded`: never
filled in from the stack's intent or a default.
"""

from __future__ import annotations

from typing import Any

from nodecert.core import checks
from nodecert_node.contract import Result

SOURCE = {"title": "NVIDIA Vera-Rubin NVL72 tuning guide, Benchmarking And Measurement: "
                   "Minimum Run Record",
          "url": "https://docs.nvidia.com/dccpu/vera-mn-perf-tuning-guide/"
                 "measuring-performance.html"}
# What the guide lists that a nodecert run does not gather at all (said, so that a
# reader does not take the record for more than it is).
NOT_GATHERED = ("UCX/HPC-X version", "CPU SMT mode and power limits",
                "NCCL topology dump", "liquid-cooling state")


def _result(results: list[Result], role: str) -> dict[str, Any] | None:
    r = checks.by_role(results, role)
    return {"verdict": r.verdict.name, "summary": r.summary} if isinstance(r, Result) else None


def minimum_run_record(results: list[Result], *, software: dict[str, Any] | None,
                       stack: dict[str, Any] | None, firmware: dict[str, Any] | None,
                       settings: dict[str, Any]) -> dict[str, Any]:
    """The record for one node's run; `settings`: the run's own (suite, id, times, the
    digests of the plan and stack it was judged with)."""
    sw = software or {}
    pins = stack or {}
    inventory = checks.by_role(results, "identity")
    inv = inventory.value if isinstance(inventory, Result) else None
    fields: dict[str, Any] = {
        "platform_image": sw.get("os") or None,
        "kernel": sw.get("kernel") or None,
        "page_size": sw.get("page_size"),
        "driver": sw.get("driver_reported") or None,
        "cuda": pins.get("cuda"),
        "nccl": pins.get("nccl"),
        "fabric_manager": pins.get("fabric_manager"),
        "firmware_recipe": (firmware or {}).get("recipe"),
        "gpu_inventory": ({k: inv.get(k) for k in ("gpus", "gpu_model")}
                          if isinstance(inv, dict) else None),
        "gpu_topology": _result(results, "topology-record"),
        "network_inventory": _result(results, "ib-record") or _result(results, "roce-record"),
        "settings": settings,
    }
    return {"source": SOURCE, **fields,
            "not_recorded": sorted(k for k, v in fields.items() if v is None),
            "not_gathered": list(NOT_GATHERED)}


__all__ = ["NOT_GATHERED", "SOURCE", "minimum_run_record"]
