"""The CLI contract: exit codes, --json output, help with examples, error text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodecert.cli import main, provision
from support.env import REPO
from support.orders import h200_host
from support.stacks import manifest, write_manifest

SAMPLE = str(REPO / "inventory" / "sample" / "lab.ini")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_stack_list_text_and_json() -> None:
    code, out, _ = run("stack", "list")
    assert code == 0
    assert "r580-cuda13.0" in out and "recommended" in out
    code, out, _ = run("stack", "list", "--json")
    data = json.loads(out)
    assert {d["name"] for d in data} == {"r580-cuda13.0", "r570-cuda12.8", "r550-cuda12.4"}
    r570 = next(d for d in data if d["name"] == "r570-cuda12.8")
    assert r570["components"]["nccl"] == "2.25.1-1+cuda12.8"


def test_stack_show_json_has_exact_pins() -> None:
    code, out, _ = run("stack", "show", "r570-cuda12.8", "--os", "ubuntu-22.04", "--json")
    assert code == 0
    data = json.loads(out)
    pins = {p["name"]: p["version"] for p in data["packages"]["ubuntu-22.04"]}
    assert pins["datacenter-gpu-manager-4-cuda12"] == "1:4.4.2-1"
    assert pins["nvidia-fabricmanager-570"] == "570.211.01-0ubuntu1.22.04.1"
    assert list(data["packages"]) == ["ubuntu-22.04"]


def test_stack_show_text_marks_unconfirmed() -> None:
    code, out, _ = run("stack", "show", "r580-cuda13.0", "--os", "debian-12")
    assert code == 0
    assert out.count("(unconfirmed)") == 9


def test_stack_show_os_not_pinned_is_bad_input() -> None:
    code, _, err = run("stack", "show", "r550-cuda12.4", "--os", "ubuntu-24.04")
    assert code == 2
    assert "pins no packages for ubuntu-24.04" in err


def test_check_pass_or_warn_exits_zero() -> None:
    code, out, _ = run("stack", "check", "r580-cuda13.0", "--gpu", "H200-SXM", "--os",
                       "ubuntu-24.04", "--date", "2026-11-29")
    assert code == 0
    assert "driver.cuda-min" in out and "[S1]" in out
    assert "verdict: WARN" in out
    assert "S1      NVIDIA CUDA Toolkit Release Notes" in out  # sources are spelled out


def test_check_fail_exits_one_and_explains() -> None:
    code, out, _ = run("stack", "check", "r550-cuda12.4", "--gpu", "B200", "--os",
                       "ubuntu-22.04", "--date", "2026-11-29")
    assert code == 1
    assert "B200 (Blackwell) requires the open kernel modules" in out
    assert "verdict: FAIL" in out


def test_check_json() -> None:
    code, out, _ = run("stack", "check", "r550-cuda12.4", "--gpu", "B200", "--json",
                       "--date", "2026-11-29")
    assert code == 1
    data = json.loads(out)
    assert data["verdict"] == "FAIL" and data["gpu"] == "B200"
    failed = {r["rule"] for r in data["results"] if r["verdict"] == "FAIL"}
    assert failed == {"gpu.driver-min", "gpu.kernel-modules"}
    assert all(r["sources"] for r in data["results"] if r["rule"] != "os.supported")


@pytest.mark.parametrize("args", [
    ("stack", "check", "no-such-stack"),
    ("stack", "check", "r580-cuda13.0", "--gpu", "H999"),
    ("stack", "check", "r580-cuda13.0", "--os", "windows"),
    ("stack", "check", "r580-cuda13.0", "--date", "yesterday"),
    ("stack", "show", "nope"),
])
def test_bad_input_exits_two(args: tuple[str, ...]) -> None:
    code, _, err = run(*args)
    assert code == 2
    assert err.strip()


def test_check_a_manifest_file_by_path(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, manifest(driver="570.133.20", cuda="13.0.0",
                                             cudnn="9.17.0.1"))
    code, out, _ = run("stack", "check", str(path))
    assert code == 1
    assert "CUDA 13.0.0 needs driver >= 580.65.06; stack pins 570.133.20" in out


def test_malformed_manifest_names_file_and_field(tmp_path: Path) -> None:
    data = manifest()
    data["components"]["cuda"] = "13"  # type: ignore[index]
    path = write_manifest(tmp_path, data)
    code, _, err = run("stack", "check", str(path))
    assert code == 2
    assert f"{path}:" in err and "components.cuda" in err


def test_help_has_examples_and_exit_codes() -> None:
    for args in (["--help"], ["stack", "--help"], ["stack", "check", "--help"],
                 ["inventory", "check", "--help"], ["provision", "--help"],
                 ["validate", "--help"]):
        code, out, _ = run(*args)
        assert code == 0
        assert "Example" in out or "Exit codes" in out, args
    assert "Exit codes: 0 PASS/WARN, 1 FAIL, 2 bad input" in run("--help")[1]


def test_inventory_check_ok_and_json() -> None:
    code, out, _ = run("inventory", "check", "-i", SAMPLE)
    assert code == 0
    assert "3 host(s) valid, 0 problem(s)" in out
    code, out, _ = run("inventory", "check", "-i", SAMPLE, "--json")
    assert json.loads(out)["hosts"]["gpu-h200-02"]["gpu_count"] == 8


def test_inventory_check_bad_exits_two(tmp_path: Path) -> None:
    inv = tmp_path / "bad.ini"
    inv.write_text("[gpu]\nn1 nodecert_gpu_model=H300\n")
    code, _, err = run("inventory", "check", "-i", str(inv))
    assert code == 2
    assert "unknown GPU model 'H300'" in err


def test_provision_preflight_fail_touches_nothing() -> None:
    code, out, err = run("provision", "-i", SAMPLE, "--stack", "r550-cuda12.4")
    assert code == 1
    assert "os.supported" in out  # r550 pins nothing for ubuntu-24.04 (the sample's OS)
    assert "no host was touched" in err


# Network safety: these tests only exercise paths that end before any SSH
# connection (the sample inventory's hosts are documentation addresses). Real
# provisioning is tested against lab hosts only (tests/test_provision.py).

def test_provision_unknown_limit_host() -> None:
    code, _, err = run("provision", "-i", SAMPLE, "--limit", "gpu-h200-99")
    assert code == 2
    assert "gpu-h200-99" in err


def test_provision_console_script_is_the_same_command() -> None:
    result = CliRunner().invoke(provision, ["-i", SAMPLE, "--stack", "r550-cuda12.4", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["gate_failed"] is True and data["run_dir"] is None
    # The installed `provision` entry point prints its own name in usage.
    exe = Path(sys.executable).parent / "provision"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert out.startswith("Usage: provision ")


@pytest.mark.parametrize(("args", "words"), [
    (("--suite", "huge"), "unknown suite 'huge'"),
    (("--only", "load.burnin"), "check(s) load.burnin are not in suite quick"),
    (("--limit", "gpu-h200-99"), "--limit 'gpu-h200-99' matches no host"),
    (("--threshold", "storage.seq_read_mbps=1"), "unknown threshold 'storage.seq_read_mbps'"),
    (("--threshold", "pcie.gen"), "expected KEY=VALUE"),
])
def test_validate_bad_input_exits_two_before_any_connection(tmp_path: Path,
                                                            args: tuple[str, ...],
                                                            words: str) -> None:
    # The sample's hosts are documentation addresses: every case stops before SSH.
    code, _, err = run("validate", "-i", SAMPLE, "--runs-dir", str(tmp_path / "runs"), *args)
    assert code == 2, err
    assert words in err
    assert not (tmp_path / "runs").exists()


def test_validate_inventory_thresholds_must_be_a_mapping(tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text(f"[gpu]\n{h200_host('n1', '192.0.2.10')}\n[gpu:vars]\n"
                   "nodecert_thresholds=[1, 2]\n"
                   "nodecert_storage_targets=/data/scratch,/data2/scratch\n")
    code, _, err = run("inventory", "check", "-i", str(inv))
    assert code == 2 and "nodecert_thresholds must be a mapping" in err
    inv.write_text(inv.read_text().replace("[1, 2]", "{pcie.gen: 4}"))
    code, out, _ = run("inventory", "check", "-i", str(inv), "--json")
    assert code == 0
    host = json.loads(out)["hosts"]["n1"]
    assert host["validation"] == {"thresholds": {"pcie.gen": 4},
                                  "storage_targets": ["/data/scratch", "/data2/scratch"]}
