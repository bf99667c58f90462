"""Reading runs back: a host's saved record, a validation run's records, a host's history
across runs, a cluster run's record. Every command that reads a run reads it here.

A record is what a run saved (results.json): never trusted to be whole, since a run may
still be writing, have been interrupted or be damaged. The strict readers (certify, a
baseline) refuse a damaged record naming its file; the history readers skip it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.runs.layout import RESULTS, RunDir, RunDirError, runs_under
from nodecert_node.contract import RESULT_SCHEMA, Plan, Result, Verdict, error_result, worst

SCHEMA = "nodecert.validation/v1"


@dataclass(frozen=True)
class Record:
    """A run's saved record (results.json), as written: what every kind of run records,
    typed (verdict and results as the contract's types)."""
    path: Path
    data: dict[str, Any]

    @property
    def run_id(self) -> str | None:
        rid = self.data.get("run_id")
        return str(rid) if rid else None

    @property
    def verdict(self) -> Verdict | None:
        """The run's verdict; None where the record holds none (a run still writing, an
        interrupted one) or one that is no verdict."""
        return verdict_of(self.data.get("verdict"))

    @property
    def verdict_written(self) -> str:
        """The verdict as the record writes it (for a message saying what it holds)."""
        return str(self.data.get("verdict"))

    @property
    def simulated(self) -> bool:
        return bool(self.data.get("simulated"))

    @property
    def started(self) -> float:
        """When the run's checks started (Unix seconds; 0.0 when the record lacks it)."""
        return _seconds(self.data.get("started"))

    @property
    def finished(self) -> float:
        return _seconds(self.data.get("finished"))

    @property
    def results(self) -> list[Result]:
        """The results as the contract's type. An entry that is no result (damaged, cut
        short) is an ERROR result saying so, never dropped: a record with an unreadable
        result never reads as one that passed."""
        res = self.data.get("results")
        return [_result(self.path, i, r) for i, r in enumerate(res)] \
            if isinstance(res, list) else []

    def result(self, check: str) -> Result | None:
        """The result for `check`, or None where the run has none."""
        return next((r for r in self.results if r.check == check), None)

    @property
    def outcome(self) -> Verdict:
        """What the record supports: the worse of its verdict and its results' (a record
        without a verdict, or with a damaged result, is ERROR: never a pass)."""
        return worst([self.verdict if self.verdict is not None else Verdict.ERROR,
                      *(r.verdict for r in self.results)])


@dataclass(frozen=True)
class HostRecord(Record):
    """One host's saved record of one validation run."""

    @property
    def host(self) -> str:
        return str(self.data.get("host") or self.path.parent.name)

    @property
    def suite(self) -> str | None:
        return self.data.get("suite")

    @property
    def run(self) -> RunDir:
        return RunDir(self.path.parent.parent)

    @property
    def status(self) -> str | None:
        """How the host's run ended ("done" when it ran to its end)."""
        status = self.data.get("status")
        return str(status) if status is not None else None

    @property
    def identity(self) -> dict[str, Any] | None:
        """The hardware identity hardware.inventory read (None: not read)."""
        ident = self.data.get("identity")
        return ident if isinstance(ident, dict) and ident else None

    @property
    def stack(self) -> str | None:
        """The name of the stack the run judged the host against."""
        stack = self.data.get("stack")
        return str(stack) if stack else None


def recorded_plan(run: RunDir, host: str) -> Plan | None:
    """The plan the run sent to `host`, as recorded at its start (None for runs made
    before inputs were recorded)."""
    p = run.plan_file(host)
    if not p.is_file():
        return None
    return Plan.from_dict(json.loads(p.read_text()))


def verdict_of(value: Any) -> Verdict | None:
    """A verdict as written in a record (its name), or None where it is none."""
    return Verdict.__members__.get(value) if isinstance(value, str) else None


def _result(path: Path, index: int, raw: Any) -> Result:
    try:
        if isinstance(raw, dict):
            # The record's schema already says what its entries are: an entry without a
            # schema or a summary of its own still reads; one without a check or a
            # verdict does not.
            return Result.from_dict({"schema": RESULT_SCHEMA, "summary": "", **raw}
                                    if raw.get("schema") is None else raw)
        problem = f"a {type(raw).__name__}, not a result"
    except (KeyError, TypeError, ValueError) as exc:
        problem = str(exc)
    check = raw.get("check") if isinstance(raw, dict) else None
    return error_result(str(check) if isinstance(check, str) and check else "record",
                        f"{path}: result {index + 1} is unreadable ({problem})",
                        fault_code="NC-RECORD-DAMAGED",
                        remediation="re-run the validation for this host")


def _seconds(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def read_host_record(path: Path) -> HostRecord:
    """A host record, or RunDirError naming the file when it is unreadable or not one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path}: not readable JSON ({exc})",
                          hint="re-run the validation for this host") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise RunDirError(f"{path}: not a nodecert host result (schema "
                          f"{data.get('schema') if isinstance(data, dict) else None!r})")
    return HostRecord(path, data)


def host_records(run: RunDir) -> list[HostRecord]:
    """Every host record of a run, strictly: one damaged record is an error."""
    return [read_host_record(p) for p in sorted(run.path.glob(f"*/{RESULTS}"))]


def run_hosts(run: RunDir) -> list[str]:
    """Every host of a validation run, in name order: a sliced run's from its slicing
    (hosts whose slice never came included), another's from the records it holds."""
    if run.slicing.is_file():
        try:
            hosts = json.loads(run.slicing.read_text())["hosts"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunDirError(f"{run.slicing}: unreadable ({exc})",
                              hint="a run's slicing is written by its first slice; start "
                                   "the run again under a new --run-id") from None
        return sorted(str(h) for h in hosts)
    return sorted(p.parent.name for p in run.path.glob(f"*/{RESULTS}"))


def finished_records(run: RunDir, hosts: list[str]) -> tuple[list[HostRecord],
                                                             dict[str, str]]:
    """The records of these hosts that their run finished, strictly (a damaged record is
    an error); and, for each other host, why it has none yet."""
    records: list[HostRecord] = []
    why: dict[str, str] = {}
    for host in sorted(hosts):
        path = run.results(host)
        if not path.is_file():
            why[host] = (f"no record in {run.path.name}: its validation never ran it (run "
                         "`nodecert runs merge` on a sliced run whose slice was lost)")
            continue
        rec = read_host_record(path)
        if rec.status in (None, "pending", "running"):
            why[host] = (f"its record in {run.path.name} is unfinished (status "
                         f"{rec.status}): its validation has not ended")
            continue
        records.append(rec)
    return records, why


def finished_run(run_dir: Path) -> list[HostRecord]:
    """The records of a validation run that ended (its summary written): what certify
    signs. RunDirError when the directory is not that, saying what to run instead."""
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory",
                          hint="pass the run directory `nodecert validate` printed "
                               "(runs/<run id>)")
    run = RunDir(run_dir)
    if not run.summary.is_file():
        raise RunDirError(f"{run_dir} has no validate.json: not a finished validation run",
                          hint="run `nodecert validate` (or wait for it to finish), then "
                               "certify the directory it prints")
    records = host_records(run)
    if not records:
        raise RunDirError(f"{run_dir} holds no <host>/{RESULTS}",
                          hint="the validation reached no host; fix that and re-run it")
    return records


def host_history(runs_dir: Path, host: str) -> Iterator[HostRecord]:
    """The host's record in every run under runs_dir that holds one, by run; a record
    being written or damaged is not history and is skipped."""
    for run in runs_under(runs_dir):
        path = run.results(host)
        if path.is_file():
            try:
                yield read_host_record(path)
            except RunDirError:
                continue


@dataclass(frozen=True)
class GroupRecord(Record):
    """A cluster or rack run's saved record: its verdict and results typed like a host's;
    the measurements it holds (pairings, the fabric, the rack's components) in `data`,
    as the run recorded them."""

    @property
    def run_dir(self) -> Path:
        """The run's directory (where its record, its nodes' runs and its page are)."""
        return self.path.parent

    @property
    def rack_name(self) -> str | None:
        """A rack run's rack (None for a cluster run)."""
        rack = self.data.get("rack")
        name = rack.get("name") if isinstance(rack, dict) else None
        return str(name) if name else None

    @property
    def not_judged(self) -> list[str]:
        """What the run could not judge, each with why (not a reason for NOT READY, and
        never a pass: the record and the certificate list it)."""
        said = self.data.get("not_judged")
        return [str(n) for n in said] if isinstance(said, list) else []

    @property
    def seconds(self) -> dict[str, float]:
        """The run's wall times by stage, as recorded."""
        got = self.data.get("seconds")
        return {str(k): _seconds(v) for k, v in got.items()} if isinstance(got, dict) else {}

    @property
    def nodes(self) -> list[str]:
        nodes = self.data.get("nodes")
        return [str(n) for n in nodes] if isinstance(nodes, list) else []

    @property
    def culprits(self) -> list[str]:
        """The nodes the run named as the cause of what failed."""
        named = self.data.get("culprits")
        return [str(n) for n in named] if isinstance(named, list) else []

    @property
    def pairs(self) -> list[dict[str, Any]]:
        """A cluster run's pairings as recorded (none where it stopped before them)."""
        pairs = self.data.get("pairs")
        return [p for p in pairs if isinstance(p, dict)] if isinstance(pairs, list) else []

    @property
    def measured(self) -> bool:
        """Whether the run reached its jobs (one stopped before them records its
        problems, no pairings)."""
        return "pairs" in self.data


def read_cluster_record(run_dir: Path) -> GroupRecord:
    """A cluster run's record, or RunDirError."""
    path = RunDir(run_dir).cluster_results
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{run_dir} is not a cluster run ({exc})",
                          hint="pass the directory `nodecert cluster validate` printed") from exc
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: not a cluster run record",
                          hint="pass the directory `nodecert cluster validate` printed")
    return GroupRecord(path, data)


RACK_SCHEMA = "nodecert.rack-run/v1"


def read_rack_record(run_dir: Path) -> GroupRecord:
    """A rack run's record, or RunDirError."""
    try:
        rec = read_cluster_record(run_dir)
    except RunDirError as exc:
        raise RunDirError(exc.what.replace("cluster run", "rack run"),
                          hint="pass the directory `nodecert rack validate` printed") from exc
    if rec.data.get("schema") != RACK_SCHEMA:
        raise RunDirError(f"{run_dir}: not a rack run (schema {rec.data.get('schema')!r})",
                          hint="pass the directory `nodecert rack validate` printed")
    return rec


__all__ = ["RACK_SCHEMA", "SCHEMA", "GroupRecord", "HostRecord", "Record", "finished_records",
           "finished_run", "host_history", "host_records", "read_cluster_record",
           "read_host_record", "read_rack_record", "recorded_plan", "run_hosts", "verdict_of"]
