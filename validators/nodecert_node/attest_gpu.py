"""GPU attestation evidence: collected and verified with NVIDIA's local verifier.

Runs under the Python that has NVIDIA's `nv-local-gpu-verifier` installed (its own
virtual environment on the node, kept apart because it pins its own cryptography,
lxml and PyJWT), never inside the control side: `attestation.gpu` starts it as

    <verifier python> -m nodecert_node.attest_gpu run --nonce HEX --out FILE [--rim-dir DIR]

and a site re-checks a certificate's embedded evidence later, where NVIDIA's
services can be reached, with `... verify --evidence FILE --out FILE --online`.

Why the verifier's steps are called one by one rather than its `attest()` in one go:
that call stops at the first network failure (the revocation check comes before the
report's signature is checked), so at an air-gapped site it cannot tell evidence
that was tampered with from evidence that merely could not be checked. Here every
step that needs no network runs first and always (the device certificate chain to
NVIDIA's root that ships with the verifier, the report's nonce, versions and
signature, the reference manifests' (RIMs') signatures and the measurements against
them), each recorded as ok, failed or not checked with the reason; then, only with
`--online`, the revocation (OCSP) status.

Outcome, for all GPUs together:
* "refused": a step failed (a forged or altered report, a wrong nonce, a chain that
  does not lead to NVIDIA's root, a revoked certificate, measurements that differ);
* "verified": every GPU's report checked and its measurements match reference
  manifests (from the mirror's RIM directory, or NVIDIA's RIM service online);
  a revocation status that could not be checked is stated, not hidden;
* "not verified here": the report's signature held, but no reference manifests were
  at hand, so the measurements were not compared: the evidence is kept for a later
  check;
* "not attested": the GPUs or their mode offer no attestation (confidential
  computing off, an architecture the verifier does not know).

This module is long because it is the whole of the verifier's use in one program: the
collection, each step and its reason, and the command line that the node check and a
site re-checking a certificate both run.

The file written is JSON (schema nodecert.gpu-attestation/v1) with the evidence
itself (each report and certificate chain, base64), its digest and every step.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import importlib
import json
import os
import secrets
import sys
from typing import Any, Callable, Dict

from nodecert_node.contract import json_sha256

SCHEMA = "nodecert.gpu-attestation/v1"
EVIDENCE_SCHEMA = "nodecert.gpu-evidence/v1"
OK, FAILED, NOT_CHECKED = "ok", "failed", "not checked"
VERIFIED, NOT_VERIFIED_HERE, REFUSED, NOT_ATTESTED = (
    "verified", "not verified here", "refused", "not attested")
# NVML's architecture numbers for which the verifier ships settings (Hopper 9,
# Blackwell 10) and the names its RIM identifiers use.
ARCH_NAMES = {9: "HOPPER", 10: "BLACKWELL"}


class Unsupported(Exception):
    """The GPUs or their mode offer no attestation: reported as such, never as attested."""


def _v(name: str) -> Any:
    return importlib.import_module(name)


def evidence_digest(evidence: dict[str, Any]) -> str:
    """sha256 of the evidence document in canonical JSON: what a certificate names."""
    return json_sha256(evidence)


def verifier_version() -> str:
    """The installed distribution's version (its module's own __version__ lags behind)."""
    try:
        return str(_v("importlib.metadata").version("nv-local-gpu-verifier"))
    except Exception:  # not installed as a distribution: say so, never guess
        return "unknown"


# --- collection ----------------------------------------------------------------------------

def _pem_chain(x509s: list[Any]) -> str:
    crypto = _v("OpenSSL.crypto")
    return "".join(crypto.dump_certificate(crypto.FILETYPE_PEM, c).decode() for c in x509s)


def collect(nonce_hex: str, replay: bool = False) -> dict[str, Any]:
    """The evidence of every GPU: its attestation report (signed by the GPU over our
    nonce) and its device certificate chain. `replay` takes NVIDIA's recorded sample
    evidence shipped with the verifier (its own no-GPU test mode): the nonce is then the
    one the sample was made with, and the document says it was replayed."""
    cc = _v("verifier.cc_admin")
    try:
        gpus = cc.collect_gpu_evidence(nonce_hex, no_gpu_mode=replay)
    except Exception as exc:  # the verifier wraps every cause in a bare Exception
        causes = []
        e: BaseException | None = exc
        while e is not None:
            causes.append(str(e))
            e = e.__cause__
        text = " <- ".join(causes)
        if "confidential compute" in text.lower() or "ppcie" in text.lower():
            raise Unsupported(text) from exc
        raise
    out = []
    for i, g in enumerate(gpus):
        arch = g.get_gpu_architecture()
        if arch not in ARCH_NAMES:
            raise Unsupported(f"GPU {i}: architecture {arch} has no attestation the verifier "
                              "knows (Hopper and later)")
        out.append({"index": i, "uuid": str(g.get_uuid()), "arch": ARCH_NAMES[arch],
                    "driver_version": str(g.get_driver_version()),
                    "vbios_version": str(g.get_vbios_version()).lower(),
                    "report_b64": base64.b64encode(g.get_attestation_report()).decode(),
                    "certificates_pem": _pem_chain(g.get_attestation_cert_chain())})
    if replay and out:
        # A recording carries the nonce it was made with, not ours: it proves the chain
        # and the checks, never that these GPUs are fresh, and says so (replayed).
        cfg = _v("verifier.config")
        report = _v("verifier.attestation").AttestationReport(
            base64.b64decode(str(out[0]["report_b64"])), cfg.GPU_ARCHITECTURE_MAP[9])
        nonce_hex = report.get_request_message().get_nonce().hex()
    return {"schema": EVIDENCE_SCHEMA, "nonce": nonce_hex, "replayed": bool(replay),
            "gpus": out}


# --- verification --------------------------------------------------------------------------

Step = Dict[str, str]


def _step(status: str, detail: str = "") -> Step:
    return {"status": status, "detail": detail}


def _chain_of(pem: str) -> list[Any]:
    crypto = _v("OpenSSL.crypto")
    end = "-----END CERTIFICATE-----"
    blocks = [b + end for b in pem.split(end) if b.strip()]
    return [crypto.load_certificate(crypto.FILETYPE_PEM, b.strip().encode()) for b in blocks]


def _rim_ids(gpu: dict[str, Any], report: Any, settings: Any) -> tuple[str, str]:
    utils = _v("verifier.cc_admin_utils").CcAdminUtils
    fmt = _v("verifier.utils").format_vbios_version
    od = report.get_response_message().get_opaque_data()
    chip = "GH100" if gpu["arch"] == "HOPPER" else od.get_data("OPAQUE_FIELD_ID_CHIP_INFO")
    if isinstance(chip, bytes):
        chip = chip.decode("ascii", "replace").strip().strip("\x00")
    driver_id = utils.get_driver_rim_file_id(gpu["driver_version"], settings, chip)

    def field(name: str) -> str:
        return str(od.get_data(name).decode("ascii")).strip().strip("\x00").upper()

    vbios = fmt(od.get_data("OPAQUE_FIELD_ID_VBIOS_VERSION")).replace(".", "").upper()
    vbios_id = utils.get_vbios_rim_file_id(field("OPAQUE_FIELD_ID_PROJECT"),
                                           field("OPAQUE_FIELD_ID_PROJECT_SKU"),
                                           field("OPAQUE_FIELD_ID_CHIP_SKU"), vbios)
    return driver_id, vbios_id


def _find_rim(rim_dirs: list[str], rim_id: str) -> str | None:
    for d in rim_dirs:
        for suffix in ("", ".swidtag", ".xml"):
            p = os.path.join(d, rim_id + suffix)
            if os.path.isfile(p):
                return p
    return None


def _load_rim(kind: str, rim_id: str, version: str, settings: Any, *, rim_dirs: list[str],
              online: bool) -> tuple[Any, Step]:
    """A reference manifest, checked offline: schema, its certificate chain to NVIDIA's
    RIM root (shipped with the verifier), its signature, its version. (None, step) when
    none is at hand; the step says failed when one is at hand and does not hold."""
    rim_mod = _v("verifier.rim")
    utils = _v("verifier.cc_admin_utils").CcAdminUtils
    base = _v("verifier.config").BaseSettings
    crypto = _v("OpenSSL.crypto")
    path = _find_rim(rim_dirs, rim_id)
    where = path or ""
    try:
        if path is not None:
            rim = rim_mod.RIM(rim_name=kind, settings=settings, rim_path=path)
        elif online:
            content = utils.fetch_rim_file(rim_id)
            rim = rim_mod.RIM(rim_name=kind, settings=settings, content=content)
            where = f"NVIDIA RIM service ({rim_id})"
        else:
            return None, _step(NOT_CHECKED, f"no reference manifest {rim_id} here (looked in "
                                            f"{', '.join(rim_dirs) or 'no RIM directory'})")
    except Exception as exc:
        if path is None:
            return None, _step(NOT_CHECKED, f"{rim_id}: not fetched from NVIDIA's RIM service "
                                            f"({exc})")
        return None, _step(FAILED, f"{where}: not a reference manifest ({exc})")
    try:
        if not rim.validate_schema():
            return None, _step(FAILED, f"{where}: does not match the RIM schema")
        chain = rim.extract_certificates()
        root = os.path.join(settings.ROOT_CERT_DIR, settings.RIM_ROOT_CERT)
        with open(root, encoding="utf-8") as f:
            chain.append(crypto.load_certificate(crypto.FILETYPE_PEM, f.read()))
        mode = (base.Certificate_Chain_Verification_Mode.DRIVER_RIM_CERT if kind == "driver"
                else base.Certificate_Chain_Verification_Mode.VBIOS_RIM_CERT)
        ok, _expired, _until = utils.verify_certificate_chain(chain, settings, mode)
        if not ok:
            return None, _step(FAILED, f"{where}: its certificate chain does not lead to "
                                       "NVIDIA's RIM root")
        if not rim.verify_signature(settings):
            return None, _step(FAILED, f"{where}: its signature does not hold")
        if str(rim.colloquialVersion).lower() != version.lower():
            return None, _step(FAILED, f"{where}: made for {kind} {rim.colloquialVersion}, the "
                                       f"GPU reports {version}")
    except Exception as exc:
        return None, _step(FAILED, f"{where}: {type(exc).__name__}: {exc}")
    rim.nodecert_chain = chain
    rim.nodecert_mode = mode
    return rim, _step(OK, f"{rim_id} from {where}: signature and chain hold")


def _revocation(chains: list[tuple[str, list[Any], Any]], settings: Any) -> Step:
    utils = _v("verifier.cc_admin_utils").CcAdminUtils
    for what, chain, mode in chains:
        try:
            ok, _warn, status, reason = utils.ocsp_certificate_chain_validation(
                list(chain), settings, mode)
        except Exception as exc:
            return _step(NOT_CHECKED, f"{what}: OCSP not reached ({exc})")
        if status == "revoked" or reason:
            return _step(FAILED, f"{what}: certificate revoked ({reason or status})")
        if not ok:
            return _step(FAILED, f"{what}: OCSP status {status or 'not good'}")
    return _step(OK, "every certificate's OCSP status is good")


def _chain_step(gpu: dict[str, Any], report: Any, settings: Any,
                steps: dict[str, Step]) -> list[Any] | None:
    """The device certificate chain, checked: the chain, or None (the step says why)."""
    base = _v("verifier.config").BaseSettings
    utils = _v("verifier.cc_admin_utils").CcAdminUtils
    try:
        chain = _chain_of(str(gpu["certificates_pem"]))
        # The chain's root must be NVIDIA's device root that ships with the verifier,
        # byte for byte: the verifier's chain check trusts whatever root it is handed.
        crypto = _v("OpenSSL.crypto")
        with open(base.DEVICE_ROOT_CERT, encoding="utf-8") as f:
            root = crypto.load_certificate(crypto.FILETYPE_PEM, f.read())
        der = crypto.FILETYPE_ASN1
        if not chain or crypto.dump_certificate(der, chain[-1]) != \
                crypto.dump_certificate(der, root):
            steps["certificate_chain"] = _step(FAILED, "the chain's root is not NVIDIA's "
                                                       "device root (shipped with the verifier)")
            return None
        fwid = report.get_response_message().get_opaque_data().get_data(
            "OPAQUE_FIELD_ID_FWID").hex()
        ok, expired, until = utils.verify_gpu_certificate_chain(list(chain), settings, fwid)
        steps["certificate_chain"] = _step(OK, f"{len(chain)} certificates to NVIDIA's device "
                                               "root; firmware ID matches the report") if ok \
            else _step(FAILED, "the device certificate chain does not lead to NVIDIA's root"
                       + (f" (expired {until})" if expired else "")
                       + " or its firmware ID differs from the report's")
    except Exception as exc:
        steps["certificate_chain"] = _step(FAILED, f"{type(exc).__name__}: {exc}")
        return None
    return chain if steps["certificate_chain"]["status"] == OK else None


def _verify_gpu(gpu: dict[str, Any], nonce: bytes, rim_dirs: list[str],
                online: bool) -> dict[str, Any]:
    cfg = _v("verifier.config")
    att = _v("verifier.attestation")
    utils = _v("verifier.cc_admin_utils").CcAdminUtils
    base = cfg.BaseSettings
    steps: dict[str, Step] = {}
    arch_no = {v: k for k, v in ARCH_NAMES.items()}.get(str(gpu.get("arch")))
    settings = cfg.GPU_ARCHITECTURE_MAP[arch_no] if arch_no is not None else None
    result: dict[str, Any] = {"index": gpu.get("index"), "uuid": gpu.get("uuid"),
                              "arch": gpu.get("arch"), "steps": steps}
    if settings is None:
        steps["report"] = _step(FAILED, f"unknown GPU architecture {gpu.get('arch')!r}")
        return result
    try:
        report_bytes = base64.b64decode(str(gpu["report_b64"]), validate=True)
        result["report_sha256"] = hashlib.sha256(report_bytes).hexdigest()
        report = att.AttestationReport(report_bytes, settings)
        steps["report"] = _step(OK, f"{len(report_bytes)} bytes, parsed")
    except Exception as exc:
        steps["report"] = _step(FAILED, f"not an attestation report ({type(exc).__name__}: "
                                        f"{exc})")
        return result
    chain = _chain_step(gpu, report, settings, steps)
    if chain is None:
        return result
    try:
        utils.verify_attestation_report(
            attestation_report_obj=report, gpu_leaf_certificate=chain[0], nonce=nonce,
            driver_version=str(gpu["driver_version"]),
            vbios_version=str(gpu["vbios_version"]).lower(), settings=settings)
        steps["report_signature"] = _step(OK, "signed by the GPU's device key over our nonce; "
                                              "driver and VBIOS versions match")
    except Exception as exc:
        steps["report_signature"] = _step(FAILED, f"{type(exc).__name__}: "
                                                  f"{str(exc).strip()}")
        return result
    driver_id, vbios_id = _rim_ids(gpu, report, settings)
    driver_rim, steps["driver_rim"] = _load_rim("driver", driver_id, str(gpu["driver_version"]),
                                                settings, rim_dirs=rim_dirs, online=online)
    vbios_rim, steps["vbios_rim"] = _load_rim("vbios", vbios_id, str(gpu["vbios_version"]),
                                              settings, rim_dirs=rim_dirs, online=online)
    if driver_rim is not None and vbios_rim is not None:
        try:
            verifier = _v("verifier.verifier").Verifier(report, driver_rim, vbios_rim,
                                                         settings=settings)
            steps["measurements"] = _step(OK, "every measurement matches the reference "
                                              "manifests") if verifier.verify(settings) \
                else _step(FAILED, "measurements differ from the reference manifests")
        except Exception as exc:
            steps["measurements"] = _step(FAILED, f"{type(exc).__name__}: {exc}")
    else:
        steps["measurements"] = _step(NOT_CHECKED, "no reference manifests to compare with")
    if online:
        mode = base.Certificate_Chain_Verification_Mode
        chains = [("device certificate chain", chain, mode.GPU_ATTESTATION)]
        chains += [(f"{r.rim_name} RIM certificate chain", r.nodecert_chain, r.nodecert_mode)
                   for r in (driver_rim, vbios_rim) if r is not None]
        steps["revocation"] = _revocation(chains, settings)
    else:
        steps["revocation"] = _step(NOT_CHECKED, "offline: certificate revocation (OCSP) was "
                                                 "not asked")
    return result


def outcome(gpus: list[dict[str, Any]]) -> tuple[str, str]:
    """(status, reason) over every GPU's steps; see the module's docstring."""
    if not gpus:
        return REFUSED, "the evidence holds no GPU"
    for g in gpus:
        for name, s in g["steps"].items():
            if s["status"] == FAILED:
                return REFUSED, f"GPU {g.get('index')} ({g.get('uuid')}): {name}: {s['detail']}"
    unmeasured = [g for g in gpus if g["steps"].get("measurements", {}).get("status") != OK]
    if unmeasured:
        why = unmeasured[0]["steps"].get("measurements", {}).get("detail", "")
        return NOT_VERIFIED_HERE, ("reports signed over the nonce, but no reference manifests "
                                   f"were at hand for {len(unmeasured)} of {len(gpus)} GPUs: "
                                   f"{why}")
    unrevoked = [g for g in gpus if g["steps"].get("revocation", {}).get("status") != OK]
    return VERIFIED, ("every GPU's report and measurements verified" +
                      ("; certificate revocation not checked here" if unrevoked else ""))


def verify(evidence: dict[str, Any], rim_dirs: list[str], online: bool) -> dict[str, Any]:
    if evidence.get("schema") != EVIDENCE_SCHEMA:
        raise ValueError(f"not {EVIDENCE_SCHEMA} evidence (schema={evidence.get('schema')!r})")
    nonce_hex = str(evidence.get("nonce", ""))
    try:
        nonce = bytes.fromhex(nonce_hex)
    except ValueError:
        raise ValueError(f"the evidence's nonce {nonce_hex[:80]!r} is not hex") from None
    if len(nonce) != 32:
        raise ValueError(f"the evidence's nonce is {len(nonce)} bytes, not 32")
    gpus = [_verify_gpu(g, nonce, rim_dirs, online) for g in evidence.get("gpus") or []]
    status, reason = outcome(gpus)
    return {"schema": SCHEMA, "status": status, "reason": reason, "nonce": nonce_hex,
            "replayed": bool(evidence.get("replayed")), "online": online,
            "verifier": {"name": "nv-local-gpu-verifier", "version": verifier_version()},
            "evidence_sha256": evidence_digest(evidence), "evidence": evidence, "gpus": gpus}


def not_attested(reason: str, nonce_hex: str = "") -> dict[str, Any]:
    return {"schema": SCHEMA, "status": NOT_ATTESTED, "reason": reason, "nonce": nonce_hex,
            "verifier": {"name": "nv-local-gpu-verifier", "version": verifier_version()},
            "evidence_sha256": None, "evidence": None, "gpus": []}


# --- command line --------------------------------------------------------------------------

def _write(path: str, doc: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def _quiet(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    # The verifier logs to stdout; the result goes to --out, the log to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        return fn()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="attest_gpu", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "collect", "verify"):
        p = sub.add_parser(name)
        p.add_argument("--out", required=True, help="where the JSON document is written")
        if name in ("run", "collect"):
            p.add_argument("--nonce", default="", help="32 bytes as hex (default: random)")
            p.add_argument("--replay", action="store_true",
                           help="NVIDIA's recorded sample evidence instead of the GPUs")
        if name in ("run", "verify"):
            p.add_argument("--rim-dir", action="append", default=[],
                           help="a directory of reference manifests (RIMs), named by RIM id")
            p.add_argument("--online", action="store_true",
                           help="ask NVIDIA's RIM and OCSP services (not at air-gapped sites)")
        if name == "verify":
            p.add_argument("--evidence", required=True, help="evidence JSON (from collect)")
    a = ap.parse_args(argv)
    if a.cmd == "verify":
        a.evidence = os.path.abspath(a.evidence)
    a.rim_dir = [os.path.abspath(d) for d in getattr(a, "rim_dir", [])]
    a.out = os.path.abspath(a.out)
    # The verifier writes its own log file (verifier.log) into the working directory:
    # beside our result, never into wherever this happened to be started.
    os.chdir(os.path.dirname(a.out))
    try:
        with contextlib.redirect_stdout(sys.stderr):  # its loggers bind stdout on import
            _v("verifier.cc_admin")
    except ImportError as exc:
        print(f"attest_gpu: NVIDIA's local verifier is not importable here ({exc}): install "
              "nv-local-gpu-verifier into this Python", file=sys.stderr)
        return 3
    if a.cmd == "verify":
        try:
            with open(a.evidence, encoding="utf-8") as f:
                ev = json.load(f)
            if not isinstance(ev, dict):
                raise ValueError("not a JSON object")
            doc = _quiet(lambda: verify(ev, a.rim_dir, a.online))
        except (OSError, ValueError) as exc:
            print(f"attest_gpu: {a.evidence}: {exc}", file=sys.stderr)
            return 2
        _write(a.out, doc)
        return 0 if doc["status"] != REFUSED else 1
    nonce = a.nonce or secrets.token_hex(32)
    try:
        ev = _quiet(lambda: collect(nonce, a.replay))
    except Unsupported as exc:
        _write(a.out, not_attested(str(exc), nonce))
        return 0
    if a.cmd == "collect":
        _write(a.out, ev)
        return 0
    doc = _quiet(lambda: verify(ev, a.rim_dir, a.online))
    _write(a.out, doc)
    return 0 if doc["status"] != REFUSED else 1


if __name__ == "__main__":
    sys.exit(main())
