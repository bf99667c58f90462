"""The run directory: its layout, the one way its files are written, and its inputs.

    runs/<run_id>/
      inputs/               what the run used, recorded when it started (0600):
        plan-<host>.json    the plan sent to the host (thresholds with origin and source,
                            suite options, order spec, the conformance script)
        stack/<name>.yml    a copy of each stack manifest the run used
        suite.json          the suite definition
        inventory.json      the hosts' order specs (no connection settings or secrets)
      <host>/results.json   the host's results, rewritten atomically after each result
      validate.json         the run's summary, written when it ends

A run writes only inside its own directory; `revalidate` makes a new run and
never edits another's. Every file is written whole or not at all (fsync + rename).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.inventory.bmc import BmcSpec
from nodecert.inventory.reader import HostSpec
from nodecert.stack.manifest import Stack
from nodecert.transport.ssh import Endpoint
from nodecert_node.contract import Plan, Result, Verdict, error_result, worst, write_atomic

SCHEMA = "nodecert.validation/v1"
RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")


class RunDirError(NodecertError):
    """A path that is not a nodecert run directory."""


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
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def inputs(self) -> Path:
        return self.path / "inputs"

    def host_dir(self, host: str) -> Path:
        return self.path / host

    def results(self, host: str) -> Path:
        return self.host_dir(host) / "results.json"

    @property
    def summary(self) -> Path:
        return self.path / "validate.json"

    def hosts(self) -> list[str]:
        return sorted(p.parent.name for p in self.path.glob("*/results.json"))

    def record_inputs(self, plans: dict[str, Plan], *, suite: dict[str, Any],
                      specs: dict[str, dict[str, Any]], stack_files: list[Path]) -> None:
        """What the run used, written before any host is contacted."""
        self.inputs.mkdir(parents=True, exist_ok=True)
        os.chmod(self.inputs, 0o700)
        for host, plan in sorted(plans.items()):
            write_json(self.inputs / f"plan-{host}.json", plan.as_dict(), private=True,
                       compact=True)
        write_json(self.inputs / "suite.json", suite, private=True)
        write_json(self.inputs / "inventory.json", specs, private=True)
        if stack_files:
            (self.inputs / "stack").mkdir(exist_ok=True)
        for f in stack_files:
            write_atomic(str(self.inputs / "stack" / f.name), f.read_bytes(), mode=0o600)

    def record_host_plan(self, host: str, plan: Plan, stack_file: Path | None) -> None:
        """A host's plan completed on contact (the stack its provisioning recorded):
        the run's inputs say what the host was really judged with."""
        write_json(self.inputs / f"plan-{host}.json", plan.as_dict(), private=True,
                   compact=True)
        if stack_file is not None:
            (self.inputs / "stack").mkdir(exist_ok=True)
            kept, data = self.inputs / "stack" / stack_file.name, stack_file.read_bytes()
            if not kept.is_file() or kept.read_bytes() != data:  # a fleet shares a few
                write_atomic(str(kept), data, mode=0o600)

    def plan(self, host: str) -> Plan | None:
        """The plan the run sent to `host`, as recorded at its start (None for runs made
        before inputs were recorded)."""
        p = self.inputs / f"plan-{host}.json"
        if not p.is_file():
            return None
        return Plan.from_dict(json.loads(p.read_text()))


@dataclass
class HostRun:
    host: str
    spec: HostSpec
    endpoint: Endpoint
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
    bmc: BmcSpec | None = None  # read out of band beside the node's checks (bmc.*)

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
        ident = next((r.facts.get("identity") for r in self.results
                      if r.check == "hardware.inventory" and r.facts.get("identity")), None)
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
        write_json(self.out_dir / "results.json", self.as_dict(), interim=interim,
                   compact=True)


@dataclass
class ValidationRun:
    run_dir: Path
    suite: str
    hosts: dict[str, HostRun]
    interrupted: bool = False

    @property
    def verdict(self) -> Verdict:
        return worst(h.verdict for h in self.hosts.values())

    def summary(self) -> dict[str, Any]:
        return {"schema": "nodecert.validation-run/v1", "run_dir": str(self.run_dir),
                "suite": self.suite, "interrupted": self.interrupted,
                "verdict": self.verdict.name,
                "hosts": {n: {"verdict": h.verdict.name, "status": h.status, "error": h.error,
                              "simulated": h.simulated, "counts": h.counts(),
                              "results": str(h.out_dir / "results.json")}
                          for n, h in sorted(self.hosts.items())}}


def open_run(path: Path) -> RunDir:
    if not path.is_dir() or not any(path.glob("*/results.json")):
        raise RunDirError(f"{path} is not a validation run directory (no <host>/results.json)",
                          hint="pass a directory under runs/ that `nodecert validate` wrote")
    return RunDir(path)


__all__ = ["RUN_ID", "SCHEMA", "HostRun", "RunDir", "RunDirError", "ValidationRun", "open_run",
           "write_json"]
