"""Drift and regression: a node's new validation compared with its certified baseline.

Pure functions of two records (the baseline's certificate predicate or results,
and the new results.json); each difference becomes a Result with the old value,
the new value and a verdict:

* drift.identity -- the hardware identity digest (a swapped GPU, board, NIC, drive);
* drift.stack -- every package of the baseline's software record: version changed,
  no longer held, removed; the driver nvidia-smi reports; the loaded kernel
  module; the framework environment's pip freeze;
* drift.perf.<metric> -- all-reduce bus bandwidth, the slowest GPU's GEMM TFLOPS,
  host->GPU bandwidth, the training job's scaling efficiency and tokens/s, every
  storage figure (local scratch and the shared file system): down more than
  drift.perf_drop_max (storage: drift.storage_drop_max);
  the soak's peak temperature: up more than drift.temp_rise_max_c;
* drift.health -- hardware Xids or uncorrectable ECC errors the baseline did not have.
"""

from __future__ import annotations

import json
from typing import Any

from nodecert.certs.identity import identity_changes, identity_digest
from nodecert_node.contract import Limits, Result, Threshold, Verdict, all_figures

Record = dict[str, Any]  # {"identity", "software", "results": [Result dicts]}


def record_of(host_results: dict[str, Any]) -> Record:
    """A results.json (or a certificate predicate: same keys) as a comparable record."""
    results = list(host_results.get("results") or [])
    software = host_results.get("software") or next(
        (r.get("facts", {}).get("software") for r in results
         if r["check"] == "stack.conformance"), None)
    return {"identity": host_results.get("identity"), "software": software,
            "results": results, "run_id": host_results.get("run_id")}


def _value(rec: Record, check: str) -> Any:
    r = next((x for x in rec["results"] if x["check"] == check), None)
    if r is None or r["verdict"] == "ERROR":
        return None
    return r.get("value")


def metrics(rec: Record) -> dict[str, tuple[float, str, str]]:
    """metric -> (value, unit, 'higher'|'lower' is better): the run's headline figures
    (contract.figures), node-wide ones only (per-GPU figures stay in the certificate)."""
    return {name: (f.value, f.unit, f.better) for name, f in
            all_figures(rec["results"]).items() if not f.labels or name.startswith("storage ")}


def _identity(old: Record, new: Record) -> Result:
    if not old.get("identity") or not new.get("identity"):
        return Result("drift.identity", Verdict.ERROR, "no hardware identity to compare "
                      f"({'baseline' if not old.get('identity') else 'new run'} lacks it)",
                      fault_code="NC-DRIFT-NO-IDENTITY",
                      remediation="Run hardware.inventory (every suite does) and re-run.")
    a, b = identity_digest(old["identity"]), identity_digest(new["identity"])
    value = {"old": a, "new": b}
    if a == b:
        return Result("drift.identity", Verdict.PASS, "same hardware as the certificate",
                      value=value)
    changes = identity_changes(old["identity"], new["identity"])
    return Result("drift.identity", Verdict.FAIL, f"hardware changed: {changes[0]}" + (
        f" (+{len(changes) - 1} more)" if len(changes) > 1 else ""), value=value,
        findings=tuple(changes), fault_code="NC-DRIFT-IDENTITY",
        remediation="A GPU, board, NIC or drive was swapped since certification: the "
                    "certificate no longer describes this node. Validate fully and certify "
                    "anew (nodecert provision / validate --suite standard, certify).")


def _stack(old: Record, new: Record) -> Result:
    a, b = old.get("software"), new.get("software")
    if not a or not b:
        return Result("drift.stack", Verdict.WARN, "no software record to compare ("
                      f"{'baseline' if not a else 'new run'} has no stack.conformance facts)")
    changes: list[str] = []
    pa, pb = a.get("packages") or {}, b.get("packages") or {}
    for name, was in sorted(pa.items()):
        now = pb.get(name)
        if now is None:
            changes.append(f"{name} {was['version']} removed")
            continue
        if now["version"] != was["version"]:
            changes.append(f"{name} {was['version']} -> {now['version']}")
        if was.get("held") and not now.get("held"):
            changes.append(f"{name} is no longer held (apt may upgrade it silently)")
    for key, label in (("driver_reported", "nvidia-smi driver"),
                       ("kernel_module", "loaded kernel module"), ("os", "OS")):
        if a.get(key) != b.get(key):
            changes.append(f"{label} {a.get(key) or '(none)'} -> {b.get(key) or '(none)'}")
    fa, fb = set(a.get("python") or []), set(b.get("python") or [])
    if fa != fb:
        changes.append("framework environment changed: " + ", ".join(
            [f"-{x}" for x in sorted(fa - fb)] + [f"+{x}" for x in sorted(fb - fa)]))
    value = {"old": {n: v["version"] for n, v in pa.items()},
             "new": {n: v["version"] for n, v in pb.items()}}
    if not changes:
        return Result("drift.stack", Verdict.PASS, f"all {len(pa)} pinned packages as "
                      "certified, held; same driver and framework", value=value)
    return Result("drift.stack", Verdict.FAIL, changes[0] + (
        f" (+{len(changes) - 1} more)" if len(changes) > 1 else ""), value=value,
        findings=tuple(changes), fault_code="NC-DRIFT-STACK",
        remediation="The software changed since certification. Re-provision the pinned "
                    "stack (nodecert provision), or certify the new state on purpose.")


def _perf(old: Record, new: Record, limits: Limits) -> list[Result]:
    mo, mn = metrics(old), metrics(new)
    out = []
    for name in sorted(set(mo) & set(mn)):
        (a, unit, better), (b, _, _) = mo[name], mn[name]
        check = f"drift.perf.{name.replace(' ', '.')}"
        value: dict[str, Any] = {"old": a, "new": b, "unit": unit}
        if better == "higher":
            # Storage has its own tolerance: a shared or virtual disk varies more than a GPU.
            key = ("drift.storage_drop_max" if name.startswith("storage ")
                   else "drift.perf_drop_max")
            drop = round((a - b) / a, 4) if a else 0.0
            value["change_pct"] = round(-100 * drop, 1)
            text = f"{name} {a:g} -> {b:g} {unit} ({-100 * drop:+.1f}%)"
            measured: float = drop
            what = "drop from the baseline"
        else:
            key = "drift.temp_rise_max_c"
            measured = round(b - a, 1)
            value["change"] = measured
            text = f"{name} {a:g} -> {b:g} {unit} ({measured:+g} {unit})"
            what = "rise from the baseline"
        t = limits.opt(key) or Threshold(0.10 if better == "higher" else 5.0, "<=",
                                         "ratio" if better == "higher" else "C",
                                         "built-in default", "profile key missing")
        outcome = t.check(measured)
        bad = not outcome.ok
        out.append(Result(check, Verdict.FAIL if bad else Verdict.PASS,
                          f"regression: {text}; {what} {outcome.message}" if bad else text,
                          value=value, unit=unit, thresholds={key: t},
                          fault_code="NC-REGRESSION" if bad else "",
                          remediation="Compare with the certificate's evidence; look at "
                                      "cooling, links and drives of the node." if bad else ""))
    return out


def _health(old: Record, new: Record) -> Result:
    def hw_xids(rec: Record) -> set[str]:
        v = _value(rec, "health.xid") or {}
        return {json.dumps({k: x.get(k) for k in ("xid", "gpu")}, sort_keys=True)
                for x in v.get("classified") or []
                if x.get("severity") not in ("application", "info")}

    def ecc(rec: Record) -> float:
        v = _value(rec, "health.gpu") or {}
        return float(v.get("ecc_volatile_uncorrectable") or 0)
    findings = [f"new hardware Xid: {x}" for x in sorted(hw_xids(new) - hw_xids(old))]
    if ecc(new) > ecc(old):
        findings.append(f"uncorrectable ECC errors {ecc(old):g} -> {ecc(new):g}")
    value = {"old": {"xids": len(hw_xids(old)), "ecc": ecc(old)},
             "new": {"xids": len(hw_xids(new)), "ecc": ecc(new)}}
    if not findings:
        return Result("drift.health", Verdict.PASS, "no new hardware Xids or ECC errors",
                      value=value)
    return Result("drift.health", Verdict.FAIL, findings[0], value=value,
                  findings=tuple(findings), fault_code="NC-DRIFT-HEALTH",
                  remediation="New hardware errors since certification: see health.gpu / "
                              "health.xid and NVIDIA's Xid catalog action.")


def compare(old: Record, new: Record, limits: Limits) -> list[Result]:
    baseline = str(old.get("run_id") or "the baseline")
    return [r.with_(facts={**r.facts, "baseline": baseline}) for r in
            [_identity(old, new), _stack(old, new), *_perf(old, new, limits),
             _health(old, new)]]


__all__ = ["compare", "metrics", "record_of"]
