"""nodecert's fast checks as Slurm's HealthCheckProgram, prolog and epilog: the drain
policy of the timer, the time budget Slurm allows, each mode's exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodecert_node.slurmhealth import FAST_CHECKS, verdict_of
from support.simnode import FAKE_SCONTROL, VALIDATORS, SimNode

QUICK = ["hardware.inventory", "hardware.pcie", "hardware.topology", "health.gpu",
         "health.xid", "storage.fio"]


def _node(tmp_path: Path, faults: list[dict[str, Any]] | None = None,
          slurm_state: str = "STATE=IDLE\nREASON=\n",
          checks: tuple[str, ...] = ("health.gpu", "health.xid")) -> tuple[SimNode, Path]:
    node = SimNode(tmp_path, faults=faults)
    state = tmp_path / "state"
    (state / "plans").mkdir(parents=True)
    if 'REASON="nodecert: ' in slurm_state:  # a drain nodecert made: it kept a record
        reason = slurm_state.split('REASON="', 1)[1].split('"', 1)[0]
        (state / "slurm-drains.json").write_text(json.dumps({"gpu07": reason}))
    (state / "plans" / "quick.json").write_text(json.dumps(node.plan(list(checks))))
    (node.bin / "scontrol").write_text(FAKE_SCONTROL)
    (node.bin / "scontrol").chmod(0o755)
    (tmp_path / "slurm").write_text(slurm_state)
    return node, state


def _health(node: SimNode, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(node.env(), NODECERT_STATE_DIR=str(state), FAKE_SLURM=str(node.tmp / "slurm"),
               SLURMD_NODENAME="gpu07")
    return subprocess.run([sys.executable, "-m", "nodecert_node", "slurm-health", *args],
                          env=env, cwd=VALIDATORS, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.integration
def test_healthcheck_drains_a_failing_gpu_and_runs_only_the_fast_checks(
        tmp_path: Path) -> None:
    node, state = _node(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 2}],
                        checks=tuple(QUICK))
    r = _health(node, state, "--mode", "healthcheck")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nodecert healthcheck: FAIL" in r.stdout
    assert "slurm: drained gpu07: nodecert: health.gpu FAIL" in r.stdout
    assert 'REASON="nodecert: health.gpu FAIL"' in (tmp_path / "slurm").read_text()
    rec = json.loads((state / "slurm-healthcheck.json").read_text())
    assert [x["check"] for x in rec["results"]] == [c for c in FAST_CHECKS if c in QUICK]
    assert rec["node"] == "gpu07" and rec["verdict"] == "FAIL"
    assert all(x["simulated"] for x in rec["results"])


@pytest.mark.integration
def test_healthcheck_resumes_only_its_own_drain(tmp_path: Path) -> None:
    node, state = _node(tmp_path, slurm_state='STATE=IDLE+DRAIN\nREASON="nodecert: '
                                              'health.gpu FAIL"\n')
    r = _health(node, state, "--mode", "healthcheck")
    assert "healthcheck: PASS" in r.stdout and "slurm: resumed gpu07" in r.stdout, r.stdout
    (tmp_path / "slurm").write_text('STATE=IDLE+DRAIN\nREASON="maintenance: PSU swap"\n')
    r = _health(node, state, "--mode", "healthcheck")
    assert "drained by someone else ('maintenance: PSU swap'): not touched" in r.stdout
    assert "maintenance" in (tmp_path / "slurm").read_text()


@pytest.mark.parametrize(("mode", "code"), [("prolog", 1), ("epilog", 0)])
@pytest.mark.integration
def test_prolog_holds_the_job_back_epilog_only_drains(tmp_path: Path, mode: str,
                                                      code: int) -> None:
    node, state = _node(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 0}])
    r = _health(node, state, "--mode", mode)
    assert r.returncode == code, r.stdout + r.stderr
    assert f"nodecert {mode}: FAIL" in r.stdout
    log = (tmp_path / "slurm.log").read_text().splitlines()
    assert log == ["NodeName=gpu07 State=DRAIN Reason=nodecert: health.gpu FAIL"]
    # healthy: the prolog lets the job start and never resumes (only the health check does)
    node2, state2 = _node(tmp_path / "ok", slurm_state='STATE=IDLE+DRAIN\nREASON="nodecert: '
                                                        'health.gpu FAIL"\n')
    r = _health(node2, state2, "--mode", mode)
    assert r.returncode == 0 and f"nodecert {mode}: PASS" in r.stdout, r.stdout
    assert "left IDLE+DRAIN" in r.stdout


@pytest.mark.integration
def test_a_budget_too_short_runs_nothing_and_drains_nothing(tmp_path: Path) -> None:
    node, state = _node(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 0}])
    r = _health(node, state, "--mode", "healthcheck", "--budget-s", "6")
    assert r.returncode == 0
    assert "PASS" in r.stdout and "not run, out of time: health.gpu, health.xid" in r.stdout
    assert not (tmp_path / "slurm.log").exists()


def test_without_a_plan_slurm_is_left_alone(tmp_path: Path) -> None:
    node, state = _node(tmp_path)
    (state / "plans" / "quick.json").unlink()
    r = _health(node, state, "--mode", "prolog")
    assert r.returncode == 0 and "no plan in" in r.stdout and "left alone" in r.stdout
    assert not (tmp_path / "slurm.log").exists()


def test_verdict_counts_only_what_ran() -> None:
    assert verdict_of([{"verdict": "NOT RUN", "fault_code": "NC-NOT-JUDGED"}]) == "PASS"
    assert verdict_of([{"verdict": "WARN"}, {"verdict": "ERROR"}]) == "ERROR"
    assert verdict_of([{"verdict": "PASS"}, {"verdict": "WARN"}]) == "WARN"
