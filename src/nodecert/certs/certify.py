"""Certificates: one signed in-toto Statement per node, from a validation run.

The Statement (in-toto Attestation Framework v1) names the node as its subject,
with the digest of its canonical hardware identity, and carries a nodecert
predicate: the verdict (READY only from an acceptance run: every planned check
reported, none FAILed or ERRORed, and every stage of the suite's acceptance profile was
measured at or above its minimum; HEALTHY for a health record: nothing failed, but the
run was not an acceptance run, or fell short of one; NOT READY otherwise), the
acceptance judgement with the stages a health record lacks, every Result with its
thresholds and evidence digests, the pinned stack and the software actually found,
the digests of the threshold files, the tool version, the validity window and the
SIMULATED flag. It is signed into a DSSE envelope (nodecert.certs.signing). A node that
is not READY gets a signed report that says NOT READY (or HEALTHY) and why.

The module is long because one signing pass holds together: each host's statement
(its readiness, its acceptance judgement from the run's recorded inputs, the cluster
link) is built inside the same error boundary that keeps one bad host from blocking
the others, and the revocation list is updated under one lock for all of them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert import __version__
from nodecert.certs import attestcheck, junit
from nodecert.certs import html as report_html
from nodecert.certs import revocations as revlist
from nodecert.certs.attested import attestation_summary
from nodecert.certs.identity import certificate_identity, identifies, identity_digest
from nodecert.certs.intoto import (
    CLUSTER_PREDICATE_TYPE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    RACK_PREDICATE_TYPE,
    STATEMENT_TYPE,
)
from nodecert.certs.runrecord import minimum_run_record
from nodecert.certs.signing import (
    PrivateKey,
    SignatureError,
    canonical_json,
    keyid,
    sign_envelope,
    verify_envelope,
)
from nodecert.core import checks
from nodecert.profiles import acceptance
from nodecert.runs.layout import CERT_SUFFIX, RunDir, RunDirError
from nodecert.runs.records import HostRecord, finished_run
from nodecert.stack.manifest import Stack, find_stack, load_stack
from nodecert_node.contract import Result, Verdict, write_atomic

READY, NOT_READY, HEALTHY = "READY", "NOT READY", "HEALTHY"
DEFAULT_VALID_DAYS = 90
# Evidence older than this is not certified: hardware and software drift (nodecert policy:
# a week covers a weekend of shipping between validation and signing).
DEFAULT_MAX_AGE_DAYS = 7.0
# Raw tool text stays in results.json (with its sha256 in the evidence digests):
# the certificate carries parsed facts, not verbatim logs.
_RAW_FACTS = ("conformance_output",)


class RunError(RunDirError):
    """A validation run directory that cannot be certified."""


def _iso(t: Any) -> Any:
    """Run times are Unix seconds in results.json; the certificate says them in UTC."""
    if isinstance(t, int | float) and t > 0:
        return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds")
    return t


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stack_pins(stack: Stack) -> dict[str, Any]:
    fw = stack.framework
    return {"name": stack.name, "title": stack.title, "driver": str(stack.driver),
            "kernel_modules": stack.kernel_modules,
            "fabric_manager": str(stack.fabric_manager) if stack.fabric_manager else None,
            "cuda": str(stack.cuda), "cudnn": str(stack.cudnn), "nccl": str(stack.nccl),
            "dcgm": str(stack.dcgm),
            "framework": {"pytorch": str(fw.pytorch) if fw.pytorch else None,
                          "tensorflow": fw.tensorflow},
            "manifest_sha256": _sha256_file(stack.path)}


def _settings(host: HostRecord, inputs: dict[str, str] | None) -> dict[str, Any]:
    """The run's own settings, for its run record: id, suite, times, what it was judged
    with."""
    return {"run_id": host.data.get("run_id"), "suite": host.suite,
            "started": _iso(host.data.get("started")),
            "finished": _iso(host.data.get("finished")),
            "inputs": dict(sorted((inputs or {}).items()))}


def _result_entry(r: Result) -> dict[str, Any]:
    return {"check": r.check, "verdict": r.verdict.name, "summary": r.summary,
            "value": r.value, "unit": r.unit,
            "thresholds": {k: t.as_dict() for k, t in sorted(r.thresholds.items())},
            "findings": list(r.findings), "fault_code": r.fault_code,
            "remediation": r.remediation, "duration_s": r.duration_s,
            "simulated": r.simulated,
            "facts": {k: v for k, v in r.facts.items() if k not in _RAW_FACTS},
            "evidence": [{"name": e.name, "command": e.command, "returncode": e.returncode,
                          "sha256": e.sha256} for e in r.evidence]}


def readiness(host: HostRecord,
              accepted: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """NOT READY unless the run finished, every planned check reported (the host verdict
    is ERROR otherwise), the hardware identity is known and nothing FAILed/ERRORed; then
    READY only where the acceptance judgement (acceptance.judge) accepted the run, else
    HEALTHY with the reasons it was not accepted."""
    reasons: list[str] = []
    if host.status != "done":
        reasons.append(f"the validation did not finish ({host.status}: "
                       f"{host.data.get('error') or 'no reason recorded'})")
    for r in host.results:
        if r.verdict >= Verdict.FAIL:
            reasons.append(f"{r.check} {r.verdict.name}: {r.summary}")
    if (host.verdict is None or host.verdict >= Verdict.FAIL) and not reasons:
        reasons.append(f"the run's verdict for this host is {host.verdict_written}")
    if host.identity is None:
        reasons.append("no hardware identity: hardware.inventory did not run or failed to "
                       "read it, so the certificate could not be bound to the hardware")
    elif not identifies(host.identity):
        reasons.append("the hardware identity names no serial, UUID or MAC (every field "
                       "empty): the certificate could not be bound to this node's hardware")
    if reasons:
        return NOT_READY, reasons
    if accepted is not None and accepted.get("accepted"):
        return READY, []
    return HEALTHY, list((accepted or {}).get("reasons") or
                         ["the run was not judged for acceptance"])


def validation_end(name: str, finished: float) -> dt.datetime:
    """When the run of `name` (a host, a cluster or rack run) ended, as its record's
    `finished` reads (0: none): a certificate's validity starts there."""
    if finished <= 0:
        raise RunError(f"{name}: the run records no end time for this host "
                       "(an unfinished run): re-validate it")
    return dt.datetime.fromtimestamp(finished, dt.UTC).replace(microsecond=0)


def measured_end(name: str, finished: float, issued: dt.datetime, max_age_days: float, *,
                 again: str) -> dt.datetime:
    """When the run of `name` ended; RunError when it records no end, or ended more than
    max_age_days before `issued` (`again`: what to run for fresh results)."""
    ended = validation_end(name, finished)
    age = (issued - ended).total_seconds() / 86400
    if age > max_age_days:
        raise RunError(f"{name}: the results are {age:.1f} days old (the run ended "
                       f"{ended.isoformat()}), more than the {max_age_days:g} days a "
                       f"certificate may rest on: {again}, or raise --max-result-age-days "
                       "(recorded in the certificate)")
    return ended


def cluster_reference(envelope: Path, key: PrivateKey) -> dict[str, Any]:
    """What a node certificate records of the cluster or rack certificate its node was
    proven in: only one this signer signed (checked here) is referenced."""
    kinds = {CLUSTER_PREDICATE_TYPE: "cluster", RACK_PREDICATE_TYPE: "rack"}
    try:
        ptype, payload, _ = verify_envelope(json.loads(envelope.read_bytes()),
                                            [key.public_key()])
        st = json.loads(payload)
        if ptype != PAYLOAD_TYPE or st.get("predicateType") not in kinds:
            raise ValueError("not a cluster or rack certificate")
    except (OSError, ValueError, SignatureError) as exc:
        raise RunError(f"{envelope}: not a cluster or rack certificate signed with this key "
                       f"({exc})", hint="pass the cluster.intoto.dsse.json (or "
                                        "rack.intoto.dsse.json) that `nodecert cluster "
                                        "validate --key` (`rack validate --key`) wrote with "
                                        "the same key") from exc
    p = st["predicate"]
    kind = kinds[st["predicateType"]]
    return {"kind": kind, "certificate": envelope.name, "sha256": _sha256_file(envelope),
            "run_id": p["run_id"], "verdict": p["verdict"],
            "nodes": sorted(p["nodes"] if kind == "cluster" else p["trays"]),
            # each node's identity digest as the cluster certificate's subject names it
            "subjects": {str(s["name"])[5:]: s["digest"]["sha256"]
                         for s in st.get("subject", []) if isinstance(s, dict)
                         and str(s.get("name", "")).startswith("node:")
                         and isinstance(s.get("digest"), dict)}}


def cluster_link(cluster: dict[str, Any], host: str, digest: str) -> dict[str, Any] | None:
    """The reference a node certificate carries: only when the cluster certificate's
    subject of that name is this very hardware (same identity digest), never by name
    alone (a node renamed, or replaced since, was not proven in that cluster)."""
    if cluster["subjects"].get(host) != digest:
        return None
    return {k: v for k, v in cluster.items() if k not in ("subjects", "kind")} | \
        {"identity_sha256": digest}


def validity(issued: dt.datetime, ended: dt.datetime, valid_days: int,
             max_age_days: float) -> dict[str, Any]:
    """A certificate's validity window: from the evidence (the run's end), never from the
    signature, for valid_days; the results' age limit it was signed under."""
    return {"issued": issued.isoformat(timespec="seconds"),
            "not_before": ended.isoformat(timespec="seconds"),
            "not_after": (ended + dt.timedelta(days=valid_days)).isoformat(timespec="seconds"),
            "max_result_age_days": max_age_days}


def statement(host: HostRecord, stack: Stack | None, *, issued: dt.datetime,
              valid_days: int, inputs: dict[str, str] | None = None,
              max_age_days: float = DEFAULT_MAX_AGE_DAYS,
              cluster: dict[str, Any] | None = None,
              accepted: dict[str, Any] | None = None,
              attestation_verifier: str | None = None) -> dict[str, Any]:
    """accepted: the acceptance judgement of this host's run (acceptance.judge); without
    one the certificate is a health record at best.

    inputs: name -> sha256 of each file the run recorded as its inputs (plan, suite,
    stack manifest): the certificate names exactly what the run was judged with.

    Raises RunError when the results are older than max_age_days at `issued`."""
    ended = measured_end(host.host, host.finished, issued, max_age_days,
                         again="re-validate the host")
    verdict, reasons = readiness(host, accepted)
    ident = host.identity or {}
    results = host.results
    record = checks.by_role(results, "stack-record")
    software = record.facts.get("software") if isinstance(record, Result) else None
    # The firmware bill of materials: each component of the host's recipe, wanted and
    # found where it was read (the BMC's inventory, the node's own tools).
    bom = checks.by_role(results, "firmware-record")
    recipe = bom.facts if isinstance(bom, Result) else None
    firmware = {"recipe": recipe.get("recipe"), "sources": recipe.get("sources"),
                "components": recipe.get("bom")} if recipe else None
    predicate = {
        "schema": "nodecert.node-readiness/v1",
        "verdict": verdict, "reasons": reasons, "simulated": host.simulated,
        "host": host.host, "run_id": host.data.get("run_id"), "suite": host.suite,
        # what the run measured against what READY requires
        "acceptance": accepted or None,
        "validated": {"started": _iso(host.data.get("started")),
                      "finished": _iso(host.data.get("finished"))},
        # valid from the evidence, not from the signature: signing old results late
        # must not extend how long they count
        "validity": validity(issued, ended, valid_days, max_age_days),
        "order": host.data.get("spec"), "identity": certificate_identity(ident),
        "stack": _stack_pins(stack) if stack else None, "software": software,
        "firmware": firmware,
        "attestation": attestation_summary(results, attestation_verifier),
        # what NVIDIA's tuning guide asks to keep with every result, as this run recorded it
        "run_record": minimum_run_record(
            results, software=software, stack=_stack_pins(stack) if stack else None,
            firmware=firmware, settings=_settings(host, inputs)),
        "results": [_result_entry(r) for r in results],
        "inputs": dict(sorted((inputs or {}).items())),
        "tool": {"name": "nodecert", "version": __version__},
    }
    digest = identity_digest(ident)
    link = cluster_link(cluster, host.host, digest) if cluster is not None else None
    if link is not None:
        # the cluster (or rack) certificate it was proven in
        predicate[cluster.get("kind", "cluster") if cluster else "cluster"] = link
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": f"node:{host.host}",
                         "digest": {"sha256": digest}}],
            "predicateType": PREDICATE_TYPE, "predicate": predicate}


def _read_input(path: Path) -> dict[str, Any]:
    """A run input (plan, suite) as JSON; {} where the run did not record it."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: unreadable run input ({exc})",
                       hint="the run directory was damaged: validate the host again") from exc
    return data if isinstance(data, dict) else {}


def suite_acceptance(rd: RunDir) -> str | None:
    """The acceptance profile the run's suite declared (its recorded input), once a run."""
    name = _read_input(rd.suite_input).get("acceptance")
    return name if isinstance(name, str) else None


def judged(rd: RunDir, host: HostRecord, profile: str | None) -> dict[str, Any]:
    """The acceptance judgement of one host's run, from the plan it recorded (the
    settings it really ran with), its suite's profile and its results."""
    return acceptance.judge(profile, suite=host.suite,
                            plan=_read_input(rd.plan_file(host.host)),
                            results=host.results, simulated=host.simulated)


def _run_inputs(rd: RunDir, host: HostRecord) -> tuple[Stack | None, dict[str, str]]:
    """The stack manifest and input digests the run recorded for this host. A run that
    recorded none (made before inputs were kept) falls back to the installed stacks."""
    files = {"plan": rd.plan_file(host.host), "suite": rd.suite_input}
    stack: Stack | None = None
    if host.stack:
        copy = rd.stack_input(host.stack)
        if copy.is_file():
            stack = load_stack(copy)
            files["stack"] = copy
        else:
            stack = find_stack(host.stack)
    return stack, {k: _sha256_file(p) for k, p in files.items() if p.is_file()}


@dataclass
class Certified:
    host: str
    verdict: str
    simulated: bool
    reasons: list[str]
    envelope: Path
    html: Path
    junit: Path
    pdf: Path | None = None
    # the acceptance stages a health record lacks; whether its suite asked for acceptance
    # (an acceptance suite run whole, which a HEALTHY verdict then fell short of)
    missing: list[str] = field(default_factory=list)
    acceptance_asked: bool = False


@dataclass
class CertifyRun:
    run_dir: Path
    out_dir: Path
    keyid: str
    nodes: list[Certified] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # host -> why it was not certified
    index: Path | None = None
    junit: Path | None = None
    revocations: Path | None = None  # the list the new certificates were entered on

    @property
    def all_ready(self) -> bool:
        return bool(self.nodes) and not self.failed and all(n.verdict == READY
                                                            for n in self.nodes)

    def ok(self, require_acceptance: bool = False) -> bool:
        """Every node certified and none NOT READY; a health record (HEALTHY) counts only
        where no acceptance was asked: its suite was not an acceptance suite (or it ran
        only some checks) and the caller does not require acceptance."""
        return bool(self.nodes) and not self.failed and all(
            n.verdict == READY or (n.verdict == HEALTHY and not require_acceptance
                                   and not n.acceptance_asked) for n in self.nodes)


def listing(path: Path | None, key: PrivateKey,
            now: dt.datetime) -> AbstractContextManager[list[revlist.Entry]]:
    """The revocation list held for update while certificates are written (a list to
    which nothing is kept when there is none)."""
    return revlist.updating(path, key, now) if path is not None else nullcontext([])


def load_run(run_dir: Path) -> list[HostRecord]:
    """Every host's record of a finished validation run, checked for shape."""
    try:
        return finished_run(run_dir)
    except RunDirError as exc:
        raise RunError(exc.what, hint=exc.hint) from exc


def _check_ages(valid_days: int, max_age_days: float) -> None:
    if valid_days < 1:
        raise RunError(f"--valid-days must be at least 1 (got {valid_days})")
    if max_age_days <= 0:
        raise RunError(f"--max-result-age-days must be above 0 (got {max_age_days:g})")


def _certified(name: str, st: dict[str, Any], paths: list[Path],
               accepted: dict[str, Any]) -> Certified:
    """What the run says of one node it certified (its files: envelope, page, JUnit and,
    where rendered, the PDF)."""
    p = st["predicate"]
    return Certified(name, p["verdict"], p["simulated"], p["reasons"], paths[0], paths[1],
                     paths[2], pdf=paths[3] if len(paths) > 3 else None,
                     missing=list(accepted["missing"]),
                     acceptance_asked=bool(accepted["profile"]) and not accepted["partial"])


def certify(run_dir: Path, key: PrivateKey, *, out_dir: Path | None = None,
            valid_days: int = DEFAULT_VALID_DAYS, now: dt.datetime | None = None,
            max_age_days: float = DEFAULT_MAX_AGE_DAYS,
            cluster_cert: Path | None = None,
            revocations: Path | None = None,
            rendering: report_html.Rendering = report_html.PLAIN,
            attestation_verifier: str | None = None,
            records: list[HostRecord] | None = None, index: bool = True) -> CertifyRun:
    """Sign a certificate per node and render its HTML and JUnit; the fleet index too.
    With `revocations`, every new certificate is entered on that signed list and the
    older certificates of its nodes are marked superseded there. With
    `attestation_verifier` (or NODECERT_ATTESTATION_VERIFIER: NVIDIA's verifier's
    Python here) the GPUs' evidence is verified on this side; else it is node-reported.

    Each host is built (statement, signature, HTML, JUnit, all in memory) inside its own
    error boundary: a host that fails is named in `failed` and gets no files; the others
    are written, each file whole or not at all (temp + rename). `records`, `index`: a
    slice's hosts, and no fleet page (certs/sliced.py)."""
    _check_ages(valid_days, max_age_days)
    hosts = load_run(run_dir) if records is None else records
    cluster = cluster_reference(cluster_cert, key) if cluster_cert else None
    rd = RunDir(run_dir)
    profile = suite_acceptance(rd)
    verifier = attestcheck.configured(attestation_verifier)
    out = out_dir or rd.reports
    issued = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    run = CertifyRun(run_dir, out, keyid(key.public_key()))
    statements = []
    ready: list[tuple[list[Path], list[bytes]]] = []
    for h in hosts:
        name = h.host
        paths = [out / f"{name}{CERT_SUFFIX}", out / f"{name}.html",
                 out / f"{name}.junit.xml"] + ([out / f"{name}.pdf"] if rendering.pdf else [])
        try:
            stack, inputs = _run_inputs(rd, h)
            accepted = judged(rd, h, profile)
            st = statement(h, stack, issued=issued, valid_days=valid_days, inputs=inputs,
                           max_age_days=max_age_days, cluster=cluster, accepted=accepted,
                           attestation_verifier=verifier)
            env = sign_envelope(canonical_json(st), PAYLOAD_TYPE, key)
            page = report_html.node_page(st, envelope_name=paths[0].name, keyid=run.keyid,
                                         lang=rendering.lang)
            blobs = [json.dumps(env, indent=1).encode() + b"\n", page.encode(),
                     junit.node_xml(st)] + ([report_html.pdf_of(page)] if rendering.pdf
                                            else [])
        except Exception as exc:  # one bad host must not block the others
            run.failed[name] = str(exc) if isinstance(exc, RunError) else \
                f"{type(exc).__name__}: {exc}"
            continue
        ready.append((paths, blobs))
        run.nodes.append(_certified(name, st, paths, accepted))
        statements.append(st)
    with listing(revocations, key, issued) as listed:  # a list that fails: nothing written
        out.mkdir(parents=True, exist_ok=True)
        for paths, blobs in ready:  # only now: nothing is written for a host that failed
            for path, blob in zip(paths, blobs, strict=True):
                write_atomic(str(path), blob)
        listed.extend(revlist.entry_for(st, canonical_json(st)) for st in statements)
    run.revocations = revocations
    if index:
        run.index, run.junit = write_index(out, statements, run.keyid, rendering)
    return run


def write_index(out: Path, statements: list[dict[str, Any]], keyid: str,
                rendering: report_html.Rendering) -> tuple[Path, Path]:
    """The run's fleet page (and, for a large fleet, its pages of nodes: html.PAGE_ROWS)
    and JUnit file, over every node certified; pages of an earlier, larger run of the same
    directory are removed."""
    pages = report_html.fleet_pages(statements, keyid=keyid, lang=rendering.lang)
    if len(pages) > 1:
        (out / report_html.FLEET_PAGES).mkdir(exist_ok=True)
    for name, html in pages.items():
        write_atomic(str(out / name), html.encode())
    for old in (out / report_html.FLEET_PAGES).glob("*.html"):
        if f"{report_html.FLEET_PAGES}/{old.name}" not in pages:
            old.unlink()
    xml = out / "junit.xml"
    write_atomic(str(xml), junit.fleet_xml(statements))
    return out / "index.html", xml


__all__ = [
    "DEFAULT_MAX_AGE_DAYS",
    "DEFAULT_VALID_DAYS",
    "HEALTHY",
    "NOT_READY",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "READY",
    "STATEMENT_TYPE",
    "Certified",
    "CertifyRun",
    "RunError",
    "certify",
    "identity_digest",
    "judged",
    "listing",
    "load_run",
    "readiness",
    "statement",
    "validation_end",
    "write_index",
]
