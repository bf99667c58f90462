"""What `cluster validate` and `rack validate` say of a finished run: the verdict, exit
code, text and JSON read from the run's record as the contract's types (a damaged or
odd record is never a pass)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.cli import main
from nodecert.runs.records import GroupRecord

PASSING = {"schema": "nodecert.result/v1", "check": "cluster.pairs", "verdict": "PASS",
           "summary": "every pairing within its share", "findings": []}
FAILING = {"check": "cluster.allreduce", "verdict": "FAIL", "summary": "h3 is slow",
           "findings": ["h3: 120 GB/s", "h3: again 118 GB/s"]}


def _invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
            record: dict[str, Any], *args: str) -> Any:
    """`nodecert <kind> validate` over a run that left `record` (the run itself stood in)."""
    import nodecert.cluster.validate as cv
    import nodecert.rack.validate as rv
    run_dir = tmp_path / "runs" / f"{kind}-x"
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nh1\n")
    module, name = (cv, "cluster_validate") if kind == "cluster" else (rv, "rack_validate")
    rec = GroupRecord(run_dir / "results.json", record)
    monkeypatch.setattr(module, name, lambda request, progress: rec)
    return CliRunner().invoke(main, [kind, "validate", "-i", str(inv), *args])


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: dict[str, Any],
             *args: str) -> Any:
    return _invoke(tmp_path, monkeypatch, "cluster", record, *args)


def _rack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: dict[str, Any],
          *args: str) -> Any:
    return _invoke(tmp_path, monkeypatch, "rack", record, *args)


def test_a_failing_cluster_run_says_what_failed_and_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = {"verdict": "FAIL", "culprits": ["h3"], "simulated": True,
              "results": [PASSING, FAILING]}
    res = _cluster(tmp_path, monkeypatch, record)
    assert res.exit_code == 1, res.output
    assert "cluster.allreduce  FAIL   h3 is slow" in res.output
    assert "    h3: again 118 GB/s" in res.output
    assert "cluster: FAIL  named: h3  (SIMULATED)" in res.output
    out = json.loads(_cluster(tmp_path, monkeypatch, record, "--json").output)
    assert out["verdict"] == "FAIL" and out["culprits"] == ["h3"]
    assert [r["verdict"] for r in out["results"]] == ["PASS", "FAIL"]


@pytest.mark.parametrize("verdict", ["READY", None, "pass"])
def test_a_cluster_record_without_a_verdict_is_an_error_never_a_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verdict: str | None) -> None:
    res = _cluster(tmp_path, monkeypatch, {"verdict": verdict, "results": [PASSING]},
                   "--json")
    assert res.exit_code == 1 and json.loads(res.output)["verdict"] == "ERROR"


def test_a_rack_run_lists_what_was_not_judged_and_a_damaged_result_is_no_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cut = {"check": "rack.cooling", "summary": "cut short"}  # no verdict: damaged
    record = {"verdict": "PASS", "rack": {"name": "rack-a1"}, "simulated": False,
              "not_judged": ["rack.allreduce, rack.sweep: not asked for (--no-load)"],
              "seconds": {"total": 3.0}, "results": [PASSING]}
    res = _rack(tmp_path, monkeypatch, record)
    assert "not judged: rack.allreduce, rack.sweep: not asked for (--no-load)" in res.output
    assert res.exit_code == 0 and "rack rack-a1: PASS" in res.output, res.output
    assert "(SIMULATED)" not in res.output
    # a record that says PASS over a damaged result is not a pass
    res = _rack(tmp_path, monkeypatch, {**record, "results": [PASSING, cut]})
    assert res.exit_code == 1 and "rack rack-a1: ERROR" in res.output, res.output
    assert "rack.cooling       ERROR" in res.output and "result 2 is unreadable" in res.output
    out = json.loads(_rack(tmp_path, monkeypatch, {**record, "results": [PASSING, cut]},
                           "--json").output)
    assert out["rack"] == "rack-a1" and out["verdict"] == "ERROR"
    assert out["results"][1]["verdict"] == "ERROR"
