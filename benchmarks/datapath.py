"""Benchmark the cluster's scaling and data-path stages on a lab cluster (real Slurm, real
fio through the lab's shared mount; GPUs SIMULATED).

Targets: the scaling run on 2 nodes x 8 GPUs under 3 minutes, its SIMULATED efficiency
within 2% of the hardware model's; the shared file system's aggregate test on 4 nodes
under 2 minutes; one slow GPU and one slow reader each named.

Run on demand (root):   .venv/bin/python benchmarks/datapath.py [--json OUT]

It boots its own lab (state-bd, 10.78.7.0/24) and removes it at the end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import bench_lab

from nodecert.lab.hosts import Lab
from nodecert_node.scaling import model_size
from nodecert_node.workers.scaling import params

SUSTAINED, MFU, OVERLAP = 0.84, 0.45, 0.7  # the lab's model (nodecert_simhw/scaling.py)


def model_efficiency(gpus: int, busbw_gbs: float) -> float:
    """An HGX H200 (790 dense bf16 TFLOPS, 143,771 MiB) by the lab's documented model."""
    size = model_size(143771)
    p = params(size["layers"], size["d_model"])
    alone = 6 * p * size["batch"] * size["seq"] / (790e12 * SUSTAINED * MFU)
    sync = 4 * p / (busbw_gbs * gpus / (2 * (gpus - 1)) * 1e9)
    return alone / (alone + (1 - OVERLAP) * sync)


def validate(lab: Lab, work: Path, *extra: str) -> dict[str, Any]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "nodecert", "cluster", "validate", "--json", "--runs-dir",
         str(work), "-i", str(lab.cfg.state / "inventory.ini"), *extra],
        capture_output=True, text=True, timeout=1800, check=False)
    data = json.loads((Path(json.loads(proc.stdout)["run_dir"]) / "results.json").read_text())
    data["wall_s"] = round(time.monotonic() - started, 1)
    return data


def stage_seconds(data: dict[str, Any], *kinds: str) -> float:
    return round(sum(j["seconds"] for j in data["jobs"]
                     if any(f"-{k}-" in j["name"] for k in kinds)), 1)


def faulted(lab: Lab, work: Path, fault: str) -> dict[str, Any]:
    f = work / "faults.yml"
    f.write_text(f"faults:\n  - {fault}\n")
    lab.apply_faults(f)
    try:
        data = validate(lab, work)
    finally:
        lab.apply_faults(None)
    bad = [r["check"] for r in data["results"] if r["verdict"] != "PASS"]
    return {"fault": fault, "verdict": data["verdict"], "culprits": data["culprits"],
            "stages_not_passing": bad, "wall_s": data["wall_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cfg = bench_lab(7, "ncbd")
    lab = Lab(cfg, log=lambda m: None)
    out: dict[str, Any] = {}
    try:
        t0 = time.monotonic()
        lab.up(nodes=4, as_cluster=True)
        out["lab_up_s"] = round(time.monotonic() - t0, 1)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            two = validate(lab, work, "--limit", "h1,h2")
            sc = two["scaling"]["value"]
            want = model_efficiency(16, 8 * 400 / 8 * 0.94)
            out["two_nodes"] = {
                "wall_s": two["wall_s"], "verdict": two["verdict"],
                "scaling_job_s": stage_seconds(two, "scaling"),
                "efficiency": sc["efficiency"], "model_efficiency": round(want, 4),
                "deviation": round(abs(sc["efficiency"] - want) / want, 4),
                "tokens_s": sc["tokens_s"]}
            four = validate(lab, work)
            fs = four["shared_fs"]["value"]
            out["four_nodes"] = {
                "wall_s": four["wall_s"], "verdict": four["verdict"],
                "aggregate_jobs_s": stage_seconds(four, "fsprep", "fsread"),
                "aggregate_read_mbps": fs["aggregate_read_mbps"],
                "read_mbps_at_once": fs["read_mbps_at_once"],
                "efficiency": four["scaling"]["value"]["efficiency"]}
            out["faults"] = [faulted(lab, work, "{host: h3, kind: tflops_low, gpu: 2}"),
                             faulted(lab, work, "{host: h2, kind: shared_fs_slow, "
                                                "read_mbps: 8}")]
    finally:
        lab.down()
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
