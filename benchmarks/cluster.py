"""Benchmark `nodecert cluster validate` on a 16-host lab cluster: real Slurm and real
OpenMPI, HCAs and GPUs SIMULATED. Target: pairing rounds + the all-reduce over all
nodes under 5 minutes wall, both engines; one slow-rail node among 16 named after the
pairing round, and found by bisection in at most 5 rounds.

Run on demand (root):   .venv/bin/python benchmarks/cluster.py [--nodes 16] [--json OUT]

It boots its own lab (state-bc, 10.78.6.0/24) and removes it at the end.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nodecert.lab.config import LabConfig
from nodecert.lab.hosts import Lab


def run(lab: Lab, work: Path, *extra: str) -> dict[str, Any]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "nodecert", "cluster", "validate", "-i",
                        str(lab.cfg.state / "inventory.ini"), "--runs-dir", str(work),
                        "--json", *extra], capture_output=True, text=True, timeout=1800,
                       check=False)
    wall = time.monotonic() - t0
    out = json.loads(p.stdout)
    data = json.loads((Path(out["run_dir"]) / "results.json").read_text())
    return {"wall_s": round(wall, 1), "verdict": data["verdict"], "culprits": data["culprits"],
            "pair_rounds": data["rounds"], "pairs": len(data["pairs"]),
            "named_by_pairing": data["isolation"]["culprits"],
            "bisection_rounds": len(data["bisection"]["rounds"]) if data["bisection"] else 0,
            "named_by_bisection": data["bisection"]["culprits"] if data["bisection"] else [],
            "allreduce_busbw": data["allreduce"]["busbw"], "jobs": len(data["jobs"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cfg = LabConfig(subnet=ipaddress.IPv4Network("10.78.6.0/24"), bridge="ncbc0",
                    prefix="ncbc", state_name="state-bc")
    lab = Lab(cfg, log=lambda m: None)
    out: dict[str, Any] = {"nodes": args.nodes}
    try:
        t0 = time.monotonic()
        lab.up(nodes=args.nodes, as_cluster=True)
        out["lab_up_s"] = round(time.monotonic() - t0, 1)  # job tools installed, Slurm idle
        bad = f"h{max(2, args.nodes * 2 // 3)}"
        faults = Path(tempfile.mkdtemp(prefix="nodecert-bench-")) / "faults.yml"
        faults.write_text(f"faults:\n  - {{host: {bad}, kind: rail_slow, hca: 5}}\n")
        with tempfile.TemporaryDirectory(prefix="nodecert-bench-cluster-") as d:
            work = Path(d)
            for engine in ("slurm", "mpirun"):
                lab.apply_faults(None)
                out[f"{engine}_healthy"] = run(lab, work, "--engine", engine)
                lab.apply_faults(faults)
                out[f"{engine}_slow_rail_{bad}"] = run(lab, work, "--engine", engine)
    finally:
        lab.down()
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
