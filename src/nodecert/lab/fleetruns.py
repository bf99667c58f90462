"""Runs of the emulated fleet written straight to a runs directory, without SSH.

What `nodecert validate` would record for each emulated node (the same results the
emulator answers over SSH, seeded figures included), for building and judging fleet
baselines and trends over a thousand nodes' runs in seconds. Every record is SIMULATED.
"""

from __future__ import annotations

import json
from pathlib import Path

from nodecert.lab.fleet import FleetSpec, node_result, recorded_results
from nodecert.lab.fleetfigures import FIGURE_CHECKS, FIGURE_KINDS, NodeFigures
from nodecert.runs.layout import RESULTS, RunDir
from nodecert.runs.records import SCHEMA
from nodecert.runs.store import write_json
from nodecert_node.contract import Verdict

CHECKS = ("hardware.inventory", *FIGURE_CHECKS)
ORDER = ("PASS", "WARN", "FAIL", "ERROR")


def write_run(runs_dir: Path, spec: FleetSpec, run: int, *, started: float,
              checks: tuple[str, ...] = CHECKS, gpus: int = 1) -> Path:
    """Run number `run` (1 first) of every node of the fleet, as runs_dir/<id>; returns the
    run directory. Unreachable and dropped nodes have no record, as in a real run."""
    rd = RunDir.new(runs_dir)
    recorded = recorded_results()
    hosts = {}
    for i, kind in enumerate(spec.kinds()):
        name = f"n{i:05d}"
        if kind in ("unreachable", "dropped"):
            continue
        figures = NodeFigures(i, kind if kind in FIGURE_KINDS else "ok", spec.seed, gpus)
        results = [node_result(c, kind, recorded, 1.0, figures=figures, run=run) for c in checks]
        verdict = max((str(r["verdict"]) for r in results), key=ORDER.index)
        record = {"schema": SCHEMA, "host": name, "run_id": rd.run_id, "suite": "standard",
                  "status": "done", "error": "", "verdict": verdict, "simulated": True,
                  "started": started, "finished": started + 60.0,
                  "results": results}
        path = rd.path / name / RESULTS
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, separators=(",", ":")))
        hosts[name] = {"verdict": verdict, "status": "done"}
    write_json(rd.summary, {"schema": "nodecert.validation-run/v1", "run_dir": str(rd.path),
                            "suite": "standard", "interrupted": False,
                            "verdict": max((h["verdict"] for h in hosts.values()),
                                           key=ORDER.index, default=str(Verdict.ERROR)),
                            "hosts": hosts})
    return rd.path


__all__ = ["CHECKS", "write_run"]
