"""Minimum safe versions: the table of security bulletins, the judgement of one version,
the gate refusing a stack below a fixed release (and accepting it only when told, on the
record), and the node check `stack.advisories` gathered on the node and judged here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from nodecert.cli import main
from nodecert.core import checks
from nodecert.core.errors import ManifestError, UnknownNameError, VersionError
from nodecert.core.paths import compat_dir
from nodecert.stack import advisories
from nodecert.stack.advisories import default_advisories, judge, judge_result, upstream
from nodecert.stack.gate import evaluate
from nodecert.stack.manifest import find_stack, list_stacks
from nodecert.stack.versions import DottedVersion, DriverVersion
from nodecert_node.contract import Result, Verdict
from nodecert_node.parse import ParseError
from nodecert_node.parse.system import parse_runc_version
from support.simnode import SimNode

pytestmark = pytest.mark.unit

# `runc --version` as upstream's release binaries and Debian 12's package print it.
RUNC_UPSTREAM = ("runc version 1.1.12\ncommit: v1.1.12-0-g51d5e946\nspec: 1.0.2-dev\n"
                 "go: go1.20.13\nlibseccomp: 2.5.4\n")
RUNC_DEBIAN = ("runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\n"
               "go: go1.19.8\nlibseccomp: 2.5.4\n")


def _verdicts(component: str, version: str, **kw: object) -> dict[str, Verdict]:
    return {f.advisory: f.verdict for f in judge(component, version, **kw)}  # type: ignore[arg-type]


def test_every_advisory_cites_a_known_source_and_the_table_has_a_date() -> None:
    table = default_advisories()
    assert table.as_of and len(table.advisories) >= 10
    assert {a.component for a in table.advisories} == set(advisories.COMPONENTS)
    assert all(a.sources and (a.cves or a.kind == "correctness") for a in table.advisories)
    assert table.not_tabled  # what the table does not cover is said


def test_the_projects_own_stacks_are_never_refused_by_a_bulletin() -> None:
    # the container toolkit at the role's pin, every shipped stack: no FAIL
    for stack in list_stacks():
        rep = evaluate(stack, others={"container_toolkit": "1.17.8-1"})
        sec = [r for r in rep.results if r.rule.startswith("security.advisories")]
        assert {r.rule.split(" (")[0] for r in sec} == {
            "security.advisories[driver]", "security.advisories[container_toolkit]",
            "security.advisories[cublas]"}  # the framework's cuBLAS wheel
        assert all(r.verdict <= Verdict.WARN for r in sec), [r.message for r in sec]
    r580 = evaluate(find_stack("r580-cuda13.0"), others={"container_toolkit": "1.17.8-1"})
    assert all(r.verdict is Verdict.PASS for r in r580.results
               if r.rule.startswith("security.advisories"))


@pytest.mark.parametrize(("component", "version", "advisory", "verdict"), [
    ("driver", "570.124.06", "NVIDIA-DRIVER-2025-04", Verdict.FAIL),   # below its branch's fix
    ("driver", "570.133.07", "NVIDIA-DRIVER-2025-04", Verdict.PASS),   # exactly the fix
    ("driver", "580.173.02", "NVIDIA-DRIVER-2025-07", Verdict.PASS),   # a newer branch
    ("driver", "550.163.01", "NVIDIA-DRIVER-2025-10", Verdict.WARN),   # an unlisted old branch
    ("driver", "570.211.01", "NVIDIA-DRIVER-2026-05", Verdict.WARN),   # between listed ones
    ("driver", "580.126.09", "NVIDIA-DRIVER-2026-05", Verdict.FAIL),
    ("container_toolkit", "1.17.7-1", "NVIDIA-CTK-2025-07", Verdict.FAIL),
    ("container_toolkit", "1.17.8-1", "NVIDIA-CTK-2025-07", Verdict.PASS),
    ("container_toolkit", "1.18.0", "NVIDIA-CTK-2025-07", Verdict.PASS),
    ("runc", "1.1.11", "RUNC-2024-01", Verdict.FAIL),
    ("runc", "1.2.7", "RUNC-2025-11", Verdict.FAIL),
    ("runc", "1.3.3", "RUNC-2025-11", Verdict.PASS),
    ("runc", "1.1.14", "RUNC-2025-11", Verdict.WARN),
    # a correctness advisory: only its affected releases fail
    ("cublas", "13.0.0.19", "NVIDIA-CUBLAS-2026-04", Verdict.PASS),  # before the defect
    ("cublas", "13.4.0", "NVIDIA-CUBLAS-2026-04", Verdict.FAIL),     # CUDA 13.2 Update 1's
    ("cublas", "13.4.0.1", "NVIDIA-CUBLAS-2026-04", Verdict.FAIL),
    ("cublas", "13.4.1", "NVIDIA-CUBLAS-2026-04", Verdict.PASS),     # the patch release
    ("cublas", "13.8.0.4", "NVIDIA-CUBLAS-2026-04", Verdict.PASS),   # CUDA 13.4 Update 1's
])
def test_one_version_against_one_bulletin(component: str, version: str, advisory: str,
                                          verdict: Verdict) -> None:
    assert _verdicts(component, version)[advisory] is verdict


def test_a_failure_names_the_version_the_fix_and_the_cve() -> None:
    f = next(f for f in judge("driver", "570.124.06") if f.advisory == "NVIDIA-DRIVER-2025-04")
    assert f.message.startswith("driver 570.124.06 is below 570.133.07, which fixes "
                                "CVE-2025-23244")


def test_an_accepted_advisory_is_a_warn_that_says_it_was_accepted() -> None:
    got = judge("driver", "570.124.06", allowed=frozenset({"NVIDIA-DRIVER-2025-04"}))
    f = next(f for f in got if f.advisory == "NVIDIA-DRIVER-2025-04")
    assert f.verdict is Verdict.WARN and "accepted by the site" in f.message
    # the others are still failures
    assert any(g.verdict is Verdict.FAIL for g in got)


@pytest.mark.parametrize(("text", "want"), [
    ("1:4.4.2-1", "4.4.2"), ("580.173.02-0ubuntu0.24.04.1", "580.173.02"),
    ("1.17.8-1", "1.17.8"), ("1.3.3", "1.3.3")])
def test_upstream_release_of_a_package_version(text: str, want: str) -> None:
    assert upstream(text) == want


@pytest.mark.parametrize("text", ["1.1.5+ds1", "1.4.0-rc.3", "", "latest"])
def test_what_is_no_upstream_release_is_refused(text: str) -> None:
    with pytest.raises(VersionError):
        upstream(text)


# --- the gate -------------------------------------------------------------------------------

def test_the_gate_refuses_a_stack_below_a_fixed_release_and_accepts_it_on_the_record() -> None:
    stack = dataclasses.replace(find_stack("r570-cuda12.8"),
                                driver=DriverVersion.parse("570.124.06"))
    rep = evaluate(stack)
    rule = next(r for r in rep.results if r.rule == "security.advisories[driver]")
    assert rep.verdict is Verdict.FAIL and rule.verdict is Verdict.FAIL
    assert "570.124.06 is below 570.133.07" in rule.message and "SB5630" in rule.sources
    ids = frozenset({"NVIDIA-DRIVER-2025-04", "NVIDIA-DRIVER-2025-07", "NVIDIA-DRIVER-2025-10",
                     "NVIDIA-DRIVER-2026-01"})
    accepted = evaluate(stack, allow_advisories=ids)
    rule = next(r for r in accepted.results if r.rule == "security.advisories[driver]")
    assert rule.verdict is Verdict.WARN and rule.message.count("accepted by the site") == 4
    # (the driver no longer equals the stack's Fabric Manager and IMEX: those still fail)
    assert [r["rule"] for r in accepted.as_dict()["results"]  # type: ignore[attr-defined]
            if r["verdict"] == "FAIL"] == ["fabric-manager.version", "imex.version"]


def test_the_gate_judges_what_the_roles_install_beside_the_stack() -> None:
    rep = evaluate(find_stack("r580-cuda13.0"), others={"container_toolkit": "1.17.3-1"})
    rule = next(r for r in rep.results if r.rule == "security.advisories[container_toolkit]")
    assert rule.verdict is Verdict.FAIL and "below 1.17.4" in rule.message


def test_the_gate_refuses_cuda_13_2_update_1_for_its_cublas_unless_accepted() -> None:
    base = find_stack("r580-cuda13.0")
    stack = dataclasses.replace(base, cuda=DottedVersion.parse("13.2.1"))
    rep = evaluate(stack)
    rule = next(r for r in rep.results
                if r.rule == "security.advisories[cublas] (CUDA 13.2.1)")
    assert rep.verdict is Verdict.FAIL and rule.verdict is Verdict.FAIL
    assert rule.message.startswith("cublas 13.4.0 is below 13.4.1, which fixes a "
                                   "correctness defect (NVIDIA-CUBLAS-2026-04: "
                                   "cublasLtMatmul() ignored the tensor-wide scale of NVFP4")
    assert set(rule.sources) == {"CUDA1321", "CUBLAS1322"}
    accepted = evaluate(stack, allow_advisories=frozenset({"NVIDIA-CUBLAS-2026-04"}))
    rule = next(r for r in accepted.results if r.rule.startswith("security.advisories[cublas]"
                                                                  " (CUDA"))
    assert rule.verdict is Verdict.WARN and "accepted by the site" in rule.message
    # the framework's own wheel is judged too: PyTorch brings its cuBLAS
    hashes = {("nvidia-cublas==13.4.0.1" if k.startswith("nvidia-cublas==") else k): v
              for k, v in base.framework.hashes.items()}
    wheel = dataclasses.replace(base, framework=dataclasses.replace(base.framework,
                                                                   hashes=hashes))
    rule = next(r for r in evaluate(wheel).results
                if r.rule == "security.advisories[cublas] (the framework's nvidia-cublas)")
    assert rule.verdict is Verdict.FAIL and "cublas 13.4.0.1 is below 13.4.1" in rule.message
    # a toolkit the table says nothing of adds no cuBLAS of its own
    assert not any("(CUDA" in r.rule for r in evaluate(base).results)


def test_an_unknown_accepted_advisory_is_bad_input() -> None:
    with pytest.raises(UnknownNameError, match="NOPE"):
        evaluate(find_stack("r580-cuda13.0"), allow_advisories=frozenset({"NOPE"}))


def test_cli_stack_check_with_a_vulnerable_toolkit_exits_1_and_0_once_accepted() -> None:
    r = CliRunner().invoke(main, ["stack", "check", "r580-cuda13.0",
                                  "--with", "container_toolkit=1.17.3-1", "--json"])
    assert r.exit_code == 1, r.output
    assert json.loads(r.output)["verdict"] == "FAIL"
    r = CliRunner().invoke(main, ["stack", "check", "r580-cuda13.0",
                                  "--with", "container_toolkit=1.17.3-1",
                                  "--allow-advisory", "NVIDIA-CTK-2025-02",
                                  "--allow-advisory", "NVIDIA-CTK-2025-07"])
    assert r.exit_code == 0, r.output
    assert "accepted by the site (--allow-advisory NVIDIA-CTK-2025-07)" in r.output
    r = CliRunner().invoke(main, ["stack", "check", "r580-cuda13.0", "--with", "runc"])
    assert r.exit_code == 2 and "COMPONENT=VERSION" in r.output


def test_cli_lists_the_bulletins_with_their_sources() -> None:
    r = CliRunner().invoke(main, ["stack", "advisories", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    ctk = next(a for a in doc["advisories"] if a["id"] == "NVIDIA-CTK-2025-07")
    assert ctk["fixed"] == ["1.17.8"] and ctk["sources"][0]["url"].startswith("https://")
    assert doc["not_tabled"][0]["cves"] == ["CVE-2026-24260"]


# --- the table's loader ---------------------------------------------------------------------

def _table(tmp_path: Path, advisory: str) -> Path:
    (tmp_path / "sources.yml").write_text((compat_dir() / "sources.yml").read_text())
    path = tmp_path / "advisories.yml"
    path.write_text(f'schema: nodecert.advisories/v1\nas_of: "2026-11-30"\nadvisories:\n'
                    f"{advisory}")
    return path


@pytest.mark.parametrize(("advisory", "words"), [
    ("  - {id: X, component: driver, cves: [C], summary: s, line: branch, "
     "fixed: ['570.1', '570.2'], source: [FC1731]}\n", "one fixed release per branch line"),
    ("  - {id: X, component: driver, cves: [C], summary: s, line: branch, "
     "fixed: ['570.1'], source: [NOWHERE]}\n", "NOWHERE"),
    ("  - {id: X, component: kernel, cves: [C], summary: s, line: all, "
     "fixed: ['6.1'], source: [FC1731]}\n", "kernel"),
    ("  - {id: X, component: runc, cves: [C], summary: s, line: all, "
     "fixed: ['1.2.x'], source: [FC1731]}\n", "1.2.x"),
    ("  - {id: X, component: runc, cves: [], summary: s, line: all, "
     "fixed: ['1.2.1'], source: [FC1731]}\n", "a security advisory names its CVEs"),
    ("  - {id: X, component: cublas, kind: cosmetic, cves: [], summary: s, line: all, "
     "fixed: ['13.4.1'], source: [CUDA1321]}\n", "cosmetic"),
    ("  - {id: X, component: cublas, kind: correctness, cves: [], summary: s, line: all, "
     "introduced: '13.x', fixed: ['13.4.1'], source: [CUDA1321]}\n", "13.x"),
    ("  - {id: X, component: cublas, kind: correctness, cves: [], summary: s, line: all, "
     "fixed: ['13.4.1'], source: [CUDA1321]}\nbundled:\n"
     "  - {cuda: '13.2.1', cublas: '13.4.0', runc: '1.2', source: [CUDA1321]}\n",
     "name one library"),
])
def test_a_broken_table_is_refused_naming_the_file(tmp_path: Path, advisory: str,
                                                    words: str) -> None:
    path = _table(tmp_path, advisory)
    with pytest.raises(ManifestError) as exc:
        advisories.load_advisories(path)
    assert words in str(exc.value) and "advisories.yml" in str(exc.value.where or exc.value)


# --- the node check, judged on the control side ---------------------------------------------

def _gathered(installed: dict[str, object]) -> Result:
    return Result("stack.advisories", Verdict.ERROR, "gathered; awaiting the control-side judge",
                  facts={"installed": installed}, fault_code="NC-NOT-JUDGED")


def test_a_node_at_the_fixed_releases_passes_and_a_distro_runc_is_said_not_judged() -> None:
    res = judge_result(_gathered({"driver": "580.173.02", "container_toolkit": "1.17.8-1",
                                  "runc": parse_runc_version(RUNC_DEBIAN)}))
    assert res.verdict is Verdict.PASS, res.summary
    assert "clear of" in res.summary and "runc 1.1.5+ds1 is a distribution build" in res.summary
    assert res.facts["not_judged"] and res.value == {"judged": 8, "below": 0}


def test_a_node_that_fell_below_a_fixed_release_fails_naming_it() -> None:
    res = judge_result(_gathered({"driver": "580.126.09", "container_toolkit": None,
                                  "runc": parse_runc_version(RUNC_UPSTREAM)}))
    assert res.verdict is Verdict.FAIL and res.fault_code == "NC-ADVISORY"
    assert res.summary.startswith("driver 580.126.09 is below 580.159.03")
    assert any("RUNC-2025-11" in f for f in res.findings)  # runc 1.1.12: no fix on its line
    accepted = checks.judge(_gathered({"driver": "580.126.09"}), checks.JudgeContext(
        "h1", None, {"allow_advisories": ["NVIDIA-DRIVER-2026-05"]}))
    assert accepted.verdict is Verdict.WARN
    assert accepted.facts["accepted"] == ["NVIDIA-DRIVER-2026-05"]


def test_a_node_that_reported_nothing_is_an_error_never_a_pass() -> None:
    bare = Result("stack.advisories", Verdict.PASS, "emulated")
    assert judge_result(bare).verdict is Verdict.ERROR
    no_driver = judge_result(_gathered({"driver": None}))
    assert no_driver.verdict is Verdict.ERROR and "not read" in no_driver.summary
    failed = Result("stack.advisories", Verdict.ERROR, "nvidia-smi is not installed",
                    fault_code="NC-TOOL-FAILED")
    assert judge_result(failed) is failed


@given(st.lists(st.sampled_from(["spec: 1.0.2-dev", "go: go1.22.1", "libseccomp: 2.5.5",
                                 "", "  ", "commit: v1.3.3-0-gd842d771"]), max_size=5))
def test_runc_version_parses_whatever_lines_follow(extra: list[str]) -> None:
    got = parse_runc_version("\n".join(["runc version 1.3.3", *extra]))
    assert got["version"] == "1.3.3"


def test_runc_version_without_a_version_line_is_refused() -> None:
    with pytest.raises(ParseError):
        parse_runc_version("runc: command failed\n")


def _fake(node: SimNode, name: str, script: str) -> None:
    path = node.bin / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_the_node_gathers_the_versions_from_the_real_tools_formats(tmp_path: Path) -> None:
    node = SimNode(tmp_path, "h200-sxm-8")
    _fake(node, "runc", f"cat <<'EOF'\n{RUNC_UPSTREAM}EOF\n")
    _fake(node, "dpkg-query", "printf '1.17.7-1\\tii '\n")
    res = node.check("stack.advisories")
    assert res.fault_code == "NC-NOT-JUDGED"  # never a verdict of its own
    got = res.facts["installed"]
    assert got == {"driver": "580.173.02", "container_toolkit": "1.17.7-1",
                   "runc": {"version": "1.1.12", "commit": "v1.1.12-0-g51d5e946"}}
    judged = judge_result(res)
    assert judged.verdict is Verdict.FAIL and "container_toolkit 1.17.7 is below 1.17.8" \
        in judged.summary


def test_a_toolkit_known_to_dpkg_but_not_installed_is_not_judged(tmp_path: Path) -> None:
    node = SimNode(tmp_path, "h200-sxm-8")
    _fake(node, "runc", f"cat <<'EOF'\n{RUNC_DEBIAN}EOF\n")
    _fake(node, "dpkg-query", "printf '1.17.7-1\\tun '\n")  # removed, config kept
    res = node.check("stack.advisories")
    assert res.facts["installed"]["container_toolkit"] is None
    assert judge_result(res).verdict is Verdict.PASS


def test_a_runc_that_fails_is_an_error_not_a_clean_node(tmp_path: Path) -> None:
    node = SimNode(tmp_path, "h200-sxm-8")
    _fake(node, "runc", "echo 'runc: cannot exec' >&2; exit 2\n")
    res = node.check("stack.advisories")
    assert res.verdict is Verdict.ERROR and res.fault_code != "NC-NOT-JUDGED"
    assert judge_result(res) is res
