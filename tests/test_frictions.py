"""What a new user hits first: the commands as the README and the pages print them."""

from __future__ import annotations

import html
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodecert.cli import main
from nodecert.core.verdict import Verdict
from support.env import REPO
from support.nodeclient import Exited
from support.orders import h200_host


def test_provision_help_and_version() -> None:
    exe = Path(sys.executable).parent / "provision"
    for flag, words in (("-h", "Usage: provision"), ("--version", "provision, version")):
        r = subprocess.run([str(exe), flag], capture_output=True, text=True, timeout=60,
                           check=False)
        assert r.returncode == 0 and words in r.stdout, r.stdout + r.stderr


def test_no_color_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.cli.common import verdict_text
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\x1b[" in verdict_text(Verdict.FAIL)
    monkeypatch.setenv("NO_COLOR", "1")
    assert verdict_text(Verdict.FAIL) == "FAIL "


def test_the_page_prints_a_verify_command_that_works(tmp_path: Path) -> None:
    import datetime as dt

    from nodecert.certs.certify import certify
    from nodecert.certs.signing import init_key, load_private_key
    from support.runs import make_run, passing, recorded_results
    kp = init_key(tmp_path / "keys")
    for simulated in (False, True):
        run = make_run(tmp_path / str(simulated), {"n1": {
            "results": passing(recorded_results()), "simulated": simulated}})
        cr = certify(run, load_private_key(kp.private), now=dt.datetime.now(dt.UTC))
        page = cr.nodes[0].html.read_text()
        cmd = html.unescape(re.search(r'<code id="verify-command">(.*?)</code>', page)
                            .group(1))  # type: ignore[union-attr]
        argv = shlex.split(cmd)
        assert argv[:2] == ["nodecert", "verify"]
        argv[2] = str(cr.nodes[0].envelope)  # run where the page sits
        argv[argv.index("--pubkey") + 1] = str(kp.public)
        r = CliRunner().invoke(main, argv[1:])
        assert r.exit_code == 0, (simulated, r.output)


def test_readme_commands_name_the_venv() -> None:
    """Nothing else puts .venv/bin on PATH: every README block that runs nodecert or
    provision by name either says .venv/bin/ or activates the venv first."""
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    bare = [ln for b in blocks if not b.lstrip().startswith(". .venv/bin/activate")
            for ln in b.splitlines() if re.match(r"^(nodecert|provision)\s", ln.strip())]
    assert bare == []
    assert any(b.lstrip().startswith(". .venv/bin/activate") for b in blocks)


def test_lab_up_reports_the_total_time() -> None:
    from nodecert.cli.lab import lab_timing_line
    line = lab_timing_line({"base_s": 20.0, "mirror_s": 3.2, "hosts_ready_s": 0.8,
                            "total_s": 24.1})
    assert line.startswith("ready in 24.1 s (") and "hosts 0.8 s" in line


def test_certify_prints_json(tmp_path: Path) -> None:
    import json

    from nodecert.certs.signing import init_key
    from support.runs import make_run, passing, recorded_results
    kp = init_key(tmp_path / "keys")
    run = make_run(tmp_path, {"n1": {"results": passing(recorded_results())}})
    r = CliRunner().invoke(main, ["certify", str(run), "--key", str(kp.private), "--json"])
    data = json.loads(r.output)
    assert r.exit_code == 0 and data["all_ready"] is True
    assert data["nodes"][0]["host"] == "n1" and data["nodes"][0]["verdict"] == "READY"
    assert data["not_certified"] == {}


def test_picking_checks_is_only_everywhere_and_check_is_never_a_picker() -> None:
    import click

    from nodecert.cli.provision import provision
    from nodecert.cli.revalidate import revalidate_cmd
    from nodecert.cli.validate import validate_cmd

    def opts(cmd: click.Command) -> dict[str, str]:
        return {o: p.name or "" for p in cmd.params for o in getattr(p, "opts", [])}
    for cmd in (validate_cmd, revalidate_cmd):
        assert opts(cmd).get("--only") == "checks" and "--check" not in opts(cmd)
    assert opts(provision)["--check"] == "check_mode"  # a dry run, as in Ansible


def test_suite_settings_from_the_command_line_reach_the_plan() -> None:
    from nodecert.inventory.reader import load_inventory
    from nodecert.profiles import thresholds
    from nodecert.validation.plan import build_plan
    over = thresholds.parse_suite_settings(("load.burnin_s=300", "load.dtype=fp8",
                                            "storage.size_mb=2048"))
    assert over == {"load": {"burnin_s": 300, "dtype": "fp8"}, "storage": {"size_mb": 2048}}
    spec = next(iter(load_inventory(REPO / "inventory/sample/lab.ini").values()))
    plan = build_plan(spec, thresholds.suite("standard"), None, "r", cli_thresholds={},
                      scratch=None, option_overrides=over)
    assert plan.options["load"]["burnin_s"] == 300 and plan.options["load"]["soak_s"] == 600
    assert plan.options["storage"]["size_mb"] == 2048


@pytest.mark.parametrize(("item", "why"), [
    ("load.burn_s=300", "unknown suite setting 'load.burn_s'"),
    ("load.burnin_s=-5", "positive whole number"),
    ("load.dtype=int4", "must be one of bf16"),
    ("burnin_s", "unknown suite setting"),
])
def test_bad_suite_settings_are_refused_before_anything_runs(item: str, why: str,
                                                             tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["validate", "-i", str(REPO / "inventory/sample/lab.ini"),
                                  "--set", item, "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2 and why in r.output, r.output
    assert not (tmp_path / "runs").exists()


def test_a_gate_model_without_a_profile_is_validated_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from nodecert.inventory.reader import HostSpec
    from nodecert.profiles import thresholds
    # Every model the gate knows has a profile today; a model added to the gate
    # before its profile must still validate (generic checks, a clear WARN).
    monkeypatch.setattr(thresholds, "has_profile", lambda model: model != "B300")
    from nodecert.validation.plan import build_plan
    from nodecert_node.checks.hardware import judge_inventory
    from nodecert_node.contract import Limits
    spec = HostSpec(name="b300-01", address="192.0.2.1", port=22, groups=(),
                    gpu_model="B300", gpu_count=8, cpu_cores=112, ram_gb=2048, nvme_count=0)
    plan = build_plan(spec, thresholds.suite("quick"), None, "r", cli_thresholds={},
                      scratch=None)
    assert plan.spec["threshold_profile"] is None
    gpus = [{"bus_id": f"0000:{i:02x}:00.0", "name": "NVIDIA B300 SXM6 AC",
             "memory_total_mib": 282000, "serial": str(i), "uuid": f"GPU-{i}"}
            for i in range(8)]
    r = judge_inventory({"gpus": gpus, "cpu": {"cores": 112, "model": "x"},
                         "meminfo_total_gb": 2048, "nvme": []}, dict(plan.spec),
                        Limits(plan.thresholds))
    assert r.verdict is Verdict.WARN
    assert "no threshold profile for B300" in r.summary


@pytest.mark.parametrize(("model", "fixture", "count"), [
    ("B200", "b200-8gpu-580.105.08-q-x-v13.xml", 8),
    ("L4", "l4-1gpu-550.90.07-q.txt", 1),
    ("H100-NVL", "h100-nvl-2gpu-550.54.14-q.txt", 2),
    ("GB200", "gb200-4gpu-p6e-arm64-580.173.02-q-x-v13.xml", 4),
])
def test_new_profiles_pass_the_real_gpus_they_were_written_from(model: str, fixture: str,
                                                                count: int) -> None:
    from nodecert.profiles import thresholds
    from nodecert_node.checks.hardware import judge_inventory, judge_pcie
    from nodecert_node.contract import Limits
    from nodecert_node.parse import smi
    text = (REPO / "tests/fixtures/real/nvidia-smi" / fixture).read_text()
    _, gpus = smi.parse_q_xml(text) if fixture.endswith(".xml") else smi.parse_q(text)
    assert len(gpus) == count
    if model == "GB200":
        # Two GPUs to a board, and both report the board's serial (as the real tray does)
        assert [g["serial"] for g in gpus] == ["1650000000001"] * 2 + ["1650000000002"] * 2
    limits = Limits(thresholds.resolve(model))
    facts = {"gpus": gpus, "cpu": {"cores": 64 * count, "model": "x"},
             "meminfo_total_gb": 256 * count, "nvme": [],
             "dmi": {"system_serial": "S1", "system_uuid": "u", "baseboard_serial": "B1"}}
    spec = {"gpu_model": model, "gpu_count": count, "threshold_profile": model}
    r = judge_inventory(facts, spec, limits)
    assert r.verdict is Verdict.PASS, r.findings
    assert judge_pcie(gpus, [], limits).verdict is not Verdict.FAIL
    # and a GPU of another model is caught by the name list
    other = [dict(g, name="NVIDIA H200") for g in gpus]
    assert judge_inventory(dict(facts, gpus=other), spec, limits).verdict is Verdict.FAIL


def test_init_scaffolds_a_site_project_that_checks(tmp_path: Path) -> None:
    import stat

    from nodecert.inventory.reader import check_inventory
    target = tmp_path / "acme"
    r = CliRunner().invoke(main, ["init", str(target)])
    assert r.exit_code == 0, r.output
    assert (target / "inventory" / "hosts.ini").is_file()
    assert (target / "inventory" / "group_vars" / "all" / "nodecert.yml").is_file()
    assert stat.S_IMODE((target / "keys").stat().st_mode) == 0o700
    assert "provision -i inventory" in (target / "README.txt").read_text()
    hosts = (target / "inventory" / "hosts.ini").read_text()
    assert "inventory/sample" not in hosts and "--inventory inventory\n" in hosts
    host_vars = (target / "inventory" / "host_vars" / "gpu-h200-01.yml").read_text()
    assert "nodecert_bmc:" in host_vars and "ansible_become_password: !vault" in host_vars
    assert "host_vars/<host>.yml" in (target / "README.txt").read_text()
    report = check_inventory(target / "inventory")
    assert report.ok and len(report.hosts) == 3, [p.what for p in report.problems]
    # the host's BMC block, uncommented as a user would, is a valid setting
    bmc = host_vars.split("# nodecert_bmc:", 1)[1].split("\n#\n", 1)[0]
    (target / "inventory" / "host_vars" / "gpu-h200-01.yml").write_text(
        "nodecert_bmc:" + bmc.replace("\n# ", "\n") + "\n")
    report = check_inventory(target / "inventory")
    assert report.ok, [p.what for p in report.problems]
    again = CliRunner().invoke(main, ["init", str(target)])
    assert again.exit_code == 2 and "not empty" in again.output


def test_a_sites_own_suite_file(tmp_path: Path) -> None:
    import json

    from nodecert.validation.run import ValidateRequest, open_new_run
    f = tmp_path / "suites.yml"
    f.write_text("schema: nodecert.suites/v1\nsuites:\n  acme-quick:\n"
                 "    description: health only, before racking\n"
                 "    check_timeout_s: 60\n    checks: [health.gpu, health.xid]\n"
                 "    storage: {size_mb: 64}\n")
    run = open_new_run(ValidateRequest(REPO / "inventory/sample/lab.ini", suite="acme-quick",
                       runs_dir=tmp_path / "runs", suite_file=f))
    recorded = json.loads((run.run_dir / "inputs" / "suite.json").read_text())
    assert recorded["name"] == "acme-quick" and recorded["checks"] == ["health.gpu",
                                                                      "health.xid"]
    assert recorded["file"] == str(f)
    assert all(hr.plan.checks == ["health.gpu", "health.xid"] for hr in run.hosts.values())
    bad = tmp_path / "bad.yml"
    bad.write_text("schema: nodecert.suites/v1\nsuites:\n  x:\n    description: d\n"
                   "    check_timeout_s: 60\n    storage: {}\n")
    r = CliRunner().invoke(main, ["validate", "-i", str(REPO / "inventory/sample/lab.ini"),
                                  "--suite-file", str(bad), "--suite", "x",
                                  "--runs-dir", str(tmp_path / "r2")])
    assert r.exit_code == 2 and "has no checks" in r.output, r.output


class _Chan(Exited):
    def __init__(self, data: bytes, rc: int = 0) -> None:
        self.data, self.rc = data, rc

    def exec_command(self, cmd: str) -> None:
        self.cmd = cmd

    def recv(self, n: int) -> bytes:
        out, self.data = self.data, b""
        return out

    def recv_exit_status(self) -> int:
        return self.rc

    def close(self) -> None:
        pass


class _Client:
    def __init__(self, data: bytes, rc: int = 0) -> None:
        self.data, self.rc = data, rc

    def get_transport(self) -> object:
        outer = self

        class T:
            def open_session(self, timeout: float | None = None) -> _Chan:
                return _Chan(outer.data, outer.rc)
        return T()


@pytest.mark.parametrize(("recorded", "rc", "adopted"), [
    (b'{"stack": "r580-cuda13.0", "os": "ubuntu-24.04", "pins": []}', 0, "r580-cuda13.0"),
    (b'{"stack": "no-such-stack"}', 0, None),
    (b"", 1, None),                                   # never provisioned
    (b"\x1b[2Knot json", 0, None),
])
def test_validate_uses_the_stack_a_node_recorded(tmp_path: Path, recorded: bytes, rc: int,
                                                 adopted: str | None) -> None:
    import json

    from nodecert.validation.run import ValidateRequest, open_new_run
    from nodecert.validation.session import SshRunner
    inv = tmp_path / "inv.ini"
    inv.write_text(f"[g]\n{h200_host('gpu-01', '192.0.2.10')}\n")
    run = open_new_run(ValidateRequest(inv, suite="quick", runs_dir=tmp_path / "runs"))
    hr = run.hosts["gpu-01"]
    assert hr.stack is None and not hr.plan.conformance
    ns = SshRunner(run.hosts, run.links, lambda line: None, threading.Event(), (b"", "0" * 64))
    ns._adopt_recorded_stack(hr, _Client(recorded, rc))  # type: ignore[arg-type]
    assert (hr.stack.name if hr.stack else None) == adopted
    plan = json.loads((run.run_dir / "inputs" / "plan-gpu-01.json").read_text())
    if adopted:
        assert plan["conformance"]["stack"] == adopted and hr.plan.conformance["script"]
        assert (run.run_dir / "inputs" / "stack" / f"{adopted}.yml").is_file()
    else:
        assert not plan["conformance"]


@pytest.mark.parametrize("profile", ["b200-hgx-8", "gb200-nvl-4"])
@pytest.mark.integration
def test_blackwell_lab_profiles_validate_and_their_faults_fail(tmp_path: Path,
                                                               profile: str) -> None:
    from support.simnode import SimNode
    node = SimNode(tmp_path / "ok", profile=profile)
    for check in ("hardware.inventory", "hardware.pcie", "hardware.topology", "health.gpu",
                  "health.xid"):
        r = node.check(check)
        assert r.verdict is Verdict.PASS, (check, r.summary)
    if profile == "gb200-nvl-4":  # the Grace host reports itself as aarch64
        inv = node.check("hardware.inventory")
        assert (inv.value["cpu_arch"], inv.value["cpu_cores"]) == ("aarch64", 144)
    down = SimNode(tmp_path / "down", profile=profile,
                   faults=[{"kind": "nvlink_down", "gpu": 3, "links": [7]}])
    r = down.check("hardware.topology")
    assert r.verdict is Verdict.FAIL and "GPU3: NVLink 7 inactive (17 of 18 up)" in r.summary


def test_a_command_that_ends_without_reading_its_input_is_judged_by_its_status() -> None:
    """The install script exits at once when the code is already in place; the channel
    then closes under the bundle being sent ("Socket is closed"): its output and exit
    status decide, the send's failure does not lose the host."""
    from nodecert.transport.ssh import Endpoint
    from nodecert.validation.session import exec_command

    class Closed(_Chan):
        def sendall(self, data: bytes) -> None:
            raise OSError("Socket is closed")

        def shutdown_write(self) -> None:
            raise OSError("Socket is closed")

    class C(_Client):
        def get_transport(self) -> object:
            class T:
                def open_session(self, timeout: float | None = None) -> _Chan:
                    return Closed(b"", 0)
            return T()

    ep = Endpoint("h1", "10.0.0.1", 22, "root", None, (), "python3")
    assert exec_command(C(b""), ep, "install", b"x" * 4096, 10) == (0, "")  # type: ignore[arg-type]
