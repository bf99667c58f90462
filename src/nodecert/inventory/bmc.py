"""A node's BMC (`nodecert_bmc` in the inventory): where it is, how it is reached and
what the site expects of it. Read on the control side only: the controller talks to
the BMC out of band; nothing of it is sent to the node.

    nodecert_bmc:
      address: 10.10.0.21            # the BMC's own address (not the host's)
      protocol: redfish              # redfish (default) or ipmi (ipmitool lanplus)
      port: 443                      # optional: 443 for Redfish, 623 for IPMI
      ca_file: /etc/nodecert/bmc-ca.pem      # Redfish: the CA that signed the BMC's
      cert_sha256: "AB:CD:..."       #   certificate, or the certificate's own SHA-256
                                     #   (one of the two: TLS is never unverified)
      username: nodecert
      password_file: /etc/nodecert/bmc.pass  # or a vaulted nodecert_bmc_password
      firmware: ["1.18.2"]           # optional: the site's golden BMC firmware version(s)
      psu_spares: 1                  # optional: supplies that may fail at peak draw (N+1)
      psu_capacity_w: 3000           # optional: each supply's rating, where the BMC does
                                     #   not report it (IPMI)
      sample_s: 10                   # optional: how often power and temperatures are read
                                     #   while the node's checks run
      timeout_s: 10                  # optional: each request's limit

The password is read when a run starts (a file, or `nodecert_bmc_password` encrypted
with ansible-vault) and kept in memory only: it is never written to a run file, a log
or a certificate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.core.errors import InventoryError
from nodecert.core.yamldoc import keyed
from nodecert.transport.become import Secret, is_vaulted, read_password_file

KEYS = {"address", "protocol", "port", "ca_file", "cert_sha256", "username", "password_file",
        "firmware", "psu_spares", "psu_capacity_w", "sample_s", "timeout_s"}
PROTOCOLS = ("redfish", "ipmi")
PASSWORD_VAR = "nodecert_bmc_password"
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
_USER = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


def _int(raw: Any, key: str, low: int, high: int) -> tuple[int | None, str | None]:
    try:
        v = int(raw)
    except (TypeError, ValueError):
        return None, f"{key} must be an integer, got {raw!r}"
    if isinstance(raw, bool) or not low <= v <= high:
        return None, f"{key} must be between {low} and {high}, got {raw!r}"
    return v, None


def parse_bmc(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(spec, None) or (None, what is wrong)."""
    raw, why = keyed(raw, KEYS)
    if raw is None:
        return None, why
    address = str(raw.get("address") or "")
    if not _ADDRESS.match(address):
        return None, f"address {address!r} is not a host name or an IP address"
    protocol = str(raw.get("protocol") or "redfish")
    if protocol not in PROTOCOLS:
        return None, f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}"
    out: dict[str, Any] = {"address": address, "protocol": protocol}
    port, why = _int(raw.get("port", 443 if protocol == "redfish" else 623), "port", 1, 65535)
    if why:
        return None, why
    out["port"] = port
    user = str(raw.get("username") or "")
    if not _USER.match(user):
        return None, "username must be set (letters, digits, _ . @ -)"
    out["username"] = user
    if protocol == "redfish":
        ca, pin = raw.get("ca_file"), raw.get("cert_sha256")
        if bool(ca) == bool(pin):
            return None, ("a Redfish BMC needs exactly one of ca_file (the CA that signed its "
                          "certificate) or cert_sha256 (the certificate's SHA-256): nodecert "
                          "never talks to a BMC whose certificate it cannot verify")
        if pin:
            digest = str(pin).replace(":", "").lower()
            if not _SHA.match(digest):
                return None, f"cert_sha256 {pin!r} is not a SHA-256 (64 hex digits)"
            out["cert_sha256"] = digest
        else:
            out["ca_file"] = str(ca)
    if raw.get("password_file"):
        out["password_file"] = str(raw["password_file"])
    fw = raw.get("firmware")
    if fw is not None:
        out["firmware"] = [str(x) for x in (fw if isinstance(fw, list) else [fw])]
    if raw.get("psu_capacity_w") is not None:
        cap, why = _int(raw["psu_capacity_w"], "psu_capacity_w", 100, 100_000)
        if why:
            return None, why
        out["psu_capacity_w"] = cap
    for key, default, low, high in (("psu_spares", 1, 0, 16), ("sample_s", 10, 1, 3600),
                                    ("timeout_s", 10, 1, 300)):
        v, why = _int(raw.get(key, default), key, low, high)
        if why:
            return None, why
        out[key] = v
    return out, None


@dataclass(frozen=True)
class BmcSpec:
    """A host's BMC with its credentials resolved (in memory only)."""

    host: str
    # how it is reached, and who we are to it
    address: str
    protocol: str
    port: int
    username: str
    password: Secret
    # how its TLS certificate is trusted: a CA file, or the certificate's own digest
    ca_file: str | None = None
    cert_sha256: str | None = None
    # what the order says of it, and how it is read
    firmware: tuple[str, ...] = ()
    psu_spares: int = 1
    psu_capacity_w: int | None = None
    sample_s: int = 10
    timeout_s: int = 10

    def describe(self) -> str:
        """What a report may say of the BMC (never the credentials)."""
        return f"{self.protocol} {self.address}:{self.port}"

    def public(self) -> dict[str, Any]:
        return {"address": self.address, "protocol": self.protocol, "port": self.port,
                "verified_by": ("pinned certificate" if self.cert_sha256 else
                                f"CA {self.ca_file}" if self.ca_file else "ipmi rakp"),
                "firmware_expected": list(self.firmware), "psu_spares": self.psu_spares}


def require_ca_file(ca: str | None, whose: str, signed: str) -> None:
    """A named CA file must be there: a BMC's TLS is never trusted on a missing one."""
    if ca and not Path(ca).expanduser().is_file():
        raise InventoryError(f"{whose} ca_file {ca} does not exist",
                             hint=f"give the PEM file of the CA that signed {signed}, or pin "
                                  "it with cert_sha256")


def bmc_spec(host: str, spec: dict[str, Any], hv: dict[str, Any],
             vault_unlocked: bool) -> BmcSpec:
    """The host's BMC with its password read (a file, or the vaulted variable)."""
    secret: Secret | None = None
    vaulted = hv.get(PASSWORD_VAR)
    if spec.get("password_file"):
        secret = read_password_file(Path(spec["password_file"]).expanduser(),
                                    f"host {host}: BMC password file")
    elif is_vaulted(vaulted):
        if not vault_unlocked:
            raise InventoryError(f"host {host}: {PASSWORD_VAR} is vault-encrypted and no "
                                 "vault password was given",
                                 hint="add --vault-password-file FILE (or set "
                                      "ANSIBLE_VAULT_PASSWORD_FILE)")
        try:
            secret = Secret(str(vaulted))
        except Exception as exc:  # ansible's decryption errors share no base class
            raise InventoryError(f"host {host}: {PASSWORD_VAR} could not be decrypted "
                                 f"({type(exc).__name__})",
                                 hint="check that the vault password file opens this "
                                      "vault") from None
    if secret is None:
        raise InventoryError(f"host {host}: nodecert_bmc has no password",
                             hint=f"set password_file in nodecert_bmc, or a vaulted "
                                  f"{PASSWORD_VAR}")
    ca = spec.get("ca_file")
    require_ca_file(ca, f"host {host}: BMC", "the BMC's certificate")
    return BmcSpec(host, spec["address"], spec["protocol"], int(spec["port"]),
                   spec["username"], secret,
                   ca_file=str(Path(ca).expanduser()) if ca else None,
                   cert_sha256=spec.get("cert_sha256"),
                   firmware=tuple(spec.get("firmware") or ()),
                   psu_spares=int(spec.get("psu_spares", 1)),
                   psu_capacity_w=spec.get("psu_capacity_w"),
                   sample_s=int(spec.get("sample_s", 10)),
                   timeout_s=int(spec.get("timeout_s", 10)))


__all__ = ["PASSWORD_VAR", "BmcSpec", "bmc_spec", "parse_bmc"]
