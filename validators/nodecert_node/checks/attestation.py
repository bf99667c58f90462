"""attestation.gpu: hardware-rooted evidence of the GPUs, verified where it can be.

Runs only on hosts whose inventory asks for it (`nodecert_attestation: true`). The
evidence is collected and checked by NVIDIA's local verifier in its own Python
(`nodecert_attestation_python`) through nodecert_node.attest_gpu, with a nonce bound
to this run and host; the reference manifests (RIMs) come from the mirror's directory
(`nodecert_attestation_rim_dirs`), never from the network.

Judged here from the helper's document, which is untrusted text from the node: the
outcome is computed again from the recorded steps and the evidence digest again from
the evidence. verified: PASS; "not verified here" and "not attested": WARN (stated in
the certificate, never shown as attested); refused: FAIL.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

from nodecert_node import attest_gpu as ag
from nodecert_node.context import Ctx
from nodecert_node.contract import Evidence, Result, Verdict
from nodecert_node.registry import check
from nodecert_node.tools import ToolError, run

DEFAULT_PYTHON = "/opt/nodecert/attest/bin/python3"
DEFAULT_RIM_DIRS = ("/opt/nodecert/attest/rims",)
STEPS = ("report", "certificate_chain", "report_signature", "driver_rim", "vbios_rim",
         "measurements", "revocation")
VERDICTS = {ag.VERIFIED: Verdict.PASS, ag.NOT_VERIFIED_HERE: Verdict.WARN,
            ag.NOT_ATTESTED: Verdict.WARN, ag.REFUSED: Verdict.FAIL}


def run_nonce(run_id: str, host: str) -> str:
    """The challenge the GPUs sign: bound to this run and host, so anyone holding the
    certificate can recompute it and see the evidence was made for this run."""
    return hashlib.sha256(f"nodecert-attestation\0{run_id}\0{host}".encode()).hexdigest()


class BadDocument(ValueError):
    """The helper's document does not hold together: never judged as attested."""


def _gpus(doc: dict[str, Any]) -> list[dict[str, Any]]:
    gpus = doc.get("gpus")
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise BadDocument("its gpus is not a list of objects")
    for g in gpus:
        steps = g.get("steps")
        if not isinstance(steps, dict) or not all(
                isinstance(s, dict) and s.get("status") in (ag.OK, ag.FAILED, ag.NOT_CHECKED)
                for s in steps.values()):
            raise BadDocument(f"GPU {g.get('index')!r}: its steps are not ok/failed/not "
                              "checked")
    return gpus


def attestation_facts(doc: Any, expected_nonce: str = "", *,
                      allow_replay: bool = False) -> dict[str, Any]:
    """What the certificate records, checked: the status recomputed from the steps,
    the evidence digest recomputed from the evidence, the nonce the one this run set.
    Replayed evidence (NVIDIA's recorded sample) is accepted only where allowed (on
    simulated GPUs, which have none of their own) and is stated as replayed; anywhere
    else it is refused, since it says nothing of these GPUs.
    Pure; BadDocument when the document does not hold together."""
    if not isinstance(doc, dict) or doc.get("schema") != ag.SCHEMA:
        raise BadDocument(f"not a {ag.SCHEMA} document")
    claimed = doc.get("status")
    if claimed == ag.NOT_ATTESTED:
        return {"status": ag.NOT_ATTESTED, "reason": str(doc.get("reason") or ""),
                "verifier": doc.get("verifier"), "gpus": [], "evidence": None,
                "evidence_sha256": None}
    gpus = _gpus(doc)
    status, reason = ag.outcome(gpus)
    evidence = doc.get("evidence")
    if not isinstance(evidence, dict):
        raise BadDocument("it carries no evidence")
    digest = ag.evidence_digest(evidence)
    if doc.get("evidence_sha256") != digest:
        raise BadDocument(f"its evidence digest {str(doc.get('evidence_sha256'))[:16]} is not "
                          f"the evidence's ({digest[:16]})")
    if claimed != status:
        raise BadDocument(f"it says {claimed!r} but its steps say {status!r}")
    replayed = bool(evidence.get("replayed"))
    nonce = str(evidence.get("nonce") or "")
    if replayed and not allow_replay:
        status, reason = ag.REFUSED, ("replayed recorded evidence on real hardware: it says "
                                      "nothing of these GPUs")
    elif expected_nonce and not replayed and nonce != expected_nonce:
        status, reason = ag.REFUSED, (f"the evidence answers nonce {nonce[:16]}..., not this "
                                      f"run's {expected_nonce[:16]}...: not fresh")
    return {"status": status, "reason": reason, "nonce": nonce, "replayed": replayed,
            "online": bool(doc.get("online")), "verifier": doc.get("verifier"),
            "evidence_sha256": digest,
            "gpus": [{"index": g.get("index"), "uuid": g.get("uuid"), "arch": g.get("arch"),
                      "report_sha256": g.get("report_sha256"),
                      "steps": {k: g["steps"][k] for k in STEPS if k in g["steps"]}}
                     for g in gpus],
            "evidence": evidence}


def judge_attestation(facts: dict[str, Any]) -> Result:
    status = facts["status"]
    n = len(facts.get("gpus") or [])
    replay = " (REPLAYED recorded evidence, not these GPUs)" if facts.get("replayed") else ""
    summary = {
        ag.VERIFIED: f"{n} GPUs attested: evidence verified{replay}; {facts['reason']}",
        ag.NOT_VERIFIED_HERE: f"{n} GPUs: evidence collected, not verified here{replay}: "
                              f"{facts['reason']}",
        ag.NOT_ATTESTED: f"not attested: {facts['reason']}",
        ag.REFUSED: f"attestation refused{replay}: {facts['reason']}",
    }[status]
    findings = tuple(f"GPU {g['index']} {name}: {s['status']}" + (f" ({s['detail']})"
                                                                   if s.get("detail") else "")
                     for g in facts.get("gpus") or [] for name, s in g["steps"].items()
                     if s["status"] != ag.OK)
    remediation = {
        ag.REFUSED: "Do not ship the node: the GPUs' evidence does not verify. Re-run after "
                    "checking the driver and VBIOS against the pinned recipe; if it is refused "
                    "again, open a case with the evidence (in the certificate).",
        ag.NOT_VERIFIED_HERE: "Put the reference manifests (RIMs) for this driver and VBIOS "
                              "into the mirror's RIM directory, or re-verify the certificate's "
                              "evidence where NVIDIA's services can be reached.",
        ag.NOT_ATTESTED: "Attestation needs Hopper or later GPUs in confidential-computing "
                         "mode and NVIDIA's local verifier on the node; or set "
                         "nodecert_attestation: false for hosts that do not offer it.",
    }.get(status, "")
    return Result("attestation.gpu", VERDICTS[status], summary, value=_value(facts),
                  findings=findings, remediation=remediation,
                  fault_code="NC-ATTEST-REFUSED" if status == ag.REFUSED else "",
                  facts={"attestation": facts})


def _value(facts: dict[str, Any]) -> dict[str, Any]:
    return {"status": facts["status"], "gpus": len(facts.get("gpus") or []),
            "evidence_sha256": facts.get("evidence_sha256"),
            "replayed": bool(facts.get("replayed"))}


def not_attested(reason: str) -> Result:
    return judge_attestation({"status": ag.NOT_ATTESTED, "reason": reason, "gpus": [],
                              "evidence": None, "evidence_sha256": None})


@check("attestation.gpu", order=28, suites=("quick", "standard", "full", "lab"),
       needs=("attestation",),
       description="GPU attestation evidence, verified by NVIDIA's local verifier")
def gpu_attestation(ctx: Ctx) -> Result:
    python = str(ctx.spec.get("attestation_python") or DEFAULT_PYTHON)
    rim_dirs = [str(d) for d in ctx.spec.get("attestation_rim_dirs") or DEFAULT_RIM_DIRS]
    if not os.path.exists(python):
        return not_attested(f"NVIDIA's local verifier is not installed ({python} does not "
                            "exist)")
    nonce = run_nonce(ctx.plan.run_id, ctx.plan.host)
    tmp = tempfile.mkdtemp(prefix="nodecert-attest-")  # 0700, unpredictable
    out_file = os.path.join(tmp, "attestation.json")
    # the directory holding nodecert_node, for the verifier's Python to import the helper
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    argv = [python, "-m", "nodecert_node.attest_gpu", "run", "--nonce", nonce,
            "--out", out_file]
    for d in rim_dirs:
        argv += ["--rim-dir", d]
    if ctx.plan.simulated:
        # Simulated GPUs have no keys: NVIDIA's recorded sample evidence takes their
        # place, through the same verifier, and every figure says REPLAYED.
        argv.append("--replay")
    try:
        try:
            out = run(argv, timeout=ctx.timeout, name="attest_gpu", ok_codes=(0, 1),
                      env_extra={"PYTHONPATH": pkg})
        except ToolError as exc:
            return Result("attestation.gpu", Verdict.ERROR, f"the attestation did not run: "
                          f"{exc}", evidence=(exc.evidence,) if exc.evidence else (),
                          remediation="Check the verifier's Python and its packages "
                                      f"({python} -m verifier.cc_admin --help).")
        try:
            with open(out_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            return Result("attestation.gpu", Verdict.ERROR, f"the attestation wrote no "
                          f"result ({exc})", evidence=(out.evidence,))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ev = (out.evidence, Evidence.of("attestation.json", "attest_gpu --out", 0, text))
    try:
        facts = attestation_facts(json.loads(text), nonce, allow_replay=ctx.plan.simulated)
    except (ValueError, KeyError, TypeError) as exc:
        return Result("attestation.gpu", Verdict.ERROR, f"the attestation's result does not "
                      f"hold together: {exc}", evidence=ev)
    return judge_attestation(facts).with_(evidence=ev)
