"""Fleet re-validation as Slurm jobs: one exclusive job per node that Slurm can run it
on, a bounded wait for the node, each failure named for its host, and only the record
the host's own job left is collected."""

from __future__ import annotations

from pathlib import Path

import pytest

import nodecert.validation.session as session_mod
from nodecert.core.errors import InventoryError, NodecertError
from nodecert.revalidate.collect import collect_host
from nodecert.revalidate.slurm import Submission, job_script, jobs_for, submit
from nodecert.transport.engines import unschedulable
from nodecert.transport.jobs import Job, JobResult
from nodecert_node.contract import Verdict
from support.cluster import ScriptedLauncher
from support.nodeclient import Client, host, raw, record, runner


def test_only_nodes_slurm_will_start_a_job_on_are_submitted() -> None:
    states = {"gpu1": "idle", "gpu2": "mix", "gpu3": "alloc", "gpu4": "drain", "gpu5": "down*",
              "gpu6": "idle~"}
    assert [n for n in states if unschedulable(n, states) is None] == [
        "gpu1", "gpu2", "gpu3", "gpu6"]  # busy nodes are waited for, not refused
    assert "gpu4 is drain in Slurm" in str(unschedulable("gpu4", states))
    assert "reach it over SSH instead" in str(unschedulable("gpu5", states))
    assert "Slurm does not know gpu9" in str(unschedulable("gpu9", states))


def test_each_node_gets_its_own_named_job_running_its_own_scheduled_run() -> None:
    jobs = jobs_for({"b-node": "gpu2", "a-node": "gpu1"}, "quick", "abc123", 900, 1800)
    assert {h: (j.name, j.nodes) for h, j in jobs.items()} == {
        "a-node": ("nodecert-reval-abc123-0", ("gpu1",)),
        "b-node": ("nodecert-reval-abc123-1", ("gpu2",))}
    assert jobs["a-node"].script.endswith(
        "python3 -m nodecert_node local-run --suite quick --reason slurm")
    with pytest.raises(InventoryError):
        job_script("quick; rm -rf /")


def test_a_queued_job_waits_for_its_node_then_runs_within_its_own_limit() -> None:
    sl = ScriptedLauncher({})
    cmd = sl.command(Job("nodecert-reval-x-0", ("gpu1",), "true", timeout_s=900,
                         start_within_s=1800))
    assert "--immediate=1800" in cmd and "--time=16" in cmd
    assert "timeout -k 10 2700 srun " in cmd  # the wait and the run
    # the cluster stages' jobs are unchanged: nodes free within a minute, inside the limit
    cmd = sl.command(Job("nodecert-x-pair-1", ("h1", "h2"), "true", timeout_s=120))
    assert "--immediate=60" in cmd and "timeout -k 10 120 srun " in cmd


def test_submission_names_each_hosts_failure_and_cancels_what_overran() -> None:
    sl = ScriptedLauncher({"sinfo": (0, "h1 idle\nh2 drain\nh3 idle\nh4 idle\n", False),
                           "nodecert-reval": (0, " 0: nodecert: PASS; history x\n", False)})
    lines: list[str] = []
    sub = submit(sl, {"a": "h1", "b": "h2", "c": "h9"}, suite="quick", progress=lines.append)
    assert sub.failure("a") is None
    assert "h2 is drain in Slurm" in str(sub.failure("b"))
    assert "Slurm does not know h9" in str(sub.failure("c"))
    assert [c for c in sl.sent if "srun" in c and "--nodelist=h1" in c]
    assert not [c for c in sl.sent if "srun" in c and "--nodelist=h2" in c]
    assert "slurm: 1 job(s), one per node" in "\n".join(lines)
    job = Job("nodecert-reval-x-0", ("h1",), "true", timeout_s=900, start_within_s=60)
    over = Submission({"a": JobResult(job, "srun", 124, "srun: Force Terminated", 960.0,
                                           timed_out=True)})
    assert "did not end within its limit (900 s run, 60 s to start)" in str(over.failure("a"))
    crashed = Submission({"a": JobResult(job, "srun", 3, "Traceback ...", 5.0)})
    assert "the Slurm job failed (exit 3): Traceback" in str(crashed.failure("a"))
    finding = Submission({"a": JobResult(job, "srun", 1, "nodecert: FAIL", 5.0)})
    assert finding.failure("a") is None  # the node FAILed: its record says why


def test_a_dead_slurm_controller_stops_the_submission_before_any_job() -> None:
    sl = ScriptedLauncher({"sinfo": (1, "Unable to contact slurm controller", False)})
    with pytest.raises(NodecertError, match="is slurmctld up"):
        submit(sl, {"a": "h1"})
    assert not [c for c in sl.sent if "srun" in c]


def test_only_the_record_of_the_hosts_own_job_is_collected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = record(reason="slurm", job="nodecert-reval-abc-0")
    monkeypatch.setattr(session_mod, "connect", lambda ep: Client(raw(mine)))
    hr = host(tmp_path)
    collect_host(hr, runner(hr), "slurm", "nodecert-reval-abc-0")
    assert hr.status == "done" and hr.verdict is Verdict.PASS
    # An older record (another submission's, or the timer's) is not this run's.
    monkeypatch.setattr(session_mod, "connect", lambda ep: Client(raw(
        record(reason="slurm", job="nodecert-reval-old-0"))))
    hr = host(tmp_path / "2")
    collect_host(hr, runner(hr), "slurm", "nodecert-reval-abc-0")
    assert hr.verdict is Verdict.ERROR
    assert "job nodecert-reval-abc-0 left no record" in hr.error
