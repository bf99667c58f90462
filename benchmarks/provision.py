"""Benchmark provisioning on the lab: 1, 4 and 8 hosts, first run and idempotent re-run.

Run on demand, as root:   .venv/bin/python benchmarks/provision.py [--sizes 1 4 8] [--json OUT]

Reports wall time per run, per-host overhead, and -- on the largest size -- the
idempotent re-run with forks=1 and without SSH pipelining. The idempotent re-run is
timed --repeat times (the median is the figure; every run must report changed=0 and
conformant). Targets: the idempotent re-run of one host within 10 s; the first
provisioning of 8 hosts within 2x that of one host where CPU allows; the idempotent
re-run on 8 hosts under 3x the single-host re-run time.
The lab used here has its own state directory, bridge and subnet (10.78.8.0/24).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import bench_lab, report

from nodecert.lab.hosts import Lab
from nodecert.provision.run import FleetSettings, ProvisionRequest, provision

CFG = bench_lab(8, "ncpbench")
STACK = "r580-cuda13.0"


def cpu_busy_s() -> float:
    """CPU seconds this machine has been busy, all cores (controller and lab hosts alike)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def timed(inv: Path, runs: Path, **kw: object) -> tuple[float, dict[str, object]]:
    t, c = time.monotonic(), cpu_busy_s()
    report = provision(ProvisionRequest(inv, STACK, runs_dir=runs, **kw),  # type: ignore[arg-type]
                       progress=lambda line: None)
    elapsed, cpu = time.monotonic() - t, cpu_busy_s() - c
    hosts = report.hosts.values()
    # cpu_bound_s: the least wall time the work could take on this machine's cores.
    return elapsed, {"exit": report.exit_code, "changed": sum(h.changed for h in hosts),
                     "conformant": sum(1 for h in hosts if h.conformance and h.conformance.ok),
                     "cpu_s": round(cpu, 1), "cpu_bound_s": round(cpu / (os.cpu_count() or 1), 1)}


def reruns(inv: Path, runs: Path, repeat: int, **kw: object) -> tuple[float, dict[str, object]]:
    """The median of `repeat` idempotent re-runs, each of which must change nothing."""
    times, outcomes = [], []
    for _ in range(max(repeat, 1)):
        t, r = timed(inv, runs, **kw)
        times.append(round(t, 1))
        outcomes.append(r)
    return statistics.median(times), {"runs_s": times, "outcomes": outcomes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--repeat", type=int, default=3,
                    help="idempotent re-runs timed per setting (the median is reported)")
    ap.add_argument("--strategies", nargs="*", default=[],
                    help="also time the idempotent re-run with these strategies "
                         "(free, mitogen_linear, ...) on the smallest size")
    ap.add_argument("--no-variants", action="store_true",
                    help="skip the largest size's re-runs with forks=1 and without pipelining")
    args = ap.parse_args()
    lab = Lab(CFG, log=lambda m: None)
    results: dict[str, object] = {}
    runs = Path(tempfile.mkdtemp(prefix="nodecert-bench-runs-"))
    try:
        for n in args.sizes:
            lab.down()
            lab.up(nodes=n)
            inv = CFG.state / "inventory.ini"
            first, r1 = timed(inv, runs)
            again, r2 = reruns(inv, runs, args.repeat)
            results[f"{n}_hosts"] = {"first_run_s": round(first, 1), "rerun_s": again,
                                     "first_run_per_host_s": round(first / n, 1),
                                     "first": r1, "rerun": r2}
            for strategy in args.strategies if n == min(args.sizes) else []:
                ts, rs = reruns(inv, runs, args.repeat, fleet=FleetSettings(strategy=strategy))
                results[f"{n}_hosts"][f"rerun_{strategy}_s"] = ts  # type: ignore[index]
                results[f"{n}_hosts"][f"rerun_{strategy}"] = rs  # type: ignore[index]
            if n == max(args.sizes) and n > 1 and not args.no_variants:
                t1, _ = timed(inv, runs, forks=1)
                tp, _ = timed(inv, runs, pipelining=False)
                results[f"{n}_hosts"]["rerun_forks1_s"] = round(t1, 1)  # type: ignore[index]
                results[f"{n}_hosts"]["rerun_no_pipelining_s"] = round(tp, 1)  # type: ignore[index]
        results["cpus"] = os.cpu_count()
        if "1_hosts" in results and f"{max(args.sizes)}_hosts" in results:
            results["first_run_ratio_largest_vs_1"] = round(
                results[f"{max(args.sizes)}_hosts"]["first_run_s"]  # type: ignore[index]
                / results["1_hosts"]["first_run_s"], 2)  # type: ignore[index]
            one = results["1_hosts"]["rerun_s"]  # type: ignore[index]
            big = results[f"{max(args.sizes)}_hosts"]["rerun_s"]  # type: ignore[index]
            results["rerun_ratio_largest_vs_1"] = round(big / one, 2)
    finally:
        lab.down(drop_guard=True)
    return report(results, args.json)


if __name__ == "__main__":
    sys.exit(main())
