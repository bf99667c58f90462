"""Discover a rail-optimised InfiniBand fabric with the real tools and judge it against its
plan (target: discovery of a 16-node fabric in under 30 s): the lab's topology for N
nodes of 8 rails (ibsim, its subnet brought up once by OpenSM), read by Debian's
ibnetdiscover through umad2sim as a lab host reads it, parsed and judged, with the lab's
five cabling faults planted.

Run on demand:   .venv/bin/python benchmarks/cabling_discovery.py [--nodes 16] [--json OUT]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchlib import report

from nodecert.cluster.cabling import judge_cabling
from nodecert.cluster.cabling_links import parse_ibnetdiscover_ports
from nodecert.inventory.cableplan import read_plan
from nodecert.lab import fabricplan, ibfabric
from nodecert.lab.hardware import Fault

FAULTS = [Fault("h2", "cable_swapped", {"hca": 0, "with": 1}),
          Fault("h3", "cable_wrong_leaf", {"hca": 2, "leaf": 5}),
          Fault("h4", "cable_width", {"hca": 3}),
          Fault("h2", "cable_missing", {"hca": 5}),
          Fault("h3", "link_flapping", {"hca": 6})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    hosts = [(f"h{n}", n, 8) for n in range(1, args.nodes + 1)]
    with tempfile.TemporaryDirectory(prefix="nodecert-bench-") as d:
        work = Path(d)
        (work / "plan.csv").write_text(fabricplan.plan_csv(hosts))
        plan = read_plan(work / "plan.csv")
        t0 = time.perf_counter()
        text = ibfabric.read_locally(hosts, FAULTS, ["ibnetdiscover", "-p"], work)
        up_and_read_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        links = parse_ibnetdiscover_ports(text)
        res = judge_cabling(plan, links)
        judge_s = time.perf_counter() - t1
    out = {"nodes": args.nodes, "planned_links": len(plan.links), "links_found": len(links),
           "fabric_up_and_discovered_s": round(up_and_read_s, 3),
           "parse_and_judge_s": round(judge_s, 4), "verdict": res.verdict.name,
           "findings": len(res.findings)}
    report(out, args.json)


if __name__ == "__main__":
    main()
