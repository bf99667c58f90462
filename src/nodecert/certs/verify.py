"""Offline verification of a node certificate, step by step.

Order matters: nothing in the payload is trusted before the signature verifies
with a pinned public key. Then the payload type and Statement schema, the
validity window, the subject digest against the identity the predicate
carries, optionally the live hardware identity of the host, and finally the
verdict and the scope (nodecert.certs.scope). Every step is reported; the first
failure does not hide the others once the signature holds.

The module is long because those steps are one sequence over one statement, for node,
cluster and rack certificates alike: split, each part would re-read what the previous
one already checked.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecert.certs import rack as rackcert
from nodecert.certs import revocations as revlist
from nodecert.certs.attested import attestation_said
from nodecert.certs.certify import (
    HEALTHY,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    READY,
    STATEMENT_TYPE,
)
from nodecert.certs.cluster import CLUSTER_PREDICATE_TYPE, cluster_problems, subject_problems
from nodecert.certs.identity import identity_changes, identity_digest
from nodecert.certs.intoto import RACK_PREDICATE_TYPE
from nodecert.certs.keyring import Keyring, KeyStatementError, load_keyring
from nodecert.certs.scope import scope
from nodecert.certs.signing import SignatureError, verify_signers
from nodecert.core import checks
from nodecert.core.errors import ExitCode, NodecertError
from nodecert.transport.become import BecomeSource
from nodecert.validation.run import ValidateRequest, validate


class ReportError(NodecertError):
    """The report file itself is unreadable (bad input, exit 2)."""


@dataclass
class Verification:
    steps: list[tuple[str, bool, str]] = field(default_factory=list)
    statement: dict[str, Any] | None = None
    kind: str = "node"  # or "cluster", "rack": what the certificate is about
    verdict: str = ""   # the certificate's verdict, once its statement was read

    def step(self, name: str, ok: bool, detail: str) -> bool:
        self.steps.append((name, ok, detail))
        return ok

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(ok for _, ok, _ in self.steps)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.ok else ExitCode.FAILED


def _parse_time(text: Any) -> dt.datetime:
    t = dt.datetime.fromisoformat(str(text))
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def statement_problems(st: Any) -> list[str]:
    """What keeps a signed payload from being a nodecert Statement (empty: none)."""
    problems = []
    if not isinstance(st, dict):
        problems.append("not a JSON object")
        return problems
    if st.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type {st.get('_type')!r}, expected {STATEMENT_TYPE}")
    if st.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType {st.get('predicateType')!r}, expected {PREDICATE_TYPE}")
    subj = st.get("subject")
    if not (isinstance(subj, list) and len(subj) == 1 and isinstance(subj[0], dict)
            and isinstance(subj[0].get("digest"), dict) and subj[0]["digest"].get("sha256")):
        problems.append("subject must be one node with a sha256 digest")
    p = st.get("predicate")
    need = ("schema", "verdict", "reasons", "simulated", "host", "validity", "identity",
            "results", "tool")
    if not isinstance(p, dict) or any(k not in p for k in need):
        problems.append(f"predicate lacks {', '.join(k for k in need if k not in (p or {}))}")
    return problems


def subject_line(st: dict[str, Any] | None) -> str:
    """'node:<host> sha256:<digest> (system serial ...)', or why there is none."""
    if not st:
        return "(unreadable: the signature or statement did not check out)"
    if st.get("predicateType") == CLUSTER_PREDICATE_TYPE:
        names = [str(s.get("name")) for s in st["subject"]]
        return f"cluster of {len(names)} nodes: {', '.join(names)}"
    subj = st["subject"][0]
    serial = str((st["predicate"].get("identity") or {}).get("system_serial") or "")
    return (f"{subj.get('name')} sha256:{subj['digest']['sha256']}"
            + (f" (serial {serial})" if serial else ""))


def _serials(ident: dict[str, Any]) -> set[str]:
    """The serials an identity names: system, baseboard, and every GPU's."""
    return {str(ident[k]) for k in ("system_serial", "baseboard_serial") if ident.get(k)} \
        | {str(g["serial"]) for g in ident.get("gpus") or [] if g.get("serial")}


def expectation_problems(st: dict[str, Any], *, host: str | None = None,
                         serial: str | None = None, identity: str | None = None) -> list[str]:
    """What the certificate says against what the verifier expects it to be about: the
    node name, a serial (system, baseboard, chassis or any GPU's) or the identity digest.
    A cluster certificate is about each of its nodes: the host must be one of its
    subjects, and the serial and digest that host's (any node's, without a host).
    Pure; an empty list when every expectation given holds."""
    p = st["predicate"]
    if st.get("predicateType") in (CLUSTER_PREDICATE_TYPE, RACK_PREDICATE_TYPE):
        what = "cluster" if st["predicateType"] == CLUSTER_PREDICATE_TYPE else "rack"
        members = p["nodes"] if what == "cluster" else p["trays"]
        digests = {str(s["name"])[5:]: s["digest"]["sha256"] for s in st["subject"]
                   if str(s["name"]).startswith("node:")}
        idents = {n: (members.get(n) or {}).get("identity") or {} for n in digests}
        if host is not None and host not in digests:
            return [f"host {host!r} is not a node of this {what} certificate (nodes: "
                    f"{', '.join(sorted(digests))})"]
        about = [host] if host is not None else sorted(digests)
        whose = f"{host}'s" if host is not None else "any node's"
    else:
        digests = {str(p.get("host")): st["subject"][0]["digest"]["sha256"]}
        idents = {str(p.get("host")): p.get("identity") or {}}
        about, whose = list(digests), "the certified"
        if host is not None and p.get("host") != host:
            return [f"the certificate is for host {p.get('host')!r}, not {host!r}"]
    problems = []
    if serial is not None:
        serials = set().union(*(_serials(idents[n]) for n in about))
        if serial not in serials:
            problems.append(f"serial {serial!r} is not in {whose} identity "
                            f"(serials: {', '.join(sorted(serials)) or 'none'})")
    if identity is not None:
        want = identity.removeprefix("sha256:").lower()
        have = [digests[n] for n in about]
        if not want or want not in have:
            problems.append(f"identity digest is sha256:{', sha256:'.join(have)}, not "
                            f"{identity!r}")
    return problems


MAX_ENVELOPE = 64 * 1024 * 1024  # a certificate is a few MB; anything far larger is refused
MAX_DEPTH = 64  # nesting deeper than any statement nodecert writes


def _why(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _check_tree(obj: Any, depth: int = 0) -> None:
    """Refuse deep nesting and lone surrogates (which no signed text may hold)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels")
    if isinstance(obj, str):
        obj.encode("utf-8")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_tree(k, depth + 1)
            _check_tree(v, depth + 1)
    elif isinstance(obj, list):
        for v in obj:
            _check_tree(v, depth + 1)


def _strict_json(text: str) -> Any:
    obj = json.loads(text, parse_constant=_no_constant)
    _check_tree(obj)
    return obj


def read_envelope(path: Path) -> Any:
    """The envelope JSON, or ReportError (exit 2) for anything unreadable or hostile:
    too large, not UTF-8, not JSON, NaN, deep nesting, lone surrogates."""
    hint = "pass the <node>.intoto.dsse.json file `nodecert certify` wrote"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_ENVELOPE + 1)
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from exc
    if len(raw) > MAX_ENVELOPE:
        raise ReportError(f"{path} is larger than {MAX_ENVELOPE // (1024 * 1024)} MiB: not a "
                          "certificate", hint=hint)
    try:
        return _strict_json(raw.decode("utf-8"))
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise ReportError(f"{path} is not JSON ({_why(exc)})", hint=hint) from exc


def _lists(lists: list[revlist.Register] | None, revocations: Path | None,
           ring: Keyring) -> list[revlist.Register]:
    """The revocation lists that apply: those already read and the one given, which
    must be signed by a trusted key (a list that cannot be trusted is bad input, refused
    before anything is said)."""
    try:
        return list(lists or []) + (
            [revlist.load(revocations, ring.keys)] if revocations is not None else [])
    except revlist.RevocationError as exc:
        raise ReportError(exc.what, hint=exc.hint) from exc


def _subject_step(v: Verification, p: dict[str, Any], subject: dict[str, Any],
                  live_identity: dict[str, Any] | None) -> None:
    """The signed subject names the certified identity; with a live identity, the
    hardware read now is that identity."""
    digest = subject["digest"]["sha256"]
    ok = identity_digest(p["identity"]) == digest
    v.step("subject", ok, f"{subject.get('name')} sha256:{digest[:16]}... "
           + ("matches the certified identity" if ok
              else "does NOT match the identity in the predicate"))
    if live_identity is not None:
        _hardware_step(v, p["identity"], live_identity, digest)


def _payload(v: Verification, ptype: str, payload: bytes) -> tuple[bool, Any]:
    """(read, the signed statement as JSON: any JSON value, null included, judged by the
    statement step); not read, with the failed step recorded, where the payload is of
    another type or not usable JSON."""
    if not v.step("payload type", ptype == PAYLOAD_TYPE,
                  f"{ptype}" + ("" if ptype == PAYLOAD_TYPE else f", expected {PAYLOAD_TYPE}")):
        return False, None
    try:
        return True, _strict_json(payload.decode("utf-8"))
    except (ValueError, UnicodeError, RecursionError) as exc:
        v.step("statement", False, f"signed payload is not usable JSON: {_why(exc)}")
        return False, None


def verify_report(path: Path, pubkeys: list[Path], *, now: dt.datetime | None = None,
                  allow_simulated: bool = False,
                  live_identity: dict[str, Any] | None = None,
                  live_host: str | None = None,
                  expect: dict[str, str | None] | None = None,
                  revocations: Path | None = None,
                  key_statements: list[Path] | None = None,
                  require_signers: int = 1,
                  ring: Keyring | None = None,
                  require_acceptance: bool = False,
                  lists: list[revlist.Register] | None = None,
                  freshness: revlist.Freshness | None = None) -> Verification:
    """Verify a node or cluster certificate. live_identity: the hardware identity read
    from live_host now (a cluster certificate needs the host, to know which subject);
    expect: host/serial/identity the certificate must be about; revocations: the signed
    revocation list (same trusted keys) the certificate must not be revoked or
    superseded on; key_statements: key rotations and withdrawals (the keys trusted are
    the given ones, those they handed over to, less those withdrawn); require_signers:
    how many different trusted keys must have signed it (two-party signing); ring: the
    keys already resolved (instead of pubkeys and key_statements); require_acceptance:
    a node certificate must be an acceptance certificate (a health record fails); lists:
    revocation lists already read (with `revocations`: every one applies); freshness:
    how old a list may be, and the verifier's memory of the lists seen."""
    ring = ring or _keyring(pubkeys, key_statements or [])
    if require_signers < 1:
        raise ReportError(f"--require-signers must be at least 1 (got {require_signers})")
    reg = (_lists(lists, revocations, ring), freshness or revlist.Freshness(),
           now or dt.datetime.now(dt.UTC))
    v = Verification()
    signed = _signature_step(v, read_envelope(path), ring, require_signers)
    if signed is None:
        return v
    ptype, payload = signed
    read, st = _payload(v, ptype, payload)
    if not read:
        return v
    wanted = {k: val for k, val in (expect or {}).items() if val is not None}
    if isinstance(st, dict) and st.get("predicateType") in (CLUSTER_PREDICATE_TYPE,
                                                            RACK_PREDICATE_TYPE):
        v.kind = "cluster" if st["predicateType"] == CLUSTER_PREDICATE_TYPE else "rack"
        return _verify_cluster(v, st, now or dt.datetime.now(dt.UTC), allow_simulated,
                               wanted=wanted, live=(live_host, live_identity),
                               listed=(reg, payload))
    problems = statement_problems(st)
    if not v.step("statement", not problems, "; ".join(problems) or
                  f"in-toto Statement v1, {PREDICATE_TYPE}"):
        return v
    p, subj = st["predicate"], st["subject"]
    v.statement = st
    now = now or dt.datetime.now(dt.UTC)
    _validity_step(v, p, now)
    _revocation_step(v, st, reg, payload)
    _expected_step(v, st, wanted)
    _subject_step(v, p, subj[0], live_identity)
    _attestation_step(v, p)
    return _node_verdict(v, p, allow_simulated, require_acceptance)


def _keyring(pubkeys: list[Path], key_statements: list[Path]) -> Keyring:
    """The keys trusted: the given ones, those they handed over to, less the withdrawn."""
    if not pubkeys:
        raise ReportError("no trusted public key given", hint="pass --pubkey nodecert.pub "
                          "(the public key of the signer you trust)")
    try:
        return load_keyring(pubkeys, key_statements)
    except KeyStatementError as exc:
        raise ReportError(exc.what, hint=exc.hint) from exc


def _signature_step(v: Verification, envelope: dict[str, Any], ring: Keyring,
                    require_signers: int) -> tuple[str, bytes] | None:
    """(payload type, payload) when enough different parties of the ring signed it; the
    step recorded either way."""
    try:
        ptype, payload, signers = verify_signers(envelope, ring.keys)
    except SignatureError as exc:
        v.step("signature", False, withdrawn_signers(envelope, ring) or str(exc))
        return None
    parties = ring.parties(signers)
    enough = len(parties) >= require_signers
    names = ", ".join(f"{k[:16]}..." for k in signers)
    if not v.step("signature", enough,
                  (f"valid, signed by trusted key {names}" if len(signers) == 1 else
                   f"valid, signed by {len(signers)} trusted keys: {names}")
                  + ("" if len(parties) == len(signers) else
                     f" ({len(parties)} part{'y' if len(parties) == 1 else 'ies'}: a key "
                     "and its hand-over are one)")
                  + ("" if enough else f"; {require_signers} different signers required")):
        return None
    return ptype, payload


def _hardware_step(v: Verification, certified: dict[str, Any], live: dict[str, Any],
                   digest: str) -> None:
    changes = identity_changes(certified, live)
    same = identity_digest(live) == digest
    v.step("hardware", same, "the host's live hardware identity matches the certificate"
           if same else "the host's hardware differs from the certificate: "
           + ("; ".join(changes) or "identity digest differs"))


def _node_verdict(v: Verification, p: dict[str, Any], allow_simulated: bool,
                  require_acceptance: bool) -> Verification:
    """A node certificate's verdict: READY, or a health record (HEALTHY) that holds as one
    unless acceptance is required; its scope; SIMULATED refused unless allowed."""
    v.verdict = str(p["verdict"])
    consistent, accepted, line = scope(p)
    v.step("verdict", p["verdict"] in (READY, HEALTHY), f"{p['verdict']}" + (
        "" if p["verdict"] == READY else ": " + "; ".join(str(r) for r in p["reasons"][:5])))
    v.step("scope", consistent and (accepted or not require_acceptance), line + (
        " (--require acceptance)" if require_acceptance and consistent and not accepted
        else ""))
    if p["simulated"]:
        v.step("hardware kind", allow_simulated, "SIMULATED: measured on nodecert's simulated "
               "GPUs, not a certificate for real hardware" + (
                   " (accepted: --allow-simulated)" if allow_simulated else ""))
    return v


def _attestation_step(v: Verification, p: dict[str, Any]) -> None:
    said = attestation_said(p)
    if said is not None:
        v.step("attestation", *said)


def withdrawn_signers(envelope: Any, ring: Keyring) -> str:
    """Why a certificate signed only by withdrawn keys does not verify ("" when no
    withdrawn key signed it)."""
    gone = [k for kid, k in ring.trusted.items() if kid in ring.withdrawn]
    try:
        signers = verify_signers(envelope, gone)[2]
    except SignatureError:
        return ""
    return "signed only by withdrawn keys: " + "; ".join(
        f"{kid[:16]}... ({ring.withdrawn[kid][1]}, since {ring.withdrawn[kid][0]})"
        for kid in signers) + " -- have a key that holds sign it again (nodecert cosign)"


def _validity_step(v: Verification, p: dict[str, Any], now: dt.datetime) -> None:
    """Valid from the evidence (not_before, where the statement has one) to not_after."""
    try:
        issued = _parse_time(p["validity"]["issued"])
        not_after = _parse_time(p["validity"]["not_after"])
        since = p["validity"].get("not_before")
        v.step("validity", issued <= now + dt.timedelta(minutes=5) and now <= not_after,
               (f"validated {_parse_time(since).isoformat()}, signed {issued.isoformat()}"
                if since else f"issued {issued.isoformat()}")
               + f", valid until {not_after.isoformat()}"
               + (": EXPIRED" if now > not_after else ": not yet valid" if issued > now
                  + dt.timedelta(minutes=5) else ""))
    except (KeyError, TypeError, ValueError) as exc:
        v.step("validity", False, f"unreadable validity window: {exc}")


Lists = tuple[list[revlist.Register], revlist.Freshness, dt.datetime]


def _revocation_step(v: Verification, st: dict[str, Any], lists: Lists,
                     payload: bytes) -> None:
    """The certificate on every list given: each fresh (its age, the verifier's memory
    of newer ones) and none revoking or superseding it."""
    regs, policy, now = lists
    said: list[str] = []
    ok = True
    for reg in regs:
        is_fresh, why = revlist.fresh(reg, now, policy)
        holds, line = revlist.status(reg, st, payload) if is_fresh else (False, why)
        ok &= holds
        said.append(line)
        if is_fresh:
            revlist.remember(reg, policy)
    if regs:
        v.step("revocation", ok, "; ".join(said))


def _verdict_steps(v: Verification, p: dict[str, Any], allow_simulated: bool, what: str,
                   parts: str) -> Verification:
    """The verdict, and SIMULATED refused unless allowed."""
    v.verdict = str(p["verdict"])
    v.step("verdict", p["verdict"] == READY, f"{what}{p['verdict']}" + (
        "" if p["verdict"] == READY else ": " + "; ".join(str(r) for r in p["reasons"][:5])))
    if p["simulated"]:
        v.step("hardware kind", allow_simulated, f"SIMULATED: measured on nodecert's simulated "
               f"{parts}, not a certificate for real hardware" + (
                   " (accepted: --allow-simulated)" if allow_simulated else ""))
    return v


def _expected_step(v: Verification, st: dict[str, Any], wanted: dict[str, str]) -> None:
    if wanted:
        issues = expectation_problems(st, **wanted)
        v.step("expected", not issues, "; ".join(issues) or "host/serial/identity as "
               "expected: " + ", ".join(f"{k} {val}" for k, val in wanted.items()))


def _verify_cluster(v: Verification, st: dict[str, Any], now: dt.datetime,
                    allow_simulated: bool, *, wanted: dict[str, str],
                    live: tuple[str | None, dict[str, Any] | None],
                    listed: tuple[Lists, bytes]) -> Verification:
    """A cluster or rack certificate: its statement, validity, what the verifier expects,
    every subject against its identity, the live host against its subject, the verdict,
    SIMULATED."""
    rack = v.kind == "rack"
    ptype = RACK_PREDICATE_TYPE if rack else CLUSTER_PREDICATE_TYPE
    problems = ([] if st.get("_type") == STATEMENT_TYPE else
                [f"_type {st.get('_type')!r}, expected {STATEMENT_TYPE}"]) + (
        rackcert.rack_problems(st) if rack else cluster_problems(st))
    if not v.step("statement", not problems, "; ".join(problems) or
                  f"in-toto Statement v1, {ptype}"):
        return v
    v.statement = st
    p = st["predicate"]
    _validity_step(v, p, now)
    _revocation_step(v, st, *listed)
    _expected_step(v, st, wanted)
    bad = rackcert.subject_problems(st) if rack else subject_problems(st)
    nodes = p["trays"] if rack else p["nodes"]
    v.step("subject", not bad, "; ".join(bad) or (
        f"{len(nodes)} compute trays and {len(st['subject']) - len(nodes)} switch trays, "
        "each digest matches its certified identity" if rack else
        f"{len(st['subject'])} nodes, each digest matches its certified identity"))
    host, ident = live
    if ident is not None:
        digests = {str(s["name"])[5:]: s["digest"]["sha256"] for s in st["subject"]
                   if str(s["name"]).startswith("node:")}
        if host not in digests:
            v.step("hardware", False, f"host {host!r} is not a node of this "
                   f"{v.kind} certificate: its live hardware cannot be compared")
        else:
            same = identity_digest(ident) == digests[host]
            changes = identity_changes(nodes[host]["identity"], ident)
            v.step("hardware", same, f"{host}'s live hardware identity matches its subject"
                   if same else f"{host}'s hardware differs from the certificate: "
                   + ("; ".join(changes) or "identity digest differs"))
    if rack:
        return _verdict_steps(v, p, allow_simulated, f"rack {p['rack'].get('name')} ",
                              "GPUs, switch trays and rack infrastructure")
    return _verdict_steps(v, p, allow_simulated, "cluster ", "GPUs and HCAs")


def live_identity(host: str, inventory: Path, *, stack: str | None = None,
                  become: BecomeSource | None = None) -> dict[str, Any]:
    """The host's hardware identity now: hardware.inventory run over SSH (host keys
    checked as for validate)."""
    identity = checks.with_role("identity")
    with tempfile.TemporaryDirectory(prefix="nodecert-verify-") as d:
        run = validate(ValidateRequest(inventory, limit=(host,), stack=stack, runs_dir=Path(d),
                       checks=(identity,), become=become), progress=lambda line: None)
        hr = run.hosts.get(host)
        res = checks.result_of(hr.results if hr else [], identity)
        ident = res.facts.get("identity") if res else None
        if not ident:
            why = (hr.error if hr and hr.error else res.summary if res else "host not reached")
            raise ReportError(f"could not read {host}'s hardware identity: {why}",
                              hint="check that the host is reachable as for `nodecert "
                                   "validate`, then retry")
        return dict(ident)


__all__ = [
    "MAX_ENVELOPE",
    "ReportError",
    "Verification",
    "identity_changes",
    "live_identity",
    "read_envelope",
    "verify_report",
]
