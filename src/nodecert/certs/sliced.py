"""Certifying a run in slices: each slice (a task of a Slurm job array, or any other
engine's) signs the certificates of its share of the run's hosts; the last slice to end
writes the run's fleet page and JUnit file over every slice's certificates.

A slice takes every n-th host of the run in name order from the k-th (the rule a sliced
validation uses: validation/slices.py), signs those whose record is finished, and lists
what it wrote -- each certificate's name and digest -- in the reports directory
(runs/layout.py: cert_slice_summary). The fleet page is built from the certificates those
lists name, each verified with the signing key and matched to its digest: a certificate
changed since its slice listed it is refused, never shown. A host with no finished
record is named as not certified, by the slice that holds it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodecert.certs import html as report_html
from nodecert.certs.certify import PAYLOAD_TYPE, CertifyRun, RunError, certify, write_index
from nodecert.certs.signing import PrivateKey, SignatureError, keyid, verify_envelope
from nodecert.certs.verify import ReportError, read_envelope
from nodecert.runs.layout import CERT_SUFFIX, RunDir, cert_slice_summary
from nodecert.runs.records import finished_records, run_hosts
from nodecert.runs.store import write_json
from nodecert.validation.slices import Slice

SCHEMA = "nodecert.certify-slice/v1"


@dataclass
class SlicedCertify:
    """One slice's certification, and the run's fleet page when it was the last."""

    slice: Slice
    run: CertifyRun
    summary: Path
    complete: bool  # every slice has ended: the fleet page and JUnit file are written


def certify_slice(run_dir: Path, key: PrivateKey, sl: Slice, *, finished: bool = True,
                  **options: Any) -> SlicedCertify:
    """Certify slice `sl` of the run's hosts (`options`: certify's own); the fleet page
    when every slice of the same count has listed its certificates. `finished`: the run
    must have ended (merged), as certify wants of any run; a slice of a re-validation
    certifies its own hosts as soon as it has run them (finished=False)."""
    rd = RunDir(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a directory",
                       hint="pass the run directory `nodecert validate` printed")
    hosts = sl.hosts(run_hosts(rd))
    if not hosts:
        raise RunError(f"slice {sl.k} of {sl.n} of {run_dir} holds no host",
                       hint="as many slices as the run has hosts at most")
    if finished and not rd.summary.is_file():
        raise RunError(f"{run_dir} has no validate.json: not a finished validation run",
                       hint="wait for every slice of the validation to end (the last merges "
                            "it), or `nodecert runs merge` it, then certify")
    records, unfinished = finished_records(rd, hosts)
    run = certify(run_dir, key, records=records, index=False, **options) if records else \
        CertifyRun(run_dir, options.get("out_dir") or rd.reports, keyid(key.public_key()))
    run.failed.update(unfinished)
    out = run.out_dir
    listed = {"schema": SCHEMA, "run_id": rd.run_id, "k": sl.k, "of": sl.n,
              "keyid": run.keyid,
              "certificates": {c.host: _digest(c.envelope) for c in run.nodes},
              "failed": dict(sorted(run.failed.items()))}
    summary = cert_slice_summary(out, sl.k, sl.n)
    write_json(summary, listed)
    complete = all(cert_slice_summary(out, k, sl.n).is_file() for k in range(1, sl.n + 1))
    if complete:
        rendering = options.get("rendering") or report_html.PLAIN
        statements = slice_statements(out, sl.n, key)
        run.index, run.junit = write_index(out, statements, run.keyid, rendering)
    return SlicedCertify(sl, run, summary, complete)


def slice_statements(out: Path, n: int, key: PrivateKey) -> list[dict[str, Any]]:
    """Every statement the n slices listed, each verified with `key` and matched to the
    digest its slice recorded, in host order."""
    pub = key.public_key()
    statements = []
    for k in range(1, n + 1):
        path = cert_slice_summary(out, k, n)
        try:
            listed = json.loads(path.read_text())
            certs = dict(listed["certificates"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunError(f"{path}: unreadable ({exc})",
                           hint=f"certify slice {k}/{n} again") from None
        for host, digest in certs.items():
            env_path = out / f"{Path(str(host)).name}{CERT_SUFFIX}"
            if _digest(env_path) != digest:
                raise RunError(f"{env_path} changed after slice {k}/{n} listed it",
                               hint=f"certify slice {k}/{n} again (the same --slice)")
            try:
                ptype, payload, _ = verify_envelope(read_envelope(env_path), [pub])
            except (ReportError, SignatureError) as exc:
                raise RunError(f"{env_path}: {exc}",
                               hint=f"certify slice {k}/{n} again (the same --slice)") from None
            if ptype != PAYLOAD_TYPE:
                raise RunError(f"{env_path} is not a node certificate ({ptype})")
            statements.append(json.loads(payload))
    return sorted(statements, key=lambda st: str(st["predicate"]["host"]))


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


__all__ = ["SCHEMA", "SlicedCertify", "certify_slice", "slice_statements"]
