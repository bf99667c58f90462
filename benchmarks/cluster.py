"""Benchmark `nodecert cluster validate` on a 16-host lab cluster: real Slurm and real
OpenMPI, HCAs and GPUs SIMULATED. Target: pairing rounds + the all-reduce over all
nodes under 5 minutes wall, both engines; one slow-rail node among 16 named after the
pairing round, and found by bisection in at most 5 rounds.

Run on demand (root):   .venv/bin/python benchmarks/cluster.py [--nodes 16] [--json OUT]
                        [--every-fault]   # also each lab fabric fault, on both engines

The healthy Slurm run is signed as a cluster certificate and verified offline.

It boots its own lab (state-bc, 10.78.6.0/24) and removes it at the end.
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

from benchlib import bench_lab, nodecert, report, verifies

from nodecert.lab.hosts import Lab

# The fabric faults on one HCA of one node (rail_slow and node_fabric_slow beside them).
EVERY = ("port_down", "width_degraded", "speed_degraded", "symbol_errors", "hca_missing",
         "hca_firmware")


def run(lab: Lab, work: Path, *extra: str) -> dict[str, Any]:
    wall, _, out = nodecert("cluster", "validate", "-i", str(lab.cfg.state / "inventory.ini"),
                            "--runs-dir", str(work), *extra, timeout=1800)
    data = json.loads((Path(out["run_dir"]) / "results.json").read_text())
    return {"wall_s": round(wall, 1), "verdict": data["verdict"], "culprits": data["culprits"],
            "pair_rounds": data["rounds"], "pairs": len(data["pairs"]),
            "named_by_pairing": data["isolation"]["culprits"],
            "bisection_rounds": len(data["bisection"]["rounds"]) if data["bisection"] else 0,
            "named_by_bisection": data["bisection"]["culprits"] if data["bisection"] else [],
            "allreduce_busbw": data["allreduce"]["busbw"], "jobs": len(data["jobs"]),
            **({"certificate": out["certificate"]} if "certificate" in out else {})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--every-fault", action="store_true",
                    help="also each lab fabric fault on the same node, both engines")
    args = ap.parse_args()
    cfg = bench_lab(6, "ncbc")
    lab = Lab(cfg, log=lambda m: None)
    out: dict[str, Any] = {"nodes": args.nodes}
    try:
        t0 = time.monotonic()
        lab.up(nodes=args.nodes, as_cluster=True)
        out["lab_up_s"] = round(time.monotonic() - t0, 1)  # job tools installed, Slurm idle
        bad = f"h{max(2, args.nodes * 2 // 3)}"
        with tempfile.TemporaryDirectory(prefix="nodecert-bench-cluster-") as d:
            work = Path(d)
            faults = work / "faults.yml"
            keys = work / "keys"
            subprocess.run([sys.executable, "-m", "nodecert", "keys", "init", "--out",
                            str(keys)], check=True, capture_output=True, timeout=60)
            cases = [("slow_rail", f"{{host: {bad}, kind: rail_slow, hca: 5}}")]
            if args.every_fault:
                cases += [(kind, f"{{host: {bad}, kind: {kind}, hca: 3}}") for kind in EVERY]
                cases.append(("node_fabric_slow",
                              f"{{host: {bad}, kind: node_fabric_slow, factor: 0.6}}"))
            for engine in ("slurm", "mpirun"):
                lab.apply_faults(None)
                extra = ["--key", str(keys / "nodecert.key")] if engine == "slurm" else []
                res = run(lab, work, "--engine", engine, *extra)
                if extra:
                    res["certificate_verifies"] = verifies(res.pop("certificate"),
                                                           keys / "nodecert.pub")
                out[f"{engine}_healthy"] = res
                for name, fault in cases:
                    faults.write_text(f"faults:\n  - {fault}\n")
                    lab.apply_faults(faults)
                    out[f"{engine}_{name}_{bad}"] = run(lab, work, "--engine", engine)
    finally:
        lab.down()
    return report(out, args.json, indent=1)


if __name__ == "__main__":
    sys.exit(main())
