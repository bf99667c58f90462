"""Collect the runs nodes made on their own (the timer, after a package update) into a
validation run directory, so they are judged, compared and certified like any other.

A node's scheduled run gathers stack.conformance and stack.advisories but cannot judge
them (the stack manifest and the security bulletins live on the control side);
collecting judges them here, and the run then goes
through drift and `certify` like a run `nodecert validate` made. The node's record is
untrusted input: a JSON object of the known schema, valid Results of planned checks, no
NaN/Infinity, at most 16 MiB; anything else makes that host ERROR with the reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodecert.core import checks
from nodecert.inventory.reader import Inventory, resolve
from nodecert.runs.store import HostLink, HostRun, ValidationRun, write_json
from nodecert.transport.become import BecomeSource
from nodecert.transport.events import MAX_LINE, BadEvent, decode_event
from nodecert.validation.echoes import held_to_plan
from nodecert.validation.nodecmd import adopt_stack
from nodecert.validation.run import ValidateRequest, open_new_run
from nodecert.validation.runner import HostUnreachable, Runner, runner_class

HISTORY = "/var/lib/nodecert/history"
RECORD_SCHEMA = "nodecert.local-run/v1"
FETCH_TIMEOUT_S = 60.0


def fetch_command(reason: str) -> str:
    """Print the newest history file's path, then the file (nothing when there is none)."""
    pattern = f"{HISTORY}/*.json" if reason == "any" else f"{HISTORY}/*-{reason}-*.json"
    return (f"f=$(ls -1 {pattern} 2>/dev/null | sort | tail -n 1); "
            f'[ -n "$f" ] && echo "$f" && head -c {MAX_LINE + 1} "$f"')


def read_record(raw: bytes, checks: list[str]) -> tuple[str, dict[str, Any]]:
    """(history path, record with Result objects). Pure; raises BadEvent naming the fault."""
    path, _, body = raw.partition(b"\n")
    if not path.strip():
        raise BadEvent("the node has no scheduled run in its history yet", "")
    if len(body) > MAX_LINE:
        raise BadEvent("the history record is larger than 16 MiB", body[:2000].decode(
            "utf-8", "replace"))
    shown = body[:2000].decode("utf-8", "replace")
    try:
        rec = json.loads(body.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeError, ValueError) as exc:
        raise BadEvent(f"the history record is not JSON: {exc}", shown) from exc
    if not isinstance(rec, dict) or rec.get("schema") != RECORD_SCHEMA:
        raise BadEvent(f"not a {RECORD_SCHEMA} record", shown)
    results = []
    for r in rec.get("results") or []:
        ev = decode_event(json.dumps({"event": "result", "result": r}).encode(), checks)
        results.append(ev["result"])
    for key in ("started", "finished"):
        if not isinstance(rec.get(key), (int, float)):
            raise BadEvent(f"the record has no {key} time", shown)
    return path.decode("utf-8", "replace").strip(), dict(rec, results=results)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a number a node may send")


def collect_host(hr: HostRun, runner: Runner, reason: str, job: str | None = None) -> None:
    """Fill hr from the node's newest scheduled run, read through `runner` (or say why it
    cannot); with job, only the run that job started will do (an older record is not
    this run's)."""
    try:
        # as validate does: a host given no stack is judged against the one its
        # provisioning recorded on it (a held driver that changed is then drift)
        got = runner.fetch(hr, fetch_command(reason), limit=MAX_LINE + 4096,
                           timeout=FETCH_TIMEOUT_S, recorded_stack=hr.stack is None)
        path, rec = read_record(got.raw, hr.checks)
        recorded = got.recorded
    except HostUnreachable as exc:
        hr.status, hr.error = "unreachable", exc.reason
        hr.finish_missing(f"host unreachable: {hr.error}", "NC-HOST-UNREACHABLE")
        return
    except (OSError, TimeoutError) as exc:
        hr.status, hr.error = "lost", f"reading the node's history failed: {exc}"
        hr.finish_missing(hr.error, "NC-HOST-LOST")
        return
    except BadEvent as exc:
        hr.status, hr.error = "lost", f"the node's scheduled run cannot be used: {exc}"
        hr.finish_missing(hr.error, "NC-NOT-COLLECTED")
        return
    if job is not None and rec.get("job") != job:
        hr.status = "lost"
        hr.error = (f"job {job} left no record on the node (its newest {reason} run, {path}, "
                    f"is {'of job ' + str(rec.get('job')) if rec.get('job') else 'no job'}'s)")
        hr.finish_missing(hr.error, "NC-NOT-COLLECTED")
        return
    if recorded is not None:
        adopt_stack(hr, recorded)
    hr.started, hr.finished = float(rec["started"]), float(rec["finished"])
    hr.simulated = bool(rec.get("simulated"))
    hr.node = {"collected_from": path, "reason": rec.get("reason"), "host": rec.get("host")}
    here, ctx = checks.judged_here(), checks.JudgeContext(hr.host, hr.stack, hr.plan.spec)
    hr.results = [checks.judge(r, ctx) if r.check in here else held_to_plan(r, hr.plan)
                  for r in rec["results"]]
    if rec.get("skipped") or rec.get("crashed") or rec.get("error"):
        hr.status = "lost"
        hr.error = f"the node's run of {path} did not complete: " + str(
            rec.get("skipped") or rec.get("error") or "crashed")
        # An idle check that gave way to a job did what it must: not measured this time.
        hr.finish_missing(hr.error + ("; not measured this time" if rec.get("yielded") else ""),
                          "NC-IDLE-YIELDED" if rec.get("yielded") else "NC-NOT-RUN")
        return
    hr.status = "done"
    hr.finish_missing("the node's scheduled run did not report this check", "NC-NOT-REPORTED")


def collect(inventory: Path | Inventory, *, suite: str = "quick", limit: tuple[str, ...] = (),
            stack: str | None = None, runs_dir: Path = Path("runs"),
            checks: tuple[str, ...] = (), suite_file: Path | None = None,
            reason: str = "any",
            progress: Callable[[str], None] | None = None,
            become: BecomeSource | None = None, jobs: dict[str, str] | None = None,
            failures: dict[str, str] | None = None,
            runner_name: str = "ssh") -> ValidationRun:
    """A run directory holding each host's newest scheduled run (`reason`: after-update,
    timer, slurm or any), judged on the control side; nothing is run on the nodes.

    jobs: host -> the scheduler job whose record alone will do for it; failures: host ->
    why its job did not run (that host is ERROR with the reason, nothing is fetched)."""
    inventory = resolve(inventory)
    say = progress or (lambda line: None)
    made: list[Runner] = []

    def make_runner(runs: dict[str, HostRun], links: dict[str, HostLink]) -> None:
        # the runner that reaches the nodes reads their history too (before anything is
        # written: one that cannot reach them at all leaves no run behind)
        made.append(runner_class(runner_name).for_run(inventory, runs, links, say,
                                                      threading.Event(), become=become))
    run = open_new_run(ValidateRequest(inventory, suite=suite, limit=limit, stack=stack,
                       runs_dir=runs_dir, checks=checks, become=become,
                       suite_file=suite_file), before_write=make_runner)
    runner = made[0]
    try:
        _collect_all(run, runner, reason, jobs=jobs, failures=failures, say=say)
    finally:
        runner.close()
    write_json(run.dir.summary, run.summary())
    return run


def _collect_all(run: ValidationRun, runner: Runner, reason: str, *,
                 jobs: dict[str, str] | None, failures: dict[str, str] | None,
                 say: Callable[[str], None]) -> None:
    for name, hr in sorted(run.hosts.items()):
        if failures and name in failures:
            hr.status, hr.error = "lost", failures[name]
            hr.finish_missing(hr.error, "NC-NOT-RUN")
        else:
            collect_host(hr, runner, reason, (jobs or {}).get(name))
        hr.save()
        say(f"{name:<14} {hr.verdict.name:<6} "
            + (hr.error or f"collected {hr.node.get('collected_from')} "
                            f"({hr.node.get('reason')})"))


__all__ = ["HISTORY", "collect", "collect_host", "fetch_command", "read_record"]

