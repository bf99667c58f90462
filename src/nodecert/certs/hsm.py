"""Signing keys held in a hardware security module or a smart card, through PKCS#11.

A key is named by a PKCS#11 URI (RFC 7512) wherever nodecert takes a private key file:

    pkcs11:token=nodecert;object=signing-key

The module (the vendor's PKCS#11 library) comes from the URI's `module-path` query
attribute or NODECERT_PKCS11_MODULE; the user PIN from the file the URI's `pin-source`
names (mode 0600 or stricter) or from NODECERT_PKCS11_PIN -- never from the command
line. The private key never leaves the token: nodecert hashes the DSSE pre-
authentication encoding with SHA-256 and asks the token for a raw ECDSA signature
(CKM_ECDSA over the digest, which every token offers), then writes it in DER, as a
key file's signature is. ECDSA P-256 keys only (what HSMs and cards offer alike).

python-pkcs11 (the `hsm` extra) is imported only when a pkcs11: key is used.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pkcs11
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from pkcs11.util.ec import encode_ec_public_key

from nodecert.core.errors import NodecertError

SCHEME = "pkcs11:"
MODULE_ENV = "NODECERT_PKCS11_MODULE"
PIN_ENV = "NODECERT_PKCS11_PIN"


class HsmError(NodecertError):
    """A PKCS#11 key that cannot be found or used."""


@dataclass(frozen=True)
class KeyRef:
    token: str
    label: str
    module: str
    pin_source: str

    def __str__(self) -> str:  # what messages show: never the PIN
        return f"pkcs11:token={self.token};object={self.label}"


def parse_uri(uri: str) -> KeyRef:
    """The token, key label, module and PIN source a pkcs11: URI names."""
    if not uri.startswith(SCHEME):
        raise HsmError(f"{uri!r} is not a PKCS#11 URI", hint="pkcs11:token=T;object=LABEL")
    path, _, query = uri[len(SCHEME):].partition("?")
    attrs: dict[str, str] = {}
    for part in [p for p in path.split(";") if p] + [q for q in query.split("&") if q]:
        name, eq, value = part.partition("=")
        if not eq:
            raise HsmError(f"{uri}: {part!r} is not name=value")
        attrs[name.strip()] = unquote(value)
    module = attrs.get("module-path") or os.environ.get(MODULE_ENV, "")
    if "token" not in attrs or "object" not in attrs:
        raise HsmError(f"{uri}: names no token or no object",
                       hint="pkcs11:token=TOKEN-LABEL;object=KEY-LABEL")
    if not module:
        raise HsmError(f"{uri}: no PKCS#11 module",
                       hint=f"add ?module-path=/path/to/lib.so or set {MODULE_ENV}")
    return KeyRef(attrs["token"], attrs["object"], module, attrs.get("pin-source", ""))


MAX_PIN_FILE = 4096


def _pin(ref: KeyRef) -> str:
    if ref.pin_source:
        path = Path(ref.pin_source.removeprefix("file:"))
        try:  # checked on the descriptor read from: a file swapped in by name is not read
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            raise HsmError(f"{ref}: cannot read its PIN file {path}: {exc.strerror}",
                           hint="a plain file (not a link), mode 0600, owned by you") from exc
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise HsmError(f"{ref}: PIN file {path} is not a regular file")
            if st.st_uid != os.geteuid():
                raise HsmError(f"{ref}: PIN file {path} belongs to uid {st.st_uid}, not to "
                               f"the user running nodecert (uid {os.geteuid()})",
                               hint=f"chown {os.geteuid()} {path}, or keep your own copy")
            if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise HsmError(f"{ref}: PIN file {path} is accessible by others",
                               hint=f"chmod 600 {path}")
            raw = f.read(MAX_PIN_FILE + 1)
        if len(raw) > MAX_PIN_FILE:
            raise HsmError(f"{ref}: PIN file {path} is larger than a PIN file")
        return raw.decode("utf-8", "replace").strip()
    pin = os.environ.get(PIN_ENV, "")
    if not pin:
        raise HsmError(f"{ref}: no PIN", hint=f"add ?pin-source=/path/to/pin-file (0600) to "
                                              f"the URI, or set {PIN_ENV}")
    return pin


class HsmKey:
    """A private key on a token: signs, and gives its public key; nothing else."""

    def __init__(self, ref: KeyRef) -> None:
        self.ref = ref
        try:
            lib = pkcs11.lib(ref.module)
            self._token = lib.get_token(token_label=ref.token)
        except (pkcs11.PKCS11Error, RuntimeError, OSError) as exc:
            raise HsmError(f"{ref}: token not found in {ref.module} "
                           f"({type(exc).__name__}: {exc})") from exc
        self._pin = _pin(ref)
        self._public = self._load_public()

    def _session(self) -> Any:
        try:
            return self._token.open(user_pin=self._pin)
        except pkcs11.PKCS11Error as exc:
            raise HsmError(f"{self.ref}: cannot log in ({type(exc).__name__}): check "
                           "the PIN") from exc

    def _load_public(self) -> ec.EllipticCurvePublicKey:
        with self._session() as session:
            try:
                pub = session.get_key(object_class=pkcs11.ObjectClass.PUBLIC_KEY,
                                      key_type=pkcs11.KeyType.EC, label=self.ref.label)
                session.get_key(object_class=pkcs11.ObjectClass.PRIVATE_KEY,
                                key_type=pkcs11.KeyType.EC, label=self.ref.label)
            except (pkcs11.NoSuchKey, pkcs11.MultipleObjectsReturned) as exc:
                raise HsmError(f"{self.ref}: {type(exc).__name__}: an EC key pair labelled "
                               f"{self.ref.label!r} must be on the token, once") from exc
            key = serialization.load_der_public_key(encode_ec_public_key(pub))
        if not isinstance(key, ec.EllipticCurvePublicKey) \
                or not isinstance(key.curve, ec.SECP256R1):
            raise HsmError(f"{self.ref}: not an ECDSA P-256 key")
        return key

    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._public

    def sign_digest_der(self, data: bytes) -> bytes:
        """ECDSA P-256 over SHA-256(data), DER-encoded, made on the token."""
        digest = hashlib.sha256(data).digest()
        with self._session() as session:
            key = session.get_key(object_class=pkcs11.ObjectClass.PRIVATE_KEY,
                                  key_type=pkcs11.KeyType.EC, label=self.ref.label)
            raw = key.sign(digest, mechanism=pkcs11.Mechanism.ECDSA)
        half = len(raw) // 2
        return encode_dss_signature(int.from_bytes(raw[:half], "big"),
                                    int.from_bytes(raw[half:], "big"))


def open_key(uri: str) -> HsmKey:
    return HsmKey(parse_uri(uri))


__all__ = ["MODULE_ENV", "PIN_ENV", "SCHEME", "HsmError", "HsmKey", "KeyRef", "open_key",
           "parse_uri"]
