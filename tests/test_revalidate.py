"""Re-validation: drift and regression against the certified baseline,
baselines that must verify, history."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.certs.certify import certify
from nodecert.certs.signing import init_key, load_private_key
from nodecert.cli import main
from nodecert.profiles import thresholds
from nodecert.revalidate.drift import compare, metrics, record_of
from nodecert.revalidate.history import history
from nodecert.revalidate.run import BaselineError, load_baseline
from nodecert_node.contract import Limits, Verdict
from support.runs import make_run, passing, recorded_results

SOFTWARE = {"os": "ubuntu-24.04", "driver_reported": "580.173.02",
            "kernel_module": "580.173.02",
            "packages": {"nvidia-open": {"version": "580.173.02-1", "held": True},
                         "libnccl2": {"version": "2.27.7-1+cuda13.0", "held": True}},
            "python": ["torch==2.9.1+cu130"]}


def baseline_results() -> list[dict[str, Any]]:
    res = passing(recorded_results(), acceptance=False)
    for r in res:
        if r["check"] == "hardware.topology":
            r["check"] = "stack.conformance"
            r["facts"] = {"software": copy.deepcopy(SOFTWARE)}
    res.append({"check": "fabric.nccl_allreduce", "verdict": "PASS", "summary": "ok",
                "value": {"busbw_gbs": 476.9, "curve": []}, "facts": {}, "evidence": [],
                "thresholds": {}, "findings": []})
    res.append({"check": "storage.fio", "verdict": "PASS", "summary": "ok",
                "value": {"/scratch": {"seq_read_mbps": 6000.0, "rand_read_iops": 900000.0}},
                "facts": {}, "evidence": [], "thresholds": {}, "findings": []})
    return res


def record(results: list[dict[str, Any]]) -> dict[str, Any]:
    ident = next(r["facts"]["identity"] for r in results if r["check"] == "hardware.inventory")
    return record_of({"identity": ident, "results": results, "run_id": "base"})


def result(results: list[dict[str, Any]], check: str) -> dict[str, Any]:
    return next(r for r in results if r["check"] == check)


LIMITS = Limits(thresholds.resolve("H200-SXM"))


def verdicts(rs: list[Any]) -> dict[str, str]:
    return {r.check: r.verdict.name for r in rs}


def test_unchanged_node_passes_every_comparison() -> None:
    base = baseline_results()
    got = compare(record(base), record(copy.deepcopy(base)), LIMITS)
    assert verdicts(got) == {
        "drift.identity": "PASS", "drift.stack": "PASS",
        "drift.perf.allreduce_busbw": "PASS", "drift.perf.gemm_tflops_min": "PASS",
        "drift.perf.soak_peak_temp": "PASS",
        "drift.perf.storage./scratch.seq_read_mbps": "PASS",
        "drift.perf.storage./scratch.rand_read_iops": "PASS", "drift.health": "PASS"}
    assert all(r.facts["baseline"] == "base" for r in got)
    assert set(metrics(record(base))) >= {"gemm_tflops_min", "soak_peak_temp"}


def test_driver_change_unheld_package_and_framework_drift() -> None:
    base = baseline_results()
    new = copy.deepcopy(base)
    sw = result(new, "stack.conformance")["facts"]["software"]
    sw["packages"]["nvidia-open"]["version"] = "580.180.01-1"
    sw["driver_reported"] = "580.180.01"
    sw["packages"]["libnccl2"]["held"] = False
    sw["python"] = ["torch==2.9.2+cu130"]
    res = next(r for r in compare(record(base), record(new), LIMITS)
               if r.check == "drift.stack")
    assert res.verdict is Verdict.FAIL
    assert res.findings == (
        "libnccl2 is no longer held (apt may upgrade it silently)",
        "nvidia-open 580.173.02-1 -> 580.180.01-1",
        "nvidia-smi driver 580.173.02 -> 580.180.01",
        "framework environment changed: -torch==2.9.1+cu130, +torch==2.9.2+cu130")
    assert res.value["old"]["nvidia-open"] == "580.173.02-1"
    assert res.value["new"]["nvidia-open"] == "580.180.01-1"


def test_swapped_gpu_serial_fails_identity() -> None:
    base = baseline_results()
    new = copy.deepcopy(base)
    result(new, "hardware.inventory")["facts"]["identity"]["gpus"][0]["serial"] = "999"
    res = compare(record(base), record(new), LIMITS)[0]
    assert res.check == "drift.identity" and res.verdict is Verdict.FAIL
    assert res.summary.startswith("hardware changed: GPU replaced in slot 0, bus ")
    assert "serial 1653724059030 (" in res.summary and "-> serial 999 (" in res.summary


def test_busbw_and_thermal_regressions_with_old_and_new_values() -> None:
    base = baseline_results()
    new = copy.deepcopy(base)
    result(new, "fabric.nccl_allreduce")["value"]["busbw_gbs"] = 420.0   # -11.9%
    result(new, "load.thermal_soak")["value"]["peak_temp_c"] = {"0": 70.0}  # +6 C
    result(new, "storage.fio")["value"]["/scratch"]["seq_read_mbps"] = 5500.0  # -8.3%: ok
    got = {r.check: r for r in compare(record(base), record(new), LIMITS)}
    bw = got["drift.perf.allreduce_busbw"]
    assert bw.verdict is Verdict.FAIL and bw.value == {"old": 476.9, "new": 420.0,
                                                       "unit": "GB/s", "change_pct": -11.9}
    assert bw.summary == ("regression: allreduce_busbw 476.9 -> 420 GB/s (-11.9%); drop from "
                          "the baseline needs <= 0.1 ratio, measured 0.1193 ratio")
    soak = got["drift.perf.soak_peak_temp"]
    assert soak.verdict is Verdict.FAIL and soak.value["change"] == 6.0
    assert got["drift.perf.storage./scratch.seq_read_mbps"].verdict is Verdict.PASS
    # The tolerance is a threshold: the inventory or CLI can tighten it.
    strict = Limits(thresholds.resolve("H200-SXM", cli={"drift.storage_drop_max": 0.05}))
    got = {r.check: r for r in compare(record(base), record(new), strict)}
    assert got["drift.perf.storage./scratch.seq_read_mbps"].verdict is Verdict.FAIL


def test_new_xid_and_ecc_fail_health_drift() -> None:
    base = baseline_results()
    new = copy.deepcopy(base)
    result(new, "health.xid")["value"]["classified"] = [
        {"xid": 79, "gpu": "0000:3a:00.0", "count": 1, "recent": True, "severity": "fatal"},
        {"xid": 13, "gpu": "0000:3a:00.0", "count": 4, "recent": True,
         "severity": "application"}]
    result(new, "health.gpu")["value"]["ecc_volatile_uncorrectable"] = 2
    res = compare(record(base), record(new), LIMITS)[-1]
    assert res.check == "drift.health" and res.verdict is Verdict.FAIL
    assert res.findings == ('new hardware Xid: {"gpu": "0000:3a:00.0", "xid": 79}',
                            "uncorrectable ECC errors 0 -> 2")


def test_baseline_certificates_must_verify(tmp_path: Path) -> None:
    kp = init_key(tmp_path / "k")
    key = load_private_key(kp.private)
    run = make_run(tmp_path, {"n1": {"results": baseline_results()}})
    reports = certify(run, key).out_dir
    base = load_baseline(reports, [key.public_key()])
    assert set(base) == {"n1"} and base["n1"]["software"] == SOFTWARE
    assert load_baseline(run, [key.public_key()]).keys() == {"n1"}  # run dir: its reports
    other = load_private_key(init_key(tmp_path / "other").private).public_key()
    with pytest.raises(BaselineError, match="does not verify: no valid signature"):
        load_baseline(reports, [other])
    env_path = reports / "n1.intoto.dsse.json"
    env = json.loads(env_path.read_text())
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["identity"]["gpus"] = []
    env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    env_path.write_text(json.dumps(env))
    with pytest.raises(BaselineError, match="signature does not match the payload"):
        load_baseline(reports, [key.public_key()])
    with pytest.raises(BaselineError, match="holds no certificates"):
        load_baseline(tmp_path / "k", [key.public_key()])


def test_history_lists_runs_oldest_first(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for i, (verdict, busbw) in enumerate((("PASS", 476.9), ("FAIL", 420.0))):
        res = baseline_results()
        result(res, "fabric.nccl_allreduce")["value"]["busbw_gbs"] = busbw
        if verdict == "FAIL":
            result(res, "fabric.nccl_allreduce").update(verdict="FAIL", summary="slow")
        d = runs / f"r{i}" / "n1"
        d.mkdir(parents=True)
        d.joinpath("results.json").write_text(json.dumps({
            "schema": "nodecert.validation/v1", "host": "n1", "run_id": f"r{i}",
            "suite": "quick", "verdict": verdict, "started": 1764460000 + i * 86400,
            "results": res}))
    rows = history(runs, "n1")
    assert [(r["run_id"], r["verdict"]) for r in rows] == [("r0", "PASS"), ("r1", "FAIL")]
    assert rows[1]["figures"]["allreduce_busbw"] == "420GB/s"
    assert rows[1]["failing"] == ["fabric.nccl_allreduce: slow"]
    out = CliRunner().invoke(main, ["history", "n1", "--runs-dir", str(runs)])
    assert out.exit_code == 0 and "2025-11-30 23:46:40" in out.output
    out = CliRunner().invoke(main, ["history", "n9", "--runs-dir", str(runs)])
    assert out.exit_code == 2 and "no run under" in out.output


def test_newer_certificate_supersedes_older_in_history_and_fleet_page(tmp_path: Path) -> None:
    from nodecert.certs.html import current_certificates, fleet_page
    runs = tmp_path / "runs"
    for i in range(3):
        d = runs / f"r{i}" / "n1"
        d.mkdir(parents=True)
        d.joinpath("results.json").write_text(json.dumps({
            "schema": "nodecert.validation/v1", "host": "n1", "run_id": f"r{i}",
            "suite": "quick", "verdict": "PASS", "started": 1764460000 + i * 86400,
            "finished": 1764460100 + i * 86400, "results": baseline_results()}))
        if i < 2:  # r0 and r1 certified, r2 not (yet)
            (runs / f"r{i}" / "reports").mkdir()
            (runs / f"r{i}" / "reports" / "n1.intoto.dsse.json").write_text("{}")
    rows = history(runs, "n1")
    assert [r["certificate_status"] for r in rows] == ["superseded", "current", ""]
    out = CliRunner().invoke(main, ["history", "n1", "--runs-dir", str(runs)])
    assert out.output.count("superseded") == 1 and out.output.count("current") == 1

    def st(host: str, ended: str, verdict: str) -> dict[str, Any]:
        return {"predicate": {"host": host, "verdict": verdict, "simulated": False,
                              "reasons": [], "results": [], "run_id": ended,
                              "validity": {"not_before": ended, "issued": ended}}}
    old, new = st("n1", "2026-11-01T00:00:00+00:00", "NOT READY"), \
        st("n1", "2026-11-20T00:00:00+00:00", "READY")
    current, superseded = current_certificates([new, old, st("n2", "2026-11-02", "READY")])
    assert [c["predicate"]["run_id"] for c in current] == ["2026-11-20T00:00:00+00:00",
                                                           "2026-11-02"]
    assert superseded == {"n1": 1}
    page = fleet_page([old, new], keyid="k")
    assert "1 of 1 nodes READY" in page and "supersedes 1 older" in page


def test_a_partial_run_never_becomes_the_schedules_plan(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`validate --only X` sends a plan of some of the suite's checks: the node keeps it
    out of plans/<suite>.json, so the timer and the apt hook still judge the whole suite
    (a held driver's change is still seen right after an ad-hoc run)."""
    from nodecert.inventory.reader import HostSpec
    from nodecert.validation.plan import build_plan
    from nodecert_node import state
    from nodecert_node.contract import Plan
    spec = HostSpec(name="h1", address="127.0.0.1", port=22, groups=(), gpu_model="H200-SXM",
                    gpu_count=8, cpu_cores=112, ram_gb=2048, nvme_count=8, nvme_min_gb=3500,
                    simulated=True, validation={})
    quick = thresholds.suite("quick")

    def plan(checks: tuple[str, ...]) -> dict[str, Any]:
        return build_plan(spec, quick, None, "r", cli_thresholds={}, scratch=None,
                          checks=checks).as_dict()

    whole, only = plan(()), plan(("health.xid",))
    assert whole["partial"] is False and only["partial"] is True
    assert plan(tuple(quick.checks))["partial"] is False  # every check named: whole
    assert Plan.from_dict(only).checks == ["health.xid"]
    monkeypatch.setattr(state, "STATE", str(tmp_path))
    state.save_plan(whole)
    kept = json.loads((tmp_path / "plans/quick.json").read_text())
    # every check that applies to this host (the rack's checks do not: it is in no rack;
    # nor attestation: its inventory does not ask for it)
    assert kept["checks"] == [c for c in quick.checks if not c.startswith("domain.")
                              and c != "attestation.gpu"]
    state.save_plan(only)  # the ad-hoc run after it
    assert json.loads((tmp_path / "plans/quick.json").read_text()) == kept
