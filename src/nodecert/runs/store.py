"""The run's writers: a validation run's hosts as they run (HostRun), the run itself
(ValidationRun), and the one way any run file is written (write_json). Where the files go
is layout.py; reading them back is records.py.

A HostRun is what is saved of a host: its plan, status and results. How the host is
reached (its SSH endpoint, become password, BMC credentials) is the session's, never the
record's: it lives in HostLink, held beside the run and never written.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.core import checks
from nodecert.inventory.bmc import BmcSpec
from nodecert.inventory.reader import HostSpec
from nodecert.runs.layout import RESULTS, RunDir
from nodecert.runs.records import SCHEMA
from nodecert.stack.bios import BiosProfile
from nodecert.stack.firmware import Recipe
from nodecert.stack.manifest import Stack
from nodecert.transport.ssh import Endpoint
from nodecert_node.contract import Plan, Result, Verdict, error_result, worst, write_atomic


def write_json(path: Path, data: Any, *, private: bool = False, interim: bool = False,
               compact: bool = False) -> None:
    """JSON written atomically (temp file in the same directory, fsync, rename).

    interim: a file rewritten as a run goes (a host's results, after each check): compact
    (json's C encoder; indenting is done in Python, ten times slower on large evidence)
    and not fsynced -- the final write is both indented and durable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, separators=(",", ":")) if interim or compact else \
        json.dumps(data, indent=1)
    write_atomic(str(path), (text + "\n").encode(), mode=0o600 if private else 0o644,
                 durable=not interim)


@dataclass(frozen=True)
class HostLink:
    """How this session reaches a host: never saved (it holds passwords)."""
    endpoint: Endpoint
    bmc: BmcSpec | None = None  # read out of band beside the node's checks (bmc.*)


@dataclass
class HostRun:
    host: str
    spec: HostSpec
    plan: Plan
    stack: Stack | None
    out_dir: Path
    status: str = "pending"  # pending|running|done|unreachable|lost|interrupted
    error: str = ""
    results: list[Result] = field(default_factory=list)
    current: str | None = None
    current_since: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    simulated: bool = False
    node: dict[str, Any] = field(default_factory=dict)
    bad_output: str = ""  # what a node sent that was not a valid event (evidence)
    recipe: Recipe | None = None  # the firmware recipe the host is judged by
    bios: BiosProfile | None = None  # the BIOS settings it must have

    @property
    def checks(self) -> list[str]:
        return list(self.plan.checks)

    @property
    def verdict(self) -> Verdict:
        # Only a finished run with a result for every planned check can be better
        # than ERROR: a verdict must never claim checks that did not run.
        done = {r.check for r in self.results}
        if self.status != "done" or not set(self.checks) <= done:
            return Verdict.ERROR
        return worst(r.verdict for r in self.results)

    def counts(self) -> str:
        c = dict.fromkeys(Verdict, 0)
        for r in self.results:
            c[r.verdict] += 1
        return " ".join(f"{n} {v.name}" for v, n in c.items() if n)

    def finish_missing(self, why: str, code: str) -> None:
        """Every check without a Result becomes ERROR (never silently absent)."""
        done = {r.check for r in self.results}
        for name in self.checks:
            if name not in done:
                self.results.append(error_result(
                    name, f"not run: {why}", fault_code=code,
                    remediation="Fix the cause and re-run `nodecert validate` for this host.")
                    .with_(simulated=self.simulated))

    def as_dict(self) -> dict[str, Any]:
        read = checks.by_role(self.results, "identity")
        ident = (read.facts.get("identity") or None) if read is not None else None
        return {
            "schema": SCHEMA, "host": self.host, "run_id": self.plan.run_id,
            "suite": self.plan.suite, "status": self.status, "error": self.error,
            "verdict": self.verdict.name, "simulated": self.simulated,
            "started": self.started, "finished": self.finished, "node": self.node,
            "spec": self.spec.as_dict(), "stack": self.stack.name if self.stack else None,
            "thresholds": self.plan.thresholds, "options": self.plan.options,
            "identity": ident, "results": [r.as_dict() for r in self.results],
        }

    def save(self, *, interim: bool = False) -> None:
        """results.json; interim while the host runs (see write_json). Compact even at
        the end: its evidence runs to hundreds of kB, and indenting it is done in
        Python (about 15 ms a host); it is read by nodecert, the report shows it."""
        write_json(self.out_dir / RESULTS, self.as_dict(), interim=interim,
                   compact=True)


@dataclass
class ValidationRun:
    run_dir: Path
    suite: str
    hosts: dict[str, HostRun]
    interrupted: bool = False
    links: dict[str, HostLink] = field(default_factory=dict, repr=False)  # never saved

    @property
    def dir(self) -> RunDir:
        return RunDir(self.run_dir)

    @property
    def verdict(self) -> Verdict:
        return worst(h.verdict for h in self.hosts.values())

    def summary(self) -> dict[str, Any]:
        return {"schema": "nodecert.validation-run/v1", "run_dir": str(self.run_dir),
                "suite": self.suite, "interrupted": self.interrupted,
                "verdict": self.verdict.name,
                "hosts": {n: {"verdict": h.verdict.name, "status": h.status, "error": h.error,
                              "simulated": h.simulated, "counts": h.counts(),
                              "results": str(h.out_dir / RESULTS)}
                          for n, h in sorted(self.hosts.items())}}


def record_inputs(run: RunDir, plans: dict[str, Plan], *, suite: dict[str, Any],
                  specs: dict[str, dict[str, Any]], stack_files: list[Path]) -> None:
    """What a validation run used, written before any host is contacted."""
    run.make_inputs()
    for host, plan in sorted(plans.items()):
        write_json(run.plan_file(host), plan.as_dict(), private=True, compact=True)
    write_json(run.suite_input, suite, private=True)
    write_json(run.inventory_input, specs, private=True)
    if stack_files:
        run.stack_inputs.mkdir(exist_ok=True)
    for f in stack_files:
        write_atomic(str(run.stack_inputs / f.name), f.read_bytes(), mode=0o600)


def record_host_plan(run: RunDir, host: str, plan: Plan, stack_file: Path | None) -> None:
    """A host's plan completed on contact (the stack its provisioning recorded): the
    run's inputs say what the host was really judged with."""
    write_json(run.plan_file(host), plan.as_dict(), private=True, compact=True)
    if stack_file is not None:
        run.stack_inputs.mkdir(exist_ok=True)
        kept, data = run.stack_inputs / stack_file.name, stack_file.read_bytes()
        if not kept.is_file() or kept.read_bytes() != data:  # a fleet shares a few
            write_atomic(str(kept), data, mode=0o600)


def record_provision_inputs(run: RunDir, inventory: Path, manifests: list[Path]) -> None:
    """A provision run's inputs: the inventory as given (file or directory, with its
    group_vars and host_vars) and the stack manifests; and its ansible/ directory."""
    inputs = run.make_inputs()
    run.ansible.mkdir()
    if inventory.is_dir():
        shutil.copytree(inventory, inputs / inventory.name, symlinks=False)
    else:
        shutil.copy2(inventory, inputs / inventory.name)
    for manifest in manifests:
        shutil.copy2(manifest, inputs / manifest.name)


__all__ = ["SCHEMA", "HostLink", "HostRun", "ValidationRun", "record_host_plan",
           "record_inputs", "record_provision_inputs", "write_json"]
