"""A validation run split into slices: each slice one controller process (a task of a
Slurm job array, or any other engine's) for its share of the inventory, all writing
into one run directory on shared storage; the merge makes them one run again.

    runs/<run id>/inputs/slicing.json   every host of the run and its slice (each
                                         slice writes the same; a slicing that differs
                                         from the one there is refused)
    runs/<run id>/slices/<k>-of-<n>.json a slice's summary, once it ended
    runs/<run id>/validate.json         the merged run's summary (the merge writes it)

Where each of these lives is runs/layout.py. A slice's hosts are every n-th of the
run's hosts in name order, starting at the k-th: the same inventory always slices the
same way, and a re-run of slice k replaces only its hosts' records. The merge reads
every host's record; a host whose slice never wrote one, or whose record was left
unfinished (its slice killed), is ERROR "not run" with each planned check, never absent
and never a pass.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError
from nodecert.runs.layout import RUN_ID, RunDir, RunDirError
from nodecert.runs.records import SCHEMA
from nodecert.runs.store import write_json
from nodecert_node.contract import Verdict, error_result, worst

NOT_RUN_CODE = "NC-NOT-RUN-SLICE"


@dataclass(frozen=True)
class Slice:
    """Slice k of n (1 <= k <= n) of one run, named by its id."""

    k: int
    n: int
    run_id: str

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.n:
            raise InventoryError(f"slice {self.k} of {self.n} does not exist",
                                 hint="--slice K/N with 1 <= K <= N, e.g. --slice 3/8")
        if not RUN_ID.match(self.run_id) or self.run_id.startswith(("cluster-", "rack-")):
            raise InventoryError(f"run id {self.run_id!r} is not a validation run's id",
                                 hint="every slice of a run takes the same --run-id, e.g. "
                                      "$(date +%Y%m%d-%H%M%S)-$(openssl rand -hex 3)")

    @classmethod
    def parse(cls, text: str, run_id: str | None,
              env: dict[str, str] | None = None) -> Slice:
        """`K/N`, or `auto`: the task of a Slurm job array (its index within the array,
        from 1, and the array's task count), whatever index the array starts at."""
        if not run_id:
            raise InventoryError("a slice needs the run's id: every slice of a run writes "
                                 "into the same run directory",
                                 hint="--run-id ID, the same for every slice")
        if text == "auto":
            e = dict(os.environ) if env is None else env
            try:
                k = int(e["SLURM_ARRAY_TASK_ID"]) - int(e["SLURM_ARRAY_TASK_MIN"]) + 1
                n = int(e["SLURM_ARRAY_TASK_COUNT"])
            except (KeyError, ValueError) as exc:
                raise InventoryError("--slice auto is for a task of a Slurm job array: "
                                     f"{exc} is not set to a number here",
                                     hint="sbatch --array=1-N ... nodecert validate "
                                          "--slice auto, or --slice K/N") from None
            return cls(k, n, run_id)
        m = re.fullmatch(r"([0-9]+)/([0-9]+)", text.strip())
        if not m:
            raise InventoryError(f"slice {text!r} is not K/N", hint="--slice 3/8 or --slice auto")
        return cls(int(m.group(1)), int(m.group(2)), run_id)

    def hosts(self, names: list[str]) -> list[str]:
        """This slice's share of the run's hosts: every n-th in name order from the k-th."""
        return [h for i, h in enumerate(sorted(names)) if i % self.n == self.k - 1]


def join(run: RunDir, sl: Slice, hosts: list[str]) -> None:
    """Open the run directory for this slice: made by the first slice to come, and the
    run's slicing recorded; a run sliced otherwise (another count, other hosts) is
    refused before anything is written."""
    want = {"schema": "nodecert.slicing/v1", "run_id": sl.run_id, "of": sl.n,
            "hosts": {h: k for k in range(1, sl.n + 1)
                      for h in Slice(k, sl.n, sl.run_id).hosts(hosts)}}
    if run.slicing.exists():
        try:
            have = json.loads(run.slicing.read_text())
        except (OSError, ValueError) as exc:
            raise RunDirError(f"{run.slicing}: unreadable ({exc})",
                             hint="a run's slicing is written once, by its first slice; "
                                  "start the run again under a new --run-id") from None
        if have != want:
            raise RunDirError(f"run {sl.run_id} was sliced otherwise ({have.get('of')} "
                             f"slices of {len(have.get('hosts') or {})} hosts; this one is "
                             f"{sl.n} of {len(hosts)})",
                             hint="give every slice of a run the same inventory, --limit "
                                  "and slice count; or a new --run-id")
    run.path.mkdir(parents=True, exist_ok=True)
    run.slices.mkdir(exist_ok=True)
    run.make_inputs()
    if not run.slicing.exists():
        write_json(run.slicing, want, private=True)


def _lost_record(host: str, run_id: str, record: dict[str, Any] | None, *,
                 spec: dict[str, Any], checks: list[str], why: str) -> dict[str, Any]:
    """A host's record as the merge leaves it when its slice did not finish it: what it
    had (if anything), every planned check without a result ERROR "not run"."""
    rec = dict(record or {})
    results = [r for r in rec.get("results") or [] if isinstance(r, dict)]
    have = {r.get("check") for r in results}
    simulated = bool(rec.get("simulated", spec.get("simulated", False)))
    for check in checks:
        if check not in have:
            results.append(error_result(
                check, f"not run: {why}", fault_code=NOT_RUN_CODE,
                remediation="Re-run this host's slice (the same --run-id and --slice), "
                            "then `nodecert runs merge`.").with_(simulated=simulated)
                .as_dict())
    rec.update({"schema": SCHEMA, "host": host, "run_id": run_id, "status": "lost",
                "error": why, "verdict": Verdict.ERROR.name, "simulated": simulated,
                "results": results})
    rec.setdefault("spec", spec)
    return rec


@dataclass(frozen=True)
class Merged:
    summary: dict[str, Any]
    lost: tuple[str, ...]  # hosts the merge recorded as not run
    slices_missing: tuple[int, ...]

    @property
    def verdict(self) -> Verdict:
        return Verdict[self.summary["verdict"]]


def merge(run_dir: Path) -> Merged:
    """One run of a sliced run's slices: validate.json over every host of the run; a host
    without a finished record is recorded as not run (ERROR). A re-run merge gives the
    same run; after a slice was run again, its hosts' new records."""
    run = RunDir(run_dir.resolve())
    try:
        slicing = json.loads(run.slicing.read_text())
        suite = json.loads(run.suite_input.read_text())
        specs = json.loads(run.inventory_input.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{run.path} is not a sliced run whose inputs can be read: {exc}",
                         hint="`nodecert runs merge` takes the directory every slice of "
                              "one --run-id wrote into") from None
    n = int(slicing["of"])
    run_id = str(slicing["run_id"])
    missing = tuple(k for k in range(1, n + 1) if not run.slice_summary(k, n).is_file())
    hosts: dict[str, dict[str, Any]] = {}
    lost: list[str] = []
    for host, k in sorted(slicing["hosts"].items()):
        path = run.results(host)
        try:
            record: dict[str, Any] | None = json.loads(path.read_text())
        except FileNotFoundError:
            record = None
        except (OSError, ValueError):
            record = None  # cut short when its slice was killed: not a result
        if record is None or record.get("status") in ("pending", "running"):
            plan = run.plan_file(host)
            checks = list(suite.get("checks") or [])
            if plan.is_file():
                checks = list(json.loads(plan.read_text()).get("checks") or checks)
            why = (f"slice {k} of {n} ended before this host finished"
                   if record is not None else f"slice {k} of {n} never ran this host")
            record = _lost_record(host, run_id, record, spec=specs.get(host) or {},
                                  checks=checks, why=why)
            # Not synced one by one (thousands of fsyncs were most of a large merge's
            # time): the merge derives these from what the slices left, and a merge run
            # again writes them again; the summary below is synced.
            write_json(path, record, interim=True)
            lost.append(host)
        verdicts = [Verdict[str(record.get("verdict"))]] if record.get("verdict") in \
            Verdict.__members__ else [Verdict.ERROR]
        counts: dict[str, int] = {}
        for r in record.get("results") or []:
            v = str(r.get("verdict"))
            counts[v] = counts.get(v, 0) + 1
        hosts[host] = {"verdict": worst(verdicts).name, "status": record.get("status"),
                       "error": record.get("error", ""),
                       "simulated": bool(record.get("simulated")),
                       "counts": " ".join(f"{c} {v}" for v, c in sorted(counts.items())),
                       "results": str(path), "slice": k}
    verdict = worst(Verdict[h["verdict"]] for h in hosts.values()) if hosts else Verdict.ERROR
    summary = {"schema": "nodecert.validation-run/v1", "run_dir": str(run.path),
               "suite": suite.get("name"), "interrupted": bool(missing or lost),
               "verdict": verdict.name, "slices": n,
               "slices_missing": list(missing), "hosts": hosts}
    write_json(run.summary, summary)
    return Merged(summary, tuple(lost), missing)


def finish(run: RunDir, sl: Slice, summary: dict[str, Any]) -> Merged | None:
    """Record that slice `sl` ended with `summary`; the merged run when it was the last
    to end (each slice may merge: the merge gives the same run), else None. Written
    again after a slice added results to its hosts (revalidate's drift): the merge then
    reads them."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # what this slice's controller held and spent: a slice holds its share of the fleet,
    # never the whole (the figures a site sizes its array's jobs by)
    write_json(run.slice_summary(sl.k, sl.n), {
        **summary, "controller": {"host": socket.gethostname(),
                                  "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}})
    if all(run.slice_summary(k, sl.n).is_file() for k in range(1, sl.n + 1)):
        return merge(run.path)
    return None


__all__ = ["NOT_RUN_CODE", "Merged", "Slice", "finish", "join", "merge"]
