"""dcgm.diag: NVIDIA DCGM's own diagnostic (dcgmi diag -r LEVEL), judged per test."""

from __future__ import annotations

from typing import Any

from nodecert_node.context import Ctx, judge_findings
from nodecert_node.contract import Result, Verdict
from nodecert_node.parse import ParseError, dcgmi
from nodecert_node.registry import check
from nodecert_node.tools import run


def _status(text: str) -> str:
    low = text.strip().lower()
    for word in ("fail", "warn", "skip", "pass"):
        if low.startswith(word):
            return word
    return "unknown"  # "Not run", an error text: never counted as a pass


# The tests a run level plans beyond the deployment (software) tests, by their DCGM 3
# and DCGM 4 names (spaces, case and underscores ignored): a level-2 run that reports
# no PCIe or memory test did not measure them. Higher levels' stress tests go by other
# names across DCGM releases; a row of theirs that says Skip is caught all the same.
PLANNED = {2: {"pcie": ("pcie",), "memory": ("memory", "gpumemory")}}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def planned_absent(tests: dict[str, str], level: int) -> list[str]:
    """The tests this level plans that the output does not list at all."""
    have = {_key(t.split(" (")[0]) for t in tests}
    plan: dict[str, tuple[str, ...]] = {}
    for lv, names in PLANNED.items():
        if level >= lv:
            plan.update(names)
    return [name for name, aliases in sorted(plan.items()) if not have & set(aliases)]


def judge_dcgm(parsed: dict[str, Any], level: int, *, skipped: str = "warn") -> Result:
    """The test-level result wins; a per-GPU failure fails too (named by GPU); a table cut
    short without a failure in it is an ERROR, never a pass. A test DCGM skipped (as a
    whole or on some GPUs), or one the level plans that is not reported, was not measured:
    WARN naming it and DCGM's reason (ERROR when the suite says `dcgm_skipped: error`),
    never counted as passed."""
    fails: list[str] = []
    warns: list[str] = []
    unmeasured: list[str] = []
    passed = 0
    for t, r in parsed["tests"].items():
        st = _status(r)
        per = parsed.get("gpus", {}).get(t, {})
        bad = sorted(g for g, v in per.items() if _status(v) == "fail")
        skipped_gpus = sorted(g for g, v in per.items() if _status(v) == "skip")
        detail = "; ".join(parsed.get("details", {}).get(t, []))[:400]
        msg = f"DCGM {t}: {r}" + (f" (GPU {', '.join(map(str, bad))} failed)" if bad else "") \
            + (f" -- {detail}" if detail else "")
        if st == "fail" or bad:
            fails.append(msg)
        elif st == "skip" or (skipped_gpus and st == "pass"):
            where = "" if st == "skip" else f" on GPU {', '.join(map(str, skipped_gpus))}"
            unmeasured.append(f"{t} skipped{where}" + (f" ({detail})" if detail else
                                                         " (DCGM gave no reason)"))
        elif st in ("warn", "unknown"):
            warns.append(msg)
        elif st == "pass":
            passed += 1
    absent = planned_absent(parsed["tests"], level)
    unmeasured += [f"{name} not reported (planned at -r {level})" for name in absent]
    version = parsed["meta"].get("DCGM Version", "?")
    if unmeasured:
        warns.insert(0, f"dcgmi diag -r {level}: not measured: {'; '.join(unmeasured)}")
    res = judge_findings(
        "dcgm.diag", fails, warns, f"dcgmi diag -r {level}: {passed} tests passed "
        f"(DCGM {version})",
        value={"level": level, "tests": parsed["tests"], "meta": parsed["meta"],
               "gpus": {t: {str(g): v for g, v in per.items()}
                        for t, per in parsed.get("gpus", {}).items() if per},
               "passed": passed, "not_measured": unmeasured},
        fault_code="NC-DCGM" if fails else "NC-DCGM-NOT-MEASURED" if unmeasured else "",
        remediation="Read the failing DCGM test's details in the evidence; DCGM's guidance "
                    "for hardware failures is to reset, re-run, then RMA." if fails else
                    "Find why DCGM skipped the test (its reason is in the summary: a GPU "
                    "in use, a missing plugin, a MIG or vGPU mode) and re-run the "
                    "diagnostic." if unmeasured else "")
    if not fails and not parsed.get("complete", True):
        return res.with_(verdict=Verdict.ERROR, fault_code="NC-DCGM",
                         summary="dcgmi diag output is cut short (no closing border): the "
                                 "tests after the cut are unknown; re-run the diagnostic")
    if not fails and unmeasured and skipped == "error":
        return res.with_(verdict=Verdict.ERROR)
    return res


@check("dcgm.diag", order=60, suites=("standard", "full", "lab"),
       tools=("dcgmi",),
       description="NVIDIA DCGM's diagnostic at the suite's level")
def dcgm_diag(ctx: Ctx) -> Result:
    level = int((ctx.options.get("fabric") or {}).get("dcgm_level", 1))
    # JSON (-j) where the installed DCGM has it: no table layout to guess at
    timeout = float((ctx.options.get("fabric") or {}).get("dcgm_timeout_s", 1800))
    out = run(["dcgmi", "diag", "-r", str(level), "-j"], name="dcgmi diag", timeout=timeout,
              ok_codes=range(0, 256))
    try:
        parsed = dcgmi.parse_dcgmi_diag(out.text)
    except ParseError:
        if out.text.lstrip().startswith("{"):
            raise  # JSON that does not read: not a reason to run the diagnostic twice
        # a DCGM without -j prints its usage: ask for the table
        out = run(["dcgmi", "diag", "-r", str(level)], name="dcgmi diag", timeout=timeout,
                  ok_codes=range(0, 256))
        parsed = dcgmi.parse_dcgmi_diag(out.text)
    res = judge_dcgm(parsed, level,
                     skipped=str((ctx.options.get("fabric") or {}).get("dcgm_skipped", "warn")))
    if res.verdict is Verdict.PASS and out.returncode not in (0, None):
        res = res.with_(verdict=Verdict.ERROR, summary=f"dcgmi exited with status "
                        f"{out.returncode}", fault_code="NC-DCGM")
    return res.with_(evidence=(out.evidence,))
