"""The GPUs' attestation evidence checked again on the control side.

What a node says of its evidence ("verified") is the node's word: a node running a
fake verifier would say it of anything. Where the operator names NVIDIA's local
verifier on the controller (`certify --attestation-verifier PYTHON`, or
NODECERT_ATTESTATION_VERIFIER), the evidence the node embedded is verified there,
offline, with the same helper the node runs (`nodecert_node.attest_gpu verify`), and
the certificate states the control side's status. Without one, the certificate states
the node's status as node-reported, never as verified by nodecert.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from nodecert.profiles.datafiles import validators_dir

ENV = "NODECERT_ATTESTATION_VERIFIER"
TIMEOUT_S = 300.0  # NVIDIA's verifier on eight GPUs' reports, offline: well under a minute
NODE = "node"
CONTROL = "control side"


def configured(explicit: str | None = None) -> str | None:
    """The verifier Python named for this controller, if any."""
    return explicit or os.environ.get(ENV) or None


def verify_evidence(evidence: Any, python: str,
                    timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """NVIDIA's verifier's document for `evidence`, run here; a failure to run it is a
    status of its own ("not verified here"), never the node's word taken instead."""
    with tempfile.TemporaryDirectory(prefix="nodecert-attest-") as tmp:
        ev, out = Path(tmp) / "evidence.json", Path(tmp) / "result.json"
        fd = os.open(ev, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(evidence, f)
        env = {**os.environ, "PYTHONPATH": str(validators_dir()),
               "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            p = subprocess.run([python, "-m", "nodecert_node.attest_gpu", "verify",
                                "--evidence", str(ev), "--out", str(out)], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"status": "not verified here",
                    "reason": f"the control side's verifier did not run ({exc})"}
        try:
            doc = json.loads(out.read_text())
        except (OSError, ValueError):
            tail = (p.stderr or "").strip().splitlines()[-1:] or [f"exit status {p.returncode}"]
            return {"status": "not verified here",
                    "reason": f"the control side's verifier gave no result ({tail[0][:300]})"}
    return doc if isinstance(doc, dict) else {"status": "not verified here",
                                              "reason": "the verifier's result is not a document"}


def checked(summary: dict[str, Any], evidence: Any, python: str | None) -> dict[str, Any]:
    """The certificate's attestation summary with who checked it: the control side's
    status where a verifier is named here (the node's, when it differs, kept beside it),
    the node's marked node-reported otherwise."""
    if summary.get("status") == "not attested" or evidence is None:
        return {**summary, "checked_by": NODE}
    if python is None:
        return {**summary, "checked_by": NODE}
    doc = verify_evidence(evidence, python)
    status, reason = str(doc.get("status")), str(doc.get("reason"))[:500]
    out = {**summary, "checked_by": CONTROL, "status": status, "reason": reason,
           "node_status": summary.get("status")}
    gpus = doc.get("gpus")
    if isinstance(gpus, list):  # each GPU's steps as the control side found them
        out["gpus"] = [{"index": g.get("index"), "uuid": g.get("uuid"),
                        "report_sha256": g.get("report_sha256"),
                        "steps": {str(k): (v or {}).get("status")
                                  for k, v in (g.get("steps") or {}).items()
                                  if isinstance(v, dict) or v is None}}
                       for g in gpus if isinstance(g, dict)]
    if status != summary.get("status"):
        out["reason"] = (f"{reason} (the node said {summary.get('status')!r}: its word is "
                         "not taken)")
    return out


__all__ = ["CONTROL", "ENV", "NODE", "checked", "configured", "verify_evidence"]
