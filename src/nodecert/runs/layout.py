"""Where a run's files are: the one run-id recipe and the one layout of every run kind.

    runs/<run id>/                  a validation (validate, revalidate) or a provision run
      inputs/                       what the run used, recorded when it started (0700/0600)
        plan-<host>.json            validation: the plan sent to the host
        stack/<name>.yml            validation: each stack manifest the run used
        suite.json, inventory.json  validation: the suite; the hosts' order specs
        <inventory>, <stack>.yml,   provision: the inventory as given, the manifests
        extravars.json              and the extra variables
      <host>/results.json           validation: the host's record (see records.py)
      <host>/progress.log           validation: the host's lines, on a large run
      validate.json                 validation: the run's summary, written when it ends
                                    (by the merge, for a run split into slices)
      inputs/slicing.json           a sliced validation: every host and its slice
      slices/<k>-of-<n>.json        a sliced validation: each slice's summary once it ended
      ansible/                      provision: ansible-runner's private data directory
      provision.json                provision: each host's outcome
      reports/                      certify: <host>.intoto.dsse.json, .html, index.html
        slices/<k>-of-<n>.json      certify --slice: each slice's certificates, by digest
    runs/cluster-<run id>/          a cluster run
      results.json                  the cluster's record
      reports/cluster.intoto.dsse.json, cluster.html
    runs/rack-<run id>/             a rack run
      results.json                  the rack's record
      trays/<run id>/               the compute trays' own validation run
      reports/rack.intoto.dsse.json, rack.html

A run id is `<UTC-less local time YYYYmmdd-HHMMSS>-<6 random hex digits>`, prefixed with
its kind where the kind is not told by the files (`cluster-`, `rack-`). A run writes only inside
its own directory; a later run never edits another's.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from nodecert.core.errors import NodecertError
from nodecert.core.paths import Member

RUN_ID = re.compile(r"^(?:cluster-|rack-)?[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
RESULTS = "results.json"
CERT_SUFFIX = ".intoto.dsse.json"


class RunDirError(NodecertError):
    """A path that is not the run directory asked for."""


def new_run_id(kind: str = "") -> str:
    """The run id: local time to the second, then 24 random bits (two runs started in one
    second all but never draw the same id, and `RunDir.make` refuses a directory that
    exists: a run never reuses another's); `kind` prefixes it (cluster runs)."""
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
    return f"{kind}-{stamp}" if kind else stamp


@dataclass(frozen=True)
class RunDir:
    """A run's directory and where each of its files lives in it."""

    path: Path
    # the run's own files and folders, below `path`
    inputs = Member("path", "inputs")
    stack_inputs = Member("path", "inputs", "stack")
    suite_input = Member("path", "inputs", "suite.json")
    inventory_input = Member("path", "inputs", "inventory.json")
    extravars_input = Member("path", "inputs", "extravars.json")
    # a validation run's summary, there once the run ended
    summary = Member("path", "validate.json")
    provision_summary = Member("path", "provision.json")
    ansible = Member("path", "ansible")
    cluster_results = Member("path", RESULTS)
    reports = Member("path", "reports")
    # a validation run split over several controllers (validation/slices.py)
    slicing = Member("path", "inputs", "slicing.json")
    slices = Member("path", "slices")

    @classmethod
    def new(cls, runs_dir: Path, kind: str = "") -> RunDir:
        """A new run's directory under runs_dir, not made yet: its id is known (plans
        carry it) before the inputs are checked, and nothing is written for bad input."""
        return cls((runs_dir / new_run_id(kind)).resolve())

    def make(self) -> RunDir:
        """Create the (new) run directory, with its parents."""
        self.path.mkdir(parents=True)
        return self

    @property
    def run_id(self) -> str:
        return self.path.name

    def make_inputs(self) -> Path:
        self.inputs.mkdir(parents=True, exist_ok=True)
        os.chmod(self.inputs, 0o700)
        return self.inputs

    def host_dir(self, host: str) -> Path:
        return self.path / host

    def results(self, host: str) -> Path:
        return self.host_dir(host) / RESULTS

    def slice_summary(self, k: int, n: int) -> Path:
        return self.slices / f"{k}-of-{n}.json"

    def plan_file(self, host: str) -> Path:
        return self.inputs / f"plan-{host}.json"

    def stack_input(self, name: str) -> Path:
        return self.stack_inputs / f"{name}.yml"

    def certificate(self, host: str) -> Path:
        return self.reports / f"{host}{CERT_SUFFIX}"


def cert_slice_summary(reports: Path, k: int, n: int) -> Path:
    """Where `certify --slice k/n` lists the certificates it wrote, in a reports
    directory (the run's own, or the one --out names)."""
    return reports / "slices" / f"{k}-of-{n}.json"


def runs_under(runs_dir: Path) -> list[RunDir]:
    """Every directory under runs_dir, by name (run ids sort by time); a directory named
    otherwise (a run renamed or copied in by hand) is a run too."""
    if not runs_dir.is_dir():
        return []
    return [RunDir(p) for p in sorted(runs_dir.iterdir(), key=lambda p: p.name)
            if p.is_dir()]


__all__ = ["CERT_SUFFIX", "RESULTS", "RUN_ID", "RunDir", "RunDirError", "cert_slice_summary",
           "new_run_id", "runs_under"]
