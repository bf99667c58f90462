"""Benchmark the merge of a sliced validation run: every node's record of an emulated
fleet's standard-suite run, sliced N ways, one slice lost, merged in a fresh process.

Run on demand:   .venv/bin/python benchmarks/merge.py [--nodes 10000] [--slices 8]
                 [--rounds 3] [--json OUT]

The run is written as its slices leave it (nodecert.lab.fleetruns: each node's seeded
record; `inputs/slicing.json`, the suite and the specs; a summary per slice), except
that the last slice never ran: its nodes have no record. Reports the merge's wall time,
its peak memory, and the nodes it recorded as not run (the lost slice's, and no other).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import write_rows

from nodecert.lab.fleet import FleetSpec
from nodecert.lab.fleetruns import CHECKS, write_run
from nodecert.runs.layout import RunDir
from nodecert.validation.slices import Slice

CHILD = """
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from nodecert.validation.slices import merge
t1 = time.perf_counter()
m = merge(Path(sys.argv[1]))
print(json.dumps({"import_s": t1 - t0, "merge_s": time.perf_counter() - t1,
                  "lost": list(m.lost),
                  "missing": list(m.slices_missing), "verdict": m.verdict.name,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
RUN_ID = "20261207-120000-0b5e1c"


def sliced_run(d: Path, nodes: int, n: int) -> tuple[Path, set[str]]:
    """The fleet's run as n slices leave it, slice n lost; (run, the lost slice's hosts)."""
    made = write_run(d, FleetSpec(nodes, seed=3), 1, started=time.time())
    run = RunDir(d / RUN_ID)
    made.rename(run.path)
    hosts = [f"n{i:05d}" for i in range(nodes)]
    lost = set(Slice(n, n, RUN_ID).hosts(hosts))
    for h in lost:
        shutil.rmtree(run.path / h)
    run.summary.unlink()
    run.make_inputs()
    run.slicing.write_text(json.dumps({
        "schema": "nodecert.slicing/v1", "run_id": RUN_ID, "of": n,
        "hosts": {h: k for k in range(1, n + 1) for h in Slice(k, n, RUN_ID).hosts(hosts)}}))
    run.suite_input.write_text(json.dumps({"name": "standard", "checks": list(CHECKS)}))
    run.inventory_input.write_text(json.dumps({h: {"simulated": True} for h in hosts}))
    run.slices.mkdir()
    for k in range(1, n):
        run.slice_summary(k, n).write_text("{}")
    return run.path, lost


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--slices", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    for rnd in range(a.rounds):
        with tempfile.TemporaryDirectory(prefix="nodecert-bench-") as d:
            run, lost = sliced_run(Path(d), a.nodes, a.slices)
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", CHILD, str(run)], capture_output=True,
                                 text=True, timeout=600, check=True)
            wall = time.perf_counter() - t
        r = json.loads(out.stdout)
        rows.append({"round": rnd + 1, "nodes": a.nodes, "slices": a.slices,
                     "wall_s": round(wall, 2), "import_s": round(r["import_s"], 2),
                     "merge_s": round(r["merge_s"], 2),
                     "peak_rss_mb": round(r["peak_rss_mb"], 1), "verdict": r["verdict"],
                     "not_run": len(r["lost"]), "not_run_exactly_the_lost_slice":
                     set(r["lost"]) == lost, "slices_missing": r["missing"]})
        print(json.dumps(rows[-1]), flush=True)
    write_rows(a.json, rows)


if __name__ == "__main__":
    main()
