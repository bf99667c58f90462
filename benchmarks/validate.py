"""Benchmark `nodecert validate`: control-side overhead on 1, 8 and 32 lab hosts, and
fio through nodecert vs the same fio jobs run by hand.

Run on demand, as root:   .venv/bin/python benchmarks/validate.py [--sizes 1 8 32] [--json OUT]

Provisioned sizes get the driver, Fabric Manager and validator tools (provision
--tags: the framework environment is not needed to measure the control side);
bare sizes are validated unprovisioned (GPU checks fail at once, fio is missing:
nearly all of the run is control side and SSH). Overhead =
wall time of the run minus the longest node-side time (the sum of its checks'
durations as the node measured them). The fio comparison runs on one host: the
storage check's three fio jobs, then the same command lines by hand over SSH,
alternating, five times each (1 GiB files, 10 s runs); target: medians
agree within 5%.
The lab used here has its own state directory, bridge and subnet (10.78.7.0/24).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import bench_lab

from nodecert.core.errors import NodecertError
from nodecert.lab.hosts import Lab
from nodecert.lab.machine import INOTIFY_LIMIT, check_inotify
from nodecert.provision.run import ProvisionRequest, provision
from nodecert.validation.run import ValidateRequest, validate

CFG = bench_lab(7, "ncvbench")
STACK = "r580-cuda13.0"
TAGS = ("repo", "driver", "fabric_manager", "validators")
# Larger than the quick suite's: a 128 MB buffered write + fsync varies by +-25% run to
# run on this VM, by hand as through nodecert; at 1 GiB and 10 s runs it settles.
FIO_COMPARE = {"size_mb": 1024, "runtime_s": 10, "checkpoint_mb": 1024}


def overhead(inv: Path, runs: Path, n: int) -> dict[str, Any]:
    t = time.monotonic()
    run = validate(ValidateRequest(inv, stack=STACK, runs_dir=runs, forks=max(16, n)),
                   progress=lambda _: None)
    wall = time.monotonic() - t
    node = {h: sum(r.duration_s for r in hr.results) for h, hr in run.hosts.items()}
    counts: dict[str, int] = {}
    for hr in run.hosts.values():
        for r in hr.results:
            counts[r.verdict.name] = counts.get(r.verdict.name, 0) + 1
    return {"hosts": n, "wall_s": round(wall, 2), "node_max_s": round(max(node.values()), 2),
            "node_mean_s": round(statistics.mean(node.values()), 2),
            "overhead_s": round(wall - max(node.values()), 2), "verdicts": counts}


def fio_by_hand(lab: Lab, commands: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    lab.ssh("h1", "mkdir -p /var/tmp/nodecert/scratch/byhand", timeout=30)
    for cmd in commands:
        argv = shlex.split(cmd)
        argv = [a if not a.startswith("--filename=") else
                "--filename=/var/tmp/nodecert/scratch/byhand/" + a.rsplit("/", 1)[1]
                for a in argv]
        data = json.loads(lab.ssh("h1", shlex.join(argv), timeout=600).stdout)
        job = data["jobs"][0]
        name = job["jobname"]
        if name == "rand_read_4k":
            out["rand_read_iops"] = job["read"]["iops"]
        elif name == "checkpoint":
            out["checkpoint_mbps"] = job["write"]["bw_bytes"] / 1e6
        else:
            side = "write" if "write" in name else "read"
            out[f"{name}_mbps"] = job[side]["bw_bytes"] / 1e6
    lab.ssh("h1", "rm -rf /var/tmp/nodecert/scratch/byhand", timeout=60)
    return out


def fio_compare(lab: Lab, inv: Path, runs: Path, rounds: int = 5) -> dict[str, Any]:
    """Alternate the order (nodecert first, then by hand first) to cancel drift."""
    via: list[dict[str, float]] = []
    hand: list[dict[str, float]] = []
    commands: list[str] = []

    def through_nodecert() -> None:
        run = validate(ValidateRequest(inv, stack=STACK, runs_dir=runs, limit=("h1",),
                       checks=("storage.fio",), option_overrides={"storage": FIO_COMPARE}),
                       progress=lambda _: None)
        res = run.hosts["h1"].results[0]
        via.append(dict(next(iter(res.value.values()))))
        commands[:] = [e.command for e in res.evidence]

    through_nodecert()  # warm-up, and the exact command lines to repeat by hand
    via.clear()
    for k in range(rounds):
        if k % 2:
            hand.append(fio_by_hand(lab, commands))
            through_nodecert()
        else:
            through_nodecert()
            hand.append(fio_by_hand(lab, commands))
    out: dict[str, Any] = {"rounds": rounds}
    for metric in via[0]:
        a = statistics.median(v[metric] for v in via)
        b = statistics.median(h[metric] for h in hand)
        # The disk's own run-to-run spread, by hand: (max - min) / median.
        spread = (max(h[metric] for h in hand) - min(h[metric] for h in hand)) / b
        out[metric] = {"nodecert": round(a, 1), "by_hand": round(b, 1),
                       "diff_pct": round(100 * (a - b) / b, 1),
                       "nodecert_runs": [round(v[metric], 1) for v in via],
                       "by_hand_runs": [round(h[metric], 1) for h in hand],
                       "by_hand_spread_pct": round(100 * spread, 1)}
    return out


def check_inotify_need(n: int) -> int:
    """The limit to set for n hosts, or 0 when the machine's is enough."""
    try:
        check_inotify(n)
    except NodecertError as exc:
        return int(str(exc.hint).split("=")[1].split()[0])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1, 8],
                    help="lab sizes provisioned (driver, Fabric Manager, tools) first")
    ap.add_argument("--bare-sizes", type=int, nargs="*", default=[1, 8, 32],
                    help="lab sizes validated unprovisioned: GPU checks fail at once, so "
                         "the run is almost all control side (connect, ship, events)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    lab = Lab(CFG, log=lambda m: None)
    results: dict[str, Any] = {}
    runs = Path(tempfile.mkdtemp(prefix="nodecert-vbench-runs-"))
    inv = CFG.state / "inventory.ini"

    def fresh(n: int) -> None:
        lab.down()
        need = check_inotify_need(n)
        if need:
            print(f"raising fs.inotify.max_user_instances to {need} for {n} hosts", flush=True)
            INOTIFY_LIMIT.write_text(f"{need}\n")
        lab.up(nodes=n)

    original_limit = INOTIFY_LIMIT.read_text()
    try:
        for n in args.bare_sizes:
            fresh(n)
            results[f"bare_{n}_hosts"] = overhead(inv, runs, n)
            print(json.dumps({f"bare_{n}_hosts": results[f"bare_{n}_hosts"]}), flush=True)
        for n in args.sizes:
            fresh(n)
            t = time.monotonic()
            provision(ProvisionRequest(inv, stack=STACK, runs_dir=runs, tags=TAGS,
                                       forks=min(n, 16)), progress=lambda _: None)
            results[f"{n}_hosts"] = {"provision_s": round(time.monotonic() - t, 1),
                                     **overhead(inv, runs, n)}
            print(json.dumps({f"{n}_hosts": results[f"{n}_hosts"]}), flush=True)
            if n == 1:
                results["fio_nodecert_vs_by_hand"] = fio_compare(lab, inv, runs)
                print(json.dumps(results["fio_nodecert_vs_by_hand"]), flush=True)
    finally:
        lab.down()
        if INOTIFY_LIMIT.read_text() != original_limit:
            INOTIFY_LIMIT.write_text(original_limit)  # leave the machine as found
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
