"""One way to judge a list of findings read against a pinned recipe or profile (the
firmware recipe, the BIOS profile): ERROR where something could not be read, FAIL where
something differs, else PASS; the first finding is the summary."""

from __future__ import annotations

from typing import Any

from nodecert_node.contract import Result, Verdict


def judged(check: str, errors: list[str], fails: list[str], ok_summary: str, *,
           value: dict[str, Any], facts: dict[str, Any], codes: tuple[str, str],
           fix_fails: str, fix_errors: str) -> Result:
    """`codes`: (not read, differs) fault codes; the remediation joins `fix_fails` and
    `fix_errors` where each applies."""
    lines = errors + fails
    verdict = Verdict.ERROR if errors else Verdict.FAIL if fails else Verdict.PASS
    summary = (f"{lines[0]} (+{len(lines) - 1} more)" if len(lines) > 1 else lines[0]) \
        if lines else ok_summary
    unread, differs = codes
    return Result(check, verdict, summary, findings=tuple(lines), value=value, facts=facts,
                  fault_code=unread if errors else differs if fails else "",
                  remediation=(fix_fails if fails else "")
                  + ((" " if fails else "") + fix_errors if errors else ""))


__all__ = ["judged"]
