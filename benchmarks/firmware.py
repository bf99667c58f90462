"""Benchmark `nodecert firmware` on 16 lab BMCs (Redfish over HTTPS, each in the lab's
BMC namespace, readings and firmware SIMULATED). Targets: reading the firmware inventory
of 16 BMCs under 30 s wall; `firmware apply` with 4 components behind on each of the
16 hosts, at most 4 hosts at a time, every task followed to completion, under 5 minutes.

Run on demand (root):   .venv/bin/python benchmarks/firmware.py [--hosts 16] [--json OUT]

It boots its own lab (state-fw, 10.78.12.0/24) and removes it at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import many_hosts, nodecert, report

from nodecert.lab import bmc as labbmc

# The four components of the DGX H100/H200 motherboard recipe, each set behind.
BEHIND = {"cpld_mb": "0.2.1.2", "cpld_mid": "0.2.0.5", "erot_bios": "00.04.0011.0000_n00",
          "erot_bmc": "00.04.0011.0000_n00"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"hosts": args.hosts, "components_behind": len(BEHIND)}
    with many_hosts(12, "ncfw") as lab:
        t0 = time.monotonic()
        lab.up(nodes=args.hosts, profiles=("h200-sxm-8",), with_bmc=True)
        out["lab_up_s"] = round(time.monotonic() - t0, 1)
        inv = str(lab.cfg.state / "inventory.ini")
        with tempfile.TemporaryDirectory(prefix="nodecert-bench-fw-") as d:
            work = Path(d)
            wall, rc, doc = nodecert("firmware", "plan", "-i", inv)
            out["read_healthy"] = {"wall_s": wall, "rc": rc,
                                   "at_recipe": sum(h["status"] == "at-recipe"
                                                    for h in doc.get("hosts", {}).values())}
            faults = work / "faults.yml"
            faults.write_text(json.dumps({"faults": [
                {"host": f"h{n}", "kind": "firmware_old", "component": c, "version": v}
                for n in range(1, args.hosts + 1) for c, v in BEHIND.items()]}))
            lab.apply_faults(faults)
            wall, rc, doc = nodecert("firmware", "plan", "-i", inv)
            out["read_behind"] = {"wall_s": wall, "rc": rc, "behind": sum(
                h["status"] == "behind" for h in doc.get("hosts", {}).values())}
            wall, rc, doc = nodecert("firmware", "apply", "-i", inv, "--mirror",
                                     str(labbmc.firmware_mirror(lab.cfg)), "--max-parallel",
                                     "4", "--runs-dir", str(work / "runs"))
            hosts = doc.get("hosts", {}).values()
            tasks = [e for h in hosts for e in h["log"] if e["what"] == "task"
                     and e.get("state") == "Completed"]
            out["apply"] = {"wall_s": wall, "rc": rc, "max_parallel": 4,
                            "updated": sum(h["status"] == "updated" for h in hosts),
                            "tasks_completed": len(tasks),
                            "statuses": sorted({h["status"] for h in hosts})}
            wall, rc, doc = nodecert("firmware", "plan", "-i", inv)
            out["read_after"] = {"wall_s": wall, "rc": rc, "at_recipe": sum(
                h["status"] == "at-recipe" for h in doc.get("hosts", {}).values())}
    return report(out, args.json, indent=1)


if __name__ == "__main__":
    sys.exit(main())
