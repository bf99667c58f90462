"""A validation run laid out as `nodecert validate` writes it, from the results nodecert
recorded on an H200 (tests/fixtures/recorded/h200-device-2026-11-29)."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

from support.env import REPO

H200 = REPO / "tests" / "fixtures" / "recorded" / "h200-device-2026-11-29"


def recorded_results() -> list[dict[str, Any]]:
    out = []
    for line in (H200 / "run" / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "result":
            out.append(ev["result"])
    return out


def make_run(root: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    """A validation run directory as `nodecert validate` writes it."""
    run = root / "run"
    for name, over in hosts.items():
        results = over.pop("results", recorded_results())
        ident = next((r["facts"]["identity"] for r in results
                      if r["check"] == "hardware.inventory"), None)
        worst = max((["PASS", "WARN", "FAIL", "ERROR"].index(r["verdict"]) for r in results),
                    default=0)
        data = {"schema": "nodecert.validation/v1", "host": name, "run_id": "test-run",
                "suite": "quick", "status": "done", "error": None,
                "verdict": ["PASS", "WARN", "FAIL", "ERROR"][worst], "simulated": False,
                # Unix seconds, as validate writes them; an hour ago unless a test names
                # them (certificates rest on fresh results, whenever the tests run).
                "started": time.time() - 3600, "finished": time.time() - 3600 + 148.5,
                "node": {}, "spec": {"gpu_model": "H200-SXM", "gpu_count": 1},
                "stack": "r580-cuda13.0", "thresholds": {}, "options": {},
                "identity": ident, "results": results, **over}
        (run / name).mkdir(parents=True)
        (run / name / "results.json").write_text(json.dumps(data))
        # The inputs validate records at the start of a run.
        (run / "inputs" / "stack").mkdir(parents=True, exist_ok=True)
        (run / "inputs" / f"plan-{name}.json").write_text(json.dumps({"host": name}))
    (run / "inputs" / "suite.json").write_text(json.dumps({"name": "quick"}))
    stack = REPO / "stacks" / "r580-cuda13.0.yml"
    (run / "inputs" / "stack" / stack.name).write_bytes(stack.read_bytes())
    (run / "validate.json").write_text("{}")
    return run


def passing(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded results with the two real findings of that machine cleared (its VM
    exposes no NVLink; the burn-in was judged against the old floor)."""
    out = copy.deepcopy(results)
    for r in out:
        if r["verdict"] in ("FAIL", "ERROR"):
            r["verdict"], r["findings"] = "PASS", []
    return out

