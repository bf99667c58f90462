"""What a node certificate is: an acceptance certificate (its suite and profile, the
burn-in and soak durations measured, whether a cluster or rack certificate proves the
node with its neighbours) or a health record with the stages it lacks; the line verify
prints of it."""

from __future__ import annotations

from typing import Any

from nodecert.certs.certify import HEALTHY, READY


def _stage_seconds(a: dict[str, Any], stage: str) -> str:
    got = (a.get("durations_s") or {}).get(stage)
    return f"{got:g} s" if isinstance(got, int | float) else "not measured"


def neighbours(p: dict[str, Any]) -> str:
    """Whether a cluster or rack certificate proves the node with its neighbours."""
    for kind in ("rack", "cluster"):
        link = p.get(kind)
        if isinstance(link, dict):
            return (f"proven with its neighbours: {kind} certificate {link.get('certificate')}"
                    f" (run {link.get('run_id')}, {link.get('verdict')})")
    return "not proven with its neighbours: no cluster or rack certificate references it"


def scope(p: dict[str, Any]) -> tuple[bool, bool, str]:
    """What a node certificate is: (consistent, an acceptance certificate, the line).
    Consistent: READY only with an accepted acceptance judgement, and a profile for
    simulated hardware only on a SIMULATED certificate."""
    a = p.get("acceptance")
    suite = p.get("suite")
    if not isinstance(a, dict):
        return (True, False, f"suite {suite}: the certificate states no acceptance "
                f"judgement (made before acceptance was recorded): {neighbours(p)}")
    prof = a.get("profile")
    lacks = ", ".join(str(m) for m in a.get("missing") or []) or "none"
    if a.get("simulated_only") and prof and not p.get("simulated"):
        return (False, False, f"claims real hardware accepted on the {prof} acceptance "
                "profile, which is for simulated hardware only: refused")
    if p.get("verdict") == READY and not a.get("accepted"):
        return (False, False, "says READY but its acceptance judgement did not accept the "
                "run: " + "; ".join(str(r) for r in a.get("reasons") or [])[:300])
    if p.get("verdict") == READY:
        return (True, True, f"acceptance certificate: suite {suite}, acceptance profile "
                f"{prof}; burn-in {_stage_seconds(a, 'burnin')}, soak "
                f"{_stage_seconds(a, 'soak')}; {neighbours(p)}")
    what = "a health record" if p.get("verdict") == HEALTHY else "not ready"
    return (True, False, f"not an acceptance certificate ({what}): suite {suite}"
            + (f", acceptance profile {prof}" if prof else ", not an acceptance suite")
            + f"; lacks {lacks}; burn-in {_stage_seconds(a, 'burnin')}, soak "
              f"{_stage_seconds(a, 'soak')}; {neighbours(p)}")


__all__ = ["neighbours", "scope"]
