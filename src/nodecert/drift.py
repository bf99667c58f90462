"""Drift and regression: a node's new validation compared with its certified baseline.

Pure functions of two records (the baseline's certificate predicate or results,
and the new results.json); each difference becomes a Result with the old value,
the new value and a verdict:

* drift.identity -- the hardware identity digest (a swapped GPU, board, NIC, drive);
* drift.stack -- every package of the baseline's software record: version changed,
  no longer held, removed; the driver nvidia-smi reports; the loaded kernel
  module; the framework environment's pip freeze;
* drift.perf.<metric> -- all-reduce bus bandwidth, the slowest GPU's GEMM TFLOPS,
  host->GPU bandwidth, every storage figure: down more than drift.perf_drop_max;
  the soak's peak temperature: up more than drift.temp_rise_max_c;
* drift.health -- hardware Xids or uncorrectable ECC errors the baseline did not have.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nodecert.certify import identity_digest
from nodecert.verify import identity_changes
from nodecert_node.checks import Limits
from nodecert_node.result import Result, Verdict

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


def _min(d: Any) -> float | None:
    vals = [float(v) for v in (d or {}).values() if isinstance(v, int | float)]
    return min(vals) if vals else None


def _max(d: Any) -> float | None:
    vals = [float(v) for v in (d or {}).values() if isinstance(v, int | float)]
    return max(vals) if vals else None


def metrics(rec: Record) -> dict[str, tuple[float, str, str]]:
    """metric -> (value, unit, 'higher'|'lower' is better) for what the run measured."""
    out: dict[str, tuple[float, str, str]] = {}
    getters: list[tuple[str, str, Callable[[Any], Any], str, str]] = [
        ("allreduce_busbw", "fabric.nccl_allreduce", lambda v: v.get("busbw_gbs"), "GB/s",
         "higher"),
        ("gemm_tflops_min", "load.burnin", lambda v: _min(v.get("tflops_per_gpu")), "TFLOPS",
         "higher"),
        ("h2d_gbs_min", "fabric.bandwidth", lambda v: _min(v.get("host_to_device_memcpy_ce")),
         "GB/s", "higher"),
        ("soak_peak_temp", "load.thermal_soak", lambda v: _max(v.get("peak_temp_c")), "C",
         "lower"),
    ]
    for name, check, get, unit, better in getters:
        v = _value(rec, check)
        x = get(v) if isinstance(v, dict) else None
        if isinstance(x, int | float):
            out[name] = (float(x), unit, better)
    fio = _value(rec, "storage.fio")
    for target, m in (fio or {}).items() if isinstance(fio, dict) else []:
        for k, unit in (("seq_read_mbps", "MB/s"), ("seq_write_mbps", "MB/s"),
                        ("rand_read_iops", "IOPS"), ("checkpoint_mbps", "MB/s")):
            if isinstance(m, dict) and isinstance(m.get(k), int | float):
                out[f"storage {target} {k}"] = (float(m[k]), unit, "higher")
    return out


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
    rise = float(limits.value("drift.temp_rise_max_c", 5))
    mo, mn = metrics(old), metrics(new)
    out = []
    for name in sorted(set(mo) & set(mn)):
        (a, unit, better), (b, _, _) = mo[name], mn[name]
        # Storage has its own tolerance: a shared or virtual disk varies more than a GPU.
        key = "drift.storage_drop_max" if name.startswith("storage ") else "drift.perf_drop_max"
        drop = float(limits.value(key, 0.10))
        th = limits.pick(key) if better == "higher" else limits.pick("drift.temp_rise_max_c")
        check = f"drift.perf.{name.replace(' ', '.')}"
        value = {"old": a, "new": b, "unit": unit}
        if better == "higher":
            change = (b - a) / a if a else 0.0
            value["change_pct"] = round(100 * change, 1)
            bad = change < -drop
            text = f"{name} {a:g} -> {b:g} {unit} ({100 * change:+.1f}%)"
            limit = f"more than {100 * drop:g}% down fails"
        else:
            change = b - a
            value["change"] = round(change, 1)
            bad = change > rise
            text = f"{name} {a:g} -> {b:g} {unit} ({change:+g} {unit})"
            limit = f"more than {rise:g} {unit} up fails"
        out.append(Result(check, Verdict.FAIL if bad else Verdict.PASS,
                          f"regression: {text}, {limit}" if bad else text, value=value,
                          unit=unit, thresholds=th, fault_code="NC-REGRESSION" if bad else "",
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
