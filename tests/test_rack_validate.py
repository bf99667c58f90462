"""`nodecert rack validate` and the rack certificate, end to end over the rack's real
Redfish endpoints (the lab's emulators on loopback) with the trays' node runs given:
a healthy rack passes and its certificate verifies naming every tray and switch tray;
a tray in another clique, a tray not measured and a switch tray down each give the
right verdict naming the right part, and nothing else fails."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nodecert.certs import rack as rackcert
from nodecert.certs.certify import RunError, cluster_link, cluster_reference
from nodecert.certs.identity import identity_digest
from nodecert.certs.rack import certify_rack
from nodecert.certs.signing import init_key, load_private_key
from nodecert.certs.verify import verify_report
from nodecert.cli import main
from nodecert.core.errors import InventoryError
from nodecert.rack import sweep
from nodecert.rack.validate import RackRequest, rack_validate
from nodecert.runs.records import GroupRecord
from nodecert_node.contract import Result, Threshold, Verdict
from support.racklab import Rack, running

TRAYS = [f"tray{i:02d}" for i in range(18)]
TRAY = ("nodecert_gpu_model=GB200 nodecert_gpu_count=4 nodecert_cpu_cores=144 "
        "nodecert_ram_gb=960 nodecert_nvme_count=4")


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[Rack]:
    yield from running(tmp_path)


def _inventory(tmp: Path, r: Rack, **over: Any) -> Path:
    inv = tmp / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.ini").write_text("[rack_a1]\n" + "\n".join(
        f"{t} ansible_host=10.99.0.{i + 1} {TRAY}" for i, t in enumerate(TRAYS)) + "\n")
    spec = r.spec(**over)
    spec.pop("name"), spec.pop("imex")
    (inv / "group_vars" / "rack_a1.yml").write_text(yaml.safe_dump(
        {"nodecert_rack": {"name": "rack-a1", **spec}}))
    return inv


def _tray(host: str, clique: str = "2", *, imex: str = "PASS") -> dict[str, Any]:
    n = int(host[4:])
    results = [{"check": "hardware.inventory", "verdict": "PASS", "summary": "as ordered"},
               {"check": "domain.fabric", "verdict": "PASS",
                "summary": f"4 GPUs registered in NVLink clique {clique}"},
               {"check": "domain.imex", "verdict": imex, "summary": "IMEX domain UP" if
                imex == "PASS" else "IMEX node #3 (10.99.0.4) is DOWN, expected READY"}]
    return {"results": results, "simulated": True,
            "identity": {"system_serial": f"TRAY{n:04d}", "system_uuid": f"uuid-{n}",
                         "baseboard_serial": f"BB{n:04d}",
                         "gpus": [{"bus_id": f"0008:0{g}:00.0", "serial": f"G{n:02d}{g}",
                                   "uuid": f"GPU-{n:02d}{g}"} for g in range(4)],
                         "nic_macs": [f"02:00:00:00:00:{n:02x}"], "nvme": []},
            "inventory": {"driver": "580.95.05",
                          "gpus": [{"bus_id": f"0008:0{g}:00.0", "vbios": "97.00.9A.00.01"}
                                   for g in range(4)]},
            "fabric": {"clique_id": clique,
                       "cluster_uuid": "c0ffee00-0000-0000-0000-0000000000aa",
                       "gpus": [{"fabric_clique_id": clique} for _ in range(4)]}}


NO_WIRING = ("rack.nvlink_map: the switch trays report no GPU behind their NVLink ports "
             "(Redfish Port Links.AssociatedEndpoints)")


def _load() -> list[Result]:
    """The domain's jobs as a healthy rack's: every GPU pair at the same bandwidth."""
    figures: dict[sweep.GpuPair, float | None] = {
        p: 790.0 for pairs in sweep.plan(TRAYS, 4) for p in pairs}
    swept, _ = sweep.judge(figures, {}, Threshold(0.85, ">=", "ratio"), simulated=True)
    return [Result("rack.allreduce", Verdict.PASS, "all-reduce over 18 trays (72 GPUs): "
                   "busbw 786.7 GB/s", value=786.7, unit="GB/s", simulated=True), swept]


def _trays(**special: dict[str, Any]) -> Callable[..., dict[str, dict[str, Any]]]:
    def run(inv: Path, rack: dict[str, Any], run_dir: Path, say: Any) -> dict[str, Any]:
        assert rack["trays"] == TRAYS  # the trays the inventory names, sorted
        return {t: special.get(t) or _tray(t) for t in rack["trays"]}
    return run


def _verdicts(rec: GroupRecord) -> dict[str, str]:
    return {r.check: r.verdict.name for r in rec.results}


def test_a_healthy_rack_passes_and_its_certificate_verifies(
        endpoints: Rack, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, endpoints)
    rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                                  progress=lambda s: None, trays_fn=_trays(), load_fn=_load)
    assert rec.verdict is Verdict.PASS, rec.results
    assert set(_verdicts(rec).values()) == {"PASS"}
    assert list(_verdicts(rec)) == ["rack.trays", "rack.domain", "rack.switch_trays",
                                     "rack.power", "rack.cooling", "rack.firmware",
                                     "rack.allreduce", "rack.sweep"]
    # these endpoints report no GPU behind their ports: the wiring is not judged, and the
    # record says so (the lab's switch trays do report it: test_rack_lab.py)
    assert rec.not_judged == [NO_WIRING]
    assert rec.run_dir.name.startswith("rack-") and rec.simulated is True
    assert "password_file" not in json.dumps(rec.data)
    kp = init_key(tmp_path / "keys")
    env, html, verdict = certify_rack(rec.run_dir, load_private_key(kp.private))
    assert verdict == "READY"
    st = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))
    names = [s["name"] for s in st["subject"]]
    assert names[:18] == [f"node:{t}" for t in TRAYS]
    assert names[18:] == ["switch-tray:nvsw-01", "switch-tray:nvsw-02"]
    v = verify_report(env, [kp.public], allow_simulated=True)
    assert v.ok and v.kind == "rack", v.steps
    page = html.read_text()
    assert "Rack rack-a1 READY" in page and "switch-tray:nvsw-02" in page
    assert page.count('class="cell"') == 72  # the sweep's heat-map: 18 trays x 4 GPUs
    # one tray's live hardware against its subject
    v = verify_report(env, [kp.public], allow_simulated=True,
                      live_identity=_tray("tray05")["identity"], live_host="tray05")
    assert v.ok
    swapped = _tray("tray05")["identity"] | {"system_serial": "OTHER"}
    v = verify_report(env, [kp.public], allow_simulated=True, live_identity=swapped,
                      live_host="tray05")
    assert not v.ok and any(n == "hardware" and not ok for n, ok, _ in v.steps)


def _cabled(tmp: Path, r: Rack, *, fabric: bool = True) -> tuple[Path, Path]:
    """The rack's inventory naming a cable plan for its trays' scale-out fabric (each
    tray's two HCAs on two leaves)."""
    inv = _inventory(tmp, r)
    plan = tmp / "plan.csv"
    plan.write_text("node,port,rail,switch,switch_port,width\n" + "".join(
        f"{t},mlx5_{k},{k},leaf-{k:02d},{i + 1},4X\n" for i, t in enumerate(TRAYS)
        for k in range(2)))
    extra = {"nodecert_cabling_plan": str(plan)}
    if fabric:
        extra["nodecert_fabric"] = {"link_layer": "InfiniBand", "ports": 2, "rate_gbps": 400}
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(extra))
    return inv, plan


def test_the_trays_cabling_is_judged_and_bound_into_the_rack_certificate(
        endpoints: Rack, tmp_path: Path) -> None:
    from nodecert.cluster.cabling import judge_cabling
    from nodecert.cluster.cabling_links import Link
    from nodecert.inventory.cableplan import read_plan
    inv, plan_file = _cabled(tmp_path, endpoints)
    plan = read_plan(plan_file)
    links = [Link(p.node, p.port, p.switch, p.switch_port, "4X", 106.25) for p in plan.links]
    # tray03's two cables swapped at the leaves
    a, b = (next(i for i, x in enumerate(links) if (x.node, x.port) == ("tray03", f"mlx5_{k}"))
            for k in (0, 1))
    links[a], links[b] = (Link("tray03", "mlx5_0", "leaf-01", "4", "4X", 106.25),
                          Link("tray03", "mlx5_1", "leaf-00", "4", "4X", 106.25))
    rec = rack_validate(
        RackRequest(inv, runs_dir=tmp_path / "runs"), progress=lambda s: None,
        trays_fn=_trays(), load_fn=_load, cabling_fn=lambda: judge_cabling(plan, links))
    assert _verdicts(rec)["fabric.cabling"] == "FAIL" and rec.verdict is Verdict.FAIL
    assert {c: v for c, v in _verdicts(rec).items() if v != "PASS"} == {
        "fabric.cabling": "FAIL"}  # nothing else fails
    kp = init_key(tmp_path / "keys")
    env, html, verdict = certify_rack(rec.run_dir, load_private_key(kp.private))
    assert verdict == "NOT READY"
    st = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))
    cab = st["predicate"]["cabling"]
    assert cab["plan_sha256"] == plan.digest and cab["plan_lines"] == 36
    assert cab["as_planned"] == 34 and len(cab["links"]) == 36
    assert [f["kind"] for f in cab["findings"]] == ["swapped"]
    assert any("fabric.cabling" in r for r in st["predicate"]["reasons"])
    v = verify_report(env, [kp.public], allow_simulated=True)
    assert [n for n, ok, _ in v.steps if not ok] == ["verdict"], v.steps  # NOT READY, intact
    page = html.read_text()
    assert "Cabling" in page and plan.digest in page and 'id="cabling"' in page
    # wired to plan: the rack is ready, the plan still bound
    rec = rack_validate(
        RackRequest(inv, runs_dir=tmp_path / "runs2"), progress=lambda s: None,
        trays_fn=_trays(), load_fn=_load,
        cabling_fn=lambda: judge_cabling(plan, [
            Link(p.node, p.port, p.switch, p.switch_port, "4X", 106.25) for p in plan.links]))
    assert rec.verdict is Verdict.PASS
    env, _, verdict = certify_rack(rec.run_dir, load_private_key(kp.private))
    assert verdict == "READY"
    st = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))
    assert st["predicate"]["cabling"]["as_planned"] == 36


def test_a_rack_cable_plan_with_errors_or_no_fabric_is_refused_before_anything_runs(
        endpoints: Rack, tmp_path: Path) -> None:
    inv, plan_file = _cabled(tmp_path / "a", endpoints)
    plan_file.write_text(plan_file.read_text() + "tray99,mlx5_0,0,leaf-00,40,4X\n")

    def never(*_: Any) -> dict[str, Any]:
        raise AssertionError("the trays must not run")
    with pytest.raises(InventoryError, match=r"plan.csv:38.*tray99") as e:
        rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"), trays_fn=never)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), e
    inv, _ = _cabled(tmp_path / "b", endpoints, fabric=False)
    with pytest.raises(InventoryError, match="not one fabric"):
        rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"), trays_fn=never)


def test_faults_are_named_and_nothing_else_fails(endpoints: Rack, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, endpoints)
    endpoints.procs["nvsw-02"].terminate()
    endpoints.procs["nvsw-02"].wait(timeout=10)
    rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                            progress=lambda s: None,
                            trays_fn=_trays(tray07=_tray("tray07", clique="3"),
                                            tray11=_tray("tray11", imex="FAIL")))
    v = _verdicts(rec)
    assert v == {"rack.trays": "FAIL", "rack.domain": "FAIL", "rack.switch_trays": "FAIL",
                 "rack.power": "PASS", "rack.cooling": "PASS", "rack.firmware": "PASS"}
    by = {r["check"]: r for r in rec.data["results"]}
    assert by["rack.trays"]["findings"] == [
        "tray tray11: domain.imex: IMEX node #3 (10.99.0.4) is DOWN, expected READY"]
    assert by["rack.domain"]["findings"][0].startswith("tray tray07: in clique 3 of cluster")
    assert len(by["rack.domain"]["findings"]) == 1
    assert by["rack.switch_trays"]["findings"][0].startswith("switch tray nvsw-02 (")
    kp = init_key(tmp_path / "keys")
    env, _, verdict = certify_rack(tmp_path / "runs" / str(rec.run_id),
                                   load_private_key(kp.private))
    assert verdict == "NOT READY"
    st = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))
    assert "switch-tray:nvsw-02" not in [s["name"] for s in st["subject"]]  # never read
    res = CliRunner().invoke(main, ["verify", str(env), "--pubkey", str(kp.public),
                                    "--allow-simulated"])
    assert res.exit_code == 1 and "NOT READY" in res.output, res.output


def test_a_tray_not_measured_is_error_and_gets_no_certificate(
        endpoints: Rack, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, endpoints)
    rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                                  progress=lambda s: None,
                                  trays_fn=_trays(tray03={"error": "unreachable: timed out"}))
    assert rec.verdict is Verdict.ERROR
    assert _verdicts(rec)["rack.trays"] == "ERROR"
    kp = init_key(tmp_path / "keys")
    with pytest.raises(RunError, match="no hardware identity for tray03"):
        certify_rack(rec.run_dir, load_private_key(kp.private))
    assert not (rec.run_dir / "reports").exists()


def test_the_cli_names_the_rack_and_refuses_an_unknown_one(
        endpoints: Rack, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, endpoints)
    with pytest.raises(InventoryError, match="no rack named 'rack-z9'; the inventory has "
                                             "rack-a1"):
        rack_validate(RackRequest(inv, rack="rack-z9", runs_dir=tmp_path / "runs"),
                      trays_fn=_trays())
    assert not (tmp_path / "runs").exists()  # nothing written for bad input
    res = CliRunner().invoke(main, ["rack", "validate", "-i", str(inv), "--rack", "rack-z9"])
    assert res.exit_code == 2 and "no rack named 'rack-z9'" in res.output


def test_a_statement_whose_subjects_do_not_match_its_trays_is_refused(
        endpoints: Rack, tmp_path: Path) -> None:

    inv = _inventory(tmp_path, endpoints)
    rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                            progress=lambda s: None, trays_fn=_trays())
    st = rackcert.statement(rec,
                            issued=dt.datetime.fromtimestamp(rec.finished, dt.UTC))
    assert rackcert.rack_problems(st) == [] and rackcert.subject_problems(st) == []
    st["subject"][3]["digest"]["sha256"] = "0" * 64
    st["subject"] = [*st["subject"][:-1], st["subject"][0] | {"name": "node:tray99"}]
    assert rackcert.subject_problems(st) == [
        "node:tray03: digest does NOT match its identity in the predicate",
        "node:tray99: no identity in the predicate",
        "the subjects and the rack's compute trays differ"]
    st["subject"][0]["name"] = "gpu:x"
    assert rackcert.rack_problems(st) == ["subjects must be trays and switch trays with "
                                          "sha256 digests"]


def test_a_tray_certificate_references_the_rack_certificate_of_its_very_hardware(
        endpoints: Rack, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, endpoints)
    rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                               progress=lambda s: None, trays_fn=_trays(), load_fn=_load)
    kp = init_key(tmp_path / "keys")
    key = load_private_key(kp.private)
    env, _, _ = certify_rack(rec.run_dir, key)
    ref = cluster_reference(env, key)
    assert ref["kind"] == "rack" and ref["nodes"] == TRAYS and ref["verdict"] == "READY"
    mine = identity_digest(_tray("tray05")["identity"])
    link = cluster_link(ref, "tray05", mine)
    assert link is not None and link["identity_sha256"] == mine and "kind" not in link
    assert cluster_link(ref, "tray05", identity_digest(_tray("tray06")["identity"])) is None
    other = init_key(tmp_path / "other")
    with pytest.raises(RunError, match="not a cluster or rack certificate signed with this"):
        cluster_reference(env, load_private_key(other.private))


def test_a_rack_whose_domain_was_not_measured_under_load_is_not_ready(
        endpoints: Rack, tmp_path: Path) -> None:
    """Every rule passes, but the trays name no job engine: the record says what was not
    judged, and the certificate does not call the rack ready."""
    inv = _inventory(tmp_path, endpoints)
    rec = rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"),
                                  progress=lambda s: None, trays_fn=_trays())
    assert rec.verdict is Verdict.PASS and "rack.sweep" not in _verdicts(rec)
    unloaded = ("rack.allreduce, rack.sweep: the trays name no job engine (nodecert_cluster): "
                "the NVLink domain was not measured under load")
    assert rec.not_judged == [NO_WIRING, unloaded]
    kp = init_key(tmp_path / "keys")
    env, _, verdict = certify_rack(rec.run_dir, load_private_key(kp.private))
    assert verdict == "NOT READY"
    st = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))
    # not ready for want of the domain's traffic; the unreported wiring is listed, not a
    # reason (the domain's jobs prove what the links carry)
    assert st["predicate"]["reasons"] == [unloaded]
    assert st["predicate"]["not_judged"] == rec.not_judged


def test_an_unreadable_password_file_is_refused_before_anything_runs(
        endpoints: Rack, tmp_path: Path) -> None:
    missing = tmp_path / "no-such.pass"
    inv = _inventory(tmp_path, endpoints, redfish={
        "username": "nodecert", "password_file": str(missing),
        "ca_file": endpoints.spec()["redfish"]["ca_file"]})
    ran: list[str] = []

    def trays(*_: Any) -> dict[str, Any]:
        ran.append("trays")
        return {}
    with pytest.raises(InventoryError, match="Redfish password file"):
        rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"), trays_fn=trays)
    assert ran == [] and not (tmp_path / "runs").exists()


def test_ctrl_c_keeps_a_record_and_stops_the_sampling(endpoints: Rack, tmp_path: Path) -> None:
    inv = _inventory(tmp_path, endpoints, samples=30, sample_s=1)

    def interrupted(*_: Any) -> dict[str, Any]:
        raise KeyboardInterrupt
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        rack_validate(RackRequest(inv, runs_dir=tmp_path / "runs"), progress=lambda s: None,
                      trays_fn=interrupted)
    assert time.monotonic() - t0 < 15  # not the 30 samples the rack asks for
    (run,) = (tmp_path / "runs").iterdir()
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "ERROR" and data["interrupted"] is True
