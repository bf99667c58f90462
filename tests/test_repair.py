"""After a repair: the loaded re-test gate (repair.retest), Slurm resume only when it
passes, and the whole loop over real SSH on the emulated fleet, where a repaired node
passes at rest and fails under load."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodecert.certs.signing import init_key
from nodecert.cli import main
from nodecert.revalidate import repair
from nodecert_node.contract import Result, Verdict
from support.emulated import emulated_fleet

PLANNED = ("hardware.inventory", "health.gpu", "health.xid", "load.burnin",
           "fabric.nccl_allreduce")


def _ok(check: str) -> Result:
    return Result(check, Verdict.PASS, "ok")


def test_the_gate_passes_only_when_every_retested_check_passes() -> None:
    results = [_ok(c) for c in PLANNED]
    g = repair.gate(results, ["health.xid"], "r1", PLANNED)
    assert g.verdict == Verdict.PASS and "failed before (r1) and now pass: health.xid" in \
        g.summary
    burn = [r if r.check != "load.burnin" else Result("load.burnin", Verdict.FAIL,
                                                      "GPU0 results differ", fault_code="NC-BURNIN")
            for r in results]
    g = repair.gate(burn, ["health.xid"], "r1", PLANNED)
    assert g.verdict == Verdict.FAIL and g.fault_code == "NC-REPAIR-RETEST"
    assert g.findings == ("load.burnin FAIL: GPU0 results differ",)
    assert "drain -> reset-gpu -> reboot -> field-diag -> rma" in g.remediation


def test_a_check_that_failed_before_and_was_not_retested_fails_the_gate() -> None:
    g = repair.gate([_ok(c) for c in PLANNED], ["bmc.sel"], "r1", PLANNED)
    assert g.verdict == Verdict.FAIL
    assert g.findings == ("bmc.sel failed before and was not re-tested",)


def test_a_suite_without_load_cannot_prove_a_repair() -> None:
    quick = ("hardware.inventory", "health.gpu", "health.xid")
    g = repair.gate([_ok(c) for c in quick], [], None, quick)
    assert g.verdict == Verdict.FAIL and "no loaded check in the suite" in g.summary


def test_retest_checks_are_the_loaded_ones_and_those_that_failed() -> None:
    suite = ("hardware.inventory", "hardware.pcie", "health.gpu", "health.xid", "storage.fio",
             "fabric.nccl_allreduce", "load.burnin", "load.thermal_soak")
    got = repair.retest_checks(suite, {"a": ["hardware.pcie"], "b": ["drift.stack"]})
    assert got == ("hardware.inventory", "hardware.pcie", "health.gpu", "health.xid",
                   "fabric.nccl_allreduce", "load.burnin")


def test_what_failed_before_is_read_from_the_newest_run_without_the_gate(tmp_path: Path) -> None:
    from support.runs import make_run, passing, recorded_results
    results = passing(recorded_results())
    next(r for r in results if r["check"] == "health.xid").update(verdict="FAIL")
    results.append({"check": "repair.retest", "verdict": "FAIL", "summary": "not proven"})
    make_run(tmp_path, {"gpu-07": {"results": results}})
    assert repair.failing_before(tmp_path, "gpu-07") == ("test-run", ["health.xid"])
    assert repair.failing_before(tmp_path, "gpu-99") == (None, [])


class FakeSlurm:
    """scontrol on a launch host: `-o show node` in Slurm's one-line form, `update`."""

    def __init__(self, state: str, reason: str = "", fail: bool = False) -> None:
        self.state, self.reason, self.fail = state, reason, fail
        self.updates: list[str] = []

    def __call__(self, command: str, timeout: float) -> tuple[int | None, str, bool]:
        argv = shlex.split(command)
        if self.fail:
            return 1, "slurm_load_node error: Unable to contact slurm controller", False
        if argv[:3] == ["scontrol", "-o", "show"]:
            tail = f" Reason={self.reason} [root@2026-12-03T06:00:00]" if self.reason else ""
            return 0, (f"NodeName={argv[4]} Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 "
                       f"State={self.state} ThreadsPerCore=2 Partitions=gpu{tail}\n"), False
        if argv[:2] == ["scontrol", "update"]:
            self.updates.append(" ".join(argv[2:]))
            kv = dict(a.split("=", 1) for a in argv[2:])
            if kv["State"] == "RESUME":
                self.state, self.reason = "IDLE", ""
            else:
                self.state, self.reason = "IDLE+DRAIN", kv.get("Reason", "")
            return 0, "", False
        return 127, "unknown", False


def test_a_passing_gate_resumes_only_nodecerts_own_drain() -> None:
    """Ours is a drain whose reason is exactly one nodecert recorded; a reason someone
    else wrote that starts "nodecert:" is theirs (before, any such prefix was ours)."""
    recorded: list[str | None] = []
    ours = FakeSlurm("IDLE+DRAIN", "nodecert: health.xid FAIL")
    assert repair.apply_gate(ours, "gpu07", True, "",
                             ours=frozenset({"nodecert: health.xid FAIL"}),
                             record=recorded.append) == "resumed"
    assert ours.updates == ["NodeName=gpu07 State=RESUME"] and ours.state == "IDLE"
    assert recorded == [None]
    lookalike = FakeSlurm("IDLE+DRAIN", "nodecert: hands off, bad DIMM (ops)")
    assert repair.apply_gate(lookalike, "gpu07", True, "",
                             ours=frozenset({"nodecert: health.xid FAIL"})
                             ).startswith("drained by someone else")
    assert lookalike.updates == []
    site = FakeSlurm("IDLE+DRAIN", "site maintenance: PSU swap")
    assert repair.apply_gate(site, "gpu07", True, "").startswith("drained by someone else")
    assert site.updates == []
    idle = FakeSlurm("IDLE")
    assert repair.apply_gate(idle, "gpu07", True, "") == "not drained: nothing to resume"


def test_a_failing_gate_drains_or_keeps_drained_and_says_why() -> None:
    idle = FakeSlurm("MIXED")
    recorded: list[str | None] = []
    assert repair.apply_gate(idle, "gpu07", False, "load.burnin FAIL: GPU0",
                             record=recorded.append) == "drained"
    assert idle.reason == "nodecert: repair re-test failed: load.burnin FAIL: GPU0"
    assert recorded == [idle.reason]  # recorded before the drain was made
    ours = FakeSlurm("DOWN+DRAIN", "nodecert: health.gpu FAIL")
    assert repair.apply_gate(ours, "gpu07", False, "x",
                             ours=frozenset({"nodecert: health.gpu FAIL"})) == "kept drained"
    assert "left as it is" in repair.apply_gate(
        FakeSlurm("DOWN+DRAIN", "nodecert: health.gpu FAIL"), "gpu07", False, "x")
    site = FakeSlurm("IDLE+DRAIN", "site: RMA pending")
    assert "left as it is" in repair.apply_gate(site, "gpu07", False, "x")
    assert site.updates == []
    with pytest.raises(RuntimeError, match="Unable to contact slurm controller"):
        repair.apply_gate(FakeSlurm("IDLE", fail=True), "gpu07", True, "")


# --- end to end on the emulated fleet ------------------------------------------------------

@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with emulated_fleet(tmp_path_factory.mktemp("repairfleet"), 44, 12, "--weak", "1",
                        "--repaired", "1", "--time-scale", "0.01", "--seed", "5") as work:
        kinds = json.loads((work / "kinds.json").read_text())
        yield {"dir": work, "kinds": kinds, "key": init_key(work / "keys")}


@pytest.mark.integration
def test_slow_nodes_named_in_validate_and_a_reboot_cleared_node_stays_out(
        emulated: dict[str, Any], tmp_path: Path) -> None:
    inv, kinds, kp = emulated["dir"] / "inventory.ini", emulated["kinds"], emulated["key"]
    runs = tmp_path / "runs"
    cli = CliRunner()
    first = cli.invoke(main, ["validate", "-i", str(inv), "--suite", "standard",
                              "--runs-dir", str(runs), "--json"])
    assert first.exit_code == 1, first.output  # the repaired node fails its burn-in
    run1 = json.loads(first.output[first.output.index("{"):])["run_dir"]
    b = tmp_path / "fleet.baseline.json"
    built = cli.invoke(main, ["fleet", "baseline", run1, "--out", str(b), "--key",
                              str(kp.private)])
    assert built.exit_code == 0, built.output
    judged = cli.invoke(main, ["validate", "-i", str(inv), "--suite", "standard",
                               "--runs-dir", str(runs), "--baseline", str(b), "--pubkey",
                               str(kp.public), "--json"])
    summary = json.loads(judged.output[judged.output.index("{"):])
    weak = next(h for h, k in kinds.items() if k == "weak")
    fixed = next(h for h, k in kinds.items() if k == "repaired")
    healthy = sorted(h for h, k in kinds.items() if k == "ok")
    for host in [weak, *healthy]:
        rec = json.loads(Path(summary["hosts"][host]["results"]).read_text())
        peers = next(r for r in rec["results"] if r["check"] == "fleet.peers")
        assert peers["verdict"] == ("FAIL" if host == weak else "PASS"), (host, peers)
        assert rec["verdict"] == ("FAIL" if host == weak else "WARN"), host
    # After a "repair" (the emulated node's reboot cleared nothing it shows at rest),
    # the loaded re-test keeps it out; a healthy node re-tested passes the gate.
    after = cli.invoke(main, ["revalidate", "-i", str(inv), "--after-repair", "--limit",
                              f"{fixed},{healthy[0]}", "--runs-dir", str(runs), "--key",
                              str(kp.private), "--json"])
    assert after.exit_code == 1, after.output
    out = json.loads(after.output[after.output.index("{"):])
    gate = out["repair"]
    assert gate[fixed]["verdict"] == "FAIL"
    assert gate[fixed]["findings"][0].startswith("load.burnin FAIL: emulated fault")
    assert "load.burnin" in gate[fixed]["value"]["failing_before"]
    assert gate[healthy[0]]["verdict"] == "PASS"
    certs = {n["host"]: n for n in out["certificates"]["nodes"]}
    assert certs[fixed]["verdict"] == "NOT READY"
    # a re-test is not an acceptance run: the node passes the gate with a health record
    # that names what the acceptance run it still needs would add
    assert certs[healthy[0]]["verdict"] == "HEALTHY"
    assert "storage" in certs[healthy[0]]["missing"]
    # the re-test ran the loaded checks and not the whole suite
    rec = json.loads((Path(out["run"]) / fixed / "results.json").read_text())
    ran = {r["check"] for r in rec["results"]}
    assert {"load.burnin", "fabric.nccl_allreduce", "health.gpu"} <= ran
    assert "storage.fio" not in ran


def test_a_failure_stays_open_until_a_run_retests_it(tmp_path: Path) -> None:
    """hardware.pcie FAILs; a later partial run passes without re-testing it: the gate
    still asks for it (before, only the newest run counted, and it was forgotten). A run
    that re-tests it and passes closes it; an acceptance certificate starts afresh."""
    import time

    from nodecert.certs.certify import certify
    from nodecert.certs.signing import load_private_key
    from support.runs import make_run, passing, recorded_results
    runs = tmp_path / "runs"
    runs.mkdir()

    def run(rid: str, age_h: float, results: list[dict[str, Any]]) -> Path:
        made = make_run(tmp_path / rid, {"gpu-07": {
            "results": results, "run_id": rid, "started": time.time() - age_h * 3600,
            "finished": time.time() - age_h * 3600 + 100}})
        return made.rename(runs / rid)
    bad = passing(recorded_results())
    next(r for r in bad if r["check"] == "hardware.pcie").update(verdict="FAIL")
    run("r1", 5, bad)
    gpu = [r for r in passing(recorded_results()) if r["check"] == "health.gpu"]
    run("r2", 4, gpu)
    assert repair.failing_before(runs, "gpu-07") == ("r1", ["hardware.pcie"])
    pcie = [r for r in passing(recorded_results()) if r["check"] == "hardware.pcie"]
    run("r3", 3, pcie)
    assert repair.failing_before(runs, "gpu-07") == ("r3", [])
    run("r4", 2, bad)
    assert repair.failing_before(runs, "gpu-07") == ("r4", ["hardware.pcie"])
    key = init_key(tmp_path / "k")
    ready = run("r5", 1, passing(recorded_results(), acceptance=True))
    assert certify(ready, load_private_key(key.private)).all_ready
    assert repair.failing_before(runs, "gpu-07") == ("r5", [])
