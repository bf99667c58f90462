"""Outputs users already have: the plain `nvidia-smi` table across driver branches and a
container engine's GPU error, on real outputs (tests/fixtures/real, SOURCES.md) and
generated variants, and through `nodecert parse`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert.cli import main
from nodecert_node.parse import ParseError
from nodecert_node.parse.engine import classify_engine_error
from nodecert_node.parse.smitable import parse_smi_table
from support.env import REPO

pytestmark = pytest.mark.unit
SMI = REPO / "tests" / "fixtures" / "real" / "nvidia-smi"
H100_8 = SMI / "h100-80gb-hbm3-8gpu-550.90.07-default-table.txt"
PROCS = SMI / "h100-80gb-hbm3-1gpu-590.48.01-default-table-3-processes.txt"
MIG = SMI / "h100-80gb-hbm3-mig-590.48.01-default-table-mig-devices.txt"
GEFORCE = SMI / "geforce-truncated-name-525.125.06-default-table-fan-ERR.txt"


def test_r550_eight_gpus() -> None:
    r = parse_smi_table(H100_8.read_text())
    assert (r["smi_version"], r["driver_version"], r["cuda_version"]) == (
        "550.90.07", "550.90.07", "12.4")
    assert [g["bus_id"] for g in r["gpus"]][:3] == ["00000000:19:00.0", "00000000:3B:00.0",
                                                    "00000000:4C:00.0"]
    g5 = r["gpus"][5]
    assert (g5["index"], g5["name"], g5["persistence"], g5["temp_c"], g5["power_w"],
            g5["power_cap_w"], g5["memory_total_mib"], g5["mig_mode"]) == (
        5, "NVIDIA H100 80GB HBM3", "On", 22.0, 74.0, 700.0, 81559.0, "Disabled")
    # A fan the GPU does not have is absent, not 0 %.
    assert g5["fan_pct"] is None and g5["fan_cell"] == "N/A"
    assert r["processes"] == [] and r["complete"] is True


def test_r590_processes_and_mig() -> None:
    r = parse_smi_table(PROCS.read_text())
    assert [(p["pid"], p["name"], p["memory_mib"]) for p in r["processes"]] == [
        (11327, "/root/tools/memhog", 2566.0), (11328, "/root/tools/memhog", 1542.0),
        (11345, "./gpu_burn", 15690.0)]
    assert r["gpus"][0]["util_pct"] == 100.0 and r["gpus"][0]["power_w"] == 629.0
    m = parse_smi_table(MIG.read_text())
    g = m["gpus"][0]
    # In MIG mode the ECC cell says "On" and utilisation "N/A": neither is read as a count.
    assert g["ecc_volatile_uncorrected"] is None and g["ecc_cell"] == "On"
    assert g["util_pct"] is None and g["mig_mode"] == "Enabled"
    assert [(d["gi"], d["device"], d["memory_total_mib"]) for d in m["mig_devices"]] == [
        (2, 0, 40448.0), (3, 1, 20096.0), (9, 2, 9984.0), (10, 3, 9984.0)]


def test_r525_glued_fan_error_and_truncated_name() -> None:
    r = parse_smi_table(GEFORCE.read_text())
    g = r["gpus"][0]
    assert g["fan_pct"] is None and g["fan_cell"] == "ERR!" and g["temp_c"] == 38.0
    assert g["name_truncated"] is True and g["compute_mode"] == "E. Process"
    assert g["perf_state"] == "P5" and g["mig_mode"] is None
    assert r["complete"] is False  # an excerpt without the processes table


def _two_row_layout() -> str:
    """The R525 capture as drivers before R450 print it: no "MIG M." header row and two
    rows per GPU; their processes table has no GI/CI columns."""
    lines = GEFORCE.read_text().splitlines()
    keep = [ln for k, ln in enumerate(lines) if k not in (5, 9)]  # the MIG M. rows
    return "\n".join(keep).replace("525.125.06", "418.87.01").replace(
        "CUDA Version: 12.0", "CUDA Version: 10.1") + "\n\n" + "\n".join([
            "+" + "-" * 77 + "+",
            "| Processes:" + " " * 55 + "GPU Memory |",
            "|  GPU       PID   Type   Process name" + " " * 29 + "Usage      |",
            "|" + "=" * 77 + "|",
            "|    0      1234      C   python" + " " * 38 + "300MiB |",
            "+" + "-" * 77 + "+"]) + "\n"


def test_pre_r450_two_row_layout() -> None:
    text = _two_row_layout()
    assert "MIG M." not in text
    r = parse_smi_table(text)
    assert r["driver_version"] == "418.87.01" and len(r["gpus"]) == 1
    assert r["gpus"][0]["memory_used_mib"] == 2021.0 and r["gpus"][0]["mig_mode"] is None
    assert r["processes"] == [{"gpu": 0, "gi": None, "ci": None, "pid": 1234, "type": "C",
                               "name": "python", "memory_mib": 300.0}]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=6), st.booleans())
def test_cell_padding_does_not_move_values(pad: int, tabs: bool) -> None:
    """Cells are found by their borders: wider or narrower padding (another branch's
    layout) reads the same values."""
    sp = "\t" if tabs else " " * pad

    def widen(line: str) -> str:
        if "==" in line or "--" in line:
            return line  # borders and rules keep their shape
        return re.sub(r"(?<=\S)\|", sp + "|", re.sub(r"\|(?=\S)", "|" + sp, line))
    text = "\n".join(widen(ln) for ln in H100_8.read_text().splitlines())
    assert parse_smi_table(text)["gpus"] == parse_smi_table(H100_8.read_text())["gpus"]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=60))
def test_a_cut_table_is_refused_or_says_incomplete(keep: int) -> None:
    whole = H100_8.read_text().splitlines()
    lines = whole[:keep]
    if keep >= len(whole):
        assert parse_smi_table("\n".join(lines))["complete"] is True
        return
    try:
        r = parse_smi_table("\n".join(lines) + "\n")
    except ParseError as exc:
        said = str(exc)
    else:
        said = ""
    if said:
        assert "nvidia-smi table" in said
        return
    # Cut between whole GPU blocks: readable, but never presented as the whole table.
    assert r["complete"] is False


def test_a_shifted_cell_is_refused() -> None:
    text = H100_8.read_text().replace("|       1MiB /  81559MiB |", "|       1MiB /  81559MiB",
                                      1)
    with pytest.raises(ParseError, match=r"line 10: expected 3 cells"):
        parse_smi_table(text)
    text = H100_8.read_text().replace(" 72W /  700W", " 72W    700W", 1)
    with pytest.raises(ParseError, match="line 10: expected 'fan temp perf power / cap'"):
        parse_smi_table(text)


NVML_LOST = REPO / "tests" / "fixtures" / "real" / "nvidia-container-toolkit" / \
    "k8s-pod-nvidia-smi-L-loop-then-nvml-unknown-error-after-daemon-reload.txt"

# The engines' and the toolkit's own messages, as they print them (NVIDIA Container
# Toolkit troubleshooting guide; Docker's daemon error for --gpus without a GPU driver).
DOCKER_NO_DRIVER = ('docker: Error response from daemon: could not select device driver "" '
                    'with capabilities: [[gpu]].\nRun \'docker run --help\' for more '
                    'information.\n')
HOOK_NO_LIB = ("docker: Error response from daemon: failed to create task for container: "
               "failed to create shim task: OCI runtime create failed: runc create failed: "
               "unable to start container process: error during container init: error "
               "running hook #0: error running hook: exit status 1, stdout: , stderr: "
               "Auto-detected mode as 'legacy'\nnvidia-container-cli: initialization error: "
               "load library failed: libnvidia-ml.so.1: cannot open shared object file: no "
               "such file or directory: unknown.\n")
CDI_MISSING = ("Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all\n")
TOO_OLD = ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, "
           "please update your driver to a newer version, or use an earlier cuda container: "
           "unknown\n")


@pytest.mark.parametrize(("text", "code", "detail"), [
    (DOCKER_NO_DRIVER, "no-gpu-driver-registered", "nvidia-ctk runtime configure"),
    (HOOK_NO_LIB, "driver-library-missing", "Install the NVIDIA driver"),
    (CDI_MISSING, "cdi-spec-missing", "nvidia-ctk cdi generate"),
    (TOO_OLD, "driver-too-old-for-image", "newer driver"),
])
def test_engine_errors_name_cause_and_fix(text: str, code: str, detail: str) -> None:
    got = classify_engine_error(text)
    assert got is not None and got["cause_code"] == code and detail in got["fix"]
    assert got["line"] in text


def test_engine_error_on_a_real_pod_log_and_unknown_text() -> None:
    got = classify_engine_error(NVML_LOST.read_text())
    assert got is not None and got["cause_code"] == "nvml-lost-device-access"
    assert got["line"] == "Failed to initialize NVML: Unknown Error"
    assert classify_engine_error(TOO_OLD)["cause"].endswith("(12.4)")  # type: ignore[index]
    # Text that names no known cause is not classified by a guess.
    assert classify_engine_error("Error: image not known\n") is None


def test_nodecert_parse_table_and_engine_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["parse", "nvidia-smi", str(H100_8)])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["gpus"]) == 8
    err = tmp_path / "docker.txt"
    err.write_text(DOCKER_NO_DRIVER)
    r = CliRunner().invoke(main, ["parse", "container-gpu-error", str(err)])
    assert r.exit_code == 0 and json.loads(r.output)["cause_code"] == "no-gpu-driver-registered"
    r = CliRunner().invoke(main, ["parse", "container-gpu-error", str(H100_8)])
    assert r.exit_code == 2 and "no GPU error this parser knows" in r.output
    r = CliRunner().invoke(main, ["parse", "nvidia-smi", str(NVML_LOST)])
    assert r.exit_code == 2 and "not the nvidia-smi table" in r.output


def test_container_check_names_the_engine_error_cause(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """The container smoke check's message names the cause and the fix of a known engine
    error instead of the last line of the engine's output."""
    from types import SimpleNamespace

    from nodecert_node.checks import container
    from nodecert_node.contract import Evidence
    from nodecert_node.tools import ToolError

    def fails(argv: list[str], **_: object) -> None:
        raise ToolError("podman run nvidia-smi -L exited 125",
                        Evidence.of("podman run", " ".join(argv), 125, DOCKER_NO_DRIVER))
    monkeypatch.setattr(container, "run", fails)
    ctx = SimpleNamespace(plan=SimpleNamespace(check_timeout_s=60))
    inside, error = container._inside(ctx, {"image": "nvcr.io/nvidia/cuda@sha256:ab"}, [])  # type: ignore[arg-type]
    assert inside is None and error is not None
    assert "Docker has no GPU device driver registered" in error
    assert "nvidia-ctk runtime configure --runtime=docker" in error


# --- R610's header: "KMD Version" and "CUDA UMD Version" -------------------------------------

R610 = SMI / "geforce-gtx1650-1gpu-610.57.04-default-table-kmd-version.txt"
WDDM = SMI / "geforce-rtx3050-1gpu-617.14-default-table-kmd-version-wddm.txt"


def test_r610_title_row_reads_as_driver_and_cuda() -> None:
    r = parse_smi_table(R610.read_text())
    assert (r["smi_version"], r["driver_version"], r["cuda_version"]) == (
        "610.57.04", "610.57.04", "13.3")
    g = r["gpus"][0]
    assert (g["name"], g["persistence"], g["memory_total_mib"], g["power_w"]) == (
        "NVIDIA GeForce GTX 1650", "Off", 4096.0, None)


def test_a_windows_table_has_a_driver_model_and_no_mig_row() -> None:
    r = parse_smi_table(WDDM.read_text())
    g = r["gpus"][0]
    assert (r["driver_version"], r["cuda_version"]) == ("617.14", "13.4")
    assert (g["driver_model"], g["persistence"], g["temp_c"], g["fan_pct"]) == (
        "WDDM", None, 40.0, None)
    # a Linux table whose block stops after two rows is still cut short
    cut = R610.read_text().replace(
        "|                                         |                        |"
        "                  N/A |\n", "")
    with pytest.raises(ParseError, match="a GPU block of 2 row"):
        parse_smi_table(cut)


@given(st.sampled_from(["Driver Version", "KMD Version"]),
       st.sampled_from(["CUDA Version", "CUDA UMD Version"]))
def test_every_branchs_header_spelling_reads_alike(driver: str, cuda: str) -> None:
    """The same table, -q and -q -x with either branch's header words give the same reading;
    one header giving a field twice with two values is refused."""
    from nodecert_node.parse import smi
    table = H100_8.read_text()
    variant = table.replace("Driver Version:", f"{driver}:").replace("CUDA Version:",
                                                                     f"{cuda}:")
    assert parse_smi_table(variant)["driver_version"] == \
        parse_smi_table(table)["driver_version"]
    q = (SMI / "h200-1gpu-590.48.01-q-idle.txt").read_text()
    qv = q.replace("Driver Version    ", driver.ljust(len("Driver Version    ")), 1) \
        .replace("CUDA Version      ", cuda.ljust(len("CUDA Version      ")), 1)
    assert smi.parse_q(qv)[0]["Driver Version"] == smi.parse_q(q)[0]["Driver Version"]
    assert smi.parse_q(qv)[0]["CUDA Version"] == smi.parse_q(q)[0]["CUDA Version"]
    xml = (SMI / "b200-8gpu-580.105.08-q-x-v13.xml").read_text()
    tag = {"Driver Version": "driver_version", "KMD Version": "kmd_version"}[driver]
    xv = xml.replace("<driver_version>", f"<{tag}>").replace("</driver_version>", f"</{tag}>")
    assert smi.parse_q_xml(xv)[0]["Driver Version"] == smi.parse_q_xml(xml)[0]["Driver Version"]


def test_a_header_giving_the_driver_twice_is_refused() -> None:
    from nodecert_node.parse import smi
    q = (SMI / "h200-1gpu-590.48.01-q-idle.txt").read_text()
    line = next(ln for ln in q.splitlines() if ln.startswith("Driver Version"))
    twice = q.replace(line, line + "\nKMD Version                               : 610.1.1", 1)
    with pytest.raises(ParseError, match="gives Driver Version twice"):
        smi.parse_q(twice)
    xml = (SMI / "b200-8gpu-580.105.08-q-x-v13.xml").read_text()
    with pytest.raises(ParseError, match="gives Driver Version twice"):
        smi.parse_q_xml(xml.replace("<driver_version>",
                                    "<kmd_version>610.1.1</kmd_version><driver_version>", 1))
