"""Verdicts written for the cluster's own tools, from a run's records (with the fleet's
results where judged):

* k8s/<node>.json -- a Node patch (labels and status.conditions, Kubernetes' NodeCondition
  fields), to apply with `kubectl patch node <node> --subresource=status --type=strategic
  --patch-file` (conditions) and `kubectl label` (labels);
* nvsentinel/<node>.json -- NVIDIA NVSentinel HealthEvents (its health_event.proto in
  protobuf's JSON form): one event per check that did not pass, or one healthy event;
  nvsentinel/<node>.externalfault.json -- for a node that FAILed, the ExternalFault that
  has NVSentinel quarantine and drain it for repair (certs/externalfault.py);
* npd/<node>.json -- the verdict node-problem-detector's custom plugin reads on the node
  (npd/nodecert-npd-check, configured by npd/nodecert-monitor.json);
* prometheus/fleet.prom -- the fleet judgement as metrics (Prometheus text format), and the
  alerting rules; grafana/nodecert-fleet.json -- the fleet dashboard.

Everything from a node is untrusted text: label values are reduced to what Kubernetes
allows, messages are cleaned of control characters and cut to a bounded length.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path
from typing import Any

from nodecert.certs.externalfault import Failed, external_fault
from nodecert.core.textsafe import clean
from nodecert.fleet.repair import action
from nodecert.fleet.samples import gpu_model
from nodecert.runs.records import HostRecord
from nodecert.runs.store import write_json
from nodecert_node.contract import Result, Verdict, write_atomic

OBSERVABILITY = Path(__file__).with_name("observability")
LABEL_PREFIX = "nodecert.io"
NPD_VERDICT_PATH = "/var/lib/nodecert/npd-verdict.json"
MESSAGE_MAX = 1024
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """A Kubernetes label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    return _LABEL_BAD.sub("-", text)[:63].strip("-_.")


def _msg(text: str) -> str:
    t = clean(str(text))
    return t if len(t) <= MESSAGE_MAX else t[:MESSAGE_MAX - 3] + "..."


def _outcome(rec: HostRecord) -> Verdict:
    """The record's verdict; one it does not hold (cut short, damaged) is ERROR."""
    return rec.verdict if rec.verdict is not None else Verdict.ERROR


def _verdict(rec: HostRecord) -> str:
    return _outcome(rec).name


def _failing(rec: HostRecord) -> list[Result]:
    return [r for r in rec.results if r.verdict >= Verdict.FAIL]


def k8s_patch(rec: HostRecord, when: str) -> dict[str, Any]:
    verdict = _verdict(rec)
    ready = _outcome(rec) <= Verdict.WARN
    failing = _failing(rec)
    peers, trend = rec.result("fleet.peers"), rec.result("fleet.trend")

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": ctype, "status": status, "reason": reason, "message": _msg(message),
                "lastHeartbeatTime": when, "lastTransitionTime": when}
    conditions = [cond("NodecertValidated", "True" if ready else "False",
                       "NodecertPassed" if ready else "NodecertFailed",
                       f"nodecert run {rec.run_id}: {verdict}" + (
                           "; " + "; ".join(f"{r.check}: {r.summary}"
                                            for r in failing[:3]) if failing else ""))]
    if peers is not None:
        out = peers.verdict in (Verdict.FAIL, Verdict.WARN)
        conditions.append(cond("NodecertFleetOutlier", "True" if out else "False",
                               "NodecertBeyondPeers" if out else "NodecertWithinPeers",
                               peers.summary))
    if trend is not None:
        worse = trend.verdict is Verdict.WARN
        conditions.append(cond("NodecertWorseningTrend", "True" if worse else "False",
                               "NodecertFigureWorsening" if worse else "NodecertNoTrend",
                               trend.summary))
    labels = {f"{LABEL_PREFIX}/verdict": verdict, f"{LABEL_PREFIX}/ready": str(ready).lower(),
              f"{LABEL_PREFIX}/run": label_value(rec.run_id or "unknown"),
              f"{LABEL_PREFIX}/simulated": str(rec.simulated).lower()}
    model = gpu_model(rec.results)
    if model:
        labels[f"{LABEL_PREFIX}/gpu-model"] = label_value(model)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": rec.host, "labels": labels},
            "status": {"conditions": conditions}}


def _entities(r: Result) -> list[dict[str, str]]:
    raw = r.value
    v: dict[str, Any] = raw if isinstance(raw, dict) else {}
    gpus = sorted({str(o.get("label", "")).removeprefix("gpu=")
                   for o in (v.get("outliers") or []) if isinstance(o, dict)
                   and str(o.get("label", "")).startswith("gpu=")})
    return [{"entityType": "GPU", "entityValue": g} for g in gpus]


def nvsentinel_events(rec: HostRecord, when: str) -> dict[str, Any]:
    """HealthEvents (NVSentinel health_event.proto, protobuf JSON: lowerCamel field names,
    enums by name). STORE_ONLY: a validation verdict is evidence for the site's policy,
    not an order to remediate."""
    def event(r: Result | None) -> dict[str, Any]:
        code = r.fault_code if r else ""
        bad = r is not None and r.verdict >= Verdict.FAIL
        act = action(code) if bad else action("")
        return {"version": 1, "agent": "nodecert", "componentClass": "GPU" if r is not None
                and r.check.split(".")[0] in ("health", "load", "fleet")
                else "NODE", "checkName": r.check if r else "nodecert.validation",
                "isFatal": bool(bad and act.chain[0] == "drain"), "isHealthy": not bad,
                "message": _msg(f"{r.verdict.name}: {r.summary}" if r else
                                f"nodecert run {rec.run_id}: {_verdict(rec)}"),
                "recommendedAction": act.nvidia if bad else "NONE",
                "errorCode": [code] if code else [],
                "entitiesImpacted": _entities(r) if r else [],
                "metadata": {"run_id": str(rec.run_id or ""), "verdict": r.verdict.name
                             if r else _verdict(rec), "simulated": str(rec.simulated).lower(),
                             "action_chain": ",".join(act.chain)},
                "generatedTimestamp": when, "nodeName": rec.host,
                "processingStrategy": "STORE_ONLY"}
    return {"version": 1, "events": [event(r) for r in _failing(rec)] or [event(None)]}


def node_fault(rec: HostRecord, when: str) -> dict[str, Any] | None:
    """The node's NVSentinel ExternalFault where it FAILed (a fault measured), else None."""
    if _outcome(rec) is not Verdict.FAIL:
        return None
    failed = [Failed(r.check, r.fault_code, r.summary) for r in rec.results
              if r.verdict is Verdict.FAIL]
    return external_fault(rec.host, failed, verdict=_verdict(rec), run_id=str(rec.run_id or ""),
                          simulated=rec.simulated, when=when) if failed else None


def npd_verdict(rec: HostRecord, when: str) -> dict[str, Any]:
    verdict = _verdict(rec)
    bad = _failing(rec)
    return {"schema": "nodecert.npd-verdict/v1", "node": rec.host, "run_id": rec.run_id,
            "verdict": verdict, "when": when, "simulated": rec.simulated,
            "message": _msg(f"nodecert {verdict}" + (
                ": " + "; ".join(f"{r.check} {r.verdict.name}" for r in bad[:5])
                if bad else f" (run {rec.run_id})"))}


NPD_MONITOR = {
    "plugin": "custom",
    "pluginConfig": {"invoke_interval": "300s", "timeout": "10s", "max_output_length": 512,
                     "concurrency": 1},
    "source": "nodecert-custom-plugin-monitor",
    "conditions": [{"type": "NodecertNotReady", "reason": "NodecertReady",
                    "message": "the node's last nodecert verdict is PASS or WARN"}],
    "rules": [{"type": "permanent", "condition": "NodecertNotReady", "reason": "NodecertFailed",
               "path": "/usr/lib/nodecert/nodecert-npd-check", "timeout": "10s"}]}



def fleet_prom(recs: list[HostRecord]) -> str:
    lines = ["# HELP nodecert_fleet_peer_verdict The node judged against its fleet's baseline "
             "(0 PASS, 1 WARN, 2 FAIL, 3 ERROR).", "# TYPE nodecert_fleet_peer_verdict gauge"]
    for rec in recs:
        r = rec.result("fleet.peers")
        if r is not None:
            lines.append(f'nodecert_fleet_peer_verdict{{node="{_esc(rec.host)}"}} '
                         f"{int(r.verdict)}")
    lines += ["# HELP nodecert_fleet_trends Figures worse at each of the node's last runs.",
              "# TYPE nodecert_fleet_trends gauge"]
    for rec in recs:
        r = rec.result("fleet.trend")
        if r is not None:
            n = len(r.value.get("trends") or []) if isinstance(r.value, dict) else 0
            lines.append(f'nodecert_fleet_trends{{node="{_esc(rec.host)}"}} {n}')
    lines += ["# HELP nodecert_fleet_node_verdict The node's verdict in its run "
              "(0 PASS .. 3 ERROR).", "# TYPE nodecert_fleet_node_verdict gauge"]
    lines += [f'nodecert_fleet_node_verdict{{node="{_esc(rec.host)}"}} '
              f"{int(_outcome(rec))}" for rec in recs]
    return "\n".join(lines) + "\n"


def _esc(v: str) -> str:
    return clean(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _safe_name(host: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", host)
    return name if name not in ("", ".", "..") else "_"


def export(recs: list[HostRecord], out: Path, *, now: dt.datetime | None = None) -> list[Path]:
    """Every file above, for these records, under `out`; returns what was written."""
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    written = []
    for rec in recs:
        name = _safe_name(rec.host)
        for sub, data in (("k8s", k8s_patch(rec, when)),
                          ("nvsentinel", nvsentinel_events(rec, when)),
                          ("npd", npd_verdict(rec, when))):
            p = out / sub / f"{name}.json"
            write_json(p, data)
            written.append(p)
        fault = node_fault(rec, when)
        if fault is not None:
            p = out / "nvsentinel" / f"{name}.externalfault.json"
            write_json(p, fault)
            written.append(p)
    write_json(out / "npd" / "nodecert-monitor.json", NPD_MONITOR)  # makes npd/ too
    write_atomic(str(out / "npd" / "nodecert-npd-check"),
                 (OBSERVABILITY / "nodecert-npd-check").read_bytes(), mode=0o755)
    (out / "prometheus").mkdir(parents=True, exist_ok=True)
    write_atomic(str(out / "prometheus" / "fleet.prom"), fleet_prom(recs).encode())
    (out / "grafana").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(OBSERVABILITY / "prometheus-rules.yml",
                    out / "prometheus" / "nodecert-rules.yml")
    shutil.copyfile(OBSERVABILITY / "grafana-dashboard.json",
                    out / "grafana" / "nodecert-fleet.json")
    written += [out / "npd" / "nodecert-monitor.json", out / "npd" / "nodecert-npd-check",
                out / "prometheus" / "fleet.prom", out / "prometheus" / "nodecert-rules.yml",
                out / "grafana" / "nodecert-fleet.json"]
    return written


def dashboard() -> dict[str, Any]:
    return dict(json.loads((OBSERVABILITY / "grafana-dashboard.json").read_text()))


__all__ = ["NPD_MONITOR", "OBSERVABILITY", "dashboard", "export", "fleet_prom", "k8s_patch",
           "label_value", "node_fault", "npd_verdict", "nvsentinel_events"]
