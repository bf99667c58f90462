"""dcgm.diag: NVIDIA DCGM's own diagnostic (dcgmi diag -r LEVEL), judged per test."""

from __future__ import annotations

from typing import Any

from nodecert_node.context import Ctx, judge_findings
from nodecert_node.contract import Result, Verdict
from nodecert_node.parse import bench
from nodecert_node.registry import check
from nodecert_node.tools import run


def judge_dcgm(parsed: dict[str, Any], level: int) -> Result:
    fails = [f"DCGM {t}: {r}" for t, r in parsed["tests"].items() if r.lower().startswith("fail")]
    warns = [f"DCGM {t}: {r}" for t, r in parsed["tests"].items() if r.lower().startswith("warn")]
    ran = [t for t, r in parsed["tests"].items() if not r.lower().startswith("skip")]
    return judge_findings(
        "dcgm.diag", fails, warns, f"dcgmi diag -r {level}: {len(ran)} tests passed "
        f"(DCGM {parsed['meta'].get('DCGM Version', '?')})",
        value={"level": level, "tests": parsed["tests"], "meta": parsed["meta"]},
        fault_code="NC-DCGM" if fails else "",
        remediation="Read the failing DCGM test's details in the evidence; DCGM's guidance "
                    "for hardware failures is to reset, re-run, then RMA." if fails else "")


@check("dcgm.diag", order=60, suites=("standard", "full"),
       tools=("dcgmi",),
       description="NVIDIA DCGM's diagnostic at the suite's level")
def dcgm_diag(ctx: Ctx) -> Result:
    level = int((ctx.options.get("fabric") or {}).get("dcgm_level", 1))
    out = run(["dcgmi", "diag", "-r", str(level)], name="dcgmi diag",
              timeout=float((ctx.options.get("fabric") or {}).get("dcgm_timeout_s", 1800)),
              ok_codes=range(0, 256))
    res = judge_dcgm(bench.parse_dcgmi_diag(out.text), level)
    if res.verdict is Verdict.PASS and out.returncode not in (0, None):
        res = res.with_(verdict=Verdict.ERROR, summary=f"dcgmi exited with status "
                        f"{out.returncode}", fault_code="NC-DCGM")
    return res.with_(evidence=(out.evidence,))
