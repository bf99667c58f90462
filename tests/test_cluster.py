"""Cluster validation without a cluster: the settings, the expectation, the job scripts,
the launchers' command lines and output, and the whole run's decisions against a
launcher that answers from a fabric model (every job's output in the real tools'
formats). The same run on real Slurm and OpenMPI is in test_cluster_lab.py."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.certs.cluster import certify_cluster, statement
from nodecert.certs.signing import init_key, load_private_key, load_public_key
from nodecert.certs.verify import verify_report
from nodecert.cli import main
from nodecert.cluster import pairing as clusterplan
from nodecert.cluster.judge import (
    RAIL_MARK,
    expectation,
    pair_script,
    read_allreduce,
    read_rails,
)
from nodecert.cluster.run import ClusterRun
from nodecert.inventory.cluster import ClusterConfig, parse_cluster
from nodecert.runs.records import GroupRecord
from nodecert.transport.engines import MpirunLauncher, SlurmLauncher
from nodecert.transport.joboutput import demux
from nodecert.transport.jobs import Job, JobResult
from nodecert_node.contract import Threshold
from support.cluster import (
    FABRIC,
    LIMITS,
    ModelLauncher,
    ScriptedLauncher,
    context,
    ep,
    fabric_ok,
    run_model,
)

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures"




# --- settings ----------------------------------------------------------------------------

def test_cluster_settings_parse_and_refuse_what_a_shell_could_read() -> None:
    cfg, why = parse_cluster({"engine": "slurm", "partition": "gpu", "job_timeout_s": 120})
    assert why is None and cfg == ClusterConfig(engine="slurm", partition="gpu",
                                                job_timeout_s=120.0)
    for raw, words in (({"engine": "pbs"}, "not one of slurm, mpirun"),
                       ({"partition": "gpu; rm -rf /"}, "not a plain name"),
                       ({"bootstrap_port": 80}, "1024..65000"),
                       ({"max_bytes": "lots"}, "not a size"),
                       ({"gpudirect": "yes"}, "true or false"),
                       ({"nodes": 4}, "unknown key(s) nodes"),
                       ("slurm", "must be a mapping")):
        cfg, why = parse_cluster(raw)
        assert cfg is None and why and words in why, (raw, why)


# --- expectation and reading ---------------------------------------------------------------

def test_expectation_is_the_sourced_fraction_of_the_ordered_nics() -> None:
    exp = expectation(FABRIC, 8, LIMITS)
    assert exp.busbw.value == 331.2  # 0.828 x 8 x 50 GB/s
    assert exp.rail.value == 340.0  # 0.85 x 400 Gb/s
    assert exp.devices == tuple(f"mlx5_{n}" for n in range(8))
    hdr = expectation({**FABRIC, "rate_gbps": 200, "devices": ["ib0", "ib1"], "ports": 2},
                      8, LIMITS)
    assert hdr.busbw.value == 41.4 and hdr.devices == ("ib0", "ib1")
    # a real 2-node H100 run (8 x 200 Gb/s NICs per node) reads 338.82 GB/s at 8 GiB
    text = (FIX / "real/nccl-tests/h100-a3mega-2node-16gpu-all-reduce.log").read_text()
    r = read_allreduce(text)
    assert r.busbw == 338.82 and r.oob == 0
    assert not exp.busbw.check(300.0) and exp.busbw.check(r.busbw)


def test_read_rails_takes_each_rails_perftest_report_and_refuses_the_unreadable() -> None:
    hdr = (FIX / "real/perftest/a100-cx6-hdr-2node-ib_write_bw-a-mlx5_0-23gbs-cpu-freq-"
           "warnings-interleaved.txt").read_text()
    roce = (FIX / "real/perftest/dgx-spark-gb10-cx7-roce-ib_write_bw-4qp-gbits.txt").read_text()
    text = (f"{RAIL_MARK}mlx5_0\n{hdr}=== nodecert rc 0\n{RAIL_MARK}mlx5_1\n{roce}"
            f"{RAIL_MARK}mlx5_2\n Couldn't connect to h1:18517\n")
    rails = read_rails(text, ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"))
    assert rails["mlx5_0"] == pytest.approx(195.6, abs=0.1)  # 23317.65 MiB/s
    assert rails["mlx5_1"] == pytest.approx(111.71)
    assert rails["mlx5_2"] is None and rails["mlx5_3"] is None  # failed, never ran


def test_pair_script_serves_on_rank_0_and_measures_each_rail_on_rank_1() -> None:
    exp = expectation(FABRIC, 8, LIMITS)
    s = pair_script("h1", 29500, exp, "8G", gpudirect=True)
    assert "export NCCL_COMM_ID=\"$first:29500\"" in s
    assert "all_reduce_perf -b 1M -e 8G -f 2 -g 8" in s
    assert s.count("ib_write_bw -d mlx5_3 -p 29504 -F --report_gbits -D 2 --use_cuda=3") == 2
    assert "scontrol show hostnames \"$SLURM_STEP_NODELIST\"" in s
    # a measuring node without the rail's HCA releases the server waiting on that rail
    assert "exec 3<>/dev/tcp/\"$first\"/29504" in s
    assert "--use_cuda" not in pair_script("h1", 29500, exp, "8G", gpudirect=False)


# --- launchers -----------------------------------------------------------------------------

def test_demux_splits_srun_labels_and_mpirun_tags_from_the_launchers_own_lines() -> None:
    out = demux(" 0: # nThread 1\n 1: === nodecert rail mlx5_0\nsrun: error: h2: task 1\n"
                "[1,0]<stdout>:NCCL version 2.27.7\n[1,1]<stderr>:warning\n")
    assert out[0] == "# nThread 1\nNCCL version 2.27.7\n"
    assert out[1] == "=== nodecert rail mlx5_0\nwarning\n"
    assert out[None] == "srun: error: h2: task 1\n"


def test_slurm_job_is_named_exclusive_bounded_and_on_the_sites_partition() -> None:
    cfg = ClusterConfig(engine="slurm", partition="gpu", account="acme", reservation="acc")
    cmd = SlurmLauncher(cfg, ep("h1")).command(
        Job("nodecert-x-pair-1", ("h1", "h2"), "echo hi", {"A": "b c"}, 120))
    assert cmd.startswith("NODECERT_JOB=nodecert-x-pair-1 A='b c' timeout -k 10 120 srun ")
    for flag in ("--job-name=nodecert-x-pair-1", "--nodelist=h1,h2", "--exclusive",
                 "--ntasks-per-node=1", "--partition=gpu", "--account=acme",
                 "--reservation=acc", "--label", "--time=3"):
        assert flag in cmd


def test_mpirun_puts_the_launch_host_first_and_keeps_its_hostfile_private() -> None:
    m = MpirunLauncher(ClusterConfig(), ep("h2", user="ops"))
    assert m.rank_order(["h1", "h2", "h3"]) == ("h2", "h1", "h3")
    assert m.rank_order(["h1", "h3"]) == ("h1", "h3")
    cmd = m.command(Job("nodecert-x-all-2", ("h2", "h1"), "echo hi", {}, 60))
    assert "d=$(mktemp -d)" in cmd and "rm -rf \"$d\"" in cmd
    assert "h2 slots=1\\nh1 slots=1\\n" in cmd and "--tag-output" in cmd
    assert "--allow-run-as-root" not in cmd  # only when the launch user is root
    assert "--allow-run-as-root" in MpirunLauncher(ClusterConfig(), ep("h2")).command(
        Job("j", ("h1",), "true", {}, 60))




def test_slurm_preflight_names_absent_and_unusable_nodes_and_a_dead_controller() -> None:
    sl = ScriptedLauncher({"sinfo": (0, "h1 idle\nh2 drain\nh3 idle*\n", False)})
    problems = sl.preflight(["h1", "h2", "h3", "h9"])
    assert problems[0] == "not in partition gpu: h9 (Slurm knows h1, h2, h3)"
    assert problems[1] == "not usable in partition gpu: h2 (drain)"  # idle* is unresponsive
    dead = ScriptedLauncher({"sinfo": (1, "slurm_load_partitions: Unable to contact slurm "
                                          "controller (connect failure)", False)})
    assert "is slurmctld up and munge running" in dead.preflight(["h1"])[0]


def test_a_job_past_its_limit_is_cancelled_by_name_and_its_nodes_swept() -> None:
    sl = ScriptedLauncher({"srun": (124, " 0: # nThread 1 nGpus 8\n", False)})
    res = sl.run(Job("nodecert-x-pair-1", ("h1", "h2"), "true", {}, 30))
    assert res.timed_out and not res.ok
    assert any(c.startswith("scancel --name=nodecert-x-pair-1;") for c in sl.sent)
    assert sl.swept == ["nodecert-x-pair-1"] and res.leftovers == {"h1": 0, "h2": 0}
    ok = ScriptedLauncher({}).run(Job("j2", ("h1", "h2"), "true", {}, 30))
    assert ok.ok and ok.leftovers == {}


def test_after_ctrl_c_no_job_starts_and_a_cancel_waits_for_slurm_to_drop_it() -> None:
    """A job submitted in the same instant as Ctrl-C: either registered before the
    interrupt looks (and cancelled, its launcher swept first), or never started."""
    sl = ScriptedLauncher({})
    sl.interrupt()
    late = sl.run(Job("nodecert-x-pair-7", ("h1", "h2"), "true", {}, 30))
    assert late.error == "not started: the run was interrupted" and not late.ok
    assert not any("srun" in c for c in sl.sent)  # nothing reached the engine
    sl.cancel(Job("nodecert-x-pair-8", ("h1",), "true", {}, 30),
              Job("nodecert-x-pair-9", ("h2",), "true", {}, 30))
    loop = sl.sent[-1]
    both = "scancel --name=nodecert-x-pair-8; scancel --name=nodecert-x-pair-9"
    assert loop.startswith(both + "; quiet=0; for i in $(seq 1 30); do ")
    # Done only once neither has been listed for 4 looks in a row, cancelled again
    # each time one is.
    assert ("if squeue -h --name=nodecert-x-pair-8,nodecert-x-pair-9 -t PD,CF,R,S | "
            f"grep -q .; then quiet=0; {both}; else quiet=$((quiet+1)); "
            "[ $quiet -ge 4 ] && exit 0; fi") in loop
    sent = len(sl.sent)
    sl.cancel()
    assert len(sl.sent) == sent  # nothing to cancel: nothing sent


class _BlockingLauncher(ScriptedLauncher):
    """Jobs that run until interrupted; each sweep and each cancel waits on a barrier
    until all of them have started, so they can only finish if they run at once."""

    def __init__(self, jobs: int) -> None:
        super().__init__({})
        self.barrier = threading.Barrier(jobs + 1, timeout=20)  # every sweep + the cancel
        self.sweeps = self.cancels = 0
        self.started = threading.Semaphore(0)

    def remote(self, command: str, timeout: float,
               always: bool = False) -> tuple[int | None, str, bool]:
        if "srun" in command:
            self.started.release()
            self.cancelled.wait(60)  # a hung job, until Ctrl-C
            return None, "", True
        if command.startswith("scancel"):
            self.cancels += 1
            self.barrier.wait()
        return 0, "", False

    def sweep(self, job: Job) -> dict[str, int]:
        self.sweeps += 1
        self.barrier.wait()
        return dict.fromkeys(job.nodes, 0)


def test_ctrl_c_cancels_and_sweeps_every_job_at_once_and_only_once() -> None:
    """The interrupt's cancel and every running job's sweep run at the same time (each
    waits for all the others: run one after another they would never finish), and the
    jobs' own threads do not cancel or sweep again one job after another."""
    n = 6
    bl = _BlockingLauncher(n)
    jobs = [Job(f"nodecert-x-pair-{k}", (f"h{2 * k + 1}", f"h{2 * k + 2}"), "true", {}, 300)
            for k in range(n)]
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(bl.run, j) for j in jobs]
        for _ in jobs:
            assert bl.started.acquire(timeout=20)
        bl.interrupt()
        results = [f.result(timeout=20) for f in futures]
    assert (bl.sweeps, bl.cancels) == (n, 1)
    assert all(r.error.startswith("interrupted") and set(r.leftovers.values()) == {-1}
               for r in results)


# --- the whole run against a fabric model ------------------------------------------------------













def test_a_healthy_cluster_passes_with_every_node_paired_twice(tmp_path: Path) -> None:
    m = ModelLauncher()
    data = run_model(tmp_path, 6, m)
    assert data["verdict"] == "PASS" and data["culprits"] == []
    partners: dict[str, set[str]] = {}
    for p in data["pairs"]:
        a, b = p["nodes"]
        partners.setdefault(a, set()).add(b)
        partners.setdefault(b, set()).add(a)
    assert all(len(v) >= 2 for v in partners.values()) and len(partners) == 6
    assert data["bisection"] is None and data["allreduce"]["ok"]


def test_one_slow_node_among_16_is_named_by_pairing_and_by_bisection_in_5_rounds(
        tmp_path: Path) -> None:
    data = run_model(tmp_path, 16, ModelLauncher(slow={"h11": 0.55}))
    assert data["isolation"]["culprits"] == ["h11"]
    assert data["bisection"]["culprits"] == ["h11"] and len(data["bisection"]["rounds"]) <= 5
    assert data["culprits"] == ["h11"] and data["verdict"] == "FAIL"
    assert data["isolation"]["rails"] == {"h11": [f"mlx5_{k}" for k in range(8)]}


def test_nccl_without_gpudirect_rdma_fails_an_order_that_has_it(tmp_path: Path) -> None:
    """A node whose NCCL channels lack "/GDRDMA" (host-staged traffic) fails every pairing
    it is in and the all-reduce, though the figures meet their floors; an order without
    GPUDirect RDMA (fabric gpudirect: false) only notes it."""
    data = run_model(tmp_path, 4, ModelLauncher(no_gdr={"h3"}))
    assert data["culprits"] == ["h3"] and data["verdict"] == "FAIL"
    res = {r["check"]: r for r in data["results"]}
    assert res["cluster.allreduce"]["verdict"] == "FAIL"
    assert "NCCL ran over IB without GPUDirect RDMA" in res["cluster.allreduce"]["summary"]
    other = tmp_path / "relaxed"
    other.mkdir()
    relaxed = run_model(other, 4, ModelLauncher(no_gdr={"h3"}),
                        fabric={**FABRIC, "gpudirect": False})
    assert relaxed["verdict"] == "PASS", relaxed["culprits"]
    ar = next(r for r in relaxed["results"] if r["check"] == "cluster.allreduce")
    assert ar["verdict"] == "PASS"
    assert any(n.startswith("no NCCL network channel used GPUDirect RDMA")
               for n in ar["facts"]["tool_notes"]["NCCL"])  # said, not judged


def test_a_slow_rail_is_named_with_its_node(tmp_path: Path) -> None:
    data = run_model(tmp_path, 8, ModelLauncher(rails={"h3": {"mlx5_5": 0.5}}))
    assert data["isolation"]["rails"] == {"h3": ["mlx5_5"]}
    assert data["culprits"] == ["h3"]
    pairs = next(r for r in data["results"] if r["check"] == "cluster.pairs")
    assert "h3: rail(s) mlx5_5 below >= 340 Gb/s in every pairing" in pairs["findings"]


def test_a_hanging_node_is_error_with_its_logs_and_bisection_names_it(tmp_path: Path) -> None:
    data = run_model(tmp_path, 4, ModelLauncher(hang={"h2"}))
    res = {r["check"]: r for r in data["results"]}
    assert res["cluster.pairs"]["verdict"] == "ERROR"
    assert any("hung past its limit" in f for f in res["cluster.pairs"]["findings"])
    assert res["cluster.allreduce"]["evidence"], "the hung job's partial log is kept"
    assert data["bisection"]["culprits"] == ["h2"]
    assert all(v == 0 for j in data["jobs"] for v in j["leftovers"].values())
    logs = sorted((tmp_path / "cluster-run-abcdef" / "jobs").glob("*.log"))
    assert logs and "timed_out=True" in logs[0].read_text()


def test_jobs_sharing_a_node_never_run_at_once(tmp_path: Path) -> None:
    m = ModelLauncher(slow={"h2": 0.5, "h3": 0.5})
    run_model(tmp_path, 4, m)
    # bisection pairs lone suspects with one known-good node: those jobs ran in waves
    ctx = context(4)
    run = ClusterRun(ctx, tmp_path, lambda _: None, m)
    m.ran.clear()
    jobs = [run.job("bisect", ("h2", "h1"), lambda f, p: "x"),
            run.job("bisect", ("h3", "h1"), lambda f, p: "x")]
    seen: list[set[str]] = []

    def spy(job: Job) -> JobResult:
        seen.append(set(job.nodes))
        return JobResult(job, "", 0, "", 0.0)
    m.run = spy  # type: ignore[method-assign]
    run.run_jobs(jobs)
    assert seen == [{"h1", "h2"}, {"h1", "h3"}]


class ReadLauncher(ModelLauncher):
    """Also answers the shared file system's jobs: each read at once gives every node the
    MB/s of its round (`reads`), as fio --output-format=json would."""

    def __init__(self, reads: list[dict[str, float]]) -> None:
        super().__init__()
        self.reads = reads
        self.read_jobs = 0

    def run(self, job: Job) -> JobResult:
        if "-fsprep-" in job.name:
            self.ran.append(job)
            return JobResult(job, "srun ...", 0, "", 0.1)
        if "-fsread-" in job.name:
            self.ran.append(job)
            rates = self.reads[self.read_jobs]
            self.read_jobs += 1
            out = "".join(
                f" {k}: {ln}\n" for k, n in enumerate(job.nodes)
                for ln in json.dumps({"fio version": "fio-3.33", "jobs": [
                    {"jobname": "aggread", "error": 0, "read": {"bw_bytes": rates[n] * 1e6},
                     "write": {}}]}, indent=2).splitlines())
            return JobResult(job, "srun ...", 0, out, 3.0)
        return super().run(job)


def run_reads(tmp_path: Path, reads: list[dict[str, float]]) -> tuple[dict[str, Any], int]:
    ctx = context(4)
    ctx.shared_fs = {"mounts": [{"path": "/mnt/data"}], "size_mb": 64, "aggregate_read_s": 3}
    ctx.limits = {"storage.shared_peer_fraction_min": Threshold(0.8, ">=", "ratio")}
    d = tmp_path / "cluster-run-abcdef"
    d.mkdir(parents=True)
    m = ReadLauncher(reads)
    data = ClusterRun(ctx, d, lambda _: None, m).run(
        {n: {**f, "storage": {"verdict": "PASS", "summary": "as ordered", "value": {}}}
         for n, f in fabric_ok(ctx.nodes).items()})
    return data, m.read_jobs


def test_a_slow_reader_is_read_again_and_named_only_when_slow_twice(tmp_path: Path) -> None:
    even = {"h1": 150.0, "h2": 150.0, "h3": 150.0, "h4": 150.0}
    data, reads = run_reads(tmp_path / "a", [even])
    assert reads == 1 and data["verdict"] == "PASS"  # nobody behind: one read
    data, reads = run_reads(tmp_path / "b", [{**even, "h2": 59.0}, even])
    fs = data["shared_fs"]
    assert reads == 2 and data["verdict"] == "PASS" and data["culprits"] == []
    assert fs["value"]["repeat_read_mbps_at_once"]["h2"] == 150.0
    assert "not confirmed" in fs["findings"][0] and fs["evidence"], "both reads' logs kept"
    data, reads = run_reads(tmp_path / "c", [{**even, "h2": 59.0}, {**even, "h2": 61.0}])
    assert reads == 2 and data["verdict"] == "FAIL" and data["culprits"] == ["h2"]


def test_bisection_skips_the_reference_itself() -> None:
    calls: list[list[tuple[str, ...]]] = []

    def run(groups: list[tuple[str, ...]]) -> list[bool]:
        calls.append(groups)
        return ["h3" not in g for g in groups]
    b = clusterplan.bisect(["h1", "h2", "h3"], run, reference="h1")
    assert b.culprits == ["h3"]
    assert all(g != ("h1", "h1") for r in calls for g in r)


# --- the certificate -------------------------------------------------------------------------

def test_cluster_certificate_verifies_and_a_changed_subject_does_not(tmp_path: Path) -> None:
    data = run_model(tmp_path, 4, ModelLauncher(rails={"h4": {"mlx5_0": 0.4}}),
                     bad_fabric={"h2": "<script>alert(1)</script> port Down"})
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    env, html, verdict = certify_cluster(run_dir, load_private_key(keys.private))
    assert verdict == "NOT READY"
    page = html.read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert 'id="heatmap"' in page and 'data-pair="h1-h2"' in page
    v = verify_report(env, [keys.public], allow_simulated=True)
    steps = {name: ok for name, ok, _ in v.steps}
    assert steps["signature"] and steps["statement"] and steps["subject"]
    assert not steps["verdict"]  # NOT READY never verifies as ready
    st = statement(GroupRecord(tmp_path / "results.json", data), issued=dt.datetime.now(dt.UTC))
    st["subject"][0]["digest"]["sha256"] = "0" * 64
    from nodecert.certs.cluster import subject_problems
    assert subject_problems(st) == ["h1: digest does NOT match its identity in the predicate"]
    assert load_public_key(keys.public)


def test_a_healthy_cluster_certificate_is_ready(tmp_path: Path) -> None:
    data = run_model(tmp_path, 3, ModelLauncher())
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    env, _, verdict = certify_cluster(run_dir, load_private_key(keys.private))
    assert verdict == "READY"
    v = verify_report(env, [keys.public], allow_simulated=True)
    assert v.ok, v.steps
    assert not verify_report(env, [keys.public]).ok  # SIMULATED needs --allow-simulated
    assert re.search(r"3 nodes, each digest matches", " ".join(d for _, _, d in v.steps))


def test_node_certificates_reference_the_cluster_certificate_of_the_same_signer(
        tmp_path: Path) -> None:
    from nodecert.certs.certify import RunError, certify
    from support.runs import make_run, passing, recorded_results
    data = run_model(tmp_path, 3, ModelLauncher())
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    key = load_private_key(keys.private)
    env, _, _ = certify_cluster(run_dir, key)
    from nodecert.certs.identity import identity_digest
    h2 = data["fabric"]["h2"]["identity"]
    nodes = make_run(tmp_path / "v", {"h2": {"results": passing(recorded_results()),
                                             "identity": h2},
                                      "h3": {"results": passing(recorded_results())},
                                      "n9": {"results": passing(recorded_results())}})
    cr = certify(nodes, key, cluster_cert=env)
    preds = {c.host: json.loads(base64.b64decode(
        json.loads(c.envelope.read_text())["payload"]))["predicate"] for c in cr.nodes}
    ref = preds["h2"]["cluster"]
    assert ref["certificate"] == "cluster.intoto.dsse.json" and ref["verdict"] == "READY"
    assert ref["nodes"] == ["h1", "h2", "h3"] and len(ref["sha256"]) == 64
    assert ref["identity_sha256"] == identity_digest(h2)
    assert "cluster" not in preds["n9"]  # not a node of that cluster: no reference
    # h3 by name, but other hardware than the cluster certificate's h3: no reference
    assert "cluster" not in preds["h3"]
    other = init_key(tmp_path / "other")
    with pytest.raises(RunError, match="not a cluster or rack certificate signed with this key"):
        certify(nodes, load_private_key(other.private), cluster_cert=env)


# --- error counters across the jobs ------------------------------------------------------

def test_counter_dump_reads_each_hca_and_skips_the_unreadable() -> None:
    from nodecert.cluster.counters import MARK, growth, parse_dump
    real = sorted((FIX / "real/perfquery").glob("*-x*"))[0].read_text()
    text = f"{MARK}mlx5_0\n{real}{MARK}mlx5_1\nibwarn: [1] mad_rpc_open_port: can't open\n"
    got = parse_dump(text)
    assert list(got) == ["mlx5_0"] and "SymbolErrorCounter" in got["mlx5_0"]
    before = {"h1": {"mlx5_0": {"SymbolErrorCounter": 3}}, "h2": None}
    after = {"h1": {"mlx5_0": {"SymbolErrorCounter": 90}}, "h2": {"mlx5_0": {}}}
    assert growth(before, after) == {"h1": {"mlx5_0": {"SymbolErrorCounter": 87}}}


def test_errors_that_grow_during_the_jobs_fail_the_fabric_and_name_the_node(
        tmp_path: Path) -> None:
    reads = iter([{"h1": {"mlx5_0": {"SymbolErrorCounter": 5}},
                   "h2": {"mlx5_0": {"SymbolErrorCounter": 0}}},
                  {"h1": {"mlx5_0": {"SymbolErrorCounter": 5}},
                   "h2": {"mlx5_0": {"SymbolErrorCounter": 412}}}])
    ctx = context(3)
    d = tmp_path / "cluster-run-abcdef"
    d.mkdir()
    data = ClusterRun(ctx, d, lambda _: None, ModelLauncher(),
                      counters=lambda: next(reads)).run(fabric_ok(ctx.nodes))
    fab = next(r for r in data["results"] if r["check"] == "cluster.fabric")
    assert fab["verdict"] == "FAIL"
    assert ("h2 mlx5_0: SymbolErrorCounter +412 during the cluster's jobs (needs <= 0 "
            "errors, measured 412 errors)") in fab["findings"]
    assert data["culprits"] == ["h2"] and data["counter_growth"] == {
        "h2": {"mlx5_0": {"SymbolErrorCounter": 412}}}


def test_the_cabling_result_joins_the_cluster_verdict(tmp_path: Path) -> None:
    from nodecert_node.contract import Result, Verdict
    ctx = context(3)
    calls: list[int] = []

    def cabling() -> Result:
        calls.append(1)
        return Result("fabric.cabling", Verdict.FAIL, "h2 mlx5_0: no link; the plan cables "
                      "it to leaf-00 port 2 (plan line 3)",
                      facts={"links": [{"node": "h1", "port": "mlx5_0", "status": "ok",
                                        "switch": "leaf-00", "switch_port": "1"},
                                       {"node": "h2", "port": "mlx5_0", "status": "missing",
                                        "switch": "leaf-00", "switch_port": "2"}]})
    d = tmp_path / "cluster-run-abcdef"
    d.mkdir()
    data = ClusterRun(ctx, d, lambda _: None, ModelLauncher(), cabling=cabling).run(
        fabric_ok(ctx.nodes))
    cab = next(r for r in data["results"] if r["check"] == "fabric.cabling")
    assert calls == [1] and cab["verdict"] == "FAIL" and data["verdict"] == "FAIL"
    assert data["culprits"] == ["h2"]  # the node whose link is not as planned
    # a planned link whose counters grew during the jobs carries them (its health beside
    # its place); the placement alone gives the verdict
    reads = iter([{"h1": {"mlx5_0": {"SymbolErrorCounter": 5}}},
                  {"h1": {"mlx5_0": {"SymbolErrorCounter": 17}}}])
    d3 = tmp_path / "cluster-run-cdefab"
    d3.mkdir()
    data = ClusterRun(ctx, d3, lambda _: None, ModelLauncher(), cabling=cabling,
                      counters=lambda: next(reads)).run(fabric_ok(ctx.nodes))
    cab = next(r for r in data["results"] if r["check"] == "fabric.cabling")
    ok = next(x for x in cab["facts"]["links"] if x["node"] == "h1")
    assert ok["status"] == "ok" and ok["errors"] == {"SymbolErrorCounter": 12}
    assert ("h1 mlx5_0 -> leaf-00 port 1: SymbolErrorCounter +12 during the cluster's jobs"
            in cab["findings"])
    # no plan, no cabling result (nothing claimed about the cables)
    d2 = tmp_path / "cluster-run-bcdefa"
    d2.mkdir()
    data = ClusterRun(ctx, d2, lambda _: None, ModelLauncher()).run(fabric_ok(ctx.nodes))
    assert "fabric.cabling" not in [r["check"] for r in data["results"]]
    assert data["verdict"] == "PASS"


def test_extra_collectives_are_reported_not_judged(tmp_path: Path) -> None:
    from dataclasses import replace
    ctx = context(4)
    ctx = replace(ctx, cfg=ClusterConfig(engine="slurm", scaling=False,
                                         collectives=("all_gather", "alltoall")))
    d = tmp_path / "cluster-run-abcdef"
    d.mkdir()
    m = ModelLauncher()
    data = ClusterRun(ctx, d, lambda _: None, m).run(fabric_ok(ctx.nodes))
    assert [j.script.split("exec ")[-1].split()[0] for j in m.ran[-2:]] == [
        "all_gather_perf", "alltoall_perf"]
    col = next(r for r in data["results"] if r["check"] == "cluster.collectives")
    assert col["verdict"] == "PASS" and data["verdict"] == "PASS"
    assert col["findings"][0] == ("all_gather: 376.0 GB/s bus bandwidth at the largest size "
                                  "(reported, not judged: no sourced floor)")
    assert set(data["collectives"]) == {"all_gather", "alltoall"}
    assert parse_cluster({"collectives": ["reduce_scatter"]})[0] is None


def test_the_lab_collectives_print_nccl_tests_tables(tmp_path: Path) -> None:
    from nodecert_node.parse.bench import parse_nccl
    from support.simnode import SimNode
    node = SimNode(tmp_path, "h200-sxm-8")
    for tool in ("all_gather_perf", "alltoall_perf"):
        node.bin.joinpath(tool).write_text(node.bin.joinpath("all_reduce_perf").read_text()
                                           .replace("all_reduce_perf", tool))
        node.bin.joinpath(tool).chmod(0o755)
        text = node.tool(tool, "-b", "1M", "-e", "1G", "-f", "4", "-g", "8")
        assert f"# Collective test starting: {tool}" in text
        p = parse_nccl(text)
        assert p["rows"][-1]["redop"] == "none" and p["rows"][-1]["busbw"] > 0


def test_openmpi_lines_split_across_its_chunks_are_joined_again() -> None:
    from nodecert.transport.joboutput import demux
    from nodecert_node.parse.fio import parse_fio
    text = (REPO / "tests" / "fixtures" / "recorded" / "mpirun" /
            "openmpi-4.1-tag-output-fio-json-4-ranks-split-lines.txt").read_text()
    assert "<stdout>:      [1,0]<stdout>:" in text  # the real artefact is in the recording
    ranks = demux(text)
    assert sorted(k for k in ranks if k is not None) == [0, 1, 2, 3]
    for k in range(4):
        job = parse_fio(ranks[k])[0]
        assert job["name"] == "aggread" and job["read"]["bw_bytes"] > 0
    # another rank's chunk between the two halves of a line; a line the output ends in
    mixed = ("[1,0]<stdout>:abc[1,2]<stdout>:two\n[1,0]<stdout>:def\n[1,1]<stdout>: x\n"
             "[1,3]<stdout>:cut")
    assert demux(mixed) == {0: "abcdef\n", 2: "two\n", 1: "x\n", 3: "cut\n"}


def test_a_cluster_certificate_holds_the_verifier_to_one_of_its_nodes(tmp_path: Path) -> None:
    """--expect-host/-serial/-identity and --host against a cluster certificate: about
    one of its nodes, or the verify fails (it printed VALID for any host before)."""
    from nodecert.certs.identity import identity_digest
    data = run_model(tmp_path, 3, ModelLauncher())
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    env, _, _ = certify_cluster(run_dir, load_private_key(keys.private))
    h2 = data["fabric"]["h2"]["identity"]

    def check(expect: dict[str, str | None] | None = None, live: dict[str, Any] | None = None,
              host: str | None = None) -> tuple[bool, str]:
        v = verify_report(env, [keys.public], allow_simulated=True, expect=expect,
                          live_identity=live, live_host=host)
        assert v.kind == "cluster"
        return v.ok, " | ".join(d for _, ok, d in v.steps if not ok)
    assert check({"host": "h2", "serial": "SN-h2", "identity": identity_digest(h2)})[0]
    assert check({"serial": "G-h3-0"})[0]  # no host: any node's serial
    ok, why = check({"host": "gpu-99", "serial": "NOPE"})
    assert not ok and "host 'gpu-99' is not a node of this cluster certificate" in why
    ok, why = check({"host": "h1", "serial": "SN-h2"})
    assert not ok and "serial 'SN-h2' is not in h1's identity" in why
    assert not check({"host": "h1", "identity": identity_digest(h2)})[0]
    assert check(live=h2, host="h2")[0]
    ok, why = check(live=h2, host="h1")
    assert not ok and "h1's hardware differs from the certificate" in why
    swapped = {**h2, "gpus": [{**h2["gpus"][0], "serial": "G-swapped"}, *h2["gpus"][1:]]}
    assert not check(live=swapped, host="h2")[0]
    assert not check(live=h2, host="gpu-99")[0]
    # the command line: exit 1, and never "the node is READY" for a cluster
    r = CliRunner().invoke(main, ["verify", str(env), "--pubkey", str(keys.public),
                                  "--allow-simulated", "--expect-host", "gpu-99",
                                  "--expect-serial", "NOPE"])
    assert r.exit_code == 1 and "NOT VALID" in r.output and "node is READY" not in r.output
    r = CliRunner().invoke(main, ["verify", str(env), "--pubkey", str(keys.public),
                                  "--allow-simulated", "--expect-host", "h3"])
    assert r.exit_code == 0, r.output
    assert "VALID: the certificate holds and the cluster is READY" in r.output



def test_a_cluster_certificate_is_valid_from_its_measurement_and_refuses_old_runs(
        tmp_path: Path) -> None:
    """not_before is the run's end, not_after counted from it; a run older than the age
    limit (or one that records no end) is not signed."""
    from nodecert.certs.certify import RunError
    data = run_model(tmp_path, 2, ModelLauncher())
    ended = dt.datetime.fromtimestamp(data["finished"], dt.UTC).replace(microsecond=0)
    assert data["started"] <= data["finished"]
    later = ended + dt.timedelta(days=3)
    rec = GroupRecord(tmp_path / "results.json", data)
    st = statement(rec, issued=later, valid_days=30)
    v = st["predicate"]["validity"]
    assert v["not_before"] == ended.isoformat()
    assert v["not_after"] == (ended + dt.timedelta(days=30)).isoformat()
    assert v["issued"] == later.isoformat() and v["max_result_age_days"] == 7.0
    assert st["predicate"]["validated"]["finished"] == ended.isoformat()
    with pytest.raises(RunError, match=r"8\.0 days old .* more than the 7 days"):
        statement(rec, issued=ended + dt.timedelta(days=8))
    assert statement(rec, issued=ended + dt.timedelta(days=8), max_age_days=9)
    with pytest.raises(RunError, match="records no end time"):
        statement(GroupRecord(rec.path, {**data, "finished": None}), issued=later)
    # verify: expired 30 days after the run's end, whenever it was signed
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    env, _, _ = certify_cluster(run_dir, load_private_key(keys.private), now=later)
    assert verify_report(env, [keys.public], allow_simulated=True,
                         now=ended + dt.timedelta(days=29)).ok
    late = verify_report(env, [keys.public], allow_simulated=True,
                         now=ended + dt.timedelta(days=31))
    assert not late.ok and any("EXPIRED" in d for _, _, d in late.steps)


# --- the jobs' ports ------------------------------------------------------------------------

def test_a_job_whose_port_is_taken_stops_before_it_starts(tmp_path: Path) -> None:
    """Rank 0 checks the job's ports on its node first (real bash): one already taken
    stops the job, saying which, instead of NCCL or perftest meeting a stranger."""
    import socket
    import subprocess

    from nodecert.cluster.judge import PORT_BUSY_RC, pair_script, port_busy, prelude
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"PATH": "/usr/bin:/bin", "SLURM_PROCID": "0"}
        p = subprocess.run(["bash", "-c", f"{prelude('127.0.0.1', port - 2, 2)}; echo ran"],
                           capture_output=True, text=True, timeout=30, env=env, check=False)
        assert p.returncode == PORT_BUSY_RC and port_busy(p.stdout) == str(port), p.stdout
        assert "ran" not in p.stdout
        # rank 1 does not look; and ports that are free let the job start
        p1 = subprocess.run(["bash", "-c", f"{prelude('127.0.0.1', port, 0)}; echo ran"],
                            capture_output=True, text=True, timeout=30,
                            env={**env, "SLURM_PROCID": "1"}, check=False)
        assert p1.stdout.strip() == "ran"
    free = subprocess.run(["bash", "-c", f"{prelude('127.0.0.1', port, 0)}; echo ran"],
                          capture_output=True, text=True, timeout=30, env=env, check=False)
    assert free.returncode == 0 and free.stdout.strip() == "ran"
    exp = expectation(FABRIC, 8, LIMITS)
    script = pair_script("h1", 29500, exp, "8G", False)
    assert "for p in 29500 29501 29502 29503 29504 29505 29506 29507 29508;" in script


def test_a_taken_port_is_the_jobs_error_and_blames_no_node(tmp_path: Path) -> None:
    from nodecert.cluster.judge import PORT_BUSY_MARK

    class Taken(ModelLauncher):
        def run(self, job: Job) -> JobResult:
            if "h2" in job.nodes and len(job.nodes) == 2:
                self.ran.append(job)
                return JobResult(job, "srun ...", 97, f" 0: {PORT_BUSY_MARK}29541\n", 0.1)
            return super().run(job)

    data = run_model(tmp_path, 4, Taken())
    h2 = [p for p in data["pairs"] if "h2" in p["nodes"]]
    assert h2 and all("port 29541 on the job's first node was already taken" in p["error"]
                      for p in h2)
    assert "h2" not in data["culprits"]


def test_each_run_draws_where_its_ports_start(tmp_path: Path) -> None:
    from support.cluster import context
    ports = set()
    for k in range(6):
        run = ClusterRun(context(2), tmp_path / f"r{k}", lambda _: None, ModelLauncher())
        ports.add(run.job("pair", ("h1", "h2"), lambda first, port: str(port)).script)
    assert len(ports) > 1  # not the same first port every run


def test_the_port_range_is_the_sites_and_drawn_within_it(tmp_path: Path) -> None:
    """nodecert_cluster port_slots sets how many 20-port blocks above bootstrap_port the
    runs draw from (before, always 200 blocks from it); a range past 65535 is refused."""
    import dataclasses

    from nodecert.inventory.cluster import parse_cluster
    from support.cluster import context
    cfg, why = parse_cluster({"bootstrap_port": 40000, "port_slots": 3})
    assert why is None and cfg is not None
    seen = set()
    for k in range(12):
        ctx = dataclasses.replace(context(2), cfg=dataclasses.replace(
            context(2).cfg, bootstrap_port=40000, port_slots=3))
        run = ClusterRun(ctx, tmp_path / f"r{k}", lambda _: None, ModelLauncher())
        seen.add(int(run.job("pair", ("h1", "h2"), lambda first, port: str(port)).script))
    assert seen <= {40000, 40020, 40040} and len(seen) > 1
    assert parse_cluster({"bootstrap_port": 65000, "port_slots": 200})[1] == (
        "bootstrap_port 65000 with port_slots 200 reaches port 68999, past 65535: lower "
        "either")
    assert "port_slots must be an integer 1..3000" in str(parse_cluster({"port_slots": 0})[1])


def test_the_cluster_page_draws_the_fabric_against_the_cable_plan(tmp_path: Path) -> None:
    from nodecert.cluster.cabling import judge_cabling
    from nodecert.cluster.cabling_links import Link
    from nodecert.inventory.cableplan import read_plan
    data = run_model(tmp_path, 3, ModelLauncher())
    plan_csv = tmp_path / "plan.csv"
    rows = [(f"h{n}", f"mlx5_{k}", str(k), f"leaf-{k}", str(n))
            for n in (1, 2, 3) for k in (0, 1)]
    plan_csv.write_text("node,port,rail,switch,switch_port\n"
                        + "".join(",".join(r) + "\n" for r in rows))
    plan = read_plan(plan_csv)
    links = [Link(a, b, s, p) for a, b, _, s, p in rows]
    links[0], links[2] = Link("h1", "mlx5_0", "leaf-0", "2"), Link("h2", "mlx5_0", "leaf-0", "1")
    res = judge_cabling(plan, links)
    data["results"].append(res.as_dict())
    data["verdict"] = "FAIL"
    run_dir = tmp_path / "cluster-run-abcdef"
    (run_dir / "results.json").write_text(json.dumps(data))
    keys = init_key(tmp_path / "keys")
    env, html, verdict = certify_cluster(run_dir, load_private_key(keys.private))
    assert verdict == "NOT READY"
    pred = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))["predicate"]
    assert pred["cabling"]["plan_sha256"] == plan.digest
    assert [x["status"] for x in pred["cabling"]["links"]] == [
        "swapped", "ok", "swapped", "ok", "ok", "ok"]
    page = html.read_text()
    assert 'id="cabling"' in page and plan.digest in page
    assert page.count('class="link ok"') == 4 and page.count('class="link wrong"') == 2
    assert "h1 mlx5_0 -&gt; leaf-0 port 1 (plan line 2): swapped" in page
    assert "rail 0 (leaf-0)" in page
    assert verify_report(env, [keys.public], allow_simulated=True).steps[0][1]
