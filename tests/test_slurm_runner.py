"""The Slurm runner: each host's node run as a Slurm job on its node. Here without Slurm:
the job's srun line as the engine builds it, the job's script run by bash on a simulated
node (the node code from its input installed, the plan run, the events on its output),
and the runner end to end over a launcher that runs the job here instead of through
srun. With the real Slurm of the cluster lab: tests/test_cluster_lab.py."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from nodecert.inventory.cluster import ClusterConfig
from nodecert.runs.store import HostLink
from nodecert.transport.bundle import node_bundle
from nodecert.transport.engines import SlurmLauncher
from nodecert.transport.jobs import Job, JobStream, Launcher
from nodecert.transport.ssh import Endpoint
from nodecert.validation.run import ValidateRequest, open_new_run
from nodecert.validation.runner import HostUnreachable
from nodecert.validation.slurmrunner import SlurmRunner, job_script
from nodecert_node.contract import Verdict
from support.simnode import SimNode

CHECKS = ("hardware.inventory", "health.gpu", "health.xid")


def test_a_hosts_job_is_one_exclusive_task_on_its_node_fed_from_the_launcher() -> None:
    sl = SlurmLauncher(ClusterConfig(engine="slurm", partition="gpu"),
                       Endpoint("login01", "10.0.0.1", 22, "root", None, (), "python3"))
    job = Job("nodecert-val-abc-0", ("gpu07",), "true", timeout_s=600, start_within_s=1800,
              label=False, stdin=True)
    argv = shlex.split(sl.command(job).split(" timeout ", 1)[1])
    assert "--input=0" in argv and "--label" not in argv
    assert {"--nodelist=gpu07", "--ntasks=1", "--exclusive", "--immediate=1800",
            "--partition=gpu"} <= set(argv)
    # a cluster job keeps its labelled output and takes no input
    multi = sl.command(Job("nodecert-x-1", ("a", "b"), "true"))
    assert "--label" in multi and "--input" not in multi


def _feed(node: SimNode, base: Path, bundle: bytes, sha: str, plan: dict[str, Any],
          *, cut: int = 0) -> tuple[int, list[bytes], bytes]:
    """(exit code, output lines, standard error) of the job's script fed the code and
    the plan, its input held open until the node's run is done (the node stops at EOF)."""
    env = {k: v for k, v in node.env().items() if k != "PYTHONPATH"}  # the installed code
    script = job_script(sha[:16], len(bundle), sys.executable, base=str(base))
    proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(bundle[:len(bundle) - cut] if cut else
                         bundle + (json.dumps(plan) + "\n").encode())
        proc.stdin.flush()
        if cut:
            proc.stdin.close()
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if b'"event": "done"' in line:
                break
    finally:
        if not proc.stdin.closed:
            proc.stdin.close()
        rc = proc.wait(timeout=300)
    return rc, lines, proc.stderr.read()


@pytest.mark.integration
def test_the_job_installs_the_code_it_is_sent_and_runs_the_plan_that_follows(
        tmp_path: Path) -> None:
    node = SimNode(tmp_path / "node")
    bundle, sha = node_bundle()
    base = tmp_path / "base"
    _, lines, err = _feed(node, base, bundle, sha, node.plan(list(CHECKS)))
    events = [json.loads(line) for line in lines]
    assert events and events[-1] == {"event": "done", "interrupted": False}, err[-2000:]
    # standard output is the node's events alone: the install spoke on standard error
    assert [e["event"] for e in events] == ["hello", *["start", "result"] * 3, "done"]
    assert {e["result"]["verdict"] for e in events if e["event"] == "result"} == {"PASS"}
    assert b"installed" in err
    assert (base / sha[:16] / ".complete").is_file()
    assert os.readlink(base / "current") == sha[:16]


@pytest.mark.integration
def test_code_that_did_not_arrive_whole_is_never_installed_or_run(tmp_path: Path) -> None:
    node = SimNode(tmp_path / "node")
    bundle, sha = node_bundle()
    rc, lines, err = _feed(node, tmp_path / "base", bundle, sha, {}, cut=100)
    assert rc == 3 and b"did not arrive whole" in err
    assert lines == [] and not (tmp_path / "base").exists()


class _LocalChannel:
    """What JobStream reads of an SSH channel, over a job run here by bash: its standard
    output a socket, its standard input and error pipes. As over SSH, what is sent is
    taken at once (written to the job in the background; a job that exits unread drops
    it)."""

    def __init__(self, script: str, env: dict[str, str]) -> None:
        self.sock, child = socket.socketpair()
        self.proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE,
                                     stdout=child, stderr=subprocess.PIPE, env=env)
        child.close()
        self.status_event = threading.Event()
        self.err = b""
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        assert self.proc.stderr is not None
        self.err = self.proc.stderr.read()
        self.proc.wait()
        self.status_event.set()

    def sendall(self, data: bytes) -> None:
        def write() -> None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        threading.Thread(target=write, daemon=True).start()

    def settimeout(self, t: float) -> None:
        self.sock.settimeout(t)

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def recv_ready(self) -> bool:
        return bool(select.select([self.sock], [], [], 0)[0])

    def recv_stderr_ready(self) -> bool:
        return self.status_event.is_set() and bool(self.err)

    def recv_stderr(self, n: int) -> bytes:
        out, self.err = self.err[:n], self.err[n:]
        return out

    def get_transport(self) -> None:
        return None

    def recv_exit_status(self) -> int:
        return self.proc.wait()

    def close(self) -> None:
        self.sock.close()
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


class _HereLauncher(Launcher):
    """Runs each job's script here, not through srun (or `script` instead: what a job
    that srun refused would do)."""

    engine = "slurm"

    def __init__(self, node: SimNode, script: str | None = None) -> None:
        super().__init__(ClusterConfig(engine="slurm"),
                         Endpoint("h0", "127.0.0.1", 22, "root", None, (), "python3"))
        self.node, self.script = node, script
        self.cancelled_jobs: list[str] = []

    def stream(self, job: Job) -> JobStream:
        env = {k: v for k, v in self.node.env().items() if k != "PYTHONPATH"}
        script = self.script or job.script
        return JobStream(self, job, _LocalChannel(script, env))  # type: ignore[arg-type]

    def cancel(self, *jobs: Job) -> None:
        self.cancelled_jobs += [j.name for j in jobs]

    def sweep(self, job: Job) -> dict[str, int]:
        return dict.fromkeys(job.nodes, 0)


def _runner(tmp_path: Path, launch: Launcher, states: dict[str, str]) -> SlurmRunner:
    inv = tmp_path / "inv"
    inv.mkdir(parents=True)
    (inv / "hosts.ini").write_text("[gpu_nodes]\nh1 ansible_host=127.0.0.1 ansible_user=root "
                                   f"ansible_python_interpreter={sys.executable}\n")
    from nodecert.lab.hardware import spec_vars
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "h1.yml").write_text(json.dumps(
        {k: v for k, v in spec_vars("h200-sxm-8").items() if k != "nodecert_fabric"}))
    run = open_new_run(ValidateRequest(inv, checks=CHECKS, runs_dir=tmp_path / "runs"))
    links = {h: HostLink(link.endpoint) for h, link in run.links.items()}
    return SlurmRunner(run.hosts, links, lambda line: None, threading.Event(), launch=launch,
                       engine_names={"h1": "gpu01"}, states=states, start_within_s=5,
                       node_base=str(tmp_path / "base"))


@pytest.mark.integration
def test_the_runner_judges_and_saves_what_the_nodes_job_reports(tmp_path: Path) -> None:
    node = SimNode(tmp_path / "node")
    here = _HereLauncher(node)
    runner = _runner(tmp_path, here, {"gpu01": "idle"})
    hr = runner.runs["h1"]
    runner.run_host(hr)
    assert hr.status == "done", hr.error
    assert [r.check for r in hr.results] == list(CHECKS)
    assert {r.verdict for r in hr.results} == {Verdict.PASS}
    assert hr.node["runner"] == "slurm" and hr.node["slurm_job"].startswith("nodecert-val-")
    saved = json.loads((hr.out_dir / "results.json").read_text())
    assert saved["node"]["slurm_job"] == hr.node["slurm_job"] and saved["verdict"] == "PASS"
    assert here.cancelled_jobs == []  # it ended well: nothing to cancel


def test_a_node_slurm_will_not_run_a_job_on_is_unreachable_without_a_job(
        tmp_path: Path) -> None:
    here = _HereLauncher(SimNode(tmp_path / "node"),
                         script="echo never >&2; exit 9")
    runner = _runner(tmp_path, here, {"gpu01": "drain"})
    hr = runner.runs["h1"]
    runner.run_host(hr)
    assert hr.status == "unreachable" and "gpu01 is drain in Slurm" in hr.error
    assert {r.verdict for r in hr.results} == {Verdict.ERROR}
    assert {r.fault_code for r in hr.results} == {"NC-HOST-UNREACHABLE"}


def test_a_job_slurm_refused_is_error_quoting_srun_and_is_cancelled(tmp_path: Path) -> None:
    here = _HereLauncher(SimNode(tmp_path / "node"),
                         script="echo 'srun: error: Unable to allocate resources: "
                                "Requested node configuration is not available' >&2; exit 1")
    runner = _runner(tmp_path, here, {"gpu01": "idle"})
    hr = runner.runs["h1"]
    runner.run_host(hr)
    assert hr.status == "unreachable", hr.error
    assert "Slurm did not run the node's job" in hr.error
    assert "Requested node configuration is not available" in hr.error
    assert {r.verdict for r in hr.results} == {Verdict.ERROR}  # never a pass
    assert here.cancelled_jobs == [runner.jobs["h1"].name]


def test_a_nodes_own_record_is_fetched_through_a_job_on_it(tmp_path: Path) -> None:
    """revalidate --collect through the Slurm runner: the command is a job on the node,
    its output read back; a job Slurm refused is the host unreachable, in srun's words."""
    here = _HereLauncher(SimNode(tmp_path / "node"))
    runner = _runner(tmp_path, here, {"gpu01": "idle"})
    got = runner.fetch(runner.runs["h1"], "echo /var/lib/nodecert/history/x.json; "
                       "echo '{\"results\": []}'", limit=1 << 20, timeout=30)
    assert got.raw == b'/var/lib/nodecert/history/x.json\n{"results": []}\n'
    assert got.recorded is None  # not read through Slurm
    assert runner.fetch(runner.runs["h1"], "seq 1 100000", limit=100, timeout=30).raw \
        .startswith(b"1\n2\n")  # at most the limit, however much the job prints
    refused = _HereLauncher(SimNode(tmp_path / "node2"),
                            script="echo 'srun: error: invalid partition' >&2; exit 1")
    runner = _runner(tmp_path / "b", refused, {"gpu01": "idle"})
    with pytest.raises(HostUnreachable, match="invalid partition"):
        runner.fetch(runner.runs["h1"], "true", limit=100, timeout=30)
    drained = _runner(tmp_path / "c", here, {"gpu01": "down*"})
    with pytest.raises(HostUnreachable, match="gpu01 is down"):
        drained.fetch(drained.runs["h1"], "true", limit=100, timeout=30)
