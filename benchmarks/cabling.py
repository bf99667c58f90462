"""Judge a 1,000-link cable plan against a discovered fabric (target: under 2 s): 125
nodes of 8 rails each on 8 leaves, read from its CSV, with two swapped cables, a rail on
the wrong leaf, a port at 2X, a missing cable and an extra one planted.

Run on demand:   .venv/bin/python benchmarks/cabling.py [--nodes 125] [--json OUT]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchlib import report

from nodecert.cluster.cabling import judge_cabling
from nodecert.cluster.cabling_links import Link
from nodecert.inventory.cableplan import read_plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=125)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = [(f"gpu-{n:04d}", f"mlx5_{k}", str(k), f"leaf-{k:02d}", str(n))
            for n in range(1, args.nodes + 1) for k in range(8)]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "plan.csv"
        path.write_text("node,port,rail,switch,switch_port,width,speed_gbps\n" + "".join(
            f"{a},{b},{c},{s},{p},4X,400\n" for a, b, c, s, p in rows))
        t0 = time.perf_counter()
        plan = read_plan(path)
        read_s = time.perf_counter() - t0
    links = [Link(a, b, s, p, "4X", 106.25) for a, b, _, s, p in rows]
    links[0], links[9] = (Link(rows[0][0], rows[0][1], rows[9][3], rows[9][4], "4X", 106.25),
                          Link(rows[9][0], rows[9][1], rows[0][3], rows[0][4], "4X", 106.25))
    links[20] = Link(rows[20][0], rows[20][1], "leaf-07", "999", "4X", 106.25)
    links[30] = Link(rows[30][0], rows[30][1], rows[30][3], rows[30][4], "2X", 106.25)
    del links[40]
    links.append(Link("gpu-0001", "mlx5_9", "leaf-00", "1000", "4X", 106.25))
    t0 = time.perf_counter()
    res = judge_cabling(plan, links)
    judge_s = time.perf_counter() - t0
    out = {"links": len(plan.links), "read_s": round(read_s, 4), "judge_s": round(judge_s, 4),
           "verdict": res.verdict.name, "findings": len(res.findings)}
    report(out, args.json)


if __name__ == "__main__":
    main()
