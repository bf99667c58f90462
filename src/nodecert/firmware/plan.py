"""What updating a host to its recipe would change: per recipe component and BMC member,
the version running, the one wanted, and what would be done (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nodecert.stack.firmware import Recipe, same_version

_PARTS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Step:
    component: str
    member: str  # the FirmwareInventory member's @odata.id
    current: str | None
    wanted: str
    action: str  # current | update | downgrade | unordered | unknown
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "member": self.member,
                "current": self.current, "wanted": self.wanted, "action": self.action,
                "why": self.why}


def order(a: str, b: str) -> int | None:
    """-1, 0 or 1 as version a is older, equal or newer than b; None where they are not
    of one shape (other letters or separators: 0.2.0.5 against 0.2.0.7 is ordered, 2.55
    against U46 v1.56 or 25.06-A against 25.08-9 is not)."""
    pa, pb = _PARTS.split(a.strip()), _PARTS.split(b.strip())
    if len(pa) != len(pb) or pa[0::2] != pb[0::2]:
        return None
    ka = [int(x) for x in pa[1::2]]
    kb = [int(x) for x in pb[1::2]]
    return (ka > kb) - (ka < kb)


def plan_host(recipe: Recipe, members: list[dict[str, Any]]) -> list[Step]:
    """Each out-of-band component of the recipe against each member that reports it.
    `members`: {id, version, odata_id}. A component no member reports is `unknown`:
    nothing to update, and firmware.recipe says why."""
    steps = []
    for name, comp in recipe.components.items():
        if not comp.redfish:
            continue  # read in band only: updated with the node's own tools
        # a backup bank is not what runs: the update is planned against the active image
        mine = [m for m in members if comp.matches(str(m.get("id", "")))
                and not m.get("standby")]
        if not mine:
            steps.append(Step(name, "", None, comp.version, "unknown",
                              "no FirmwareInventory member matches "
                              + " or ".join(comp.redfish)))
        for m in mine:
            cur = m.get("version")
            link = str(m.get("odata_id") or "")
            if cur and same_version(str(cur), comp.version):
                steps.append(Step(name, link, cur, comp.version, "current"))
                continue
            o = order(str(cur or ""), comp.version) if cur else None
            action = ("update" if o == -1 else "downgrade" if o == 1 else "unordered")
            why = {"update": "older than the recipe",
                   "downgrade": "newer than the recipe: a downgrade",
                   "unordered": "not comparable with the recipe's version: the BMC decides "
                                "(it refuses a downgrade unless forced)"}[action]
            steps.append(Step(name, link, cur, comp.version, action, why))
    return steps


__all__ = ["Step", "order", "plan_host"]
