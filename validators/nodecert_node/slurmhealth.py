"""Slurm's own entry points on a node: HealthCheckProgram, Prolog and Epilog.

`python3 -m nodecert_node slurm-health --mode healthcheck|prolog|epilog [--budget-s S]`
runs the quick checks that are fast and only read (hardware.inventory, hardware.pcie,
health.gpu, health.xid -- those of them the quick plan holds) with the plan the
control side last sent (/var/lib/nodecert/plans/quick.json, the certified thresholds
and order spec), within a time budget: slurmd kills a HealthCheckProgram that runs
longer than 60 s, and a prolog or epilog past PrologEpilogTimeout. Each check's limit
is cut to what is left of the budget (less a margin); a check that cannot start with
MIN_CHECK_S left is not run and does not count (the record says so).

On FAIL or ERROR the node is drained with a reason ("nodecert: health.gpu FAIL")
through the same policy as the timer (local.slurm_action): never a node someone
else drained, never a DOWN one. The health check also resumes nodecert's own drain
once the checks pass again; a prolog or epilog only drains.

Exit status: healthcheck and epilog 0 (what matters is the drain; a non-zero epilog
would make slurmd drain again with a reason of its own); prolog 1 on FAIL or ERROR,
so that Slurm requeues the job instead of starting it on a failing node (slurmd then
records its own "Prolog error" reason as well). The last record of each mode is kept
in /var/lib/nodecert/slurm-<mode>.json.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import socket
import time
from typing import Any

from nodecert_node import state
from nodecert_node.contract import Plan, write_atomic
from nodecert_node.local import NOT_JUDGED, VERDICTS, slurm
from nodecert_node.runner import run_one, simulated

FAST_CHECKS = ("hardware.inventory", "hardware.pcie", "health.gpu", "health.xid")
# slurmd's limit on a HealthCheckProgram is 60 s (slurm.conf(5), HealthCheckProgram);
# 50 s leaves it time to start us and read the drain. Prolog/epilog: PrologEpilogTimeout
# is a site's setting; 30 s unless told (--budget-s).
BUDGET_S = {"healthcheck": 50.0, "prolog": 30.0, "epilog": 30.0}
MIN_CHECK_S = 5.0
MARGIN_S = 2.0


def budgeted_checks(plan: Plan, budget_s: float, started: float) -> list[dict[str, Any]]:
    """Run the fast checks of the plan within the budget; each result as a dict."""
    results: list[dict[str, Any]] = []
    current: dict[str, Any] = {"proc": None}
    sim = simulated(plan)
    for name in (c for c in FAST_CHECKS if c in plan.checks):
        left = budget_s - (time.monotonic() - started) - MARGIN_S
        if left < MIN_CHECK_S:
            results.append({"check": name, "verdict": "NOT RUN", "not_run": True,
                            "fault_code": NOT_JUDGED,
                            "summary": f"not run: {left:.0f} s left of the {budget_s:g} s "
                                       "budget"})
            continue
        res = run_one(name, plan, min(plan.timeout_for(name), left), current)
        results.append(res.with_(simulated=sim).as_dict())
    return results


def verdict_of(results: list[dict[str, Any]]) -> str:
    counted = [r for r in results if r.get("fault_code") != NOT_JUDGED]
    if not counted:
        return "PASS"  # nothing judged: nothing to drain for (the record says why)
    return VERDICTS[max(VERDICTS.index(str(r["verdict"])) for r in counted)]


def health(mode: str, budget_s: float, node: str) -> tuple[int, str]:
    started = time.monotonic()
    os.makedirs(state.STATE, exist_ok=True)
    record: dict[str, Any] = {"schema": "nodecert.slurm-health/v1", "mode": mode,
                              "host": socket.gethostname(), "node": node,
                              "started": time.time(), "budget_s": budget_s, "results": []}
    with open(os.path.join(state.STATE, "local.lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0, "nodecert: a scheduled validation holds the node; health check skipped"
        path = state.plan_path("quick")
        if not os.path.exists(path):
            return 0, (f"nodecert: no plan in {path}: run `nodecert validate --suite quick` "
                       "from the control side once; Slurm left alone")
        with open(path) as f:
            plan = Plan.from_dict(json.load(f))
        record["results"] = budgeted_checks(plan, budget_s, started)
        record["verdict"] = verdict_of(record["results"])
        record["slurm"] = slurm(record, node, resume=mode == "healthcheck")
        record["finished"] = time.time()
        write_atomic(os.path.join(state.STATE, f"slurm-{mode}.json"),
                     json.dumps(record, indent=1).encode(), mode=0o600)
    skipped = [r["check"] for r in record["results"] if r.get("not_run")]
    line = (f"nodecert {mode}: {record['verdict']} in {time.monotonic() - started:.1f}s"
            + (f" (not run, out of time: {', '.join(skipped)})" if skipped else "")
            + f"; slurm: {record['slurm']}")
    bad = record["verdict"] in ("FAIL", "ERROR")
    return (1 if bad and mode == "prolog" else 0), line


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nodecert_node slurm-health",
                                 description="nodecert's fast checks as Slurm's health "
                                             "check, prolog or epilog")
    ap.add_argument("--mode", choices=sorted(BUDGET_S), required=True)
    ap.add_argument("--budget-s", type=float, help="the whole run's time limit (default: "
                    "50 for healthcheck, 30 for prolog and epilog)")
    ap.add_argument("--node", default="", help="the Slurm node name (default: "
                    "$SLURMD_NODENAME, else the short host name)")
    a = ap.parse_args(argv)
    node = a.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        code, line = health(a.mode, a.budget_s or BUDGET_S[a.mode], node)
    except Exception as exc:  # nodecert's own fault: said, but no job held back for it
        print(f"nodecert {a.mode}: ERROR (nodecert itself, the node not judged): "
              f"{type(exc).__name__}: {exc}")
        return 0
    print(line)
    return code
