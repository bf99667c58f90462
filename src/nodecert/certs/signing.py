"""Signing keys and DSSE envelopes.

DSSE (github.com/secure-systems-lab/dsse, protocol v1): the signature covers
PAE(payloadType, payload) = "DSSEv1" SP len(type) SP type SP len(body) SP body,
so neither the payload nor its type can be swapped. We implement PAE ourselves
on `cryptography` (already a dependency through paramiko) rather than pull in
securesystemslib: the envelope is a few lines of a frozen spec, and keeping the
crypto in one well-audited library keeps a later PKCS#11/HSM move a key-loading
change. ECDSA P-256 (SHA-256) is the default because HSMs and cloud KMSs all
offer it; Ed25519 is available.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from nodecert.core.errors import NodecertError

KEY_TYPES = ("ecdsa-p256", "ed25519")
PKCS11_SCHEME = "pkcs11:"


@runtime_checkable
class TokenKey(Protocol):
    """A private key that stays on a token (PKCS#11: certs.hsm): it signs, and gives its
    public key."""

    def public_key(self) -> ec.EllipticCurvePublicKey: ...

    def sign_digest_der(self, data: bytes) -> bytes: ...


PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | TokenKey
PublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class SigningKeyError(NodecertError):
    """A signing key cannot be created or used."""


class SignatureError(Exception):
    """A DSSE envelope does not verify; the message says exactly why."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def keyid(pub: PublicKey) -> str:
    """sha256 of the public key's DER SubjectPublicKeyInfo: stable, HSM-independent."""
    der = pub.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    keyid: str


def init_key(out_dir: Path, key_type: str = "ecdsa-p256", name: str = "nodecert") -> KeyPair:
    """Create NAME.key (0600, PKCS#8 PEM) and NAME.pub in out_dir; never overwrite."""
    if key_type not in KEY_TYPES:
        raise SigningKeyError(f"unknown key type {key_type!r}",
                              hint=f"use one of {', '.join(KEY_TYPES)}")
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    priv_path, pub_path = out_dir / f"{name}.key", out_dir / f"{name}.pub"
    for p in (priv_path, pub_path):
        if p.exists():
            raise SigningKeyError(f"{p} already exists: refusing to overwrite a signing key",
                            hint="choose another --out directory, or move the old key away "
                                 "yourself (reports it signed stay verifiable only with its "
                                 ".pub)")
    key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey = (
        ec.generate_private_key(ec.SECP256R1()) if key_type == "ecdsa-p256"
        else ed25519.Ed25519PrivateKey.generate())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # Created 0600 from the start (O_EXCL: no race, no overwrite), never chmod'ed later.
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub_path.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return KeyPair(priv_path, pub_path, keyid(key.public_key()))


def load_private_key(path: Path | str) -> PrivateKey:
    """The signing key, refused when group- or world-accessible; a pkcs11: URI names a
    key on a token (an HSM, a smart card), which never leaves it."""
    if str(path).startswith(PKCS11_SCHEME):
        # python-pkcs11 (the hsm extra) is loaded only for a key that needs it.
        hsm = importlib.import_module("nodecert.certs.hsm")
        key: PrivateKey = hsm.open_key(str(path))
        return key
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise SigningKeyError(f"cannot read signing key {path}: {exc.strerror}",
                        hint="create one with `nodecert keys init`") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningKeyError(f"signing key {path} is accessible by others (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}): refusing to use it",
                        hint=f"chmod 600 {path}, and consider the key exposed: rotate it")
    try:
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path} is not an unencrypted PEM private key: {exc}") from exc
    if isinstance(loaded, ec.EllipticCurvePrivateKey) \
            and isinstance(loaded.curve, ec.SECP256R1):
        return loaded
    if isinstance(loaded, ed25519.Ed25519PrivateKey):
        return loaded
    raise SigningKeyError(f"{path}: unsupported key type {type(loaded).__name__}",
                    hint=f"use one of {', '.join(KEY_TYPES)}")


def load_public_key(path: Path) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise SigningKeyError(f"cannot read public key {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise SigningKeyError(f"{path} is not a PEM public key: {exc}") from exc
    if isinstance(key, ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey):
        return key
    raise SigningKeyError(f"{path}: unsupported public key type {type(key).__name__}")


def _sign(key: PrivateKey, data: bytes) -> bytes:
    if isinstance(key, TokenKey):
        return key.sign_digest_der(data)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    return key.sign(data)


def _verify(pub: PublicKey, sig: bytes, data: bytes) -> bool:
    try:
        if isinstance(pub, ec.EllipticCurvePublicKey):
            pub.verify(sig, data, ec.ECDSA(hashes.SHA256()))
        else:
            pub.verify(sig, data)
    except InvalidSignature:
        return False
    return True


def sign_envelope(payload: bytes, payload_type: str, key: PrivateKey) -> dict[str, Any]:
    sig = _sign(key, pae(payload_type, payload))
    return {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": keyid(key.public_key()),
                            "sig": base64.b64encode(sig).decode()}]}


def b64decode_any(text: str) -> bytes:
    """Base64 as DSSE allows it: standard or URL-safe alphabet, padded or not; anything
    else raises ValueError."""
    t = text.strip()
    if "-" in t or "_" in t:
        t = t.replace("-", "+").replace("_", "/")
    t += "=" * (-len(t) % 4)
    return base64.b64decode(t, validate=True)


def _parts(envelope: Any) -> tuple[str, bytes, list[Any]]:
    """(payloadType, payload, signatures) of something shaped like a DSSE envelope."""
    if not isinstance(envelope, dict):
        raise SignatureError("not a DSSE envelope (expected a JSON object)")
    missing = [k for k in ("payloadType", "payload", "signatures") if k not in envelope]
    if missing:
        raise SignatureError(f"not a DSSE envelope: missing {', '.join(missing)}")
    ptype, sigs = envelope["payloadType"], envelope["signatures"]
    if not isinstance(ptype, str) or not isinstance(sigs, list) or not sigs:
        raise SignatureError("not a DSSE envelope: payloadType must be a string and "
                             "signatures a non-empty list")
    try:
        payload = b64decode_any(str(envelope["payload"]))
    except ValueError as exc:
        raise SignatureError(f"payload is not valid base64: {exc}") from exc
    return ptype, payload, sigs


def verify_signers(envelope: Any, trusted: list[PublicKey]) -> tuple[str, bytes, list[str]]:
    """(payloadType, payload, the key ids of every trusted key whose signature verifies,
    each once, in the envelope's order); SignatureError when none does."""
    ptype, payload, sigs = _parts(envelope)
    by_id = {keyid(k): k for k in trusted}
    signed = pae(ptype, payload)
    good: list[str] = []
    seen: list[str] = []
    for s in sigs:
        if not isinstance(s, dict):
            continue
        kid = str(s.get("keyid", ""))
        try:
            raw = b64decode_any(str(s.get("sig", "")))
        except ValueError:
            seen.append(f"{kid[:16] or '?'}: signature is not valid base64")
            continue
        # A keyid is only a hint: try the named key first, then every trusted key.
        candidates = ([by_id[kid]] if kid in by_id else []) + [
            k for i, k in by_id.items() if i != kid and i not in good]
        match = next((keyid(pub) for pub in candidates if _verify(pub, raw, signed)), None)
        if match is not None:
            if match not in good:
                good.append(match)
            continue
        seen.append(f"{kid[:16] or '?'}: " + ("signature does not match the payload (the "
                                              "report was altered, or signed by another key)"
                                              if kid in by_id else
                                              "signed by a key that is not trusted"))
    if not good:
        raise SignatureError("no valid signature from a trusted key: " + "; ".join(seen))
    return ptype, payload, good


def verify_envelope(envelope: Any, trusted: list[PublicKey]) -> tuple[str, bytes, str]:
    """(payloadType, payload, keyid) when a signature verifies with a trusted key."""
    ptype, payload, good = verify_signers(envelope, trusted)
    return ptype, payload, good[0]


def add_signature(envelope: Any, key: PrivateKey) -> dict[str, Any]:
    """The envelope with one more signature, by `key`, over the same payload (a second
    party's: QA after the integrator). Refused when that key has signed it already."""
    ptype, payload, sigs = _parts(envelope)
    kid = keyid(key.public_key())
    if any(isinstance(s, dict) and s.get("keyid") == kid for s in sigs):
        raise SigningKeyError(f"key {kid[:16]}... has signed this already",
                              hint="a second signature must come from another party's key")
    sig = _sign(key, pae(ptype, payload))
    return {**envelope, "signatures": [*sigs, {"keyid": kid,
                                               "sig": base64.b64encode(sig).decode()}]}


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON (sorted keys, no whitespace, UTF-8) for digests and payloads."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


__all__ = [
    "KEY_TYPES",
    "KeyPair",
    "SignatureError",
    "SigningKeyError",
    "add_signature",
    "b64decode_any",
    "canonical_json",
    "init_key",
    "keyid",
    "load_private_key",
    "load_public_key",
    "pae",
    "sign_envelope",
    "verify_envelope",
    "verify_signers",
]
