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


def judge_dcgm(parsed: dict[str, Any], level: int) -> Result:
    """The test-level result wins; a per-GPU failure fails too (named by GPU); a table cut
    short without a failure in it is an ERROR, never a pass."""
    fails: list[str] = []
    warns: list[str] = []
    ran = 0
    for t, r in parsed["tests"].items():
        st = _status(r)
        per = parsed.get("gpus", {}).get(t, {})
        bad = sorted(g for g, v in per.items() if _status(v) == "fail")
        detail = "; ".join(parsed.get("details", {}).get(t, []))[:400]
        msg = f"DCGM {t}: {r}" + (f" (GPU {', '.join(map(str, bad))} failed)" if bad else "") \
            + (f" -- {detail}" if detail else "")
        if st == "fail" or bad:
            fails.append(msg)
        elif st in ("warn", "unknown"):
            warns.append(msg)
        if st != "skip":
            ran += 1
    res = judge_findings(
        "dcgm.diag", fails, warns, f"dcgmi diag -r {level}: {ran} tests passed "
        f"(DCGM {parsed['meta'].get('DCGM Version', '?')})",
        value={"level": level, "tests": parsed["tests"], "meta": parsed["meta"],
               "gpus": {t: {str(g): v for g, v in per.items()}
                        for t, per in parsed.get("gpus", {}).items() if per}},
        fault_code="NC-DCGM" if fails else "",
        remediation="Read the failing DCGM test's details in the evidence; DCGM's guidance "
                    "for hardware failures is to reset, re-run, then RMA." if fails else "")
    if not fails and not parsed.get("complete", True):
        return res.with_(verdict=Verdict.ERROR, fault_code="NC-DCGM",
                         summary="dcgmi diag output is cut short (no closing border): the "
                                 "tests after the cut are unknown; re-run the diagnostic")
    return res


@check("dcgm.diag", order=60, suites=("standard", "full"),
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
    res = judge_dcgm(parsed, level)
    if res.verdict is Verdict.PASS and out.returncode not in (0, None):
        res = res.with_(verdict=Verdict.ERROR, summary=f"dcgmi exited with status "
                        f"{out.returncode}", fault_code="NC-DCGM")
    return res.with_(evidence=(out.evidence,))
