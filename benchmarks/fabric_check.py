"""Benchmark the per-node fabric check (net.ib) on the simulator: 8 NDR HCAs, the
default 3 s counter window, five runs. Target: under 10 s per node.

Run on demand:   .venv/bin/python benchmarks/fabric_check.py [--json OUT]

The HCAs are SIMULATED (the lab's ibstat/ibstatus/perfquery); the figure is the check's
own cost: two perfquery passes over every port, a sampling window between them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.simnode import SimNode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodecert-bench-fabric-") as d:
        node = SimNode(Path(d), "h200-sxm-8")
        plan = node.plan(["net.ib"])
        plan["options"]["fabric"]["counter_window_s"] = 3
        walls = []
        for _ in range(5):
            start = time.monotonic()
            r = node.check("net.ib", plan=plan)
            walls.append(time.monotonic() - start)
            assert r.verdict.name == "PASS", r.summary
    out = {"runs": len(walls), "median_s": round(statistics.median(walls), 2),
           "max_s": round(max(walls), 2), "ports": 8, "window_s": 3}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if out["max_s"] < 10 else 1


if __name__ == "__main__":
    sys.exit(main())
