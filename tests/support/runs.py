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


# The settings of a standard-suite run, as its plan records them: at the production
# acceptance profile's minimums (validators/acceptance.yml).
ACCEPTANCE_OPTIONS = {"storage": {"runtime_s": 30}, "fabric": {"dcgm_level": 2},
                      "load": {"burnin_s": 120, "soak_s": 600}}
ACCEPTANCE_SUITES = {"standard": "production", "full": "production", "lab": "lab"}


def make_run(root: Path, hosts: dict[str, dict[str, Any]], *, suite: str = "standard",
             plan: dict[str, Any] | None = None) -> Path:
    """A validation run directory as `nodecert validate` writes it: by default a run of
    the standard (acceptance) suite, whose plan holds its settings; `plan` adds to or
    overrides every host's plan (partial, options)."""
    run = root / "run"
    for name, over in hosts.items():
        results = over.pop("results", recorded_results())
        ident = next((r["facts"]["identity"] for r in results
                      if r["check"] == "hardware.inventory"), None)
        worst = max((["PASS", "WARN", "FAIL", "ERROR"].index(r["verdict"]) for r in results),
                    default=0)
        data = {"schema": "nodecert.validation/v1", "host": name, "run_id": "test-run",
                "suite": suite, "status": "done", "error": None,
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
        (run / "inputs" / f"plan-{name}.json").write_text(json.dumps(
            {"host": name, "suite": data["suite"], "partial": False, "spec": data["spec"],
             "options": copy.deepcopy(ACCEPTANCE_OPTIONS), **(plan or {})}))
    (run / "inputs" / "suite.json").write_text(json.dumps(
        {"name": suite, "acceptance": ACCEPTANCE_SUITES.get(suite)}))
    stack = REPO / "stacks" / "r580-cuda13.0.yml"
    (run / "inputs" / "stack" / stack.name).write_bytes(stack.read_bytes())
    (run / "validate.json").write_text("{}")
    return run


# The acceptance stages that one-GPU recording did not run, as passing results of their
# checks (figures from the H200 reference rows of the thresholds' sources).
_STAGE_RESULTS: dict[str, Any] = {
    "platform.pcie_acs": None, "platform.iommu": None, "platform.cpu_governor": None,
    "platform.numa_balancing": None, "stack.conformance": None,
    "fabric.nccl_allreduce": {"busbw_gbs": None, "nccl": "2.27.7"},  # one GPU: n/a
    "fabric.bandwidth": {"host_to_device_memcpy_ce": {"0": 55.4},
                         "device_to_host_memcpy_ce": {"0": 55.9}},
    "storage.fio": {"/var/lib/nodecert/scratch": {"seq_read_mbps": 3100.0,
                                                  "seq_write_mbps": 2900.0}},
    "dcgm.diag": {"level": 2, "tests": {}, "meta": {}},
}


def passing(results: list[dict[str, Any]], *, acceptance: bool = True) -> list[dict[str, Any]]:
    """The recorded results with the two real findings of that machine cleared (its VM
    exposes no NVLink; the burn-in was judged against the old floor). With `acceptance`
    (the default) also every acceptance stage that recording lacks, as a passing result,
    and its burn-in and soak as long as the production profile asks: what an acceptance
    run of that node reports."""
    out = copy.deepcopy(results)
    for r in out:
        if r["verdict"] in ("FAIL", "ERROR"):
            r["verdict"], r["findings"] = "PASS", []
    if not acceptance:
        return out
    have = {r["check"] for r in out}
    for check, value in _STAGE_RESULTS.items():
        if check not in have:
            out.append({"check": check, "verdict": "WARN" if check == "fabric.nccl_allreduce"
                        else "PASS", "summary": f"{check}: as an acceptance run reports it",
                        "value": copy.deepcopy(value), "unit": "", "thresholds": {},
                        "findings": [], "evidence": [], "duration_s": 1.0, "facts": {}})
    for r in out:
        if r["check"] == "load.burnin":
            r["value"]["seconds"] = max(float(r["value"].get("seconds") or 0), 120.0)
        if r["check"] == "load.thermal_soak":
            gpus = r["value"]["peak_temp_c"]
            r["value"]["samples"] = 600 * len(gpus)
            r["value"].setdefault("plateau_sm_mhz", dict.fromkeys(gpus, 1980.0))
    return out

