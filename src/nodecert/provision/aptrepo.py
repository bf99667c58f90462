"""Debian repository metadata, read as apt reads it: Packages stanzas, Release hashes,
Debian version order and dependency resolution inside one repository. Pure functions:
what `nodecert mirror` fetches is decided here, from the upstream's own index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nodecert.core.errors import ManifestError, VersionError
from nodecert.stack.versions import DebianVersion

Stanza = dict[str, str]


def parse_stanzas(text: str, where: str) -> list[Stanza]:
    """deb822 paragraphs (Packages, Release): fields, continuation lines joined with
    newlines. A line that is neither a field nor a continuation is refused."""
    out: list[Stanza] = []
    cur: Stanza = {}
    key = ""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            if cur:
                out.append(cur)
            cur, key = {}, ""
        elif line[0] in " \t":
            if not key:
                raise ManifestError(f"{where}:{n}: continuation line outside a field")
            cur[key] += "\n" + line.strip()
        else:
            name, sep, value = line.partition(":")
            if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ManifestError(f"{where}:{n}: not a 'Field: value' line: {line[:80]!r}")
            key = name
            cur[key] = value.strip()
    if cur:
        out.append(cur)
    return out


def release_sha256(text: str, where: str) -> dict[str, tuple[str, int]]:
    """The SHA256 section of a Release file: {path: (hex digest, size)}."""
    (stanza,) = parse_stanzas(text, where)[:1] or [{}]
    out: dict[str, tuple[str, int]] = {}
    for line in stanza.get("SHA256", "").splitlines():
        parts = line.split()
        if len(parts) == 3 and re.fullmatch(r"[0-9a-f]{64}", parts[0]) and parts[1].isdigit():
            out[parts[2]] = (parts[0], int(parts[1]))
    return out


# --- Debian version order: the project's own dpkg-exact comparison ------------------------

def _version(text: str) -> DebianVersion:
    try:
        return DebianVersion.parse(text)
    except VersionError as exc:
        raise ManifestError(f"the repository lists a version dpkg would refuse: {exc.what}") \
            from None


def compare_versions(a: str, b: str) -> int:
    """<0, 0, >0 as dpkg --compare-versions orders a and b."""
    return _version(a).compare(_version(b))


_OPS = {">=": lambda c: c >= 0, "<=": lambda c: c <= 0, ">>": lambda c: c > 0,
        "<<": lambda c: c < 0, "=": lambda c: c == 0, ">": lambda c: c >= 0,
        "<": lambda c: c <= 0}
_DEP = re.compile(r"^([a-z0-9][a-z0-9+.-]*)(?::[a-z0-9-]+)?\s*(?:\(\s*(>=|<=|>>|<<|=|>|<)"
                  r"\s*([^)\s]+)\s*\))?\s*(?:\[[^]]*\])?\s*(?:<[^>]*>)?$")


@dataclass(frozen=True)
class Dep:
    name: str
    op: str = ""
    version: str = ""

    def allows(self, version: str) -> bool:
        return not self.op or _OPS[self.op](compare_versions(version, self.version))

    def __str__(self) -> str:
        return f"{self.name} ({self.op} {self.version})" if self.op else self.name


def parse_depends(value: str, where: str) -> list[list[Dep]]:
    """'a (>= 1), b | c' -> [[a>=1], [b, c]]; an unreadable relation is refused."""
    groups: list[list[Dep]] = []
    for group in value.replace("\n", " ").split(","):
        if not group.strip():
            continue
        alts = []
        for alt in group.split("|"):
            m = _DEP.match(alt.strip())
            if not m:
                raise ManifestError(f"{where}: cannot read the relation {alt.strip()!r}")
            alts.append(Dep(m.group(1), m.group(2) or "", m.group(3) or ""))
        groups.append(alts)
    return groups


@dataclass
class Resolution:
    selected: list[Stanza] = field(default_factory=list)
    # relations no package of this repository satisfies: the OS archive must
    external: list[str] = field(default_factory=list)
    missing_pins: list[tuple[str, str]] = field(default_factory=list)


def resolve(stanzas: list[Stanza], pins: list[tuple[str, str | None]],
            where: str) -> Resolution:
    """The pinned packages (exact versions; None: the highest the repository has) and,
    transitively, every dependency this repository can satisfy (a pinned name at its
    pinned version, otherwise the highest version that fits). Relations it cannot
    satisfy are listed, not guessed."""
    by_name: dict[str, list[Stanza]] = {}
    provides: dict[str, list[Stanza]] = {}
    for s in stanzas:
        by_name.setdefault(s.get("Package", ""), []).append(s)
        for p in parse_depends(s.get("Provides", ""), f"{where} ({s.get('Package')})"):
            provides.setdefault(p[0].name, []).append(s)
    pinned = {n: v for n, v in pins if v is not None}
    res = Resolution()
    chosen: dict[str, Stanza] = {}
    queue: list[Stanza] = []
    for name, version in pins:
        hit = [s for s in by_name.get(name, []) if version is None or s.get("Version") == version]
        hit.sort(key=lambda x: _version(x.get("Version", "")), reverse=True)
        if not hit:
            res.missing_pins.append((name, version or "any"))
            continue
        chosen[name] = hit[0]
        queue.append(hit[0])

    def satisfied(d: Dep) -> bool:
        s = chosen.get(d.name)
        return (s is not None and d.allows(s.get("Version", ""))) or any(
            d.name in {p[0].name for p in parse_depends(c.get("Provides", ""), where)}
            for c in chosen.values())

    def candidate(d: Dep) -> Stanza | None:
        if d.name in pinned:
            fit = [s for s in by_name.get(d.name, []) if s.get("Version") == pinned[d.name]]
            return fit[0] if fit and d.allows(pinned[d.name]) else None
        fit = [s for s in by_name.get(d.name, []) if d.allows(s.get("Version", ""))]
        if not fit and not d.op:
            fit = provides.get(d.name, [])
        best = None
        for s in fit:
            if best is None or compare_versions(s["Version"], best["Version"]) > 0:
                best = s
        return best

    while queue:
        s = queue.pop(0)
        rels = ", ".join(x for x in (s.get("Pre-Depends", ""), s.get("Depends", "")) if x)
        for group in parse_depends(rels, f"{where} ({s.get('Package')})"):
            if any(satisfied(d) for d in group):
                continue
            pick = next((c for c in map(candidate, group) if c is not None), None)
            if pick is None:
                text = " | ".join(map(str, group))
                if text not in res.external:
                    res.external.append(text)
                continue
            chosen[pick["Package"]] = pick
            queue.append(pick)
    res.selected = sorted(chosen.values(), key=lambda x: x["Package"])
    return res


__all__ = ["Dep", "Resolution", "compare_versions", "parse_depends", "parse_stanzas",
           "release_sha256", "resolve"]
