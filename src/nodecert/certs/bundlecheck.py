"""verify-bundle: a hand-over bundle checked offline, whole, in one pass.

In order: the manifest's signature against the keys the verifier trusts (given out of
band; the bundle's key statements extend or withdraw them, its copies of public keys
are never trusted by themselves), as many different signers as required; every file the
manifest lists, byte for byte (sha256 and size); nothing in the bundle the manifest does
not list (and no link, device or path outside it); then every certificate as `verify`
checks it, with the bundle's revocation list and the verifier's own (the signer's
current list: a bundle built before a revocation fails), each refused when older than
the verifier allows or than a list of the same signer it saw before. Every step is
reported; a bundle holds only when all hold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from nodecert.certs import revocations as revlist
from nodecert.certs.handover import MANIFEST, MANIFEST_TYPE, REVOCATIONS, SCHEMA
from nodecert.certs.keyring import (
    ROTATION_SUFFIX,
    WITHDRAWAL_SUFFIX,
    Keyring,
    KeyStatementError,
    load_keyring,
)
from nodecert.certs.signing import SignatureError, b64decode_any, verify_signers
from nodecert.certs.verify import (
    ReportError,
    Verification,
    read_envelope,
    verify_report,
    withdrawn_signers,
)
from nodecert.core.errors import ExitCode
from nodecert.core.textsafe import clean

MAX_FILES = 100_000


@dataclass
class BundleCheck:
    steps: list[tuple[str, bool, str]] = field(default_factory=list)
    certificates: dict[str, Verification] = field(default_factory=dict)  # file -> result
    # The certificates the manifest names (read before its signature is checked when the
    # bundle is refused first: counted and named so, never trusted).
    listed: list[str] = field(default_factory=list)

    @property
    def unchecked(self) -> list[str]:
        """Certificates the manifest names that were never checked (the bundle was
        refused before they were read)."""
        return [f for f in self.listed if f not in self.certificates]

    def step(self, name: str, ok: bool, detail: str) -> bool:
        self.steps.append((name, ok, detail))
        return ok

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(ok for _, ok, _ in self.steps) and all(
            v.ok for v in self.certificates.values())

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.ok else ExitCode.FAILED


def _walk(root: Path) -> tuple[list[str], list[str]]:
    """(regular files by relative path, what is not a regular file or directory)."""
    files, odd = [], []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = path.relative_to(root).as_posix()
            if stat.S_ISDIR(st.st_mode):
                continue
            if stat.S_ISREG(st.st_mode):
                files.append(rel)
            else:
                odd.append(rel)
        if len(files) > MAX_FILES:
            break
    return sorted(files), sorted(odd)


def _listed_path(rel: Any) -> bool:
    """A manifest path that names a file inside the bundle, and only that."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        return False
    p = PurePosixPath(rel)
    return not p.is_absolute() and ".." not in p.parts and p.as_posix() == rel


def _sha256(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def check(bundle: Path, pubkeys: list[Path], *, require_signers: int = 1,
          allow_simulated: bool = False, now: dt.datetime | None = None,
          allow_health_records: bool = False, revocations: Path | None = None,
          key_statements: list[Path] | None = None,
          freshness: revlist.Freshness | None = None) -> BundleCheck:
    """Check the bundle at `bundle` against the verifier's trusted keys (and the key
    statements it holds and the verifier gives). Every node certificate must be an
    acceptance certificate unless allow_health_records; the bundle's revocation list and
    the verifier's (`revocations`, the signer's current one) both apply, each as fresh
    as `freshness` asks."""
    if not bundle.is_dir():
        raise ReportError(f"{bundle}: not a directory", hint="pass the hand-over bundle's "
                                                             "directory")
    if not pubkeys:
        raise ReportError("no trusted public key given", hint="pass --pubkey SIGNER.pub: the "
                          "key you received from the signer, not the bundle's copy")
    if require_signers < 1:
        raise ReportError(f"--require-signers must be at least 1 (got {require_signers})")
    out = BundleCheck()
    files, odd = _walk(bundle)
    statements = [bundle / f for f in files if f.startswith("keys/") and
                  (f.endswith(ROTATION_SUFFIX) or f.endswith(WITHDRAWAL_SUFFIX))
                  ] + list(key_statements or [])
    try:
        ring = load_keyring(pubkeys, statements)
    except KeyStatementError as exc:
        out.step("keys", False, exc.what)
        return out
    if statements:
        out.step("keys", True, "; ".join(ring.notes) or "key statements change nothing")
    body = _manifest(out, bundle, files, ring, require_signers)
    if body is None:
        return out
    listed = body["files"]
    _files_step(out, bundle, listed, files, odd)
    certs = [r.get("file") for r in body.get("certificates") or [] if isinstance(r, dict)]
    out.listed = [str(c) for c in certs]
    if not out.step("certificates", bool(certs) and all(c in listed for c in certs),
                    f"{len(certs)} listed" if certs and all(c in listed for c in certs)
                    else "the manifest names no certificate, or one it does not list"):
        return out
    if any(not ok for name, ok, _ in out.steps if name == "files"):
        return out  # a bundle whose bytes changed: its certificates are not read
    lists = _lists_step(out, bundle / REVOCATIONS if REVOCATIONS in listed else None,
                        revocations, ring, freshness=freshness, now=now)
    if lists is None:
        return out
    if body.get("health_records_allowed"):
        out.step("health records", allow_health_records,
                 "the signer handed health records over (handover --allow-health-records): "
                 + ("accepted: --allow-health-records" if allow_health_records else
                    "refused: pass --allow-health-records to accept them"))
    for rel in certs:
        out.certificates[str(rel)] = verify_report(
            bundle / str(rel), [], ring=ring, require_signers=require_signers,
            allow_simulated=allow_simulated, lists=lists, now=now,
            require_acceptance=not allow_health_records, freshness=freshness)
    return out


def _manifest(out: BundleCheck, bundle: Path, files: list[str], ring: Keyring,
              require_signers: int) -> dict[str, Any] | None:
    """The manifest's body when it is there, signed by enough parties of the ring and a
    hand-over manifest; None (its step recorded) when not."""
    if MANIFEST not in files:
        out.step("manifest", False, f"no {MANIFEST}: not a hand-over bundle")
        return None
    try:
        manifest = read_envelope(bundle / MANIFEST)
    except ReportError as exc:  # a manifest that is not even JSON any more
        out.step("manifest", False, exc.what)
        return None
    out.listed = _names_listed(manifest)
    try:
        ptype, payload, signers = verify_signers(manifest, ring.keys)
    except SignatureError as exc:
        out.step("manifest", False, withdrawn_signers(manifest, ring) or f"signature: {exc}")
        return None
    parties = ring.parties(signers)
    enough = len(parties) >= require_signers
    names = ", ".join(f"{k[:16]}..." for k in signers)
    if not out.step("manifest", enough and ptype == MANIFEST_TYPE,
                    f"signed by {len(signers)} trusted key(s): {names}"
                    + ("" if len(parties) == len(signers) else
                       f" ({len(parties)} part{'y' if len(parties) == 1 else 'ies'}: a key "
                       "and its hand-over are one)")
                    + ("" if enough else f"; {require_signers} different signers required")
                    + ("" if ptype == MANIFEST_TYPE else f"; payload type {ptype!r}, "
                       f"expected {MANIFEST_TYPE}")):
        return None
    try:
        body = json.loads(payload)
        listed = body["files"]
        if body.get("schema") != SCHEMA or not isinstance(listed, dict):
            raise ValueError(f"schema {body.get('schema')!r}")
    except (ValueError, KeyError, TypeError) as exc:
        out.step("manifest", False, f"not a hand-over manifest ({exc})")
        return None
    return dict(body)


def _names_listed(envelope: dict[str, Any]) -> list[str]:
    """The certificate files a manifest names, read from its payload without trusting it:
    only to count and name what a refused bundle holds."""
    try:
        body = json.loads(b64decode_any(str(envelope.get("payload", ""))))
        return [clean(str(r["file"]))[:200] for r in body.get("certificates") or []
                if isinstance(r, dict) and "file" in r][:MAX_FILES]
    except (ValueError, TypeError, AttributeError):
        return []


def _lists_step(out: BundleCheck, inside: Path | None, given: Path | None, ring: Keyring, *,
                freshness: revlist.Freshness | None,
                now: dt.datetime | None) -> list[revlist.Register] | None:
    """Read the bundle's list and the verifier's, and say which apply (None: one of them
    cannot be trusted, and the bundle fails)."""
    regs: list[revlist.Register] = []
    said: list[str] = []
    for label, path in (("the bundle's", inside), ("--revocations", given)):
        if path is None:
            continue
        try:
            reg = revlist.load(path, ring.keys)
        except revlist.RevocationError as exc:
            out.step("revocations", False, f"{label}: {exc.what}")
            return None
        regs.append(reg)
        said.append(f"{label} list #{reg.sequence} issued {reg.issued}")
    fresh = [revlist.fresh(r, now or dt.datetime.now(dt.UTC),
                           freshness or revlist.Freshness()) for r in regs]
    out.step("revocations", all(ok for ok, _ in fresh),
             ("applied: " + "; ".join(said) if regs else
              "no revocation list in the bundle and none given (--revocations): whether a "
              "certificate was revoked since was NOT checked")
             + "".join(f"; {why}" for ok, why in fresh if not ok))
    return regs


def _files_step(out: BundleCheck, bundle: Path, listed: dict[str, Any], files: list[str],
                odd: list[str]) -> None:
    bad = [f"{clean(str(rel))[:120]}: not a path inside the bundle" for rel in listed
           if not _listed_path(rel)]
    changed, missing = [], []
    for rel, want in listed.items():
        if not _listed_path(rel):
            continue
        path = bundle / rel
        if rel not in files:
            missing.append(rel)
            continue
        digest, size = _sha256(path)
        if not isinstance(want, dict) or want.get("sha256") != digest \
                or want.get("size") != size:
            changed.append(rel)
    extra = [f for f in files if f not in listed and f != MANIFEST]
    problems = bad + [f"{r}: changed (sha256 differs from the manifest)" for r in changed] + [
        f"{r}: missing" for r in missing] + [
        f"{r}: not listed in the manifest" for r in extra] + [
        f"{r}: not a regular file (a link or device)" for r in odd]
    out.step("files", not problems, "; ".join(problems[:20]) + (
        f" (and {len(problems) - 20} more)" if len(problems) > 20 else "")
        if problems else f"{len(listed)} files, each as the manifest lists it, nothing else")


__all__ = ["BundleCheck", "check"]
