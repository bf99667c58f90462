"""The hand-over bundle: everything a customer receives for a delivery, in one directory
that verifies offline with one command and opens in a browser.

    DIR/index.html                      every certificate, its verdict, its page
    DIR/README.txt                      how to verify, and the signers' key ids
    DIR/certificates/<kind>-<name>.intoto.dsse.json   node, cluster and rack certificates
    DIR/reports/<kind>-<name>.html      each one's page, rendered from what was signed
    DIR/keys/<keyid>.pub                the signers' public keys (copies: trust is given
                                        out of band, with `verify-bundle --pubkey`)
    DIR/keys/*.rotation.dsse.json, *.withdrawal.dsse.json   key statements
    DIR/nvsentinel/<node>.externalfault.json   for a node NOT READY on a failed check: the
                                        NVIDIA NVSentinel ExternalFault that has the
                                        customer's NVSentinel drain it for repair
    DIR/revocations.intoto.dsse.json    the signer's revocation list, when given
    DIR/manifest.intoto.dsse.json       sha256 and size of every other file, signed

Built in a private directory beside DIR and renamed into place: a bundle is whole or
absent. Every certificate is checked to carry a signature of a trusted key before it
goes in; where runs certified the same node (cluster, rack) more than once, the one on
the newest evidence is handed over and the others are named in the result.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from nodecert import __version__
from nodecert.certs import html as report_html
from nodecert.certs.externalfault import Failed, external_fault
from nodecert.certs.i18n import DEFAULT, gettext_for
from nodecert.certs.intoto import (
    CLUSTER_PREDICATE_TYPE,
    PREDICATE_TYPE,
    RACK_PREDICATE_TYPE,
)
from nodecert.certs.keyring import Keyring, read_statement, resolve
from nodecert.certs.signing import (
    PrivateKey,
    PublicKey,
    SignatureError,
    canonical_json,
    keyid,
    load_public_key,
    sign_envelope,
    verify_signers,
)
from nodecert.certs.verify import ReportError, read_envelope
from nodecert.core.errors import ExitCode, NodecertError
from nodecert.core.textsafe import clean
from nodecert.runs.layout import CERT_SUFFIX, RunDir

MANIFEST = "manifest.intoto.dsse.json"
MANIFEST_TYPE = "application/vnd.nodecert.handover+json"
SCHEMA = "nodecert.handover/v1"
REVOCATIONS = "revocations.intoto.dsse.json"
KINDS = {PREDICATE_TYPE: "node", CLUSTER_PREDICATE_TYPE: "cluster",
         RACK_PREDICATE_TYPE: "rack"}


class HandoverError(NodecertError):
    """A bundle that cannot be built from what was given (bad input, exit 2)."""


class WithdrawnSigningKey(HandoverError):
    """A signing key its own statements withdraw: nothing it signs verifies (exit 1)."""

    exit_code = ExitCode.FAILED


@dataclass(frozen=True)
class Certificate:
    source: Path
    envelope: dict[str, Any]
    statement: dict[str, Any]
    kind: str  # node, cluster, rack
    name: str  # the node, the cluster's run, the rack

    @property
    def stem(self) -> str:
        return f"{self.kind}-{self.name}"

    @property
    def health_record(self) -> bool:
        """A node's health record (HEALTHY): not an acceptance certificate."""
        return self.kind == "node" and self.statement["predicate"].get("verdict") == "HEALTHY"

    @property
    def evidence_time(self) -> tuple[str, str]:
        p = self.statement["predicate"]
        v = p.get("validity") or {}
        return (str(v.get("not_before") or (p.get("validated") or {}).get("finished")
                    or ""), str(v.get("issued") or ""))


@dataclass
class Handover:
    out: Path
    certificates: list[Certificate] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # what newer evidence replaced
    signers: list[str] = field(default_factory=list)  # key ids of the manifest's signers


def _statement(env: dict[str, Any], source: Path) -> dict[str, Any]:
    try:
        st = json.loads(base64.b64decode(str(env.get("payload", "")), validate=False))
    except (ValueError, binascii.Error) as exc:
        raise HandoverError(f"{source}: its payload is not a statement ({exc})") from exc
    if not isinstance(st, dict) or st.get("predicateType") not in KINDS \
            or not isinstance(st.get("predicate"), dict):
        raise HandoverError(f"{source}: not a node, cluster or rack certificate")
    return st


def _safe_name(text: str) -> str:
    """A file-name stem from a name a statement carries (untrusted)."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in clean(text))[:80]
    return out.strip(".") or "unnamed"


def collect(runs: list[Path]) -> list[Certificate]:
    """Every certificate under each run's reports/ (or the directory itself)."""
    found = []
    for run in runs:
        where = RunDir(run).reports if RunDir(run).reports.is_dir() else run
        if not where.is_dir():
            raise HandoverError(f"{run}: not a run directory",
                                hint="pass run directories `certify`, `cluster certify` or "
                                     "`rack certify` wrote certificates into")
        files = sorted(where.glob(f"*{CERT_SUFFIX}"))
        if not files:
            raise HandoverError(f"{run}: holds no certificate (*{CERT_SUFFIX})",
                                hint="certify the run first (`nodecert certify RUN`)")
        for path in files:
            try:
                env = read_envelope(path)
            except ReportError as exc:
                raise HandoverError(exc.what, hint=exc.hint) from exc
            if not isinstance(env, dict):
                raise HandoverError(f"{path}: not a DSSE envelope")
            st = _statement(env, path)
            kind = KINDS[st["predicateType"]]
            p = st["predicate"]
            name = (p.get("host") if kind == "node" else
                    (p.get("rack") or {}).get("name") if kind == "rack" else
                    p.get("run_id") or run.name)
            found.append(Certificate(path, env, st, kind, _safe_name(str(name or run.name))))
    return found


def _rank(c: Certificate) -> tuple[bool, tuple[str, str]]:
    # a health record never replaces a certificate that is not one (as on the revocation
    # list): the newest acceptance evidence goes in
    return not c.health_record, c.evidence_time


def newest(certs: list[Certificate]) -> tuple[list[Certificate], list[str]]:
    """One certificate per subject (the newest evidence; a health record only where the
    subject has nothing else) and what the others were."""
    best: dict[str, Certificate] = {}
    older: list[str] = []
    for c in certs:
        have = best.get(c.stem)
        if have is None or _rank(c) > _rank(have):
            if have is not None:
                older.append(f"{have.source} (replaced by {c.source})")
            best[c.stem] = c
        else:
            older.append(f"{c.source} (replaced by {have.source})")
    return [best[k] for k in sorted(best)], older


def _pem(pub: PublicKey) -> bytes:
    return pub.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def _page(c: Certificate, signer: str, lang: str) -> str:
    page = {"node": report_html.node_page, "cluster": report_html.cluster_page,
            "rack": report_html.rack_page}[c.kind]
    return page(c.statement, envelope_name=f"../certificates/{c.stem}{CERT_SUFFIX}",
                keyid=signer, lang=lang)


def _write(root: Path, rel: str, data: bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def digest_files(root: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file under root but the manifest, by relative path."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and rel != MANIFEST:
            data = path.read_bytes()
            out[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return out


def _write_certificate(work: Path, c: Certificate, signer: str, *, lang: str,
                       pdf: bool) -> None:
    """One certificate in the bundle: its envelope and the page people read (and PDF)."""
    _write(work, f"certificates/{c.stem}{CERT_SUFFIX}",
           json.dumps(c.envelope, indent=1).encode() + b"\n")
    page = _page(c, signer, lang)
    _write(work, f"reports/{c.stem}.html", page.encode())
    if pdf:
        _write(work, f"reports/{c.stem}.pdf", report_html.pdf_of(page))
    fault = node_fault(c)
    if fault is not None:
        _write(work, f"nvsentinel/{_safe_name(c.name)}.externalfault.json",
               json.dumps(fault, indent=1).encode() + b"\n")


def node_fault(c: Certificate) -> dict[str, Any] | None:
    """A node certificate's NVSentinel ExternalFault: NOT READY on at least one failed
    check (a fault measured). A node that is not READY only for what was not measured
    (ERROR, checks missing) is not drained on the certificate's word."""
    p = c.statement["predicate"]
    if c.kind != "node" or p.get("verdict") != "NOT READY":
        return None
    failed = [Failed(str(r.get("check", "")), str(r.get("fault_code") or ""),
                     str(r.get("summary", ""))) for r in p.get("results") or []
              if isinstance(r, dict) and r.get("verdict") == "FAIL"]
    if not failed:
        return None
    return external_fault(c.name, failed, verdict="NOT READY", run_id=str(p.get("run_id") or ""),
                          simulated=bool(p.get("simulated")),
                          when=str((p.get("validity") or {}).get("issued") or ""),
                          certificate=f"certificates/{c.stem}{CERT_SUFFIX}")

def _signed(body: dict[str, Any], keys: list[PrivateKey]) -> dict[str, Any]:
    """The manifest in one envelope signed by every key (each party's signature)."""
    env = sign_envelope(canonical_json(body), MANIFEST_TYPE, keys[0])
    for k in keys[1:]:
        env["signatures"] += sign_envelope(canonical_json(body), MANIFEST_TYPE,
                                           k)["signatures"]
    return env


def build(runs: list[Path], out: Path, keys: list[PrivateKey], *,
          pubkeys: list[Path] | None = None, key_statements: list[Path] | None = None,
          revocations: Path | None = None, now: dt.datetime | None = None,
          lang: str = DEFAULT, pdf: bool = False,
          allow_health_records: bool = False) -> Handover:
    """Write the bundle for the certificates of `runs` into `out` (which must not exist),
    its manifest signed by every key of `keys`; what people read in `lang`. A node whose
    newest certificate is a health record (HEALTHY) is refused unless
    allow_health_records (which the manifest records)."""
    if not keys:
        raise HandoverError("no signing key given", hint="pass --key (repeatable: each "
                                                         "party signs the manifest)")
    if out.exists():
        raise HandoverError(f"{out} already exists: a bundle is never written over",
                            hint="name a new directory with --out")
    ring = _signing_ring(keys, pubkeys or [], key_statements or [])
    chosen, older = newest(collect(runs))
    health = [c for c in chosen if c.health_record]
    if health and not allow_health_records:
        _refuse_health_records(health)
    signed_by = _signers(chosen, ring)
    issued = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for c in chosen:
            _write_certificate(work, c, signed_by[c.stem][0], lang=lang, pdf=pdf)
        used = {kid for kids in signed_by.values() for kid in kids} | {
            keyid(k.public_key()) for k in keys}
        for kid in sorted(used):
            _write(work, f"keys/{kid[:16]}.pub", _pem(ring.trusted[kid]))
        for st in key_statements or []:
            _write(work, f"keys/{_safe_name(st.name)}", st.read_bytes())
        if revocations is not None:
            _write(work, REVOCATIONS, revocations.read_bytes())
        rows = [{**_row(c, signed_by[c.stem]),
                 "pdf": f"reports/{c.stem}.pdf" if pdf else ""} for c in chosen]
        signers = [keyid(k.public_key()) for k in keys]
        _write(work, "index.html", report_html.handover_page(
            rows, signers=signers, issued=issued.isoformat(), has_revocations=revocations
            is not None, has_statements=bool(key_statements), lang=lang).encode())
        _write(work, "README.txt", readme(signers, rows, bool(key_statements),
                                          gettext_for(lang).gettext).encode())
        body = {"schema": SCHEMA, "issued": issued.isoformat(),
                "tool": {"name": "nodecert", "version": __version__},
                "certificates": [{k: r[k] for k in ("file", "kind", "name", "verdict",
                                                    "simulated", "subject")} for r in rows],
                # the signer's choice to hand health records over, for every verifier
                "health_records_allowed": bool(health),
                "files": digest_files(work)}
        _write(work, MANIFEST, json.dumps(_signed(body, keys), indent=1).encode() + b"\n")
        work.chmod(0o755)
        os.rename(work, out)  # whole or not at all
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Handover(out, chosen, older, signers)


def _signing_ring(keys: list[PrivateKey], pubkeys: list[Path],
                  key_statements: list[Path]) -> Keyring:
    """The keys trusted, the signing keys among them: a withdrawal they (or their chain)
    signed counts, and a withdrawn signing key is refused before anything is written."""
    ring: Keyring = resolve([load_public_key(p) for p in pubkeys]
                            + [k.public_key() for k in keys],
                            [(str(p), *read_statement(p)) for p in key_statements])
    gone = [keyid(k.public_key()) for k in keys if keyid(k.public_key()) in ring.withdrawn]
    if gone:
        since, why = ring.withdrawn[gone[0]]
        raise WithdrawnSigningKey(
            f"signing key {gone[0][:16]}... is withdrawn ({why}"
            + (f", since {since}" if since else "") + "): a bundle it signs verifies "
            "nowhere; nothing was written", hint="sign with a key that holds (--key)")
    for k in keys:
        ring.trusted.setdefault(keyid(k.public_key()), k.public_key())
    return ring


def _refuse_health_records(health: list[Certificate]) -> None:
    lacks = "; ".join(
        f"{c.name} ({c.source.name}: suite {c.statement['predicate'].get('suite')}, lacks "
        + ", ".join((c.statement["predicate"].get("acceptance") or {}).get("missing")
                    or ["acceptance"]) + ")" for c in health[:10])
    raise HandoverError(f"{len(health)} node(s) hold only a health record, not an "
                        f"acceptance certificate: {lacks}",
                        hint="validate them with an acceptance suite (standard or full) "
                             "and certify, or hand the health records over knowingly "
                             "with --allow-health-records (recorded in the manifest)")


def _signers(chosen: list[Certificate], ring: Keyring) -> dict[str, list[str]]:
    """Each certificate's trusted signers; a certificate no key of the ring signed is
    refused, naming its file."""
    signed_by: dict[str, list[str]] = {}
    for c in chosen:
        try:
            signed_by[c.stem] = verify_signers(c.envelope, ring.keys)[2]
        except SignatureError as exc:
            raise HandoverError(f"{c.source}: not signed by a key of this hand-over ({exc})",
                                hint="pass the signer's public key with --pubkey, or its "
                                     "rotation with --key-statement") from exc
    return signed_by


def _row(c: Certificate, signers: list[str]) -> dict[str, Any]:
    p = c.statement["predicate"]
    subj = c.statement.get("subject") or []
    return {"file": f"certificates/{c.stem}{CERT_SUFFIX}", "page": f"reports/{c.stem}.html",
            "kind": c.kind, "name": c.name, "verdict": str(p.get("verdict")),
            "simulated": bool(p.get("simulated")), "reasons": [str(r) for r in
                                                              (p.get("reasons") or [])][:3],
            "subject": [str(s.get("name")) for s in subj if isinstance(s, dict)][:200],
            "valid_until": str((p.get("validity") or {}).get("not_after", "")),
            "signers": [k[:16] for k in signers]}


def readme(signers: list[str], rows: list[dict[str, Any]], statements: bool,
           tr: Callable[[str], str]) -> str:
    simulated = any(r["simulated"] for r in rows)
    lines = [tr("nodecert hand-over bundle"), "",
             tr("Open index.html in a browser: every certificate, its verdict and its page."),
             "", tr("Verify everything offline, in one command, with the signer's public key "
                    "that you received separately (not the copy in keys/):"), "",
             "  nodecert verify-bundle . --pubkey SIGNER.pub"
             + (" --allow-simulated" if simulated else "")
             + (f" --require-signers {len(signers)}" if len(signers) > 1 else ""), "",
             tr("The manifest is signed by:")]
    lines += [f"  {kid}" for kid in signers]
    lines += ["", tr("Compare these key ids with the ones the signer gave you "
                     "(nodecert keys id SIGNER.pub).")]
    if statements:
        lines += [tr("keys/ also holds key hand-overs and withdrawals; verify-bundle reads "
                     "them.")]
    return "\n".join(lines) + "\n"


__all__ = ["MANIFEST", "MANIFEST_TYPE", "Certificate", "Handover", "HandoverError", "build",
           "collect", "digest_files", "newest", "node_fault"]
