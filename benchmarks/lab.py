"""Benchmark the lab: base build (cold), `lab up` for 1/4/16 hosts, memory per host, reset.

Run on demand, as root:   .venv/bin/python benchmarks/lab.py [--cold] [--json OUT]

--cold removes the cached base image first, so its build time is measured from
scratch (downloads included). Targets (a 2-core machine): 4 hosts
ssh-ready in under 5 s once the base exists, under 20 MB RAM per host.
The lab used here has its own state directory, bridge and subnet (10.78.9.0/24).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from benchlib import bench_lab

from nodecert.lab import net
from nodecert.lab.hosts import Lab
from nodecert.lab.mirror import build_mirror
from nodecert.lab.rootfs import build_base

CFG = bench_lab(9, "ncbench")


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def children(pid: int | None) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="rebuild the base image from scratch")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    results: dict[str, object] = {}
    lab = Lab(CFG, log=lambda m: None)
    lab.down()
    if args.cold:
        shutil.rmtree(CFG.base, ignore_errors=True)
    t = time.monotonic()
    built = build_base(CFG)
    results["base_build_s"] = round(time.monotonic() - t, 2) if built else "cached"
    t = time.monotonic()
    build_mirror(CFG)
    results["mirror_build_s"] = round(time.monotonic() - t, 2)
    for n in (1, 4, 16):
        t = time.monotonic()
        lab.up(nodes=n)
        ready = time.monotonic() - t
        # Everything a host costs: its container (processes in its namespace) plus
        # its supervisor and systemd-nspawn on the machine side.
        pss = [pss_kib([*net.netns_pids(h.netns), h.pid or 0, *children(h.pid)])
               for h in lab.hosts()]
        results[f"up_{n}_hosts_s"] = round(ready, 2)
        results[f"pss_per_host_mib_{n}"] = round(statistics.mean(pss) / 1024, 1)
        if n == 4:
            resets = [lab.reset("h2") for _ in range(3)]
            results["reset_s_median_of_3"] = round(statistics.median(resets), 2)
        t = time.monotonic()
        lab.down()
        results[f"down_{n}_hosts_s"] = round(time.monotonic() - t, 2)
    lab.down(drop_guard=True)
    width = max(len(k) for k in results)
    for k, v in results.items():
        print(f"{k:<{width}}  {v}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
