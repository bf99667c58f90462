"""Benchmark a fleet validated as a Slurm job array: an emulated fleet served in a lab
cluster's own namespace, validated (quick suite) once by one controller job and once as
the tasks of a job array on the lab's real Slurm, each task a controller for every N-th
node, all writing into one run on the cluster's NFS share; the last task merges.

Run on demand (root):   .venv/bin/python benchmarks/sliced_slurm.py [--nodes 1000]
                        [--slices 4] [--hosts 4] [--time-scale 1.0] [--json OUT]

Reports per run: wall time (submission to the end of the last task), the slowest
node's own time, the verdicts (the array's must equal the single job's), the nodes
reported lost or unreachable (none of the healthy ones may be), and each slice's
controller: its host, peak memory and CPU seconds (from the slice summaries).

It boots its own lab (state-sl, 10.78.13.0/24: four hosts, each one CPU to Slurm) and
removes it at the end. The lab's hosts run this machine's nodecert (bound read-only).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchlib import bench_lab, report

from nodecert.lab.cluster import SHARED_MOUNT
from nodecert.lab.fleetlab import export_dir, served_fleet
from nodecert.lab.hosts import Lab


def sbatch(lab: Lab, args: str, timeout: float) -> float:
    """Submit and wait for the job (array) to end; its wall seconds."""
    t0 = time.monotonic()
    # the job's exit code is the run's (1 with the fleet's failing nodes): not checked
    lab.ssh("h1", f"cd /tmp && sbatch --parsable --wait -p gpu {args}", timeout=timeout,
            check=False)
    return time.monotonic() - t0


def figures(run: Path, wall: float) -> dict[str, Any]:
    summary = json.loads((run / "validate.json").read_text())
    hosts = summary["hosts"]
    slowest = 0.0
    for h in hosts.values():
        rec = json.loads(Path(h["results"].replace(SHARED_MOUNT, str(run.parents[1]))
                              ).read_text())
        slowest = max(slowest, sum(float(r.get("duration_s") or 0) for r in
                                   rec.get("results") or []))
    ctl = [json.loads(p.read_text()).get("controller") for p in sorted(
        (run / "slices").glob("*.json"))] if (run / "slices").is_dir() else []
    return {"wall_s": round(wall, 1), "slowest_node_s": round(slowest, 1),
            "over_slowest_s": round(wall - slowest, 1),
            "statuses": {s: sum(v["status"] == s for v in hosts.values())
                         for s in sorted({v["status"] for v in hosts.values()})},
            "verdicts": {h: v["verdict"] for h, v in hosts.items()},
            # why hosts did not finish, each wording once (numbers left out) with a count
            "errors": dict(Counter(re.sub(r"[0-9.]+", "N", str(v.get("error")))[:160]
                                   for v in hosts.values() if v["status"] != "done")),
            "slices": [c for c in ctl if c]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--slices", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    lab = Lab(bench_lab(13, "ncsl"), log=lambda m: None)
    out: dict[str, Any] = {"nodes": a.nodes, "slices": a.slices, "hosts": a.hosts}
    share = export_dir(lab.cfg)
    try:
        t0 = time.monotonic()
        lab.up(nodes=a.hosts, as_cluster=True, controllers=True)
        out["lab_up_s"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        with served_fleet(lab.cfg, a.nodes, "--time-scale", str(a.time_scale),
                          "--failing", str(max(1, a.nodes // 200)), "--seed", "3") as fleet:
            out["fleet_up_s"] = round(time.monotonic() - t0, 1)
            kinds = json.loads((fleet / "kinds.json").read_text())
            job = (f"--wrap '{sys.executable} -m "
                   f"nodecert validate -i {SHARED_MOUNT}/fleet/inventory.ini --progress "
                   f"summary --runs-dir {SHARED_MOUNT}/runs")
            # one controller: a slice of one (its figures in the same summary as a task's)
            wall = sbatch(lab, f"{job} --run-id 20261207-200000-000001 --slice 1/1'", 7200)
            one = figures(share / "runs" / "20261207-200000-000001", wall)
            wall = sbatch(lab, f"--array=1-{a.slices} {job} --run-id 20261207-200000-000002 "
                               "--slice auto'", 7200)
            sliced = figures(share / "runs" / "20261207-200000-000002", wall)
        failing = {h for h, k in kinds.items() if k == "failing"}
        for name, fig in (("one_controller", one), ("job_array", sliced)):
            verdicts = fig.pop("verdicts")
            fig["healthy_not_done"] = sum(1 for h in verdicts if h not in failing
                                          and verdicts[h] in ("ERROR",))
            fig["failing_found"] = sorted(h for h, v in verdicts.items() if v == "FAIL") == \
                sorted(failing)
            out[name] = {**fig, "verdict_counts": {v: list(verdicts.values()).count(v)
                                                   for v in sorted(set(verdicts.values()))}}
            out[name]["verdicts_hash"] = hash(tuple(sorted(verdicts.items())))
        out["same_verdicts"] = out["one_controller"].pop("verdicts_hash") == \
            out["job_array"].pop("verdicts_hash")
    finally:
        lab.down()
    return report(out, a.json)


if __name__ == "__main__":
    raise SystemExit(main())
