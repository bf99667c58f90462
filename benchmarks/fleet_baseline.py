"""Benchmark the fleet baseline: build it and judge every node against it over the runs of
1,000 emulated nodes, and count what is found.

Run on demand:   .venv/bin/python benchmarks/fleet_baseline.py [--nodes 1000] [--seeds 5]
                 [--weak 3] [--gpus 8] [--json OUT]

Per seed: one standard-suite run of the emulated fleet (nodecert.lab.fleetruns: seeded
figures, spread 0.8% node to node; `weak` nodes 5% below on every load figure, above
every floor) is written to a temporary runs directory; then, in a fresh process, the
baseline is built from it and every node judged against it (peers) -- timed, with its
peak memory. Reports wall time, peak RSS, the weak nodes found and any healthy node
flagged (a false outlier).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import write_rows

from nodecert.lab.fleet import FleetSpec
from nodecert.lab.fleetruns import write_run

CHILD = """
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from nodecert.fleet import baseline as fb, peers
from nodecert.fleet.judging import fleet_limits
from nodecert.runs.records import finished_run
t1 = time.perf_counter()
recs = finished_run(Path(sys.argv[1]))
b = fb.build(recs)
limits = fleet_limits(None)
flagged = {r.host: str(peers.judge(r.results, b, limits).verdict) for r in recs}
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_and_judge_s": t2 - t1,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "flagged": {h: v for h, v in flagged.items() if v != "PASS"},
                  "gemm_sigma_fraction": b.groups["NVIDIA H200"]["gemm_tflops"].sigma
                  / b.groups["NVIDIA H200"]["gemm_tflops"].median}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--weak", type=int, default=3)
    ap.add_argument("--gpus", type=int, default=1, help="GPUs per node (each judged)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    for seed in range(a.seeds):
        spec = FleetSpec(a.nodes, weak=a.weak, seed=seed)
        kinds = {f"n{i:05d}": k for i, k in enumerate(spec.kinds())}
        with tempfile.TemporaryDirectory(prefix="nodecert-bench-") as d:
            run = write_run(Path(d), spec, 1, started=time.time(), gpus=a.gpus)
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", CHILD, str(run)], capture_output=True,
                                 text=True, timeout=600, check=True)
            wall = time.perf_counter() - t
        r = json.loads(out.stdout)
        weak = {h for h, k in kinds.items() if k == "weak"}
        found = set(r["flagged"])
        rows.append({"seed": seed, "nodes": a.nodes, "gpus": a.gpus, "wall_s": round(wall, 2),
                     "build_and_judge_s": round(r["build_and_judge_s"], 2),
                     "peak_rss_mb": round(r["peak_rss_mb"], 1),
                     "weak_found": len(weak & found), "weak": len(weak),
                     "false_outliers": sorted(found - weak),
                     "gemm_spread": f"{r['gemm_sigma_fraction']:.2%}"})
        print(json.dumps(rows[-1]), flush=True)
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
