"""Which signing keys a verifier trusts: the keys it was given, the keys they handed over
to, less the keys withdrawn.

Two signed key statements (DSSE, payload type KEY_PAYLOAD_TYPE):

- a **rotation** names the old key and carries the new public key; it is signed by the
  old key (the hand-over) and by the new one (proof its holder has it). A verifier who
  trusts the old key then trusts the new one; chains (A to B to C) are followed.
- a **withdrawal** names a key and why, from when; it is signed by a trusted key (the key
  itself, or one of its chain). A withdrawn key's signatures no longer count, from any
  time: what it signed must be signed again by a key that holds (`nodecert cosign`).
  A hand-over the withdrawn key made is followed only when the withdrawal keeps it
  (`keep`: the key ids it handed over to that still stand; the withdrawal's own signer
  always) or a third key that still holds countersigned it. Never by its own date: the
  holder of a stolen key can write any date, so a hand-over's `issued` decides nothing.

Pure over parsed statements; verify, verify-bundle and the revocation list take the
resulting `Keyring`.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from nodecert.certs.signing import (
    PrivateKey,
    PublicKey,
    SignatureError,
    b64decode_any,
    canonical_json,
    init_key,
    keyid,
    load_public_key,
    sign_envelope,
    verify_signers,
)
from nodecert.core.errors import NodecertError
from nodecert_node.contract import write_atomic

KEY_PAYLOAD_TYPE = "application/vnd.nodecert.key+json"
SCHEMA = "nodecert.key/v1"
ROTATION_SUFFIX = ".rotation.dsse.json"
WITHDRAWAL_SUFFIX = ".withdrawal.dsse.json"
MAX_STATEMENT = 64 * 1024


Statement = tuple[str, dict[str, Any], dict[str, Any]]  # source, envelope, parsed body


class KeyStatementError(NodecertError):
    """A key statement that cannot be read or used (bad input, exit 2)."""


@dataclass
class Keyring:
    """The keys trusted, by key id, and what the statements did (for verify's report)."""

    trusted: dict[str, PublicKey]
    withdrawn: dict[str, tuple[str, str]] = field(default_factory=dict)  # id: since, why
    notes: list[str] = field(default_factory=list)
    # A withdrawn key id: the key ids its hand-overs may still go to (every withdrawal of
    # it that counted agreeing: the intersection).
    keeps: dict[str, frozenset[str]] = field(default_factory=dict)
    # Key id: the key id it was handed over from (a rotation both signed): one party.
    linked: dict[str, str] = field(default_factory=dict)

    @property
    def keys(self) -> list[PublicKey]:
        return [k for kid, k in self.trusted.items() if kid not in self.withdrawn]

    def party(self, kid: str) -> str:
        """The first key of `kid`'s lineage: a key and every key it handed over to (or
        was handed over from) are one party, one signer however many of them sign."""
        seen = {kid}
        while kid in self.linked and self.linked[kid] not in seen:
            kid = self.linked[kid]
            seen.add(kid)
        return min(seen) if kid in self.linked else kid

    def parties(self, kids: list[str]) -> list[str]:
        """The different parties among these signers' key ids, in order."""
        out: dict[str, str] = {}
        for k in kids:
            out.setdefault(self.party(k), k)
        return list(out.values())


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _pem(pub: PublicKey) -> str:
    return pub.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def rotate(old: PrivateKey, out_dir: Path, name: str, key_type: str = "ecdsa-p256",
           now: str | None = None) -> tuple[Path, Path, Path]:
    """A new key pair NAME.key/NAME.pub in out_dir and NAME.rotation.dsse.json, signed by
    the old key and the new one. Returns (private, public, statement)."""
    pair = init_key(out_dir, key_type, name)
    new = serialization.load_pem_private_key(pair.private.read_bytes(), password=None)
    body = {"schema": SCHEMA, "action": "rotate", "from": keyid(old.public_key()),
            "to": pair.keyid, "public_key": _pem(new.public_key()),  # type: ignore[arg-type]
            "issued": now or _now()}
    env = sign_envelope(canonical_json(body), KEY_PAYLOAD_TYPE, old)
    env["signatures"] += sign_envelope(canonical_json(body), KEY_PAYLOAD_TYPE,
                                       new)["signatures"]  # type: ignore[arg-type]
    path = out_dir / f"{name}{ROTATION_SUFFIX}"
    write_atomic(str(path), json.dumps(env, indent=1).encode() + b"\n")
    return pair.private, pair.public, path


def _utc(text: str) -> str:
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise KeyStatementError(f"{text!r} is not a time",
                                hint="ISO 8601, e.g. 2026-12-01T00:00:00+00:00") from exc
    t = t if t.tzinfo else t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC).isoformat(timespec="seconds")


def _keyid_arg(text: str, what: str) -> str:
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise KeyStatementError(f"{text!r} is not a key id ({what})",
                                hint="pass the 64 hex digits `nodecert keys id` prints")
    return text


def withdraw(signer: PrivateKey, target: str, reason: str, out: Path, *,
             since: str | None = None, now: str | None = None,
             keep: tuple[str, ...] = ()) -> Path:
    """A signed withdrawal of the key `target` (a key id), written to out: its
    signatures count no more, and of its hand-overs only those to `keep` (and to the
    signer's own key) are still followed. `since` says from when it is not to be
    trusted (default: now), for the record."""
    _keyid_arg(target, "the key to withdraw")
    if not reason.strip():
        raise KeyStatementError("a withdrawal needs a reason", hint="pass --reason TEXT")
    kept = {_keyid_arg(k, "--keep") for k in keep}
    signer_id = keyid(signer.public_key())
    if signer_id != target:
        kept.add(signer_id)  # the withdrawer vouches for itself by signing
    body = {"schema": SCHEMA, "action": "withdraw", "keyid": target,
            "reason": reason.strip(), "since": _utc(since or now or _now()),
            "issued": now or _now(), "keep": sorted(kept - {target})}
    env = sign_envelope(canonical_json(body), KEY_PAYLOAD_TYPE, signer)
    write_atomic(str(out), json.dumps(env, indent=1).encode() + b"\n")
    return out


def read_statement(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(envelope, its unverified body) of a key statement file."""
    try:
        with path.open("rb") as f:  # at most one byte past the limit is ever read
            raw = f.read(MAX_STATEMENT + 1)
        if len(raw) > MAX_STATEMENT:
            raise ValueError("larger than a key statement")
        env = json.loads(raw)
        body = json.loads(_payload(env))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise KeyStatementError(f"{path}: not a key statement ({exc})",
                                hint=f"pass a *{ROTATION_SUFFIX} or *{WITHDRAWAL_SUFFIX} "
                                     "that `nodecert keys` wrote") from exc
    if not isinstance(body, dict) or body.get("schema") != SCHEMA \
            or body.get("action") not in ("rotate", "withdraw"):
        raise KeyStatementError(f"{path}: not a key statement (schema "
                                f"{body.get('schema') if isinstance(body, dict) else '?'!r})")
    return env, body


def _payload(env: Any) -> bytes:
    if not isinstance(env, dict) or env.get("payloadType") != KEY_PAYLOAD_TYPE:
        raise ValueError(f"payload type is not {KEY_PAYLOAD_TYPE}")
    return b64decode_any(str(env["payload"]))


def _rotation_key(body: dict[str, Any]) -> PublicKey | None:
    try:
        key = serialization.load_pem_public_key(str(body.get("public_key", "")).encode())
    except ValueError:
        return None
    return key if isinstance(key, ec.EllipticCurvePublicKey
                             | ed25519.Ed25519PublicKey) else None


def _signed_by(env: dict[str, Any], keys: list[PublicKey]) -> list[str]:
    try:
        return verify_signers(env, keys)[2]
    except SignatureError:
        return []


def _countersigned(env: dict[str, Any], ring: Keyring, old_id: str, new_id: str) -> bool:
    """Whether a third key, trusted and not withdrawn, also signed this hand-over."""
    others = [k for kid, k in ring.trusted.items()
              if kid not in (old_id, new_id) and kid not in ring.withdrawn]
    return bool(_signed_by(env, others))


def _follow(anchors: list[PublicKey], rotations: list[Statement],
            withdrawn: dict[str, tuple[str, str]],
            keeps: dict[str, frozenset[str]]) -> Keyring:
    """The anchors and every key a trusted key handed over to (chains followed); of a
    withdrawn key's hand-overs only those its withdrawal keeps or a third key that holds
    countersigned."""
    ring = Keyring({keyid(k): k for k in anchors}, dict(withdrawn), keeps=dict(keeps))
    changed = True
    while changed:
        changed = False
        for src, env, b in rotations:
            new_id, old_id = str(b.get("to", "")), str(b.get("from", ""))
            if new_id in ring.trusted and old_id in ring.trusted \
                    and new_id not in ring.linked and old_id != new_id \
                    and old_id in _signed_by(env, [ring.trusted[old_id]]) \
                    and new_id in _signed_by(env, [ring.trusted[new_id]]):
                ring.linked[new_id] = old_id  # both given as anchors: still one party
            if new_id in ring.trusted or old_id not in ring.trusted:
                continue
            new = _rotation_key(b)
            if new is None or keyid(new) != new_id:
                ring.notes.append(f"{src}: ignored, its new key does not match its key id")
                continue
            if old_id not in _signed_by(env, [ring.trusted[old_id]]) \
                    or new_id not in _signed_by(env, [new]):
                ring.notes.append(f"{src}: ignored, not signed by both the old and the "
                                  "new key")
                continue
            if old_id in withdrawn and new_id not in keeps.get(old_id, frozenset()) \
                    and not _countersigned(env, ring, old_id, new_id):
                ring.notes.append(
                    f"{src}: ignored, key {old_id[:16]}... is withdrawn and its withdrawal "
                    f"does not keep this hand-over (whatever date the hand-over states), "
                    "nor did a key that holds countersign it")
                continue
            ring.trusted[new_id] = new
            ring.linked[new_id] = old_id
            ring.notes.append(f"{src}: key {old_id[:16]}... handed over to {new_id[:16]}...")
            changed = True
    return ring


def _fixpoint(anchors: list[PublicKey], rotations: list[Statement],
              withdrawals: list[Statement]) -> tuple[Keyring, dict[int, list[str]]]:
    """The keyring once no further withdrawal counts, and the withdrawals that counted
    (by index) with their trusted signers."""
    withdrawn: dict[str, tuple[str, str]] = {}
    keeps: dict[str, frozenset[str]] = {}
    counted: dict[int, list[str]] = {}
    by: dict[str, str] = {}
    while True:
        ring = _follow(anchors, rotations, withdrawn, keeps)
        grown = False
        for i, (src, env, b) in enumerate(withdrawals):
            target = str(b.get("keyid", ""))
            signers = _signed_by(env, list(ring.trusted.values()))
            if i in counted or not signers:
                continue
            counted[i] = signers
            kept = frozenset(str(k) for k in b.get("keep") or [] if isinstance(k, str))
            # Two withdrawals of one key keep only what both keep: fewer keys, never more.
            keeps[target] = keeps[target] & kept if target in keeps else kept
            if target not in withdrawn:
                withdrawn[target] = (str(b.get("since", "")), str(b.get("reason", ""))[:200])
                by[target] = f"{src}: key {target[:16]}... withdrawn by {signers[0][:16]}... " \
                             f"({withdrawn[target][1]})"
            grown = True
        if not grown:
            ring.notes += list(by.values())
            return ring, counted


def _gone_without(by_target: dict[str, list[list[str]]], signer: str, target: str) -> bool:
    """Whether `signer` is withdrawn by a withdrawal `target` did not sign."""
    return any(target not in signers for signers in by_target.get(signer, []))


def resolve(anchors: list[PublicKey], statements: list[Statement]) -> Keyring:
    """The keyring that anchors and statements (source, envelope, body) give.

    A withdrawal counts when a key trusted at some point of the resolution signed it,
    and withdrawals only add up: where statements contradict each other, fewer keys are
    trusted, never more. One exception, so that a thief cannot use a stolen key its
    owner withdrew: a withdrawal signed only by keys that a withdrawal its target did not
    sign withdrew does not count (two keys withdrawing each other stay both withdrawn:
    nobody can tell which holder is the thief)."""
    rotations = [(src, env, b) for src, env, b in statements if b["action"] == "rotate"]
    withdrawals = [(src, env, b) for src, env, b in statements if b["action"] == "withdraw"]
    dropped: list[str] = []
    while True:
        ring, counted = _fixpoint(anchors, rotations, withdrawals)
        by_target: dict[str, list[list[str]]] = {}
        for i, signers in counted.items():
            by_target.setdefault(str(withdrawals[i][2].get("keyid", "")), []).append(signers)
        drop = [i for i, signers in counted.items()
                if all(_gone_without(by_target, s, str(withdrawals[i][2].get("keyid", "")))
                       for s in signers)]
        if not drop:
            ring.notes += dropped
            return ring
        dropped += [f"{withdrawals[i][0]}: ignored, signed only by withdrawn keys" for i in drop]
        withdrawals = [w for i, w in enumerate(withdrawals) if i not in drop]


def load_keyring(pubkeys: list[Path], statements: list[Path]) -> Keyring:
    """The keyring of the public key files a verifier trusts and the key statements."""
    anchors = [load_public_key(p) for p in pubkeys]
    parsed = [(str(p), *read_statement(p)) for p in statements]
    return resolve(anchors, parsed)


__all__ = ["KEY_PAYLOAD_TYPE", "ROTATION_SUFFIX", "WITHDRAWAL_SUFFIX", "KeyStatementError",
           "Keyring", "load_keyring", "read_statement", "resolve", "rotate", "withdraw"]
