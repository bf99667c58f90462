"""Benchmark the README's main job phase by phase, and the acceptance suite's overhead.

Run on demand, as root:   .venv/bin/python benchmarks/main_job.py [--json OUT] [--skip-venv]

Phases, each timed on its own, as README command 1 runs them: a fresh venv with
`pip install -e .` (pip's cache as this machine has it: a first install on a new machine
downloads more), `lab up` of two hosts (the base image and mirror shared with any lab
already built here, else built now), provisioning (Ansible + conformance), validation
with the lab acceptance suite, certification. Per host, the acceptance overhead: the
host's validation wall time minus the sum of the configured durations of its stages
(burn-in, soak, and storage's three timed fio jobs); target at most 15 s. The lab used
has its own state directory, bridge and subnet (10.78.9.0/24): a user's lab is not
touched. Every certificate must come out READY (SIMULATED).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import bench_lab

from nodecert.certs.certify import certify
from nodecert.certs.signing import init_key, load_private_key
from nodecert.lab.hosts import Lab
from nodecert.provision.run import ProvisionRequest, provision
from nodecert.validation.run import ValidateRequest, validate
from nodecert_node.checks.storage import JOBS as FIO_JOBS

REPO = Path(__file__).resolve().parents[1]
CFG = bench_lab(9, "ncmbench")
STACK = "r580-cuda13.0"


def venv_phase() -> float:
    with tempfile.TemporaryDirectory(prefix="nodecert-bench-venv-") as d:
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", f"{d}/venv"], check=True, timeout=300)
        subprocess.run([f"{d}/venv/bin/pip", "install", "-q", "-e", str(REPO)], check=True,
                       timeout=1200)
        return time.monotonic() - t


def overhead(run_dir: Path) -> dict[str, Any]:
    """Per host: validation wall, the configured stage durations, the difference, and the
    checks that took longest."""
    out: dict[str, Any] = {}
    for rec_path in sorted(run_dir.glob("*/results.json")):
        rec = json.loads(rec_path.read_text())
        plan = json.loads((run_dir / "inputs" / f"plan-{rec['host']}.json").read_text())
        load, storage = plan["options"]["load"], plan["options"]["storage"]
        configured = (load["burnin_s"] + load["soak_s"]
                      + len(FIO_JOBS) * storage["runtime_s"] * len(storage["targets"]))
        wall = rec["finished"] - rec["started"]
        slow = sorted(((r["check"], round(r.get("duration_s", 0.0), 1))
                       for r in rec["results"]), key=lambda x: -x[1])[:6]
        out[rec["host"]] = {"wall_s": round(wall, 1), "configured_s": configured,
                            "overhead_s": round(wall - configured, 1), "slowest": slow}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--skip-venv", action="store_true", help="do not time the venv phase")
    args = ap.parse_args()
    phases: dict[str, Any] = {}
    if not args.skip_venv:
        phases["venv_pip_s"] = round(venv_phase(), 1)
    lab = Lab(CFG, log=lambda m: None)
    runs = Path(tempfile.mkdtemp(prefix="nodecert-bench-runs-"))
    try:
        lab.down()
        t = time.monotonic()
        up = lab.up(nodes=2)
        phases["lab_up_s"] = round(time.monotonic() - t, 1)
        phases["lab_up_timings"] = {k: round(v, 1) for k, v in up["timings"].items()}
        inv = CFG.state / "inventory.ini"
        t = time.monotonic()
        report = provision(ProvisionRequest(inv, STACK, runs_dir=runs),
                           progress=lambda line: None)
        phases["provision_s"] = round(time.monotonic() - t, 1)
        phases["provision_exit"] = int(report.exit_code)
        t = time.monotonic()
        vr = validate(ValidateRequest(inv, suite="lab", stack=STACK, runs_dir=runs),
                      progress=lambda line: None)
        phases["validate_lab_suite_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        key = load_private_key(init_key(runs / "keys").private)
        cr = certify(vr.run_dir, key)
        phases["certify_s"] = round(time.monotonic() - t, 1)
        phases["verdicts"] = {n.host: n.verdict + (" (SIMULATED)" if n.simulated else "")
                              for n in cr.nodes}
        phases["acceptance_overhead"] = overhead(vr.run_dir)
    finally:
        lab.down(drop_guard=True)
    phases["main_job_s"] = round(sum(v for k, v in phases.items()
                                     if k.endswith("_s") and isinstance(v, float)), 1)
    phases["cpus"] = os.cpu_count()
    report(phases, args.json)
    ok = all(v == "READY (SIMULATED)" for v in phases["verdicts"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
