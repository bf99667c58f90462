"""Minimum safe versions: the security bulletins of stacks/compat/advisories.yml, and the
pure judgement of one installed version against them.

A version is judged per advisory of its component: on a line (driver branch, runc minor)
that the bulletin lists, below the fixed release is FAIL; a line newer than every listed
one came after the bulletin (clear); an older or in-between line the bulletin lists no
fix for is WARN (no fixed release there), never a silent pass. An advisory the site
accepted (`--allow-advisory ID`, or the host's `nodecert_allow_advisories`) is WARN and
says so, so the acceptance is on the record wherever the verdict goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.core.errors import VersionError
from nodecert.core.paths import compat_dir
from nodecert.core.verdict import Verdict
from nodecert.stack.compat import load_sources
from nodecert.stack.versions import DottedVersion
from nodecert_node.contract import Result

COMPONENTS = ("driver", "container_toolkit", "runc", "cublas")
KINDS = ("security", "correctness")
LINES = {"all": 0, "branch": 1, "minor": 2}
# What an installed version looks like to be judged: a plain upstream release. A package
# revision ("-1"), an epoch ("1:") or a distro suffix is stripped by `upstream`.
_UPSTREAM = re.compile(r"^\d+(?:\.\d+)+$")


@dataclass(frozen=True)
class Advisory:
    """A security bulletin for one component: its CVEs, and per release line the first
    version that carries the fix."""

    id: str
    component: str
    cves: tuple[str, ...]
    summary: str
    line: str
    fixed: tuple[DottedVersion, ...]
    sources: tuple[str, ...]
    kind: str = "security"  # or correctness: wrong results, no CVE
    introduced: DottedVersion | None = None  # the first affected release, where known

    def line_of(self, v: DottedVersion) -> tuple[int, ...]:
        return v.prefix(LINES[self.line])


@dataclass(frozen=True)
class NotTabled:
    component: str
    cves: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Bundled:
    """The release of a library a CUDA toolkit release ships (a stack pins the toolkit)."""

    cuda: str
    component: str
    version: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Advisories:
    as_of: str
    advisories: tuple[Advisory, ...]
    not_tabled: tuple[NotTabled, ...]
    bundled: tuple[Bundled, ...] = ()

    def shipped_with(self, cuda: str) -> tuple[Bundled, ...]:
        return tuple(b for b in self.bundled if b.cuda == cuda)

    def ids(self) -> set[str]:
        return {a.id for a in self.advisories}

    def for_component(self, component: str) -> tuple[Advisory, ...]:
        return tuple(a for a in self.advisories if a.component == component)


@dataclass(frozen=True)
class Finding:
    """One advisory's verdict on one installed version."""

    advisory: str
    component: str
    version: str
    verdict: Verdict
    message: str
    sources: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"advisory": self.advisory, "component": self.component,
                "version": self.version, "verdict": self.verdict.name,
                "message": self.message, "sources": list(self.sources)}


def load_advisories(path: Path | None = None) -> Advisories:
    path = path or compat_dir() / "advisories.yml"
    sources = load_sources(path.parent / "sources.yml")
    root = yamldoc.load(path).mapping({"schema", "as_of", "advisories"},
                                      {"not_tabled", "bundled"})
    if root["schema"].text() != "nodecert.advisories/v1":
        raise root["schema"].error("expected schema nodecert.advisories/v1")
    out: list[Advisory] = []
    for node in root["advisories"].seq():
        f = node.mapping({"id", "component", "cves", "summary", "line", "fixed", "source"},
                         {"kind", "introduced"})
        srcs = _sources(f["source"], sources)
        fixed = tuple(v.parsed(lambda t: DottedVersion.parse(t, min_parts=2,
                                                             what="fixed release"))
                      for v in f["fixed"].seq())
        kind = f["kind"].choice(KINDS) if "kind" in f else "security"
        cves = tuple(f["cves"].text_list())
        if kind == "security" and not cves:
            raise f["cves"].error("a security advisory names its CVEs",
                                  hint="or give it `kind: correctness`")
        introduced = (f["introduced"].parsed(lambda t: DottedVersion.parse(
            t, min_parts=2, what="first affected release")) if "introduced" in f else None)
        adv = Advisory(f["id"].text(), f["component"].choice(COMPONENTS), cves,
                       f["summary"].text(), f["line"].choice(tuple(LINES)), fixed, srcs,
                       kind, introduced)
        lines = [adv.line_of(v) for v in fixed]
        if not fixed or len(set(lines)) != len(lines):
            raise f["fixed"].error(f"{adv.id}: give one fixed release per {adv.line} line")
        if adv.id in {a.id for a in out}:
            raise f["id"].error(f"advisory {adv.id} is listed twice")
        out.append(adv)
    nt = []
    if "not_tabled" in root:
        for node in root["not_tabled"].seq():
            f = node.mapping({"component", "cves", "why"})
            nt.append(NotTabled(f["component"].choice(COMPONENTS),
                                tuple(f["cves"].text_list()), f["why"].text()))
    bundled = []
    for node in root["bundled"].seq() if "bundled" in root else ():
        f = node.mapping({"cuda", "source"}, set(COMPONENTS) - {"driver"})
        libs = [k for k in f if k not in ("cuda", "source")]
        if len(libs) != 1:
            raise node.error("name one library and its release beside `cuda`")
        bundled.append(Bundled(f["cuda"].text(), libs[0], f[libs[0]].text(),
                               _sources(f["source"], sources)))
    return Advisories(root["as_of"].text(), tuple(out), tuple(nt), tuple(bundled))


def _sources(node: yamldoc.Node, known: dict[str, Any]) -> tuple[str, ...]:
    srcs = tuple(node.text_list())
    for key in srcs:
        if key not in known:
            raise node.error(f"source {key!r} is not in stacks/compat/sources.yml",
                             hint="add the bulletin there, with its title and URL")
    return srcs


@cache
def default_advisories() -> Advisories:
    return load_advisories()


def upstream(version: str) -> str:
    """The upstream release in a package version: `1:4.4.2-1` -> `4.4.2`,
    `580.173.02-0ubuntu0.24.04.1` -> `580.173.02`. Raises VersionError for anything else
    (a distro build such as `1.1.5+ds1`, whose fixes are backported and whose upstream
    number therefore says nothing about them)."""
    text = version.strip().split(":", 1)[-1]
    head, dash, revision = text.rpartition("-")
    if not _UPSTREAM.match(text) and dash and revision[:1].isdigit():
        text = head  # a package revision (a pre-release such as -rc.3 stays refused)
    if not _UPSTREAM.match(text):
        raise VersionError(f"{version!r} is not an upstream release")
    return text


def judge(component: str, version: str, *, allowed: frozenset[str] = frozenset(),
          table: Advisories | None = None) -> list[Finding]:
    """Every advisory of `component` on one installed `version` (an upstream release)."""
    table = table or default_advisories()
    v = DottedVersion.parse(upstream(version), what=f"{component} version")
    out = []
    for adv in table.for_component(component):
        verdict, message = _one(adv, v, component)
        if verdict > Verdict.PASS and adv.id in allowed:
            verdict, message = Verdict.WARN, f"{message} -- accepted by the site " \
                f"(--allow-advisory {adv.id})"
        out.append(Finding(adv.id, component, str(v), verdict, message, adv.sources))
    return out


def _one(adv: Advisory, v: DottedVersion, component: str) -> tuple[Verdict, str]:
    what = f"{component} {v}"
    cves = ", ".join(adv.cves[:2]) + (f" and {len(adv.cves) - 2} more"
                                      if len(adv.cves) > 2 else "")
    if adv.kind == "correctness":
        what = f"{component} {v}"
        if adv.introduced is not None and v < adv.introduced:
            return Verdict.PASS, (f"{what} predates the defect {adv.id} names (first in "
                                  f"{adv.introduced})")
        cves = "a correctness defect"
    mine = adv.line_of(v)
    fix = next((f for f in adv.fixed if adv.line_of(f) == mine), None)
    if fix is not None:
        if v < fix:
            return Verdict.FAIL, (f"{what} is below {fix}, which fixes {cves} ({adv.id}: "
                                  f"{adv.summary})")
        return Verdict.PASS, f"{what} includes the fix for {cves} ({fix})"
    if mine > max(adv.line_of(f) for f in adv.fixed):
        return Verdict.PASS, (f"{what} is on a newer line than every release {adv.id} fixes "
                              f"({', '.join(map(str, adv.fixed))})")
    line = ".".join(map(str, mine))
    return Verdict.WARN, (f"{adv.id} ({cves}) lists no fixed release on the {line} line of "
                          f"{component} (fixed: {', '.join(map(str, adv.fixed))}): {what} "
                          "may be unpatched; move to a listed line")


def worst_findings(findings: list[Finding]) -> Verdict:
    return max((f.verdict for f in findings), default=Verdict.PASS)


def _runc_release(got: Any) -> tuple[str | None, str]:
    """(the upstream release to judge, or None; why not). A distro build (Debian's
    `1.1.5+ds1`, its commit not an upstream tag) carries backported fixes its number does
    not show: judging it against upstream releases would fail a patched node."""
    if not isinstance(got, dict) or "version" not in got:
        return None, f"runc --version was not read ({(got or {}).get('error', 'no output')})"
    version, commit = str(got["version"]), str(got.get("commit", ""))
    if _UPSTREAM.match(version) and commit.startswith(f"v{version}"):
        return version, ""
    return None, (f"runc {version} is a distribution build (commit {commit or 'not shown'}): "
                  "its fixes are backported, so follow the distribution's security tracker")


def judge_result(res: Result, allowed: frozenset[str] = frozenset(),
                 table: Advisories | None = None) -> Result:
    """The node's gathered versions (stack.advisories) judged against the bulletins."""
    got = res.facts.get("installed")
    if not isinstance(got, dict):
        if res.verdict >= Verdict.FAIL:
            return res  # the node's own failure (nvidia-smi missing, ...) stands
        return res.with_(verdict=Verdict.ERROR, fault_code="NC-ADVISORY-NOT-MEASURED",
                         summary="the node reported no installed versions: nothing was "
                                 "judged against the security bulletins")
    table = table or default_advisories()
    findings: list[Finding] = []
    problems: list[str] = []
    notes: list[str] = []
    for component in COMPONENTS:
        value = got.get(component)
        if component == "runc":
            release, why = _runc_release(value) if value is not None else (None, "")
            if why:
                notes.append(why)
            value = release
        if value is None:
            if component == "driver":
                problems.append("the driver's version was not read")
            continue
        try:
            findings += judge(component, str(value), allowed=allowed, table=table)
        except VersionError as exc:
            problems.append(f"{component}: {exc}")
    bad = [f for f in findings if f.verdict > Verdict.PASS]
    verdict = max([Verdict.ERROR] if problems else [], default=worst_findings(findings))
    judged = sorted({f"{f.component} {f.version}" for f in findings})
    summary = ("; ".join(problems + [f.message for f in bad]) if problems or bad else
               f"{', '.join(judged) or 'nothing installed'}: clear of "
               f"{len({f.advisory for f in findings})} security bulletins")
    if notes:
        summary += f" (not judged: {'; '.join(notes)})"
    return res.with_(
        verdict=verdict, summary=summary, findings=tuple(f.message for f in bad) + tuple(notes),
        value={"judged": len(findings), "below": sum(f.verdict >= Verdict.FAIL for f in bad)},
        facts={"installed": got, "advisories": [f.as_dict() for f in findings],
               "accepted": sorted(allowed & {f.advisory for f in bad}),
               "table_as_of": table.as_of, "not_judged": notes},
        fault_code=("NC-ADVISORY" if verdict >= Verdict.FAIL else ""),
        remediation=("Update the named component to at least the fixed release (re-run "
                     "`nodecert provision` with a stack that pins it), or accept the "
                     "advisory for this host (nodecert_allow_advisories) and say why."
                     if bad else ""))


__all__ = ["COMPONENTS", "KINDS", "Advisories", "Advisory", "Bundled", "Finding", "NotTabled",
           "default_advisories", "judge", "judge_result", "load_advisories", "upstream",
           "worst_findings"]
