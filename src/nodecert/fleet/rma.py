"""The RMA evidence bundle: for a failed node, one signed archive a vendor's support can
check offline.

It holds the failing record (every result with its evidence), the kernel log lines the
checks read (Xid, NVRM, PCIe/AER, machine checks), the BMC's event log and sensor
readings (the bmc.* results), the hardware identity (serial numbers), the node's
history of runs and certificates, and any file the technician adds (nvidia-bug-report's
log, which needs the node's root and minutes, is added with --add); a manifest lists
every file's sha256 and is signed (DSSE). `verify` checks the signature and every file;
one changed byte fails it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.certs import signing
from nodecert.core.errors import NodecertError
from nodecert.fleet.repair import action
from nodecert.runs.layout import CERT_SUFFIX, RESULTS
from nodecert.runs.records import HostRecord, host_history
from nodecert_node.contract import Result, Verdict

PAYLOAD_TYPE = "application/vnd.nodecert.rma-manifest+json"
MANIFEST = "manifest.json"
SIGNED = "manifest.intoto.dsse.json"
KERNEL = re.compile(r"NVRM|Xid|nvidia|AER|PCIe Bus Error|Machine Check|mce:|EDAC|"
                    r"fell off the bus|NVLink", re.I)
MAX_ADDED = 512 << 20
MAX_MEMBER = 1 << 30


class RmaError(NodecertError):
    """An RMA bundle that cannot be made or does not verify."""


def _bad(rec: HostRecord) -> list[Result]:
    return [r for r in rec.results if r.verdict >= Verdict.FAIL]


def failing_record(runs_dir: Path, host: str, run: str | None = None) -> HostRecord:
    """The host's newest record with a FAIL or ERROR (or its record in `run`)."""
    recs = sorted(host_history(runs_dir, host), key=lambda r: r.started or r.finished)
    if run:
        recs = [r for r in recs if run in (r.run_id, r.path.parent.parent.name)]
        if not recs:
            raise RmaError(f"no record of {host} in run {run} under {runs_dir}")
    recs = [r for r in recs if _bad(r)]
    if not recs:
        raise RmaError(f"{host} has no failing run under {runs_dir}",
                       hint="an RMA bundle is for a node that failed; pass --run to pick one")
    return recs[-1]


def kernel_lines(rec: HostRecord) -> list[str]:
    """The kernel log lines the checks read that concern the GPUs, PCIe or the CPU's error
    reporting, once each, in order."""
    seen: dict[str, None] = {}
    for r in rec.results:
        for ev in r.evidence:
            if ev.name not in ("dmesg", "journalctl", "kernel log"):
                continue
            for line in ev.output.splitlines():
                if KERNEL.search(line):
                    seen.setdefault(line.rstrip(), None)
    return list(seen)


@dataclass(frozen=True)
class Bundle:
    path: Path
    host: str
    run_id: str | None
    files: dict[str, str]  # name -> sha256


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def build(runs_dir: Path, host: str, out: Path, key: signing.PrivateKey, *, run: str | None = None,
          added: tuple[Path, ...] = (), now: dt.datetime | None = None) -> Bundle:
    """Write the bundle (tar.gz) for the host's failing run; RmaError on bad input, before
    anything is written."""
    rec = failing_record(runs_dir, host, run)
    for p in added:
        if not p.is_file():
            raise RmaError(f"--add {p}: not a file")
        if p.stat().st_size > MAX_ADDED:
            raise RmaError(f"--add {p}: larger than {MAX_ADDED >> 20} MiB")
    bad = _bad(rec)
    bmc = [r for r in rec.results if r.check.startswith("bmc.")]
    hist = []
    certs: dict[str, bytes] = {}
    for h in sorted(host_history(runs_dir, host), key=lambda r: r.started or r.finished):
        cert = h.run.certificate(host)
        hist.append({"run_id": h.run_id, "suite": h.suite,
                     "verdict": h.verdict.name if h.verdict is not None else None,
                     "started": h.started, "simulated": h.simulated,
                     "failing": [f"{r.check}: {r.summary}" for r in _bad(h)],
                     "certificate": f"certificates/{h.run.run_id}{CERT_SUFFIX}"
                     if cert.is_file() else None})
        if cert.is_file():
            certs[f"certificates/{h.run.run_id}{CERT_SUFFIX}"] = cert.read_bytes()
    files: dict[str, bytes] = {
        RESULTS: _json(rec.data),
        "failing.json": _json([{**r.as_dict(), "actions": action(r.fault_code).as_dict()}
                               for r in bad]),
        "kernel-log.txt": ("\n".join(kernel_lines(rec)) + "\n").encode(),
        "bmc.json": _json([r.as_dict() for r in bmc]),
        "identity.json": _json(rec.data.get("identity")),
        "history.json": _json(hist),
        **certs,
        **{f"added/{p.name}": p.read_bytes() for p in added},
    }
    digests = {n: hashlib.sha256(b).hexdigest() for n, b in sorted(files.items())}
    manifest = {"schema": "nodecert.rma/v1", "host": host, "run_id": rec.run_id,
                "created": (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "simulated": rec.simulated, "failing": [r.check for r in bad],
                "not_collected": [] if added else [
                    "nvidia-bug-report: run `sudo nvidia-bug-report.sh` on the node and add "
                    "its nvidia-bug-report.log.gz with --add"],
                "files": digests}
    files[MANIFEST] = _json(manifest)
    files[SIGNED] = _json(signing.sign_envelope(signing.canonical_json(manifest), PAYLOAD_TYPE,
                                                key))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"rma-{host}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return Bundle(out, host, rec.run_id, digests)


MAX_MEMBERS = 10_000
MAX_TOTAL = 4 << 30  # bytes unpacked, all members: far above an RMA bundle with its logs
MAX_MANIFEST = 16 << 20


def _members(path: Path) -> tuple[dict[str, str], dict[str, bytes]]:
    """Every member's sha256 (streamed: nothing unpacked into memory but the manifests)
    and the two manifests' bytes. Refused: anything but regular files under one
    `rma-<host>/` directory, a name twice, more members or bytes than a bundle holds."""
    digests: dict[str, str] = {}
    small: dict[str, bytes] = {}
    top: str | None = None
    total = 0
    try:
        with tarfile.open(path, "r:gz") as tar:
            for m in tar:
                parts = m.name.split("/")
                if not m.isfile() or len(parts) < 2 or ".." in parts or "" in parts \
                        or not parts[0].startswith("rma-"):
                    raise RmaError(f"{path}: unexpected member {m.name!r}",
                                   hint="a bundle holds only files under its rma-HOST/ "
                                        "directory")
                if top not in (None, parts[0]):
                    raise RmaError(f"{path}: member {m.name!r} is outside {top}/: a "
                                   "bundle has one directory")
                top, rel = parts[0], "/".join(parts[1:])
                total += m.size
                if rel in digests or len(digests) >= MAX_MEMBERS or m.size > MAX_MEMBER \
                        or total > MAX_TOTAL:
                    raise RmaError(f"{path}: member {m.name!r} "
                                   + ("appears twice" if rel in digests else
                                      "is one member or byte too many for a bundle"))
                f = tar.extractfile(m)
                h = hashlib.sha256()
                keep = rel in (MANIFEST, SIGNED) and m.size <= MAX_MANIFEST
                kept = bytearray()
                while f is not None and (block := f.read(1 << 20)):
                    h.update(block)
                    if keep:
                        kept += block
                digests[rel] = h.hexdigest()
                if keep:
                    small[rel] = bytes(kept)
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise RmaError(f"{path}: not a readable bundle ({exc})") from exc
    return digests, small


def verify(path: Path, trusted: list[signing.PublicKey]) -> dict[str, Any]:
    """The bundle's signed manifest when the signature and every file's digest hold;
    RmaError naming what does not. Every member must be in the signed manifest."""
    digests, small = _members(path)
    if SIGNED not in small:
        raise RmaError(f"{path}: no signed manifest ({SIGNED})")
    try:
        ptype, payload, _ = signing.verify_envelope(json.loads(small[SIGNED]), trusted)
    except (ValueError, signing.SignatureError) as exc:
        raise RmaError(f"{path}: the manifest's signature does not verify ({exc})",
                       hint="give the signer's public key (--pubkey)") from exc
    if ptype != PAYLOAD_TYPE:
        raise RmaError(f"{path}: payload type {ptype}, expected {PAYLOAD_TYPE}")
    manifest = json.loads(payload)
    listed = dict(manifest.get("files") or {})
    extra = sorted(set(digests) - set(listed) - {MANIFEST, SIGNED})
    problems = [f"{n}: missing" for n in sorted(listed) if n not in digests]
    problems += [f"{n}: changed (sha256 differs from the signed manifest)"
                 for n in sorted(listed) if n in digests and digests[n] != listed[n]]
    problems += [f"{n}: not in the signed manifest" for n in extra]
    try:
        readable = json.loads(small.get(MANIFEST, b"null"))
    except ValueError:
        readable = None
    if readable != manifest:
        problems.append(f"{MANIFEST}: differs from the signed manifest")
    if problems:
        raise RmaError(f"{path}: {problems[0]}" + (f" (+{len(problems) - 1} more)"
                                                   if len(problems) > 1 else ""))
    return dict(manifest)


__all__ = ["Bundle", "RmaError", "build", "failing_record", "kernel_lines", "verify"]
