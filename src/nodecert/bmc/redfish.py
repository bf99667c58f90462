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

    def get(self, path: str) -> Any:
        """GET a /redfish/v1/ resource as JSON; BmcError on any failure."""
        if not path.startswith("/redfish/v1"):
            raise BmcError(f"not a Redfish path: {path!r}")
        token = base64.b64encode(
            f"{self.spec.username}:{self.spec.password.reveal()}".encode()).decode()
        headers = {"Authorization": f"Basic {token}", "Accept": "application/json",
                   "OData-Version": "4.0"}
        t0 = time.monotonic()
        for attempt in (1, 2):  # one retry on a connection the BMC closed between calls
            conn = self._connect()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read(MAX_BODY + 1)
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt == 2:
                    raise BmcError(f"BMC {self.spec.describe()} closed the connection "
                                   f"on GET {path}") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                raise BmcError(f"BMC {self.spec.describe()}: GET {path} failed: "
                               f"{type(exc).__name__}: {exc}") from None
        self.calls.append((path, resp.status, round(time.monotonic() - t0, 3)))
        if resp.status == 401:
            raise BmcError(f"BMC {self.spec.describe()} refused the credentials of user "
                           f"{self.spec.username} (HTTP 401)",
                           hint="check nodecert_bmc.username and the BMC password (its "
                                "file or vaulted nodecert_bmc_password)")
        if resp.status == 404:
            raise NotFound(f"BMC {self.spec.describe()}: GET {path} answered HTTP 404")
        if resp.status != 200:
            raise BmcError(f"BMC {self.spec.describe()}: GET {path} answered HTTP "
                           f"{resp.status}")
        if len(body) > MAX_BODY:
            raise BmcError(f"BMC {self.spec.describe()}: GET {path} sent more than "
                           f"{MAX_BODY} bytes")
        try:
            return json.loads(body, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise BmcError(f"BMC {self.spec.describe()}: GET {path} is not JSON a BMC may "
                           f"send ({str(exc)[:120]})") from None

    def evidence(self, name: str, path: str, doc: Any) -> Evidence:
        return Evidence.of(name, f"GET https://{self.spec.address}:{self.spec.port}{path}",
                           200, json.dumps(doc, indent=1, sort_keys=True)[:200_000])


__all__ = ["BmcError", "NotFound", "RedfishClient"]
