"""Benchmark `nodecert rack validate` on a full lab rack: 18 GB200 compute trays (72
SIMULATED GPUs, NVLink fabric and IMEX simulated) and the rack's 9 switch trays
(1,296 NVLink ports), 2 power shelves and CDU as real Redfish endpoints. Targets: the
trays' fabric and IMEX stage under 60 s, the whole rack validation under 10 minutes.

Run on demand (root):   .venv/bin/python benchmarks/rack.py [--runs 3] [--json OUT]

Each run is timed from the command line to its exit; the rack record's own wall times
(the trays' checks and the endpoints' reading, which run at once) are reported beside.
The first run is signed as a rack certificate and verified offline.

It boots its own lab (state-br, 10.78.10.0/24) and removes it at the end.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nodecert.lab.config import LabConfig
from nodecert.lab.hosts import INOTIFY_LIMIT, Lab

TRAYS = 18


def run(lab: Lab, work: Path, *extra: str) -> dict[str, Any]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "nodecert", "rack", "validate", "-i",
                        str(lab.cfg.state / "inventory.ini"), "--runs-dir", str(work),
                        "--json", *extra], capture_output=True, text=True, timeout=1800,
                       check=False)
    wall = time.monotonic() - t0
    out = json.loads(p.stdout)
    return {"wall_s": round(wall, 1), "verdict": out["verdict"], "seconds": out["seconds"],
            **({"certificate": out["certificate"]} if "certificate" in out else {})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cfg = LabConfig(subnet=ipaddress.IPv4Network("10.78.10.0/24"), bridge="ncbr0",
                    prefix="ncbr", state_name="state-br")
    lab = Lab(cfg, log=lambda m: None)
    out: dict[str, Any] = {"trays": TRAYS, "gpus": 4 * TRAYS}
    before = INOTIFY_LIMIT.read_text()
    INOTIFY_LIMIT.write_text(f"{max(1024, int(before))}\n")  # 18 hosts' systemd
    try:
        t0 = time.monotonic()
        lab.up(nodes=TRAYS, profiles=("gb200-nvl-4",), with_rack=True)
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
                    v = subprocess.run([sys.executable, "-m", "nodecert", "verify",
                                        res.pop("certificate"), "--pubkey",
                                        str(keys / "nodecert.pub"), "--allow-simulated"],
                                       capture_output=True, text=True, timeout=120,
                                       check=False)
                    res["certificate_verifies"] = v.returncode == 0
                runs.append(res)
                print(json.dumps(res), flush=True)
            out["runs"] = runs
            out["median"] = {
                "wall_s": statistics.median(r["wall_s"] for r in runs),
                "trays_s": statistics.median(r["seconds"]["trays"] for r in runs),
                "infrastructure_s": statistics.median(r["seconds"]["infrastructure"]
                                                      for r in runs)}
    finally:
        lab.down()
        INOTIFY_LIMIT.write_text(before)
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
