"""The node-side checks end to end against the hardware simulator (no lab host needed).

Each injected fault must make exactly the right check FAIL; a node without a
driver or GPU must FAIL, never pass; the suite runner isolates hung and crashing
checks; the storage test writes only under its scratch directory.
"""

from __future__ import annotations

import ast
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nodecert_node.contract import Verdict
from support.simnode import VALIDATORS, SimNode, failing, verdicts

pytestmark = pytest.mark.integration

LOW_FLOORS = {"storage.seq_read_mbps_min": 1, "storage.seq_write_mbps_min": 1,
              "storage.rand_read_iops_min": 1, "storage.checkpoint_mbps_min": 1}






@pytest.mark.parametrize("profile", ["h200-sxm-8", "h100-sxm-8", "a100-sxm-8", "l40s-pcie-4"])
def test_healthy_simulated_node_passes(tmp_path: Path, profile: str) -> None:
    assert failing(SimNode(tmp_path, profile)) == {}


@pytest.mark.parametrize(("fault", "check", "words"), [
    ({"kind": "gpu_missing", "gpu": 3}, "hardware.inventory",
     "7 GPUs visible to the driver, the spec orders 8"),
    ({"kind": "pcie_degraded", "gpu": 2, "width": 8}, "hardware.pcie",
     "GPU 0000:3a:00.0: link trained at x8 of x16 (degraded width)"),
    ({"kind": "pcie_degraded", "gpu": 2, "gen": 3}, "hardware.pcie",
     "GPU 0000:3a:00.0: link running at Gen3 of Gen5 in P0"),
    ({"kind": "nvlink_down", "gpu": 5, "links": [3, 4]}, "hardware.topology",
     "GPU5: NVLink 3, 4 inactive (16 of 18 up)"),
    ({"kind": "nvlink_down", "gpu": 1}, "hardware.topology",
     "GPU1: NVML: Unable to retrieve NVLink information as all links are inactive"),
    ({"kind": "ecc_uncorrectable", "gpu": 1, "count": 3}, "health.gpu",
     "GPU 0000:2a:00.0: 3 uncorrectable ECC errors since the driver loaded"),
    ({"kind": "row_remap_pending", "gpu": 6}, "health.gpu",
     "GPU 0000:ba:00.0: row remapping pending"),
    ({"kind": "row_remap_failure", "gpu": 6}, "health.gpu", "row remapping failed"),
    ({"kind": "xid", "gpu": 4, "code": 79}, "health.xid",
     "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on GPU4 0000:9a:00.0"),
    ({"kind": "xid", "gpu": 0, "code": 48}, "health.xid", "Xid 48"),
])
def test_each_fault_fails_exactly_its_check(tmp_path: Path, fault: dict[str, Any], check: str,
                                            words: str) -> None:
    got = failing(SimNode(tmp_path, "h200-sxm-8", faults=[fault]))
    assert list(got) == [check], got
    assert words in got[check], got[check]


def test_application_xid_is_reported_not_failed(tmp_path: Path) -> None:
    r = SimNode(tmp_path, faults=[{"kind": "xid", "gpu": 0, "code": 13}]).check("health.xid")
    assert r.verdict is Verdict.PASS and "Xid 13" in r.findings[0]


def test_no_driver_and_no_gpu_fail_plainly(tmp_path: Path) -> None:
    nodrv = SimNode(tmp_path / "a", installed={})
    got = verdicts(nodrv)
    for name in ("hardware.inventory", "hardware.pcie", "hardware.topology", "health.gpu"):
        assert got[name][0] is Verdict.FAIL
        assert "the NVIDIA driver is not working" in got[name][1]
        assert "couldn't communicate with the NVIDIA driver" in got[name][1]
    assert got["health.xid"][0] is Verdict.PASS  # the kernel log is read without the driver
    nogpu = SimNode(tmp_path / "b", installed={},
                    faults=[{"kind": "gpu_missing", "gpu": g} for g in range(8)])
    r = nogpu.check("hardware.inventory")
    assert r.verdict is Verdict.FAIL and r.fault_code == "NC-NO-GPU"
    assert "no NVIDIA GPU on this node" in r.summary


def test_suite_runner_stamps_simulated_and_isolates_hangs(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    # A hung nvidia-smi (the GPU stopped answering): only health.gpu is affected.
    plan = node.plan(["health.xid", "health.gpu", "hardware.inventory"])
    # The checks' own limits (3 s) stop them before the tool's (5 s) would.
    plan["check_timeouts_s"] = {"health.gpu": 3, "hardware.inventory": 3, "health.xid": 60}
    plan["tool_timeout_s"] = 5
    events = node.suite_with_tool("nvidia-smi", '#!/bin/sh\nexec python3 -c "import signal; '
                                  'signal.pause()" nodecert-hung-smi\n', plan)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "hello" and kinds[-1] == "done" and events[0]["simulated"] is True
    results = {e["result"]["check"]: e["result"] for e in events if e["event"] == "result"}
    assert list(results) == ["hardware.inventory", "health.gpu", "health.xid"]  # suite order
    assert all(r["simulated"] for r in results.values())
    gpu = results["health.gpu"]
    assert gpu["verdict"] == "ERROR" and gpu["fault_code"] == "NC-CHECK-TIMEOUT"
    assert "did not finish within 3 s" in gpu["summary"]
    assert results["hardware.inventory"]["fault_code"] == "NC-CHECK-TIMEOUT"
    # health.xid reads the kernel log even when nvidia-smi hangs (its tool limit, 5 s).
    assert results["health.xid"]["verdict"] == "PASS"
    assert "killed after 5 s" in results["health.xid"]["evidence"][0]["output"]
    # Stopping a check stops the tools it started (they run in their own groups).
    left = subprocess.run(["pgrep", "-f", "nodecert-hung-sm[i]"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert left.stdout == ""


def test_a_checks_limit_reaches_every_process_it_started(tmp_path: Path) -> None:
    """A tool whose workers leave its session (setsid, as fio's job processes do) is
    killed whole at its limit; and what a check left running when it ended is killed
    before the next check starts, and named in the check's result."""
    node = SimNode(tmp_path)
    plan = node.plan(["health.xid", "health.gpu", "hardware.inventory"])
    plan["check_timeouts_s"] = {"health.gpu": 60, "hardware.inventory": 60, "health.xid": 60}
    plan["tool_timeout_s"] = 3
    pause = 'python3 -c "import signal; signal.pause()"'
    # nvidia-smi hangs, its setsid'd worker with it: the tool limit kills both
    events = node.suite_with_tool(
        "nvidia-smi", f"#!/bin/sh\nsetsid {pause} nodecert-setsid-worker >/dev/null 2>&1 &\n"
                      f"exec {pause} nodecert-hung-smi\n", plan)
    results = {e["result"]["check"]: e["result"] for e in events if e["event"] == "result"}
    assert "killed after 3 s" in results["health.xid"]["evidence"][0]["output"]

    def left(marker: str) -> str:
        # a SIGKILL is delivered asynchronously: a killed process may still be on its way
        # out for a moment on a busy machine; one that is still there after 10 s was missed
        deadline = time.monotonic() + 10
        while True:
            pids = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True,
                                  timeout=30, check=False).stdout
            if not pids or time.monotonic() > deadline:
                return pids
            time.sleep(0.2)
    assert left("nodecert-setsid-worke[r]") == "" and left("nodecert-hung-sm[i]") == ""
    real = node.tool_script("nvidia-smi")
    events = node.suite_with_tool(
        "nvidia-smi", f"#!/bin/sh\nsetsid {pause} nodecert-left-behind >/dev/null 2>&1 &\n"
                      + real.split("\n", 1)[1], node.plan(["health.gpu"]))
    (gpu,) = [e["result"] for e in events if e["event"] == "result"]
    assert any("outlived it and were killed before the next check" in f
               for f in gpu["findings"]), gpu["findings"]
    assert left("nodecert-left-behin[d]") == ""


def test_crashing_check_is_an_error_and_the_suite_goes_on(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    plan = node.plan(["hardware.inventory", "health.gpu"])
    plan["thresholds"]["gpu.memory_mib_min"]["value"] = "lots"  # int < str: TypeError
    events = node.suite(plan)
    res = {e["result"]["check"]: e["result"] for e in events if e["event"] == "result"}
    assert res["hardware.inventory"]["verdict"] == "ERROR"
    assert res["hardware.inventory"]["fault_code"] == "NC-CHECK-CRASH"
    # A threshold that is not a number is a configuration error: ERROR, never a FAIL.
    assert "threshold value 'lots'" in res["hardware.inventory"]["summary"]
    assert res["health.gpu"]["verdict"] == "PASS"


def test_storage_writes_only_under_scratch_and_cleans_up(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    scratch = tmp_path / "scratch"
    small = {"size_mb": 32, "runtime_s": 1, "checkpoint_mb": 32}

    def fio(**thresholds: Any) -> Any:
        plan = node.plan(["storage.fio"], scratch=str(scratch),
                         cli_thresholds=dict(LOW_FLOORS, **thresholds))
        plan["options"]["storage"].update(small)
        return node.check("storage.fio", plan=plan)
    r = fio()
    assert r.verdict is Verdict.PASS, r.summary
    assert set(r.value[str(scratch)]) == {"seq_read_mbps", "seq_write_mbps", "rand_read_iops",
                                          "checkpoint_mbps"}
    assert all(v > 0 for v in r.value[str(scratch)].values())
    assert r.thresholds["seq_read_mbps"].origin == "command line --threshold"
    assert list(scratch.iterdir()) == []  # nothing left behind
    assert all(f"--filename={scratch}/nodecert-fio-" in e.command for e in r.evidence)
    # A floor the disk cannot meet fails with the measured figure and the limit.
    r = fio(**{"storage.seq_read_mbps_min": 10**7})
    assert r.verdict is Verdict.FAIL
    assert "seq read mbps: needs >= 10000000 MB/s, measured " in r.summary


def test_storage_refuses_when_space_is_short(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    plan = node.plan(["storage.fio"], scratch=str(tmp_path / "s"))
    plan["options"]["storage"]["size_mb"] = 10**9  # a petabyte
    r = node.check("storage.fio", plan=plan)
    assert r.verdict is Verdict.ERROR and "MiB free, the storage test needs" in r.summary
    assert not list((tmp_path / "s").iterdir())


def test_node_code_is_python38_syntax() -> None:
    """Nodes run their own python3 (3.8+): no syntax newer than 3.8 in nodecert_node."""
    files = sorted((VALIDATORS / "nodecert_node").rglob("*.py"))
    assert len(files) >= 15
    for path in files:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))
        assert "from __future__ import annotations" in path.read_text() or \
            path.name in ("__init__.py", "__main__.py"), path
    assert os.access(VALIDATORS / "nodecert_node" / "__main__.py", os.R_OK)


# --- fabric checks (standard suite) --------------------------------------------------------

FABRIC = ["fabric.nccl_allreduce", "fabric.bandwidth", "dcgm.diag"]


def fabric_failing(node: SimNode) -> dict[str, str]:
    out = {}
    for name in FABRIC:
        r = node.check(name, suite="standard")
        if r.verdict is not Verdict.PASS:
            out[name] = r.summary
    return out


def test_fabric_checks_pass_on_a_healthy_hgx(tmp_path: Path) -> None:
    node = SimNode(tmp_path)
    assert fabric_failing(node) == {}
    r = node.check("fabric.nccl_allreduce", suite="standard")
    assert 440 < r.value["busbw_gbs"] < 480 and len(r.value["curve"]) > 20


@pytest.mark.parametrize(("fault", "expect"), [
    ({"kind": "busbw_low", "factor": 0.7},
     {"fabric.nccl_allreduce": "needs >= 440 GB/s"}),
    ({"kind": "nccl_wrong"},
     {"fabric.nccl_allreduce": "wrong values at 8589934592 B (out-of-place)"}),
    ({"kind": "pcie_degraded", "gpu": 2, "width": 8},
     {"fabric.bandwidth": "GPU2 host->GPU", "dcgm.diag": "DCGM PCIe: Fail (GPU 2 failed)"}),
    ({"kind": "row_remap_pending", "gpu": 4},
     {"dcgm.diag": "DCGM Page Retirement/Row Remap: Fail"}),
])
def test_fabric_faults(tmp_path: Path, fault: dict[str, Any], expect: dict[str, str]) -> None:
    got = fabric_failing(SimNode(tmp_path, faults=[fault]))
    assert set(got) == set(expect), got
    for check_name, words in expect.items():
        assert words in got[check_name], got[check_name]


def test_nccl_hang_becomes_error_with_the_partial_log(tmp_path: Path) -> None:
    node = SimNode(tmp_path, faults=[{"kind": "nccl_hang"}])
    plan = node.plan(["fabric.nccl_allreduce"], suite="standard")
    plan["options"]["fabric"]["timeout_s"] = 3
    r = node.check("fabric.nccl_allreduce", plan=plan)
    assert r.verdict is Verdict.ERROR and r.fault_code == "NC-TOOL-TIMEOUT"
    assert "all_reduce_perf did not finish within 3 s" in r.summary
    partial = r.evidence[-1].output
    assert "# Using devices" in partial and "[nodecert: killed after 3 s]" in partial


# --- load checks (gpu_burn as the load) ----------------------------------------------------

def load_check(node: SimNode, name: str) -> Any:
    plan = node.plan([name], suite="standard")
    plan["options"]["load"] = {"burnin_s": 4, "soak_s": 4}
    return node.check(name, plan=plan)


@pytest.mark.parametrize(("fault", "check_name", "words"), [
    (None, "load.burnin", "8 GPUs loaded for 4 s"),
    (None, "load.thermal_soak", "8 GPUs, "),
    ({"kind": "sdc", "gpu": 5}, "load.burnin",
     "GPU5: results differ from the reference (3 errors): silent data corruption"),
    # 0.7x throughput with the simulator's jitter: 29-31% below the best, rounded.
    ({"kind": "tflops_low", "gpu": 2, "factor": 0.7}, "load.burnin",
     "as a fraction of the node's best GPU"),
    ({"kind": "thermal_throttle", "gpu": 6, "after_s": 2}, "load.thermal_soak",
     "GPU6: HW Slowdown under load"),
    ({"kind": "power_brake", "gpu": 1}, "load.thermal_soak", "GPU1: HW Slowdown under load"),
])
def test_load_checks_and_their_faults(tmp_path: Path, fault: dict[str, Any] | None,
                                      check_name: str, words: str) -> None:
    r = load_check(SimNode(tmp_path, faults=[fault] if fault else []), check_name)
    assert words in r.summary, r.summary
    if fault and fault["kind"] == "tflops_low":
        ratio = float(r.summary.rsplit("measured ", 1)[1].split(" ")[0])
        assert r.summary.startswith("GPU2 ") and 0.65 <= ratio <= 0.75, r.summary
    assert r.verdict is (Verdict.PASS if fault is None else Verdict.FAIL)
    if check_name == "load.thermal_soak":
        series = r.facts["series"]
        assert len(series) == 8 and all(len(s) >= 3 for s in series.values())
        assert r.evidence[-1].name == "telemetry"


def test_a_stop_between_checks_keeps_the_next_from_starting(tmp_path: Path) -> None:
    """The control side going away while the runner is between checks (its stop finds no
    check running) still stops the run: the next check is never started, so nothing
    keeps loading the node after an interrupt."""
    from nodecert_node import runner
    from nodecert_node.contract import Plan

    plan = Plan.from_dict(SimNode(tmp_path).plan(["health.gpu"]))
    current: dict[str, Any] = {"proc": None}
    runner.stop_current(current)  # no check is running: nothing to kill, yet
    res = runner.run_one("health.gpu", plan, 30, current)
    assert res.fault_code == "NC-CHECK-STOPPED" and res.verdict is Verdict.ERROR
    assert current["proc"] is None and "not started" in res.summary


def test_a_stop_never_signals_a_check_already_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle guard stops the running check when a GPU job starts; if that check has
    ended and been reaped, its pid may be another process's now: no signal is sent
    (before, its process group was signalled by the stale pid)."""
    import signal as sig
    import sys

    from nodecert_node import runner
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    fd = runner._pidfd(proc.pid)
    proc.wait(timeout=30)  # reaped: the pid is free for anyone
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(runner.os, "killpg", lambda pid, s: sent.append((pid, s)))
    current: dict[str, Any] = {"proc": proc, "pidfd": fd}
    runner.stop_current(current)
    assert sent == [] and current["stopped"]
    # A check still running is stopped, through its group.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    monkeypatch.undo()
    current = {"proc": live, "pidfd": runner._pidfd(live.pid)}
    runner.stop_current(current)
    assert live.wait(timeout=30) == -sig.SIGTERM
    for f in (fd, current["pidfd"]):
        if f is not None:
            os.close(f)
