"""What the rack's judges share: the findings-to-Result rule, a component's last good
sample and how one that was not read is named, health and state read alike. Pure."""

from __future__ import annotations

from typing import Any

from nodecert_node.contract import Result, Verdict

BAD_HEALTH = {"Critical"}


def judge_findings(name: str, fails: list[str], warns: list[str], ok_summary: str,
                   **kw: Any) -> Result:
    """FAIL with any fail finding, WARN with only warnings, else PASS (the node checks'
    rule, for the rack's)."""
    if fails or warns:
        return Result(name, Verdict.FAIL if fails else Verdict.WARN, first_of(fails or warns),
                      findings=tuple(fails + warns), **kw)
    return Result(name, Verdict.PASS, ok_summary, **kw)


def first_of(findings: list[str]) -> str:
    """A result's summary: its first finding, and how many more there are."""
    n = len(findings)
    return findings[0] if n == 1 else f"{findings[0]} (+{n - 1} more)"


def who_is(c: dict[str, Any]) -> str:
    return f"{c['kind'].replace('_', ' ')} {c['name']} ({c['address']})"


def last_sample(c: dict[str, Any]) -> dict[str, Any] | None:
    good = [s for s in c["samples"] if s is not None]
    return good[-1] if good else None


def unread(c: dict[str, Any]) -> str | None:
    if last_sample(c) is None:
        return (f"{who_is(c)} cannot be read: "
                f"{c['errors'][-1] if c['errors'] else 'no answer'}")
    return None


def read_of_kind(comps: list[dict[str, Any]], kind: str, fails: list[str]
          ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(component, its last good sample) for each of a kind that was read; one that was
    not is a FAIL naming it."""
    out = []
    for c in comps:
        if c["kind"] != kind:
            continue
        why = unread(c)
        if why:
            fails.append(why)
        else:
            out.append((c, last_sample(c) or {}))
    return out


def note_health(who: str, health: Any, state: Any, fails: list[str], warns: list[str],
            *, absent_ok: bool = False) -> None:
    if state in ("Absent", "Disabled", "UnavailableOffline") and not absent_ok:
        fails.append(f"{who}: {state}")
    if health in BAD_HEALTH:
        fails.append(f"{who}: health {health}")
    elif health == "Warning":
        warns.append(f"{who}: health Warning")


__all__ = ["BAD_HEALTH", "first_of", "judge_findings", "last_sample", "note_health", "read_of_kind",
           "unread", "who_is"]
