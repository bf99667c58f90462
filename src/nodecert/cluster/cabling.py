"""`fabric.cabling`: the discovered links against the cable plan. Pure.

Every plan line is judged, none skipped: its node port's link missing, on the wrong
switch (and so, where the plan names rails, on another rail) or on the wrong port of
the right switch, exchanged with another planned cable (two links swapped are named as
one swap), or trained below the plan's width or speed. A link the tools report from a
node port the plan does not name is extra. Findings name the link, the node, the port
and the plan's expectation with its line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from nodecert.cluster.cabling_links import Link
from nodecert.inventory.cableplan import Plan, PlanLink
from nodecert_node.contract import Result, Verdict

# nodecert policy: a link whose rate is within this fraction of the plan's is at the
# plan's speed (InfiniBand reports 4X EDR as 103.125 Gb/s for a "100 Gb/s" cable).
SPEED_TOLERANCE = 0.05


@dataclass
class Cabling:
    """Per plan line what was found, and the fabric's links outside the plan."""

    judged: int = 0  # plan lines judged (those of the nodes read)
    ok: list[int] = field(default_factory=list)  # plan lines as planned
    findings: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)
    status: dict[int, str] = field(default_factory=dict)  # plan line -> "ok" or the kind

    def add(self, kind: str, text: str) -> None:
        self.findings.append((kind, text))


def _found(link: Link) -> str:
    return f"{link.switch} port {link.switch_port}"


def _plan(p: PlanLink) -> str:
    return f"{p.where()} (plan line {p.line})"


def compare(plan: Plan, links: list[Link], *, nodes: set[str] | None = None) -> Cabling:
    """`links`: what the tools discovered; `nodes`: the nodes whose ports were read (a
    plan line of another node is not judged here: say which were read)."""
    out = Cabling()
    found = {(link.node, link.port): link for link in links}
    rails = plan.rails()
    switch_rail = {sw: r for r, sws in rails.items() for sw in sws}
    judged = [p for p in plan.links if nodes is None or p.node in nodes]
    out.judged = len(judged)
    wrong: dict[int, tuple[PlanLink, Link]] = {}
    for p in judged:
        link = found.get(p.end)
        if link is None or link.state != "Active":
            seen = ("no link" if link is None else
                    f"its link to {_found(link)} is {link.state}, not Active")
            out.add("missing", f"{p.node} {p.port}: {seen}; the plan cables it to "
                               f"{_plan(p)}")
            out.status[p.line] = "missing"
            continue
        if (link.switch, link.switch_port) != (p.switch, p.switch_port):
            wrong[p.line] = (p, link)
            continue
        below = _below(p, link)
        if below:
            out.add("below", f"{p.node} {p.port} -> {_found(link)}: trained at "
                             f"{'; '.join(below)} (plan line {p.line})")
            out.status[p.line] = "below"
        else:
            out.ok.append(p.line)
            out.status[p.line] = "ok"
    _misplaced(out, plan, wrong, switch_rail)
    _extras(out, plan, links, nodes)
    return out


def _below(p: PlanLink, link: Link) -> list[str]:
    """How a link cabled as planned trained below the plan's width or speed."""
    below = []
    if p.width and link.width and int(link.width[:-1]) < int(p.width[:-1]):
        below.append(f"width {link.width}, the plan's {p.width}")
    speed = link.speed_gbps
    if p.speed_gbps and speed is not None and speed < p.speed_gbps * (1 - SPEED_TOLERANCE):
        below.append(f"{speed:g} Gb/s, the plan's {p.speed_gbps:g} Gb/s")
    return below


def _misplaced(out: Cabling, plan: Plan, wrong: dict[int, tuple[PlanLink, Link]],
               switch_rail: dict[str, str]) -> None:
    """Each link that lands elsewhere than planned: two planned cables exchanged (each
    lands where the other was planned), on another rail or switch, or another port."""
    by_end = {(p.switch, p.switch_port): p for p in plan.links}
    swapped: set[int] = set()
    for line, (p, link) in sorted(wrong.items()):
        if line in swapped:
            continue
        other = by_end.get((link.switch, link.switch_port))
        if other is not None and other.line in wrong and other.line != line:
            o_link = wrong[other.line][1]
            if (o_link.switch, o_link.switch_port) == (p.switch, p.switch_port):
                swapped |= {line, other.line}
                out.status[line] = out.status[other.line] = "swapped"
                out.add("swapped", f"{p.node} {p.port} and {other.node} {other.port} are "
                                   f"swapped: {p.node} {p.port} reaches {_found(link)} "
                                   f"(planned for {other.node} {other.port}, line "
                                   f"{other.line}) and {other.node} {other.port} reaches "
                                   f"{_found(o_link)} (planned for {p.node} {p.port}, line "
                                   f"{p.line})")
                continue
        if link.switch != p.switch:
            on = switch_rail.get(link.switch)
            rail = (f": on rail {on}, the plan's rail {p.rail}" if p.rail is not None and
                    on is not None and on != p.rail else "")
            out.status[p.line] = "wrong rail" if rail else "wrong switch"
            out.add(out.status[p.line],
                    f"{p.node} {p.port} reaches {_found(link)}, the plan cables it to "
                    f"{_plan(p)}{rail}")
        else:
            out.status[p.line] = "wrong port"
            out.add("wrong port", f"{p.node} {p.port} reaches {_found(link)}, the plan "
                                  f"cables it to port {p.switch_port} (plan line {p.line})")


def _extras(out: Cabling, plan: Plan, links: list[Link], nodes: set[str] | None) -> None:
    """Every active link from a node port that no plan line names."""
    planned = {p.end for p in plan.links}
    for link in sorted(links, key=lambda x: (x.node, x.port)):
        if (link.node, link.port) not in planned and link.state == "Active" and \
                (nodes is None or link.node in nodes):
            out.add("extra", f"{link.node} {link.port} reaches {_found(link)}: no plan line "
                             "names it")


def judge_cabling(plan: Plan, links: list[Link] | None, *, nodes: set[str] | None = None,
                  tool_error: str = "") -> Result:
    """fabric.cabling: PASS when every judged plan line is as planned and nothing is
    extra; FAIL naming each link otherwise; ERROR when the fabric could not be read (the
    tool's words), never a pass for what was not seen."""
    facts: dict[str, Any] = {"plan": plan.path, "plan_sha256": plan.digest,
                             "plan_lines": len(plan.links)}
    if links is None:
        return Result("fabric.cabling", Verdict.ERROR,
                      f"the fabric could not be read: {tool_error or 'no tool output'}",
                      facts=facts, fault_code="NC-CABLING-UNREAD",
                      remediation="Run the fabric's tools (ibnetdiscover, iblinkinfo, "
                                  "lldpctl) where they can see it, then judge again.")
    c = compare(plan, links, nodes=nodes)
    facts.update(ok_lines=len(c.ok), links_found=len(links),
                 findings=[{"kind": k, "text": t} for k, t in c.findings],
                 # every judged plan line and what it was found as (the page draws them)
                 links=[{"line": p.line, "node": p.node, "port": p.port, "rail": p.rail,
                         "switch": p.switch, "switch_port": p.switch_port,
                         "status": c.status[p.line]}
                        for p in plan.links if p.line in c.status])
    if not c.findings:
        return Result("fabric.cabling", Verdict.PASS,
                      f"all {c.judged} planned links where the plan says, at its width "
                      "and speed", value={"planned": c.judged, "wrong": 0}, facts=facts)
    texts = tuple(t for _, t in c.findings)
    return Result("fabric.cabling", Verdict.FAIL,
                  texts[0] + (f" (+{len(texts) - 1} more)" if len(texts) > 1 else ""),
                  findings=texts, value={"planned": c.judged, "wrong": len(texts)},
                  facts=facts, fault_code="NC-CABLING",
                  remediation="Re-cable each named link as the plan says (or correct the "
                              "plan), reseat or replace a cable that trained low, then "
                              "judge again.")


def with_link_errors(result: Result, grew: dict[str, dict[str, dict[str, int]]]) -> Result:
    """The cabling result with each planned link's error counters that grew during the
    cluster's jobs (node -> device -> counter -> gain, as cluster.fabric judges them):
    the link's health beside its place, for the page and the certificate. The verdict is
    cluster.fabric's to give, not this check's: placement alone judges fabric.cabling."""
    links = result.facts.get("links") or []
    noted: list[str] = []
    marked = []
    for x in links:
        gained = (grew.get(str(x["node"])) or {}).get(str(x["port"]))
        if not gained:
            marked.append(x)
            continue
        marked.append(dict(x, errors=dict(sorted(gained.items()))))
        noted.append(f"{x['node']} {x['port']} -> {x['switch']} port {x['switch_port']}: "
                     + ", ".join(f"{c} +{n}" for c, n in sorted(gained.items()))
                     + " during the cluster's jobs")
    if not noted:
        return result
    return replace(result, facts=dict(result.facts, links=marked),
                   findings=result.findings + tuple(noted))


__all__ = ["SPEED_TOLERANCE", "Cabling", "compare", "judge_cabling", "with_link_errors"]
