"""The node-side scheduled run: local-run on the simulator, history
bound, Prometheus metrics (parsed by the Prometheus client's own parser), the
GPU-busy skip, and the Slurm drain policy against a fake scontrol."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodecert_node.local import keep_history, metrics_text, slurm_action
from support.env import REPO
from support.simnode import FAKE_SCONTROL, VALIDATORS, SimNode

pytestmark = pytest.mark.integration


def node_env(node: SimNode, state: Path, prom: Path) -> dict[str, str]:
    return dict(node.env(), NODECERT_STATE_DIR=str(state), NODECERT_TEXTFILE_DIR=str(prom),
                FAKE_SLURM=str(node.tmp / "slurm"))


def local_run(node: SimNode, state: Path, prom: Path,
              *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodecert_node", "local-run", *args],
                          env=node_env(node, state, prom), cwd=VALIDATORS, capture_output=True,
                          text=True, timeout=300, check=False)


def setup(tmp_path: Path, faults: list[dict[str, Any]] | None = None,
          checks: tuple[str, ...] = ("health.gpu", "health.xid")) -> tuple[SimNode, Path, Path]:
    node = SimNode(tmp_path, faults=faults)
    state, prom = tmp_path / "state", tmp_path / "prom"
    (state / "plans").mkdir(parents=True)
    prom.mkdir()
    plan = node.plan(list(checks))
    (state / "plans" / "quick.json").write_text(json.dumps(plan))
    return node, state, prom


def test_local_run_writes_history_and_valid_metrics(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    (state / "revalidate-pending").write_text("queued by a package change\n")
    r = local_run(node, state, prom, "--keep", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("nodecert: PASS; history ")
    hist = sorted((state / "history").glob("*.json"))
    assert len(hist) == 1 and "-after-update-" in hist[0].name  # the hook's marker
    assert not (state / "revalidate-pending").exists()  # the queued run happened
    rec = json.loads(hist[0].read_text())
    assert [x["check"] for x in rec["results"]] == ["health.gpu", "health.xid"]
    assert rec["simulated"] is True
    families = {f.name: f for f in text_string_to_metric_families(
        (prom / "nodecert.prom").read_text())}
    assert set(families) >= {"nodecert_last_run_timestamp_seconds", "nodecert_node_verdict",
                             "nodecert_check_verdict", "nodecert_last_run_skipped"}
    checks = {s.labels["check"]: s.value for s in families["nodecert_check_verdict"].samples}
    assert checks == {"health.gpu": 0.0, "health.xid": 0.0}
    for _ in range(3):
        assert local_run(node, state, prom, "--keep", "2").returncode == 0
    assert len(list((state / "history").glob("*.json"))) == 2  # bounded


def test_a_run_started_as_a_scheduler_job_records_the_job(tmp_path: Path) -> None:
    # The control side collects only the record its own job left (not an older one).
    node, state, prom = setup(tmp_path)
    env = dict(node_env(node, state, prom), NODECERT_JOB="nodecert-reval-abc123-0")
    r = subprocess.run([sys.executable, "-m", "nodecert_node", "local-run", "--reason",
                        "slurm"], env=env, cwd=VALIDATORS, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    hist = list((state / "history").glob("*-slurm-*.json"))
    assert len(hist) == 1
    assert json.loads(hist[0].read_text())["job"] == "nodecert-reval-abc123-0"
    assert local_run(node, state, prom).returncode == 0
    timer = next((state / "history").glob("*-timer-*.json"))
    assert "job" not in json.loads(timer.read_text())


def test_failing_node_exits_1_and_metrics_say_fail(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 2}])
    r = local_run(node, state, prom)
    assert r.returncode == 1 and r.stdout.startswith("nodecert: FAIL")
    fam = {f.name: f for f in text_string_to_metric_families((prom / "nodecert.prom").read_text())}
    assert fam["nodecert_node_verdict"].samples[0].value == 2.0


def _approx(x: float) -> object:
    import pytest
    return pytest.approx(x, abs=1e-3)


def test_busy_gpus_skip_unless_forced(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    assert local_run(node, state, prom).returncode == 0  # judged: PASS, kept
    first = json.loads(next((state / "history").glob("*.json")).read_text())
    real = node.bin / "nvidia-smi"
    real.rename(node.bin / "nvidia-smi.sim")
    real.write_text("#!/bin/sh\ncase \"$*\" in *query-compute-apps*) "
                    "echo '4242, python3 train.py'; exit 0;; esac\n"
                    f"exec {node.bin / 'nvidia-smi.sim'} \"$@\"\n")
    real.chmod(0o755)
    r = local_run(node, state, prom)
    assert r.returncode == 0
    assert r.stdout.startswith("nodecert: GPUs busy with user work: 4242, python3 train.py")
    rec = json.loads(sorted((state / "history").glob("*.json"))[-1].read_text())
    assert rec["results"] == [] and rec["skipped"] and rec["verdict"] is None  # never PASS
    fam = {f.name: f for f in text_string_to_metric_families((prom / "nodecert.prom").read_text())}
    assert fam["nodecert_last_run_skipped"].samples[0].value == 1.0
    # The skipped run keeps the last judged verdict and says when it was measured (before,
    # the verdict vanished and an alert on it cleared without evidence).
    assert fam["nodecert_node_verdict"].samples[0].value == 0.0
    assert fam["nodecert_node_verdict_timestamp_seconds"].samples[0].value == \
        _approx(first["finished"])
    r = local_run(node, state, prom, "--force")
    assert r.stdout.startswith("nodecert: PASS")


def test_a_tool_error_is_no_gpu_job(tmp_path: Path) -> None:
    """nvidia-smi's own words in place of the process list are not a job: the run is not
    skipped, it runs and says it could not tell; a skipped run records no verdict."""
    node, state, prom = setup(tmp_path)
    real = node.bin / "nvidia-smi"
    real.rename(node.bin / "nvidia-smi.sim")
    for words, code in (("Failed to initialize NVML: Driver/library version mismatch", 0),
                        ("NVIDIA-SMI has failed because it couldn't communicate with the "
                         "NVIDIA driver.", 9)):
        said = tmp_path / "said.txt"
        said.write_text(words + "\n")
        real.write_text("#!/bin/sh\ncase \"$*\" in *query-compute-apps*) "
                        f"cat {said}; exit {code};; esac\n"
                        f"exec {node.bin / 'nvidia-smi.sim'} \"$@\"\n")
        real.chmod(0o755)
        r = local_run(node, state, prom)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("nodecert: PASS; could not tell whether the GPUs are busy")
        assert words[:30] in r.stdout
        rec = json.loads(sorted((state / "history").glob("*.json"))[-1].read_text())
        assert not rec.get("skipped") and rec["results"] and rec["verdict"] == "PASS"


def test_the_simulated_tool_lists_no_compute_apps(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    env = node_env(node, state, prom)
    r = subprocess.run([str(node.bin / "nvidia-smi"), "--query-compute-apps=pid,process_name",
                        "--format=csv,noheader"], env=env, capture_output=True, text=True,
                       timeout=60, check=False)
    assert (r.returncode, r.stdout) == (0, "")


def test_compute_app_rows_are_read_strictly() -> None:
    from nodecert_node.idle import GpuUsersUnknown, parse_compute_apps
    assert parse_compute_apps("") == []
    assert parse_compute_apps("No running processes found\n") == []
    assert parse_compute_apps("4242, python3 train.py\n77, /usr/bin/python3\n") == [
        "4242, python3 train.py", "77, /usr/bin/python3"]
    for text in ("Failed to initialize NVML: Unknown Error\n",
                 "[Insufficient Permissions], python3\n", "4242,\n"):
        with pytest.raises(GpuUsersUnknown, match="no process row"):
            parse_compute_apps(text)


def test_crashed_run_is_error_in_history_and_metrics_and_exits_3(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    (state / "plans" / "quick.json").write_text('{"schema": "nodecert.plan/v1", "run_id"')
    (state / "revalidate-pending").write_text("queued by a package change\n")
    r = local_run(node, state, prom)
    assert r.returncode == 3, r.stdout + r.stderr  # not 1 (a FAIL): systemd marks it failed
    assert r.stdout.startswith("nodecert: ERROR (the scheduled run crashed: ")
    rec = json.loads(next((state / "history").glob("*.json")).read_text())
    assert rec["verdict"] == "ERROR" and rec["crashed"] is True
    fam = {f.name: f for f in text_string_to_metric_families((prom / "nodecert.prom").read_text())}
    assert fam["nodecert_node_verdict"].samples[0].value == 3.0
    assert fam["nodecert_last_run_crashed"].samples[0].value == 1.0
    assert (state / "revalidate-pending").exists()  # the queued run stays queued


def test_unit_fails_only_on_a_crash() -> None:
    unit = (REPO / "roles/validators/templates/nodecert-revalidate.service.j2").read_text()
    assert "SuccessExitStatus=1\n" in unit  # FAIL: a finding; 3 (a crash): the unit fails


def test_after_update_run_gathers_conformance_without_counting_it(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    plan = node.plan(["health.gpu", "stack.conformance"])
    plan["conformance"] = {"stack": "r580-cuda13.0", "script": "echo nvidia-open 580"}
    (state / "plans" / "quick.json").write_text(json.dumps(plan))
    r = local_run(node, state, prom)
    assert r.returncode == 0 and r.stdout.startswith("nodecert: PASS"), r.stdout + r.stderr
    rec = json.loads(next((state / "history").glob("*.json")).read_text())
    conf = next(x for x in rec["results"] if x["check"] == "stack.conformance")
    assert conf["fault_code"] == "NC-NOT-JUDGED"
    assert conf["facts"]["conformance_output"].strip() == "nvidia-open 580"


def test_no_plan_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    r = local_run(node, state, prom, "--suite", "standard")
    assert r.returncode == 1 and "ERROR" in r.stdout
    rec = json.loads(next((state / "history").glob("*.json")).read_text())
    assert rec["error"].startswith("no plan for suite 'standard': run `nodecert validate")


@pytest.mark.parametrize(("verdict", "state", "reason", "resume", "want"), [
    ("FAIL", "IDLE", "", False, "drain"),
    ("ERROR", "ALLOCATED", "", False, "drain"),
    ("FAIL", "IDLE+DRAIN", "maintenance: PSU swap", False, None),   # operator's drain
    ("FAIL", "IDLE+DRAIN", "nodecert: health.gpu FAIL", False, None),  # already ours
    ("PASS", "IDLE+DRAIN", "nodecert: health.gpu FAIL", True, "resume"),
    ("PASS", "IDLE+DRAIN", "nodecert: health.gpu FAIL", False, None),  # resume not asked
    ("PASS", "IDLE+DRAIN", "maintenance: PSU swap", True, None),     # never theirs
    ("WARN", "IDLE", "", True, None),
    ("FAIL", "DOWN", "", False, None),                               # an admin's DOWN
    ("FAIL", "DOWN*", "", False, None),
    ("FAIL", "IDLE+MAINT", "", False, None),                         # maintenance
    ("FAIL", "FAIL", "", False, None),
    ("FAIL", "IDLE", "bad DIMM, ticket 4711", False, None),          # a reason already set
    ("FAIL", "MIXED", "", False, "drain"),
    ("PASS", "DOWN+DRAIN", "nodecert: health.gpu FAIL", True, None),  # not back by itself
    ("PASS", "IDLE+DRAIN+MAINT", "nodecert: health.gpu FAIL", True, None),
    ("PASS", "IDLE", "", True, None),                                # nothing to resume
])
def test_slurm_policy(verdict: str, state: str, reason: str, resume: bool,
                      want: str | None) -> None:
    # "ours": the reason nodecert recorded when it drained the node is the one shown
    kept = reason if reason.startswith("nodecert:") else None
    assert slurm_action(verdict, state, reason, resume, kept) == want


@pytest.mark.parametrize("kept", [None, "nodecert: health.xid FAIL"])
def test_a_drain_nodecert_did_not_record_is_never_resumed(kept: str | None) -> None:
    """Anyone may write a reason starting "nodecert:": without nodecert's own record of
    that very drain it is someone else's, left alone."""
    assert slurm_action("PASS", "IDLE+DRAIN", "nodecert: health.gpu FAIL", True,
                        kept) is None


def test_slurm_drain_and_resume_with_a_fake_scontrol(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 2}])
    fake = node.bin / "scontrol"
    fake.write_text(FAKE_SCONTROL)
    fake.chmod(0o755)
    slurm = tmp_path / "slurm"
    slurm.write_text("STATE=IDLE\nREASON=\n")
    r = local_run(node, state, prom, "--slurm-drain", "--slurm-node", "gpu01")
    assert "slurm: drained gpu01: nodecert: health.gpu FAIL" in r.stdout
    assert 'REASON="nodecert: health.gpu FAIL"' in slurm.read_text()
    # An operator's drain is never touched.
    slurm.write_text('STATE=IDLE+DRAIN\nREASON="maintenance: PSU swap"\n')
    r = local_run(node, state, prom, "--slurm-drain", "--slurm-node", "gpu01")
    assert "drained by someone else ('maintenance: PSU swap'): not touched" in r.stdout
    assert "maintenance" in slurm.read_text()
    # Healthy again: resume only nodecert's own drain, and only when asked.
    node2, _, _ = setup(tmp_path / "ok")
    slurm.write_text('STATE=IDLE+DRAIN\nREASON="nodecert: health.gpu FAIL"\n')
    env_node = node2
    env_node.tmp = tmp_path  # same fake Slurm state file
    (node2.bin / "scontrol").write_text(FAKE_SCONTROL)
    (node2.bin / "scontrol").chmod(0o755)
    r = local_run(env_node, state, prom, "--slurm-drain", "--slurm-resume",
                  "--slurm-node", "gpu01")
    assert "slurm: resumed gpu01" in r.stdout and slurm.read_text().startswith("STATE=IDLE\n")
    log = (tmp_path / "slurm.log").read_text().splitlines()
    assert log == ["NodeName=gpu01 State=DRAIN Reason=nodecert: health.gpu FAIL",
                   "NodeName=gpu01 State=RESUME"]
    assert json.loads((state / "slurm-drains.json").read_text()) == {}
    # The same reason written by someone else (nodecert kept no record of it): left.
    slurm.write_text('STATE=IDLE+DRAIN\nREASON="nodecert: health.gpu FAIL"\n')
    r = local_run(env_node, state, prom, "--slurm-drain", "--slurm-resume",
                  "--slurm-node", "gpu01")
    assert "drained by someone else ('nodecert: health.gpu FAIL'): not touched" in r.stdout
    assert len((tmp_path / "slurm.log").read_text().splitlines()) == 2


def test_metrics_text_escapes_and_units() -> None:
    text = metrics_text({"suite": "quick", "verdict": "WARN", "started": 10.0,
                         "finished": 12.5, "results": [
                             {"check": 'odd"name', "verdict": "WARN", "value": None},
                             {"check": "load.burnin", "verdict": "PASS",
                              "value": {"tflops_per_gpu": {"0": 660.5, "1": 661.0}}},
                             {"check": "load.scaling", "verdict": "PASS",
                              "value": {"efficiency": 0.974, "tokens_s_n": 198000.0}}]})
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    assert fam["nodecert_scaling_efficiency_ratio"].samples[0].value == 0.974
    assert fam["nodecert_last_run_duration_seconds"].samples[0].value == 2.5
    assert {s.labels["check"] for s in fam["nodecert_check_verdict"].samples} == {
        'odd"name', "load.burnin", "load.scaling"}
    assert [s.value for s in fam["nodecert_gemm_tflops"].samples] == [660.5, 661.0]


def test_metrics_timestamps_are_exact_integers_and_units_are_base() -> None:
    finished = 1764500123.0
    text = metrics_text({"suite": "standard", "verdict": "PASS", "started": 1764499000.25,
                         "finished": finished, "results": [
                             {"check": "fabric.nccl_allreduce", "verdict": "PASS",
                              "value": {"busbw_gbs": 476.96}}]})
    assert f"nodecert_last_run_timestamp_seconds {int(finished)}\n" in text  # not 1.7645e+09
    fam = {f.name: f for f in text_string_to_metric_families(text)}
    assert fam["nodecert_last_run_timestamp_seconds"].samples[0].value == finished
    assert fam["nodecert_last_run_duration_seconds"].samples[0].value == 1122.75
    bw = fam.get("nodecert_allreduce_busbw_bytes_per_second")
    assert bw is not None and bw.samples[0].value == pytest.approx(476.96e9)
    assert not any("gbytes" in name or "mbytes" in name for name in fam)


def test_keep_history_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert_node import local
    monkeypatch.setattr(local, "STATE", str(tmp_path))
    for k in range(5):
        keep_history({"finished": 1764460000 + k, "reason": "timer"}, 3)
    assert len(list((tmp_path / "history").glob("*.json"))) == 3


def test_a_failing_scontrol_keeps_history_and_metrics_and_fails_the_unit(
        tmp_path: Path) -> None:
    """Slurm is touched after the verdict is kept: a broken scontrol is recorded in the
    history and gives the crash exit code (it was a traceback, no history, exit 1)."""
    node, state, prom = setup(tmp_path, faults=[{"kind": "ecc_uncorrectable", "gpu": 2}])
    fake = node.bin / "scontrol"
    fake.write_text("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm "
                    "controller' >&2\nexit 1\n")
    fake.chmod(0o755)
    r = local_run(node, state, prom, "--slurm-drain", "--slurm-node", "gpu01")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    hist = sorted((state / "history").glob("*.json"))
    rec = json.loads(hist[0].read_text())
    assert rec["verdict"] == "FAIL" and rec["slurm_failed"] is True
    assert rec["slurm"].startswith("failed: ") and "slurm: failed: " in r.stdout
    assert (prom / "nodecert.prom").exists()


@pytest.mark.parametrize("how", ["group-writable", "another owner", "a link"])
def test_metrics_go_only_into_a_directory_this_user_owns_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    from nodecert_node import local
    textfile = tmp_path / "textfile"
    textfile.mkdir(mode=0o755)
    where = textfile
    if how == "group-writable":
        textfile.chmod(0o775)
    elif how == "another owner":
        monkeypatch.setattr(local.os, "geteuid", lambda: os.getuid() + 1)
    else:
        where = tmp_path / "link"
        where.symlink_to(textfile)
    record = {"suite": "quick", "verdict": "PASS", "started": 1.0, "finished": 2.0,
              "results": []}
    with pytest.raises(local.MetricsDirError, match=r"metrics|not a directory"):
        local.write_metrics(record, str(where))
    assert not list(textfile.iterdir())
    textfile.chmod(0o755)
    monkeypatch.undo()
    assert local.write_metrics(record, str(textfile)) == str(textfile / "nodecert.prom")


def _long_plan(node: SimNode, state: Path) -> None:
    """A suite whose burn-in runs 30 s on the simulator (gpu_burn's engine)."""
    plan = node.plan(["health.gpu", "load.burnin"], suite="standard")
    plan["options"]["load"] = {**plan["options"].get("load", {}), "burnin_s": 30,
                               "engine": "gpu_burn"}
    (state / "plans" / "quick.json").write_text(json.dumps(plan))


def _burning(pid: int, limit_s: float = 60) -> None:
    """Wait until the run's burn-in (gpu_burn) is running: polled, never a fixed sleep."""
    deadline = time.monotonic() + limit_s
    def cmdline(p: str) -> bytes:
        try:
            return (Path("/proc") / p / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            return b""
    while not any(b"gpu_burn" in cmdline(p) for p in _ours_left(pid)):
        assert time.monotonic() < deadline, "the burn-in never started"
        time.sleep(0.1)


def _ours_left(pid: int) -> list[str]:
    """Processes still running that were started under pid (by their environment mark)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                env = (p / "environ").read_bytes()
            except OSError:
                continue
            if f"NODECERT_TEST_MARK={pid}".encode() in env:
                out.append(p.name)
    return out


def test_an_idle_run_gives_way_to_a_gpu_job_within_seconds(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    _long_plan(node, state)
    real = node.bin / "nvidia-smi"
    real.rename(node.bin / "nvidia-smi.sim")
    job = tmp_path / "job-started"
    real.write_text("#!/bin/sh\ncase \"$*\" in *query-compute-apps*) "
                    f"[ -e {job} ] && echo '777, python3 train.py'; exit 0;; esac\n"
                    f"exec {node.bin / 'nvidia-smi.sim'} \"$@\"\n")
    real.chmod(0o755)
    env = dict(node_env(node, state, prom), NODECERT_TEST_MARK=str(os.getpid()))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "nodecert_node", "local-run", "--idle",
                             "--idle-poll-s", "0.5"], env=env, cwd=VALIDATORS,
                            stdout=subprocess.PIPE, text=True)
    _burning(os.getpid())
    job.write_text("")
    started = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    gone = time.monotonic() - started
    assert proc.returncode == 0, out
    assert gone < 10 and time.monotonic() - t0 < 25  # not the burn-in's 30 s
    assert out.startswith("nodecert: gave way to a GPU job that started: 777, python3 train.py")
    rec = json.loads(next((state / "history").glob("*.json")).read_text())
    assert rec["yielded"] is True and rec["results"] == []  # a cut run is no verdict
    assert _ours_left(os.getpid()) == []


def test_an_idle_run_stops_on_sigterm_and_leaves_nothing(tmp_path: Path) -> None:
    node, state, prom = setup(tmp_path)
    _long_plan(node, state)
    env = dict(node_env(node, state, prom), NODECERT_TEST_MARK=str(os.getpid()))
    proc = subprocess.Popen([sys.executable, "-m", "nodecert_node", "local-run", "--idle"],
                            env=env, cwd=VALIDATORS, stdout=subprocess.PIPE, text=True)
    _burning(os.getpid())
    assert len(_ours_left(os.getpid())) > 1  # local-run and its burn-in
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert time.monotonic() - t < 10 and proc.returncode == 0, out
    assert "gave way to the scheduler" in out
    assert _ours_left(os.getpid()) == []
