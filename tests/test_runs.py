"""The run directory: one id recipe, one layout, the writers and the typed readers."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from nodecert.core.errors import NodecertError
from nodecert.revalidate.history import history
from nodecert.runs import records
from nodecert.runs.layout import RUN_ID, RunDir, RunDirError, new_run_id, runs_under
from nodecert.runs.store import HostLink, HostRun, write_json
from nodecert.transport.become import BecomeSource
from nodecert.validation.run import ValidateRequest, open_new_run
from nodecert_node.contract import Result, Verdict
from support.orders import h200_host

INVENTORY = f"[gpu]\n{h200_host('gpu-01', '192.0.2.10', 'ansible_user=ops')}\n"


def test_run_ids_are_unique_sortable_and_say_their_kind() -> None:
    # 24 random bits a second: 20 runs started in one second differ but once in ~80,000
    # draws (200 collided once in CI); a run never reuses a directory either way (make)
    ids = {new_run_id() for _ in range(20)}
    assert len(ids) == 20 and all(RUN_ID.match(i) for i in ids)
    cluster = new_run_id("cluster")
    assert cluster.startswith("cluster-") and RUN_ID.match(cluster)
    assert not RUN_ID.match("20261201-120000")  # no random part: not a run id


def test_a_new_run_is_written_only_when_made(tmp_path: Path) -> None:
    run = RunDir.new(tmp_path / "runs")
    assert not run.path.exists()  # its id is known before any input is checked
    run.make()
    assert run.path.is_dir() and run.path.parent == (tmp_path / "runs").resolve()
    with pytest.raises(FileExistsError):
        run.make()  # a run never reuses another's directory
    assert run.results("h1") == run.path / "h1" / "results.json"
    assert run.certificate("h1") == run.path / "reports" / "h1.intoto.dsse.json"


def test_the_saved_record_never_holds_how_the_host_is_reached(tmp_path: Path) -> None:
    """The become password is read for the session and kept beside the run (HostLink),
    never in the host's record nor in the run's inputs."""
    inv = tmp_path / "inv.ini"
    inv.write_text(INVENTORY.replace("ansible_user=ops", "ansible_user=ops ansible_become=true"))
    secret = "correct-horse-battery-staple"
    pw = tmp_path / "become"
    pw.write_text(secret + "\n")
    os.chmod(pw, 0o600)
    run = open_new_run(ValidateRequest(inv, suite="quick", runs_dir=tmp_path / "runs",
                                       become=BecomeSource(password_file=pw)))
    link = run.links["gpu-01"]
    assert isinstance(link, HostLink) and link.endpoint.become_password is not None
    assert link.endpoint.become_password.reveal() == secret
    assert "endpoint" not in {f.name for f in dataclasses.fields(HostRun)}
    hr = run.hosts["gpu-01"]
    hr.save()
    for path in run.run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
    rec = records.read_host_record(RunDir(run.run_dir).results("gpu-01"))
    assert rec.host == "gpu-01" and rec.run_id == run.run_dir.name and rec.suite == "quick"
    assert records.recorded_plan(RunDir(run.run_dir), "gpu-01") == hr.plan


def test_bad_input_writes_no_run(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text(INVENTORY.replace("H200-SXM", "NO-SUCH-GPU"))
    with pytest.raises(NodecertError, match="NO-SUCH-GPU"):
        open_new_run(ValidateRequest(inv, suite="quick", runs_dir=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _record(run: RunDir, host: str, **over: object) -> Path:
    data = {"schema": "nodecert.validation/v1", "host": host, "run_id": run.run_id,
            "suite": "quick", "verdict": "PASS", "simulated": True, "started": 100.0,
            "finished": 160.0, "results": [{"check": "health.gpu", "verdict": "PASS",
                                            "summary": "ok"}], **over}
    write_json(run.results(host), data)
    return run.results(host)


def test_finished_run_reads_every_record_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    run = RunDir.new(tmp_path).make()
    _record(run, "h1")
    _record(run, "h2", verdict="FAIL")
    with pytest.raises(RunDirError, match=r"has no validate\.json"):
        records.finished_run(run.path)  # still running, or interrupted before its summary
    write_json(run.summary, {"verdict": "FAIL"})
    assert [(r.host, r.verdict) for r in records.finished_run(run.path)] == [("h1", Verdict.PASS),
                                                                      ("h2", Verdict.FAIL)]
    run.results("h3").parent.mkdir()
    run.results("h3").write_text('{"schema": "other"}')
    with pytest.raises(RunDirError, match=r"h3/results\.json: not a nodecert host result"):
        records.finished_run(run.path)
    run.results("h3").write_text('{"schema": "nodecert.valid')  # truncated
    with pytest.raises(RunDirError, match=r"h3/results\.json: not readable JSON"):
        records.host_records(run)
    with pytest.raises(RunDirError, match="not a directory"):
        records.finished_run(tmp_path / "nope")
    empty = RunDir.new(tmp_path).make()
    write_json(empty.summary, {})
    with pytest.raises(RunDirError, match=r"holds no <host>/results\.json"):
        records.finished_run(empty.path)


def test_a_hosts_history_skips_damaged_runs_and_other_hosts(tmp_path: Path) -> None:
    runs = [RunDir.new(tmp_path).make() for _ in range(3)]
    _record(runs[0], "h1", started=100.0)
    _record(runs[1], "h2")
    runs[2].results("h1").parent.mkdir()
    runs[2].results("h1").write_text("{")  # being written, or damaged
    _record(runs[2], "h9")
    assert [r.started for r in records.host_history(tmp_path, "h1")] == [100.0]
    assert [r.run.run_id for r in records.host_history(tmp_path, "h2")] == [runs[1].run_id]
    assert runs_under(tmp_path) == sorted(runs, key=lambda r: r.run_id)
    assert runs_under(tmp_path / "absent") == []
    rows = history(tmp_path, "h1")
    assert [r["run_id"] for r in rows] == [runs[0].run_id]


def test_a_record_with_absent_or_odd_fields_is_read_as_absent(tmp_path: Path) -> None:
    run = RunDir.new(tmp_path).make()
    rec = records.read_host_record(_record(run, "h1", started=None, finished="soon", results="x",
                                   run_id=None))
    assert (rec.started, rec.finished, rec.results, rec.run_id) == (0.0, 0.0, [], None)


def test_a_record_reads_as_the_contracts_types(tmp_path: Path) -> None:
    run = RunDir.new(tmp_path).make()
    rec = records.read_host_record(_record(run, "h1"))
    assert rec.verdict is Verdict.PASS and rec.verdict is not None  # PASS is 0: never "no verdict"
    (r,) = rec.results
    assert isinstance(r, Result) and (r.check, r.verdict, r.summary) == (
        "health.gpu", Verdict.PASS, "ok")
    assert rec.result("health.gpu") == r and rec.result("load.burnin") is None
    # a verdict that is none of the four is no verdict, never a PASS
    assert records.read_host_record(_record(run, "h2", verdict="READY")).verdict is None


@pytest.mark.parametrize("entry", [
    {"check": "load.burnin", "verdict": "GREAT", "summary": "x"},  # no such verdict
    {"check": "load.burnin", "summary": "cut short"},  # no verdict
    {"check": "load.burnin", "verdict": "PASS", "schema": "other/v9"},
    "load.burnin PASS",  # not an object
])
def test_a_damaged_result_reads_as_an_error_never_dropped(tmp_path: Path, entry: object) -> None:
    run = RunDir.new(tmp_path).make()
    ok = {"check": "health.gpu", "verdict": "PASS", "summary": "ok"}
    rec = records.read_host_record(_record(run, "h1", results=[ok, entry]))
    good, bad = rec.results
    assert good.verdict is Verdict.PASS
    assert bad.verdict is Verdict.ERROR and bad.fault_code == "NC-RECORD-DAMAGED"
    assert bad.check == ("load.burnin" if isinstance(entry, dict) else "record")
    assert "result 2 is unreadable" in bad.summary and str(rec.path) in bad.summary


def test_a_cluster_run_is_read_or_refused(tmp_path: Path) -> None:
    run = RunDir.new(tmp_path, "cluster").make()
    with pytest.raises(RunDirError, match="is not a cluster run"):
        records.read_cluster_record(run.path)
    write_json(run.cluster_results, {"schema": "nodecert.cluster-run/v1", "pairs": []})
    assert records.read_cluster_record(run.path).pairs == []
    run.cluster_results.write_text(json.dumps([1, 2]))
    with pytest.raises(RunDirError, match="not a cluster run record"):
        records.read_cluster_record(run.path)


def test_a_group_record_reads_typed_and_an_odd_verdict_is_never_ready(tmp_path: Path) -> None:
    from nodecert.certs.cluster import passed, reasons_of
    path = tmp_path / "results.json"
    fail = {"check": "cluster.pairs", "verdict": "FAIL", "summary": "h3 is slow"}
    rec = records.GroupRecord(path, {"verdict": "FAIL", "nodes": ["h1", 2], "pairs": [{}, "x"],
                             "results": [fail, {"check": "cluster.allreduce"}]})
    assert rec.verdict is Verdict.FAIL and rec.nodes == ["h1", "2"] and rec.pairs == [{}]
    assert [r.verdict for r in rec.results] == [Verdict.FAIL, Verdict.ERROR]
    assert reasons_of(rec)[0] == "cluster.pairs: FAIL h3 is slow"
    assert not passed(rec) and passed(records.GroupRecord(path, {"verdict": "WARN"}))
    # a record whose verdict says more than its results do is judged by its results
    assert not passed(records.GroupRecord(path, {"verdict": "PASS", "results": [fail]}))
    assert records.GroupRecord(path, {"verdict": "PASS", "results": [fail]}).outcome is Verdict.FAIL
    for odd in ("READY", "pass", None, 0):  # no verdict is never a passing one
        assert not passed(records.GroupRecord(path, {"verdict": odd}))
    assert not records.GroupRecord(path, {"problems": ["no host answered"]}).measured

