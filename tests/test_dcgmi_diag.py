"""dcgmi diag on real-world variants: DCGM 3 and 4 tables, wrapped message cells, a table
cut short, `-j` JSON (dcgm.diag)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecert_node.checks.dcgm import judge_dcgm
from nodecert_node.contract import Verdict
from nodecert_node.parse import ParseError, dcgmi
from support.env import REPO

REAL = REPO / "tests" / "fixtures" / "real" / "dcgmi"


def real(name: str) -> str:
    return (REAL / name).read_text()


@pytest.mark.parametrize(("name", "tests", "verdict"), [
    ("a100-sxm4-80gb-p4de-8gpu-diag-r2-pass.txt",
     ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
      "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
      "Graphics Processes", "Inforom", "PCIe", "GPU Memory"], Verdict.PASS),
    ("a10g-1gpu-dcgm-4.4.2-diag-r2-pass-new-layout.txt", ["software", "memory", "pcie"],
     Verdict.PASS),
    ("b200-8gpu-dcgm-4.4.1-diag-r2-pcie-fail-child-output-unparsable.txt",
     ["software", "memory", "pcie"], Verdict.FAIL),
    ("l40s-4gpu-dcgm-4.2.3-diag-pcie-fail-internal-error-TRUNCATED.txt",
     ["software", "memory", "pcie"], Verdict.FAIL),
])
def test_real_tables(name: str, tests: list[str], verdict: Verdict) -> None:
    parsed = dcgmi.parse_dcgmi_diag(real(name))
    assert list(parsed["tests"]) == tests  # no test made of a Warning row or a wrap
    assert judge_dcgm(parsed, 2).verdict is verdict


def test_dcgm4_test_level_fail_wins_over_per_gpu_pass() -> None:
    parsed = dcgmi.parse_dcgmi_diag(real(
        "b200-8gpu-dcgm-4.4.1-diag-r2-pcie-fail-child-output-unparsable.txt"))
    assert parsed["gpus"]["pcie"] == dict.fromkeys(range(8), "Pass")
    (msg,) = parsed["details"]["pcie"]
    # the wrapped cell is one message again, its mid-word breaks undone
    assert "Syntax error: value, object or array expected" in msg
    assert msg.endswith("Reset GPU. Restart DCGM. Rerun diagnostics.")
    r = judge_dcgm(parsed, 2)
    assert r.summary.startswith("DCGM pcie: Fail -- Warning: There was an internal error")
    assert parsed["meta"]["DCGM Version"] == "4.4.1"


def test_truncated_table_keeps_its_failure_and_a_cut_pass_is_an_error() -> None:
    text = real("l40s-4gpu-dcgm-4.2.3-diag-pcie-fail-internal-error-TRUNCATED.txt")
    parsed = dcgmi.parse_dcgmi_diag(text)
    assert not parsed["complete"] and len(parsed["details"]["pcie"]) == 4
    passing = real("a10g-1gpu-dcgm-4.4.2-diag-r2-pass-new-layout.txt")
    cut = passing[:passing.rindex("+---")]
    r = judge_dcgm(dcgmi.parse_dcgmi_diag(cut), 2)
    assert r.verdict is Verdict.ERROR and "cut short" in r.summary
    assert judge_dcgm(dcgmi.parse_dcgmi_diag(passing), 2).verdict is Verdict.PASS


def test_old_layout_warning_rows_are_messages_of_the_test_above() -> None:
    table = "\n".join([
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        "+-----  Hardware  ----------+------------------------------------------------+",
        "| GPU Memory                | Fail - GPU: 3                                  |",
        "| Warning                   | GPU 3 Error using CUDA API cudaMalloc Check DC |",
        "|                           | GM and system logs for errors.                 |",
        "| Info                      | GPU 3 allocated 95% of memory                  |",
        "+---------------------------+------------------------------------------------+"])
    parsed = dcgmi.parse_dcgmi_diag(table)
    assert list(parsed["tests"]) == ["GPU Memory"]
    assert parsed["details"]["GPU Memory"] == [
        "Warning: GPU 3 Error using CUDA API cudaMalloc Check DCGM and system logs for "
        "errors.", "Info: GPU 3 allocated 95% of memory"]
    assert judge_dcgm(parsed, 2).verdict is Verdict.FAIL


def test_message_row_before_any_test_is_refused() -> None:
    with pytest.raises(ParseError, match="'Warning' row before any test"):
        dcgmi.parse_dcgmi_diag("| Warning                   | stray |\n")


# --- -j JSON ----------------------------------------------------------------------------

DCGM4_JSON = {
    "DCGM Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [
            {"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0,
                                               "status": "Pass"}],
             "test_summary": {"status": "Pass"}}]},
        {"category": "Integration", "tests": [
            {"name": "pcie", "results": [
                {"entity_group": "GPU", "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_id": 1, "status": "Fail",
                 "warnings": [{"warning": "GPU 1 PCIe replay rate exceeded", "error_id": 8}]}],
             "test_summary": {"status": "Fail"}}]}]},
    "metadata": {"DCGM Version": "4.4.1", "Driver Version Detected": "580.105.08"}}
DCGM3_JSON = {"DCGM GPU Diagnostic": {"test_categories": [
    {"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [{"gpu_ids": "0", "status": "Pass"},
                                           {"gpu_ids": "1", "status": "Skip"}]}]}],
    "version": "3.3.3"}}


def test_json_dcgm4_and_dcgm3() -> None:
    p4 = dcgmi.parse_dcgmi_diag(json.dumps(DCGM4_JSON, indent=2))
    assert p4["format"] == "json" and p4["tests"] == {"software": "Pass", "pcie": "Fail"}
    assert p4["gpus"]["pcie"] == {0: "Pass", 1: "Fail"}
    r = judge_dcgm(p4, 2)
    assert r.verdict is Verdict.FAIL and "GPU 1 failed" in r.summary
    assert "PCIe replay rate" in r.summary
    p3 = dcgmi.parse_dcgmi_diag(json.dumps(DCGM3_JSON))
    assert p3["tests"] == {"GPU Memory": "Pass"} and p3["meta"]["DCGM Version"] == "3.3.3"
    # GPU 1 skipped its memory test, and no PCIe test is reported: not measured
    r3 = judge_dcgm(p3, 2)
    assert r3.verdict is Verdict.WARN
    assert "GPU Memory skipped on GPU 1" in r3.summary and "pcie not reported" in r3.summary


@pytest.mark.parametrize("bad", ['{"DCGM Diagnostic": {"test_categories": [', '{"x": 1}',
                                 '{"DCGM Diagnostic": {"test_categories": [{"tests": '
                                 '[{"name": "pcie", "results": []}]}]}}'])
def test_json_cut_or_foreign_is_refused(bad: str) -> None:
    with pytest.raises(ParseError):
        dcgmi.parse_dcgmi_diag(bad)


# --- property-based: wrap the messages at other widths, add rows, cut ------------------

FAIL_TABLE = real("b200-8gpu-dcgm-4.4.1-diag-r2-pcie-fail-child-output-unparsable.txt")


def _rewrap(text: str, width: int) -> str:
    """The same table with every message re-wrapped at `width` (as another DCGM would)."""
    msg = dcgmi.parse_dcgmi_diag(text)["details"]["pcie"][0].split(": ", 1)[1]
    chunks = [msg[i:i + width] for i in range(0, len(msg), width)]
    rows = [f"| {'Warning' if k == 0 else '':<25} | {c:<{width}}   |"
            for k, c in enumerate(chunks)]
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| Warning"))
    end = next(i for i in range(start + 1, len(lines)) if "GPU0:" in lines[i])
    return "\n".join(lines[:start] + rows + lines[end:])


@settings(max_examples=40, deadline=None)
@given(width=st.integers(min_value=12, max_value=60))
def test_property_rewrapped_messages_read_the_same(width: int) -> None:
    parsed = dcgmi.parse_dcgmi_diag(_rewrap(FAIL_TABLE, width))
    assert list(parsed["tests"]) == ["software", "memory", "pcie"]
    (msg,) = parsed["details"]["pcie"]
    assert re.sub(r"\s+", "", msg) == re.sub(r"\s+", "", dcgmi.parse_dcgmi_diag(
        FAIL_TABLE)["details"]["pcie"][0])
    assert judge_dcgm(parsed, 2).verdict is Verdict.FAIL


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=1, max_value=len(FAIL_TABLE.splitlines())))
def test_property_cut_table_never_passes(cut: int) -> None:
    text = "\n".join(FAIL_TABLE.splitlines()[:cut])
    try:
        parsed = dcgmi.parse_dcgmi_diag(text)
    except ParseError:
        return
    assert set(parsed["tests"]) <= {"software", "memory", "pcie"}
    assert judge_dcgm(parsed, 2).verdict is not Verdict.PASS


# --- skipped is not passed ----------------------------------------------------------------

PASS_DCGM4 = real("a10g-1gpu-dcgm-4.4.2-diag-r2-pass-new-layout.txt")
SKIP_REASON = "Cannot run test: GPU0 is in use by another process"


def _skip(text: str, tests: set[str], reason: str = SKIP_REASON) -> str:
    """The real DCGM 4 table with `tests` skipped (test row and GPU row), an Info row
    with DCGM's reason under each."""
    out, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^\| (\w+)\s+\| Pass", line)
        if m:
            cur = m.group(1)
        if cur in tests and "Pass" in line:
            out.append(line.replace("Pass", "Skip"))
            if "GPU0" in line:
                out.append(f"| {'Info':<25} | {reason:<46} |")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_run_where_only_the_software_test_ran_is_not_a_pass() -> None:
    parsed = dcgmi.parse_dcgmi_diag(_skip(PASS_DCGM4, {"memory", "pcie"}))
    assert parsed["tests"] == {"software": "Pass", "memory": "Skip", "pcie": "Skip"}
    r = judge_dcgm(parsed, 2)
    assert r.verdict is Verdict.WARN and r.fault_code == "NC-DCGM-NOT-MEASURED"
    assert "not measured: memory skipped" in r.summary and "pcie skipped" in r.summary
    assert SKIP_REASON in r.summary  # DCGM's own reason, named
    assert r.value["passed"] == 1 and "tests passed" not in r.summary
    assert judge_dcgm(parsed, 2, skipped="error").verdict is Verdict.ERROR
    assert judge_dcgm(dcgmi.parse_dcgmi_diag(PASS_DCGM4), 2).verdict is Verdict.PASS


def test_planned_tests_that_are_not_reported_were_not_measured() -> None:
    only_software = "\n".join(PASS_DCGM4.splitlines()[:12] + PASS_DCGM4.splitlines()[-1:])
    parsed = dcgmi.parse_dcgmi_diag(only_software)
    assert parsed["tests"] == {"software": "Pass"} and parsed["complete"]
    r = judge_dcgm(parsed, 2)
    assert r.verdict is Verdict.WARN
    assert "memory not reported (planned at -r 2)" in r.summary
    assert judge_dcgm(parsed, 1).verdict is Verdict.PASS  # -r 1 plans no more
    # DCGM 3's names for the same tests count as reported
    dcgm3 = dcgmi.parse_dcgmi_diag(real("a100-sxm4-80gb-p4de-8gpu-diag-r2-pass.txt"))
    assert judge_dcgm(dcgm3, 2).verdict is Verdict.PASS


@settings(max_examples=40, deadline=None)
@given(skipped=st.sets(st.sampled_from(["software", "memory", "pcie"]), min_size=1),
       reason=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                      min_size=1, max_size=40).map(str.strip).filter(bool))
def test_property_any_skipped_test_is_named_never_passed(skipped: set[str],
                                                         reason: str) -> None:
    parsed = dcgmi.parse_dcgmi_diag(_skip(PASS_DCGM4, skipped, reason.replace("|", "/")))
    r = judge_dcgm(parsed, 2)
    assert r.verdict is Verdict.WARN
    for t in skipped:
        assert f"{t} skipped" in r.summary
    assert r.value["passed"] == 3 - len(skipped)
