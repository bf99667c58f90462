"""Which signing keys a verifier trusts: the keys it was given, the keys they handed over
to, less the keys withdrawn.

Two signed key statements (DSSE, payload type KEY_PAYLOAD_TYPE):

- a **rotation** names the old key and carries the new public key; it is signed by the
  old key (the hand-over) and by the new one (proof its holder has it). A verifier who
  trusts the old key then trusts the new one; chains (A to B to C) are followed.
- a **withdrawal** names a key and why, from when; it is signed by a trusted key (the key
  itself, or one of its chain). A withdrawn key's signatures no longer count, from any
  time: what it signed must be signed again by a key that holds (`nodecert cosign`). A
  rotation made by a key after its withdrawal is not followed.

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


class KeyStatementError(NodecertError):
    """A key statement that cannot be read or used (bad input, exit 2)."""


@dataclass
class Keyring:
    """The keys trusted, by key id, and what the statements did (for verify's report)."""

    trusted: dict[str, PublicKey]
    withdrawn: dict[str, tuple[str, str]] = field(default_factory=dict)  # id: since, why
    notes: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[PublicKey]:
        return [k for kid, k in self.trusted.items() if kid not in self.withdrawn]


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


def withdraw(signer: PrivateKey, target: str, reason: str, out: Path, *,
             since: str | None = None, now: str | None = None) -> Path:
    """A signed withdrawal of the key `target` (a key id), written to out: its
    signatures count no more, and what it hands over from `since` (default: now) is not
    followed."""
    if len(target) != 64 or any(c not in "0123456789abcdef" for c in target):
        raise KeyStatementError(f"{target!r} is not a key id",
                                hint="pass the 64 hex digits `nodecert keys id` prints")
    if not reason.strip():
        raise KeyStatementError("a withdrawal needs a reason", hint="pass --reason TEXT")
    body = {"schema": SCHEMA, "action": "withdraw", "keyid": target,
            "reason": reason.strip(), "since": _utc(since or now or _now()),
            "issued": now or _now()}
    env = sign_envelope(canonical_json(body), KEY_PAYLOAD_TYPE, signer)
    write_atomic(str(out), json.dumps(env, indent=1).encode() + b"\n")
    return out


def read_statement(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(envelope, its unverified body) of a key statement file."""
    try:
        raw = path.read_bytes()[:MAX_STATEMENT + 1]
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


def _follow(anchors: list[PublicKey], rotations: list[tuple[str, dict[str, Any],
                                                          dict[str, Any]]],
            withdrawn: dict[str, tuple[str, str]]) -> Keyring:
    """The anchors and every key a trusted key handed over to (chains followed), a hand-
    over made by a withdrawn key from its withdrawal on excepted."""
    ring = Keyring({keyid(k): k for k in anchors}, dict(withdrawn))
    changed = True
    while changed:
        changed = False
        for src, env, b in rotations:
            new_id, old_id = str(b.get("to", "")), str(b.get("from", ""))
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
            if old_id in withdrawn and str(b.get("issued", "")) >= withdrawn[old_id][0]:
                ring.notes.append(f"{src}: ignored, made by key {old_id[:16]}... after it "
                                  "was withdrawn")
                continue
            ring.trusted[new_id] = new
            ring.notes.append(f"{src}: key {old_id[:16]}... handed over to {new_id[:16]}...")
            changed = True
    return ring


def resolve(anchors: list[PublicKey], statements: list[tuple[str, dict[str, Any],
                                                             dict[str, Any]]]) -> Keyring:
    """The keyring that anchors and statements (source, envelope, body) give.

    A withdrawal counts when a key trusted at some point of the resolution signed it,
    and withdrawals only add up: where statements contradict each other, fewer keys are
    trusted, never more."""
    rotations = [(src, env, b) for src, env, b in statements if b["action"] == "rotate"]
    withdrawals = [(src, env, b) for src, env, b in statements if b["action"] == "withdraw"]
    withdrawn: dict[str, tuple[str, str]] = {}
    by: dict[str, str] = {}
    while True:
        ring = _follow(anchors, rotations, withdrawn)
        grown = False
        for src, env, b in withdrawals:
            target = str(b.get("keyid", ""))
            signers = _signed_by(env, list(ring.trusted.values()))
            if target not in withdrawn and signers:
                withdrawn[target] = (str(b.get("since", "")), str(b.get("reason", ""))[:200])
                by[target] = f"{src}: key {target[:16]}... withdrawn by {signers[0][:16]}... " \
                             f"({withdrawn[target][1]})"
                grown = True
        if not grown:
            ring.notes += list(by.values())
            return ring


def load_keyring(pubkeys: list[Path], statements: list[Path]) -> Keyring:
    """The keyring of the public key files a verifier trusts and the key statements."""
    anchors = [load_public_key(p) for p in pubkeys]
    parsed = [(str(p), *read_statement(p)) for p in statements]
    return resolve(anchors, parsed)


__all__ = ["KEY_PAYLOAD_TYPE", "ROTATION_SUFFIX", "WITHDRAWAL_SUFFIX", "KeyStatementError",
           "Keyring", "load_keyring", "read_statement", "resolve", "rotate", "withdraw"]
