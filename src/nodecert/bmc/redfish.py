"""A Redfish client for one BMC: HTTPS with the BMC's certificate verified (against the
site's CA, or pinned by its SHA-256, checked before any credential is sent), HTTP Basic
authentication, a time limit on every request, and JSON answers only.

The password is read from its Secret when a request is built and goes nowhere else;
errors name the BMC and the resource, never the credentials.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import ssl
import time
from typing import Any

from nodecert.core.errors import NodecertError
from nodecert.core.textsafe import clean
from nodecert.inventory.bmc import BmcSpec
from nodecert_node.contract import Evidence

MAX_BODY = 8 * 1024 * 1024


class BmcError(NodecertError):
    """The BMC could not be read (unreachable, refused the credentials, untrusted)."""


class NotFound(BmcError):
    """The BMC answered HTTP 404: it has no such resource (an optional one is absent)."""


def _context(spec: BmcSpec) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=spec.ca_file) if spec.ca_file else \
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if spec.cert_sha256:
        # Pinned: the chain is not judged, the certificate itself is (compared before
        # anything is sent, in RedfishClient._connect).
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity parse in Python's json but are not JSON: a reading that is one
    would pass a threshold comparison it cannot pass, and no signed statement holds it."""
    raise ValueError(f"{name} is not a number a BMC may send")


class RedfishClient:
    def __init__(self, spec: BmcSpec) -> None:
        self.spec = spec
        self._ctx = _context(spec)
        self._conn: http.client.HTTPSConnection | None = None
        self.calls: list[tuple[str, int, float]] = []  # (path, status, seconds)

    def _connect(self) -> http.client.HTTPSConnection:
        if self._conn is not None:
            return self._conn
        conn = http.client.HTTPSConnection(self.spec.address, self.spec.port,
                                           timeout=self.spec.timeout_s, context=self._ctx)
        try:
            conn.connect()
        except ssl.SSLCertVerificationError as exc:
            conn.close()
            raise BmcError(f"BMC {self.spec.describe()}: its TLS certificate is not trusted "
                           f"({exc.verify_message})",
                           hint="give nodecert_bmc.ca_file the CA that signed it, or pin "
                                "the certificate with cert_sha256") from None
        except (OSError, ssl.SSLError) as exc:
            conn.close()
            raise BmcError(f"BMC {self.spec.describe()} unreachable: "
                           f"{type(exc).__name__}: {exc}",
                           hint="check the BMC's address, its network and that Redfish is "
                                "enabled on it") from None
        if self.spec.cert_sha256:
            sock = conn.sock
            der = sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) \
                else None
            got = hashlib.sha256(der or b"").hexdigest()
            if got != self.spec.cert_sha256:
                conn.close()
                raise BmcError(f"BMC {self.spec.describe()}: its certificate's SHA-256 is "
                               f"{got}, not the pinned {self.spec.cert_sha256}; nothing was "
                               "sent to it",
                               hint="if the BMC's certificate was replaced on purpose, pin "
                                    "the new one; otherwise something else answers at this "
                                    "address")
        self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, dict[str, str], Any]:
        """One request to a /redfish/v1/ resource: (status, headers, JSON body or None).
        401 is BmcError; any other status is the caller's to judge."""
        if not path.startswith("/redfish/v1"):
            raise BmcError(f"not a Redfish path: {path!r}")
        token = base64.b64encode(
            f"{self.spec.username}:{self.spec.password.reveal()}".encode()).decode()
        headers = {"Authorization": f"Basic {token}", "Accept": "application/json",
                   "OData-Version": "4.0"}
        if body is not None:
            headers["Content-Type"] = content_type
        t0 = time.monotonic()
        for attempt in (1, 2):  # one retry on a connection the BMC closed between calls
            conn = self._connect()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                raw = resp.read(MAX_BODY + 1)
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt == 2 or method != "GET":  # only a GET is safe to send again
                    raise BmcError(f"BMC {self.spec.describe()} closed the connection "
                                   f"on {method} {path}") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise BmcError(f"BMC {self.spec.describe()}: {method} {path} failed: "
                               f"{type(exc).__name__}: {exc}") from None
        self.calls.append((path, resp.status, round(time.monotonic() - t0, 3)))
        if resp.status == 401:
            raise BmcError(f"BMC {self.spec.describe()} refused the credentials of user "
                           f"{self.spec.username} (HTTP 401)",
                           hint="check nodecert_bmc.username and the BMC password (its "
                                "file or vaulted nodecert_bmc_password)")
        if len(raw) > MAX_BODY:
            raise BmcError(f"BMC {self.spec.describe()}: {method} {path} sent more than "
                           f"{MAX_BODY} bytes")
        doc: Any = None
        if raw.strip():
            try:
                doc = json.loads(raw, parse_constant=_refuse_constant)
            except ValueError as exc:
                if resp.status in (200, 201, 202):
                    raise BmcError(f"BMC {self.spec.describe()}: {method} {path} is not "
                                   f"JSON a BMC may send ({str(exc)[:120]})") from None
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, doc

    def get(self, path: str) -> Any:
        """GET a /redfish/v1/ resource as JSON; BmcError on any failure."""
        status, _, doc = self.request("GET", path)
        if status == 404:
            raise NotFound(f"BMC {self.spec.describe()}: GET {path} answered HTTP 404")
        if status != 200:
            said = message(doc)
            raise BmcError(f"BMC {self.spec.describe()}: GET {path} answered HTTP "
                           f"{status}" + (f": {said}" if said else ""))
        if doc is None:
            raise BmcError(f"BMC {self.spec.describe()}: GET {path} sent no JSON")
        return doc

    def evidence(self, name: str, path: str, doc: Any) -> Evidence:
        return Evidence.of(name, f"GET https://{self.spec.address}:{self.spec.port}{path}",
                           200, json.dumps(doc, indent=1, sort_keys=True)[:200_000])


def message(doc: Any) -> str:
    """What a Redfish error or task says (its messages, joined), as untrusted text."""
    if not isinstance(doc, dict):
        return ""
    inner = doc.get("error")
    err: dict[str, Any] = inner if isinstance(inner, dict) else doc
    msgs: list[str] = [err["message"]] if isinstance(err.get("message"), str) else []
    for key in ("@Message.ExtendedInfo", "Messages"):
        items = err.get(key)
        for m in items if isinstance(items, list) else []:
            if isinstance(m, dict) and isinstance(m.get("Message"), str):
                msgs.append(m["Message"])
    return clean("; ".join(dict.fromkeys(msgs)))[:500]


__all__ = ["BmcError", "NotFound", "RedfishClient", "message"]
