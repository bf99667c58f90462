"""A node that failed acceptance, as an NVIDIA NVSentinel ExternalFault: the custom
resource an outside system creates to have NVSentinel quarantine and drain a node before
external repair (NVSentinel ADR-049, "API -- ExternalFault"). Its spec carries one
HealthEvent (NVSentinel's data-models/protobufs/health_event.proto, in protobuf's JSON
form) that the ExternalFault reconciler emits as authored.

One resource per node (NVSentinel's admission webhook refuses a second active one for a
node): every failed check of the node is in its one event, its fault codes in
`errorCode`. Only a FAIL (a fault measured) makes one; a node that was not measured
(ERROR) is not drained on nodecert's word. Everything from a node is untrusted text: it
is cleaned and bounded here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nodecert.core.textsafe import clean

API_VERSION = "nvsentinel.dgxc.nvidia.com/v1"
KIND = "ExternalFault"
# ADR-049's example: a CUSTOM action naming the external repair, so that NVSentinel's
# fault-remediation hands the drained node to the integrator (an
# ExternalRemediationRequest) rather than acting on it itself.
ACTION, CUSTOM_ACTION = "CUSTOM", "external-remediation"
CHECK_NAME = "nodecert-acceptance"
MESSAGE_MAX = 1024
_NAME_MAX = 253
_NAME_BAD = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True)
class Failed:
    """One failed check of the node: its name, fault code and summary."""

    check: str
    fault_code: str
    summary: str


def resource_name(node: str) -> str:
    """A DNS-1123 subdomain naming the node's resource: `nodecert-<node>`; where the
    node's name had to change to fit (case, characters, length), a digest of it keeps two
    nodes apart."""
    base = _NAME_BAD.sub("-", node.lower()).strip("-.") or "node"
    name = f"nodecert-{base}"
    if base != node or len(name) > _NAME_MAX:
        name = f"nodecert-{base[:200]}-{hashlib.sha256(node.encode()).hexdigest()[:8]}"
    return name


def _bounded(text: str, limit: int = MESSAGE_MAX) -> str:
    t = clean(str(text))
    return t if len(t) <= limit else t[:limit - 3] + "..."


def external_fault(node: str, failed: Iterable[Failed], *, verdict: str, run_id: str,
                   simulated: bool, when: str, certificate: str = "") -> dict[str, Any]:
    """The ExternalFault for `node` and its failed checks (at least one)."""
    failed = list(failed)
    if not failed:
        raise ValueError(f"{node}: no failed check, so no fault to raise")
    codes = list(dict.fromkeys(f.fault_code for f in failed if f.fault_code))
    lead = "SIMULATED -- " if simulated else ""
    message = _bounded(f"{lead}nodecert {verdict}: " + "; ".join(
        f"{f.check}: {f.summary}" for f in failed))
    meta = {"source": "nodecert", "run_id": _bounded(run_id, 128), "verdict": verdict,
            "simulated": str(simulated).lower(),
            "failed_checks": _bounded(",".join(f.check for f in failed), 512)}
    if certificate:
        meta["certificate"] = _bounded(certificate, 256)
    event = {"version": 1, "agent": "nodecert", "componentClass": "node",
             "checkName": CHECK_NAME, "isFatal": True, "isHealthy": False,
             "message": message, "recommendedAction": ACTION,
             "customRecommendedAction": CUSTOM_ACTION, "errorCode": codes,
             "entitiesImpacted": [{"entityType": "Node", "entityValue": _bounded(node, 253)}],
             "metadata": meta, "generatedTimestamp": when,
             "nodeName": _bounded(node, 253)}
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": resource_name(node),
                         "labels": {"app.kubernetes.io/managed-by": "nodecert"}},
            "spec": {"healthEvent": event}}


__all__ = ["API_VERSION", "KIND", "Failed", "external_fault", "resource_name"]
