"""Re-validation: validate again, compare each node with its certified baseline,
record the differences as Results in the new run, and certify the new run.

The baseline is a set of certificates (a reports directory, or a run directory
holding one) verified with the trusted keys before anything in it is used; an
uncertified run directory (results.json only) is accepted as a baseline too, and
the drift results say which run they compare against.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nodecert.certs import revocations as revlist
from nodecert.certs.certify import PAYLOAD_TYPE, CertifyRun, certify
from nodecert.certs.signing import PrivateKey, PublicKey, SignatureError, verify_envelope
from nodecert.certs.sliced import certify_slice
from nodecert.certs.verify import ReportError, read_envelope
from nodecert.core.errors import NodecertError
from nodecert.fleet import judging as fleet_judging
from nodecert.fleet.baseline import Baseline
from nodecert.inventory.engine import slurm_launcher
from nodecert.inventory.reader import resolve
from nodecert.profiles import thresholds
from nodecert.revalidate import drift
from nodecert.revalidate import repair as repairgate
from nodecert.revalidate.collect import collect
from nodecert.revalidate.slurm import REASON as SLURM_REASON
from nodecert.revalidate.slurm import submit
from nodecert.runs.layout import CERT_SUFFIX, RunDir, RunDirError, runs_under
from nodecert.runs.records import host_records
from nodecert.runs.store import write_json
from nodecert.validation import slices
from nodecert.validation.run import ValidateRequest, ValidationRun, validate
from nodecert_node.contract import Result, Verdict


class BaselineError(NodecertError):
    """A baseline that cannot be read or does not verify."""


def _envelopes(path: Path) -> list[Path]:
    """The certificates of a reports directory, or of a run directory's reports."""
    for d in (path, RunDir(path).reports):
        found = sorted(d.glob(f"*{CERT_SUFFIX}"))
        if found:
            return found
    return []


def _accepted(p: dict[str, Any]) -> bool:
    """An acceptance certificate (READY, its run accepted), not a health record."""
    return p.get("verdict") == "READY" and bool((p.get("acceptance") or {}).get("accepted"))


def load_baseline(path: Path, trusted: list[PublicKey]) -> dict[str, drift.Record]:
    """host -> record, from verified certificates or from a run's results.json. A record
    from a certificate says whether it was an acceptance certificate ("accepted")."""
    if not path.is_dir():
        raise BaselineError(f"baseline {path} is not a directory",
                            hint="pass a reports directory (runs/<run>/reports) or a run "
                                 "directory")
    out: dict[str, drift.Record] = {}
    envs = _envelopes(path)
    for env_path in envs:
        try:
            env = read_envelope(env_path)
            ptype, payload, _ = verify_envelope(env, trusted)
        except (ReportError, ValueError) as exc:
            raise BaselineError(f"baseline certificate {env_path} is unreadable: {exc}") from exc
        except SignatureError as exc:
            raise BaselineError(f"baseline certificate {env_path} does not verify: {exc}",
                                hint="give the signer's public key (--pubkey) or the key "
                                     "that signed it (--key); never compare against an "
                                     "unverified certificate") from exc
        if ptype != PAYLOAD_TYPE:
            raise BaselineError(f"{env_path}: payload type {ptype}, expected {PAYLOAD_TYPE}")
        p = json.loads(payload)["predicate"]
        out[str(p["host"])] = {**drift.record_of(p), "accepted": _accepted(p)}
    if envs:
        return out
    try:
        records = host_records(RunDir(path))
    except RunDirError as exc:
        raise BaselineError(f"baseline {exc.what}", hint=exc.hint) from exc
    for rec in records:
        out[rec.host] = drift.record_of(rec.data)
    if not out:
        raise BaselineError(f"{path} holds no certificates and no <host>/results.json",
                            hint="pass the reports directory `nodecert certify` wrote")
    return out


def _reports_dirs(runs_dir: Path, exclude: str | None = None) -> list[Path]:
    """The reports directories under runs_dir (certify's default output), newest first;
    never the run `exclude` names (a sliced run in progress: its own slices' certificates
    are not its baseline)."""
    found = [run.reports for run in runs_under(runs_dir)
             if run.run_id != exclude and _envelopes(run.reports)]
    return sorted(found, key=lambda d: d.stat().st_mtime, reverse=True)


def latest_baseline(runs_dir: Path) -> Path | None:
    """The newest reports directory under runs_dir (certify's default output)."""
    found = _reports_dirs(runs_dir)
    return found[0] if found else None


def acceptance_baseline(runs_dir: Path, trusted: list[PublicKey], exclude: str | None = None
                        ) -> tuple[dict[str, drift.Record], Path | None]:
    """Each node's baseline under runs_dir: its newest acceptance certificate, so that a
    health record (a quick run between acceptance runs) never becomes what drift is
    judged against; a node that has none keeps its newest certificate. The newest
    reports directory is read strictly (a certificate there that does not verify stops
    the run); older ones are searched only for acceptance certificates, and one that
    does not verify there is passed over, never compared with."""
    dirs = _reports_dirs(runs_dir, exclude)
    if not dirs:
        return {}, None
    base = load_baseline(dirs[0], trusted)
    wanted = {h for h, rec in base.items() if not rec.get("accepted")}
    for d in dirs[1:]:
        if not wanted:
            break
        for env_path in _envelopes(d):
            try:
                ptype, payload, _ = verify_envelope(read_envelope(env_path), trusted)
                p = json.loads(payload)["predicate"] if ptype == PAYLOAD_TYPE else {}
            except (ReportError, ValueError, SignatureError, KeyError, TypeError):
                continue
            host = str(p.get("host"))
            if host in wanted and _accepted(p):
                base[host] = {**drift.record_of(p), "accepted": True}
                wanted.discard(host)
    return base, dirs[0]


@dataclass
class Revalidation:
    run: ValidationRun
    baseline: Path | None
    drift: dict[str, list[Result]] = field(default_factory=dict)
    fleet: dict[str, list[Result]] = field(default_factory=dict)
    repair: dict[str, Result] = field(default_factory=dict)
    cert: CertifyRun | None = None

    @property
    def regressed(self) -> bool:
        return any(r.verdict >= Verdict.FAIL for rs in self.drift.values() for r in rs)

    @property
    def repair_failed(self) -> bool:
        return any(r.verdict >= Verdict.FAIL for r in self.repair.values())


@dataclass(frozen=True)
class RevalidateRequest:
    """What `nodecert revalidate` is asked to do: the validation to run (or whose settings
    a collected run is judged with), the key that signs the new certificates and the keys
    trusted for the baseline's.

    baseline: the certified run to compare with (default: the newest under runs_dir).
    collect_reason: instead of validating, collect each node's newest scheduled run of
    that reason (after-update, timer, any) and judge, compare and certify it. via_slurm:
    start each node's own run as a Slurm job (started within slurm_wait_s), then collect
    that run."""

    validation: ValidateRequest
    key: PrivateKey
    trusted: list[PublicKey]
    baseline: Path | None = None
    collect_reason: str | None = None
    via_slurm: bool = False
    slurm_wait_s: float = 1800.0
    idle: bool = False  # Slurm jobs that give way within seconds to preemption/GPU jobs
    slurm_partition: str | None = None  # the idle checks' own (lowest-tier) partition
    slurm_reservation: str | None = None  # or a reservation the site names
    fleet_baseline: Baseline | None = None  # also judge each node against its peers
    after_repair: bool = False  # re-test what failed, under load, and gate on it


def revalidate(request: RevalidateRequest, *,
               progress: Callable[[str], None] | None = None) -> Revalidation:
    """Validate again (or collect), compare every host with its certified baseline and
    certify the new run."""
    v = request.validation
    if v.slice is not None and (request.via_slurm or request.collect_reason):
        raise NodecertError("a slice of a re-validation validates its share of the hosts: "
                            "it does not collect runs the nodes made on their own",
                            hint="drop --slice, or --via-slurm/--collect")
    v = replace(v, inventory=resolve(v.inventory))  # read once, for every step below
    runs_dir = v.runs_dir
    if request.baseline is not None:
        base_dir: Path | None = request.baseline
        base = load_baseline(request.baseline, request.trusted)
    else:
        base, base_dir = acceptance_baseline(runs_dir, request.trusted,
                                             v.slice.run_id if v.slice else None)
    run, failing = _new_run(request, v, progress)
    out = Revalidation(run, base_dir)
    for name, hr in sorted(run.hosts.items()):
        new = drift.record_of(hr.as_dict())
        if name not in base:
            res = [Result("drift.baseline", Verdict.WARN, "no certified baseline for this "
                          "host: nothing to compare with (this run becomes its baseline)")]
        else:
            # Judged with the thresholds this run used (recorded in its plan).
            res = drift.compare(base[name], new, hr.plan.limits())
        res = [r.with_(simulated=hr.simulated) for r in res]
        out.drift[name] = res
        hr.results.extend(res)
        if hr.status == "done":
            # fleet.trend over the node's own runs; fleet.peers with a fleet baseline
            fl = fleet_judging.host_results(hr, baseline=request.fleet_baseline,
                                            runs_dir=runs_dir)
            out.fleet[name] = fl
            hr.results.extend(fl)
        if request.after_repair:
            before_run, failed = failing.get(name, (None, []))
            g = repairgate.gate(hr.results, failed, before_run, tuple(hr.plan.checks)).with_(
                simulated=hr.simulated)
            out.repair[name] = g
            hr.results.append(g)
        hr.save()
    if request.after_repair:
        _slurm_gate(replace(request, validation=v), out, progress)
    # entered on the list next to the runs: a repaired node's new certificate supersedes
    # the one it had, for every verifier given that list
    listed = runs_dir / revlist.DEFAULT_NAME
    if v.slice is None:
        write_json(run.dir.summary, run.summary())
        out.cert = certify(run.run_dir, request.key, revocations=listed)
    else:
        # the slice's summary again, with the comparisons in it; the last slice merges
        slices.finish(run.dir, v.slice, run.summary())
        out.cert = certify_slice(run.run_dir, request.key, v.slice, finished=False,
                                 revocations=listed).run
    return out


def _new_run(request: RevalidateRequest, v: ValidateRequest,
             progress: Callable[[str], None] | None) -> tuple[
        ValidationRun, dict[str, tuple[str | None, list[str]]]]:
    """The run to compare with the baseline: through Slurm, collected from the nodes'
    own timers, the loaded re-test after a repair (with what failed before), or a new
    validation."""
    inventory, suite, limit, stack, runs_dir, checks, become = (
        v.inventory, v.suite, v.limit, v.stack, v.runs_dir, v.checks, v.become)
    if request.via_slurm:
        launch, engine_names = slurm_launcher(inventory, limit, become,
                                              partition=request.slurm_partition,
                                              reservation=request.slurm_reservation)
        sub = submit(launch, engine_names, suite=suite, start_within_s=request.slurm_wait_s,
                     progress=progress, idle=request.idle)
        failures = {h: why for h in engine_names if (why := sub.failure(h))}
        run = collect(inventory, suite=suite, limit=limit, stack=stack, runs_dir=runs_dir,
                      checks=checks, suite_file=v.suite_file, reason=SLURM_REASON,
                      progress=progress, become=become,
                      jobs={h: r.job.name for h, r in sub.jobs.items()}, failures=failures)
    elif request.collect_reason:
        run = collect(inventory, suite=suite, limit=limit, stack=stack, runs_dir=runs_dir,
                      checks=checks, suite_file=v.suite_file,
                      reason=request.collect_reason, progress=progress, become=become)
    elif request.after_repair:
        return _retest(v, progress)
    else:
        run = validate(v, progress=progress)
    return run, {}


def _retest(v: ValidateRequest, progress: Callable[[str], None] | None) -> tuple[
        ValidationRun, dict[str, tuple[str | None, list[str]]]]:
    """The loaded re-test: each host's failing checks (from its newest run) and the
    loaded checks, of the suite asked for."""
    inventory = resolve(v.inventory)
    specs = inventory.hosts
    names = sorted(inventory.select(v.limit, list(specs)) if v.limit else specs)
    failing = {h: repairgate.failing_before(v.runs_dir, h) for h in names}
    suite = thresholds.suite(v.suite, v.suite_file)
    checks = repairgate.retest_checks(suite.checks, {h: f for h, (_, f) in failing.items()})
    if v.checks:
        checks = tuple(c for c in checks if c in v.checks)
    say = progress or (lambda line: None)
    for h, (rid, f) in sorted(failing.items()):
        say(f"{h:<14} after repair: re-testing " + (f"{', '.join(f)} (failed in {rid}) and "
                                                     if f else "") + "the loaded checks")
    return validate(replace(v, checks=checks), progress=progress), failing


def _slurm_gate(request: RevalidateRequest, out: Revalidation,
                progress: Callable[[str], None] | None) -> None:
    """Resume the nodes whose re-test passed (nodecert's drain only), drain those whose
    re-test failed: through the inventory's Slurm, where it has one."""
    v = request.validation
    try:
        launch, engine_names = slurm_launcher(v.inventory, v.limit, v.become)
    except NodecertError:
        return  # no Slurm in this inventory: the gate is the certificate's verdict
    say = progress or (lambda line: None)
    try:
        for host, g in sorted(out.repair.items()):
            node = engine_names.get(host, host)
            passed = g.verdict < Verdict.FAIL
            node_drains = out.run.hosts[host].node.get("slurm_drains") or {}
            ours = frozenset({r for n, r in repairgate.kept_drains(v.runs_dir).items()
                              if n == node} | {r for n, r in node_drains.items() if n == node})

            def record(reason: str | None, node: str = node) -> None:
                repairgate.keep_drain(v.runs_dir, node, reason)
            try:
                did = repairgate.apply_gate(launch.remote, node, passed,
                                            g.findings[0] if g.findings else g.summary,
                                            ours=ours, record=record)
            except RuntimeError as exc:
                # Said in the result: a node not resumed, or not drained, is the operator's
                # to fix by hand; nothing here pretends it happened.
                did = f"failed: {exc}"
            say(f"{host:<14} slurm: {did}")
            out.repair[host] = g.with_(
                summary=g.summary + (f" (Slurm: {did})" if did.startswith("failed") else ""),
                value={**(g.value or {}), "slurm": did})
            hr = out.run.hosts[host]
            hr.results = [out.repair[host] if r.check == repairgate.CHECK else r
                          for r in hr.results]
            hr.save()
    finally:
        launch.close()


__all__ = ["BaselineError", "RevalidateRequest", "Revalidation", "acceptance_baseline",
           "latest_baseline",
           "load_baseline", "revalidate"]
