"""Benchmark `nodecert rack validate` on a full lab rack: 18 GB200 compute trays (72
SIMULATED GPUs, NVLink fabric and IMEX simulated, real Slurm running the NVLink domain's
jobs) and the rack's 9 switch trays (1,296 NVLink ports), 2 power shelves and CDU as
real Redfish endpoints. Targets: the trays' fabric and IMEX stage under 60 s, the whole
rack validation under 10 minutes, and a slow GPU among the 72 named in at most 2
sampling rounds plus a bounded confirmation.

Run on demand (root):   .venv/bin/python benchmarks/rack.py [--runs 3] [--json OUT]

Each run is timed from the command line to its exit; the rack record's own wall times
(the trays' checks and the endpoints' reading, which run at once, then the domain's
jobs) are reported beside. The first run is signed as a rack certificate and verified
offline. Then one run per slow-GPU position (an nvlink_slow fault: every link and the
fabric's health read healthy, only traffic shows it) records what the sweep named and in
how many rounds.

It boots its own lab (state-br, 10.78.10.0/24) and removes it at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import many_hosts, nodecert, report, verifies

from nodecert.lab.hosts import Lab

TRAYS = 18


def run(lab: Lab, work: Path, *extra: str) -> dict[str, Any]:
    wall, _, out = nodecert("rack", "validate", "-i", str(lab.cfg.state / "inventory.ini"),
                            "--runs-dir", str(work), *extra, timeout=1800)
    by = {r["check"]: r for r in out["results"]}
    sweep = (by.get("rack.sweep") or {}).get("value") or {}
    return {"wall_s": round(wall, 1), "verdict": out["verdict"], "seconds": out["seconds"],
            "allreduce_gbs": (by.get("rack.allreduce") or {}).get("value"),
            "sweep": {k: sweep.get(k) for k in ("rounds", "confirmations", "pairs",
                                                "median_gbs")},
            "named": [f.split(":")[0] for f in (by.get("rack.sweep") or {}).get("findings", [])],
            **({"certificate": out["certificate"]} if "certificate" in out else {})}


SLOW = [("h3", 0), ("h11", 3), ("h18", 2)]  # where the slow GPU is, one run each


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"trays": TRAYS, "gpus": 4 * TRAYS}
    with many_hosts(10, "ncbr") as lab:
        t0 = time.monotonic()
        lab.up(nodes=TRAYS, profiles=("gb200-nvl-4",), with_rack=True, as_cluster=True)
        out["lab_up_s"] = round(time.monotonic() - t0, 1)
        with tempfile.TemporaryDirectory(prefix="nodecert-bench-rack-") as d:
            work = Path(d)
            keys = work / "keys"
            subprocess.run([sys.executable, "-m", "nodecert", "keys", "init", "--out",
                            str(keys)], check=True, capture_output=True, timeout=60)
            runs = []
            for k in range(args.runs):
                extra = ["--key", str(keys / "nodecert.key")] if k == 0 else []
                res = run(lab, work, *extra)
                if extra:
                    res["certificate_verifies"] = verifies(res.pop("certificate"),
                                                           keys / "nodecert.pub")
                runs.append(res)
                print(json.dumps(res), flush=True)
            out["runs"] = runs
            out["median"] = {
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "trays_s": statistics.median(r["seconds"]["trays"] for r in runs),
                "load_s": statistics.median(r["seconds"]["load"] for r in runs),
                "infrastructure_s": statistics.median(r["seconds"]["infrastructure"]
                                                      for r in runs)}
            slow = []
            for host, gpu in SLOW:
                f = work / "faults.yml"
                f.write_text(json.dumps({"faults": [{"kind": "nvlink_slow", "host": host,
                                                     "gpu": gpu}]}))
                lab.apply_faults(f)
                try:
                    res = run(lab, work)
                finally:
                    lab.apply_faults(None)
                res["slow_gpu"] = f"{host} GPU {gpu}"
                slow.append(res)
                print(json.dumps(res), flush=True)
            out["slow_gpu_runs"] = slow
    return report(out, args.json, indent=1)


if __name__ == "__main__":
    sys.exit(main())
