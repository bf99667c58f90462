"""What a node certificate states of its GPUs' hardware-rooted evidence (attestation),
and what verify says of it."""

from __future__ import annotations

from typing import Any

from nodecert.certs import attestcheck
from nodecert.core import checks
from nodecert_node.contract import Result, json_sha256


def attestation_summary(results: list[Result],
                        verifier: str | None = None) -> dict[str, Any]:
    """What the certificate states of the GPUs' hardware-rooted evidence: the status the
    attestation.gpu check judged, its reason, the evidence digest, the nonce and each GPU's
    steps (the evidence itself is in that check's facts), and who checked it: with
    `verifier` (NVIDIA's verifier's Python on this controller) the control side verifies
    the evidence itself; otherwise the status is stated as node-reported. A host that did
    not collect any is stated as not attested, never left for a reader to assume."""
    found = checks.by_role(results, "attestation")
    r = found if isinstance(found, Result) else None
    facts = r.facts.get("attestation") if r is not None else None
    if r is None or not isinstance(facts, dict):
        why = (f"the attestation check did not report ({r.verdict.name}: {r.summary})"
               if r is not None else "not collected: the host's inventory does not ask for "
               "attestation (nodecert_attestation)")
        return {"status": "not attested", "reason": why, "evidence_sha256": None, "gpus": [],
                "checked_by": attestcheck.NODE}
    return attestcheck.checked(_node_summary(r, facts), facts.get("evidence"), verifier)


def _node_summary(r: Result, facts: dict[str, Any]) -> dict[str, Any]:
    return {"status": facts.get("status"), "reason": facts.get("reason"),
            "verdict": r.verdict.name, "evidence_sha256": facts.get("evidence_sha256"),
            "nonce": facts.get("nonce"), "replayed": bool(facts.get("replayed")),
            "verifier": facts.get("verifier"),
            "gpus": [{"index": g.get("index"), "uuid": g.get("uuid"),
                      "report_sha256": g.get("report_sha256"),
                      "steps": {k: (v or {}).get("status")
                                for k, v in (g.get("steps") or {}).items()}}
                     for g in facts.get("gpus") or []]}


def attestation_said(p: dict[str, Any]) -> tuple[bool, str] | None:
    """What verify says of a certificate's attestation: (holds, the line). The embedded
    evidence is checked against the digest the certificate states (contract.json_sha256,
    as the node computed it). None for a certificate made
    before attestation was recorded."""
    att = p.get("attestation")
    if not isinstance(att, dict):
        return None
    raw = status = str(att.get("status"))
    if raw != "not attested" and att.get("checked_by") != attestcheck.CONTROL:
        # the node's own word (a certificate from before the field: the node's too)
        status = f"{raw} (node-reported, not verified by the control side)"
    r = checks.by_role([r for r in p.get("results", []) if isinstance(r, dict)], "attestation")
    facts = r.get("facts", {}).get("attestation") if r is not None else None
    evidence = facts.get("evidence") if isinstance(facts, dict) else None
    stated = att.get("evidence_sha256")
    if evidence is None and not stated:
        return (raw != "verified", f"{status}: {att.get('reason')}" if raw != "verified"
                else "says verified but carries no evidence")
    found = json_sha256(evidence)
    same = found == stated
    return same, (f"{status}: {att.get('reason')}; evidence sha256:{str(stated)[:16]}..."
                  + ("" if same else f" does NOT match the embedded evidence "
                                     f"({found[:16]}...)"))


__all__ = ["attestation_said", "attestation_summary"]
