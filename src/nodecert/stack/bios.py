"""BIOS profiles (stacks/bios/*.yml): the BIOS attributes a platform needs, each with its
source, and the pure judgement of what a BMC's Redfish Bios reports (`bmc.bios`).

A host names its profile (`nodecert_bios_profile`) and may add or change attributes
(`nodecert_bios`: {attribute: value}). An attribute the BMC does not report is ERROR,
never a pass; one at another value is a FAIL naming it, found and wanted, and saying
where a pending setting will change it at the next reset; one right now that the pending
settings change to another value at the next reset is a FAIL too, before the reset.
Pending means changed: an attribute the pending object repeats at its current value (in
another representation: True and "true") is no change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nodecert.core import yamldoc
from nodecert.core.errors import ManifestError, UnknownNameError
from nodecert.core.paths import compat_dir, stacks_dir
from nodecert.core.verdict import Verdict
from nodecert.stack.compat import load_sources
from nodecert.stack.lines import judged
from nodecert_node.contract import Result

SCHEMA = "nodecert.bios-profile/v1"
Scalar = str | int | bool


@dataclass(frozen=True)
class BiosProfile:
    name: str
    title: str
    attributes: dict[str, Scalar]
    sources: dict[str, str]  # attribute -> source key ("site" for the inventory's)
    path: Path | None = None


def profiles_dir() -> Path:
    return stacks_dir() / "bios"


def load_profile(path: Path) -> BiosProfile:
    root = yamldoc.load(path).mapping({"schema", "name", "title", "attributes"})
    if root["schema"].text() != SCHEMA:
        raise root["schema"].error(f"expected schema {SCHEMA}")
    known = load_sources(compat_dir() / "sources.yml")
    attrs: dict[str, Scalar] = {}
    sources: dict[str, str] = {}
    for name, node in root["attributes"].items():
        f = node.mapping({"value", "source"})
        value = f["value"].value
        if not isinstance(value, str | int | bool):
            raise f["value"].error(f"{name}: a BIOS attribute is text, a number or a boolean")
        key = f["source"].text()
        if key not in known:
            raise f["source"].error(f"source {key!r} is not in stacks/compat/sources.yml")
        attrs[name], sources[name] = value, key
    if not attrs:
        raise root["attributes"].error("a BIOS profile names at least one attribute")
    name = root["name"].text()
    if name != path.stem:
        raise root["name"].error(f"profile {name!r} is in {path.name}: name the file "
                                 f"{name}.yml")
    return BiosProfile(name, root["title"].text(), attrs, sources, path)


def find_profile(name: str) -> BiosProfile:
    path = Path(name)
    if path.suffix == ".yml" and path.is_file():
        return load_profile(path)
    found = profiles_dir() / f"{name}.yml"
    if not found.is_file():
        names = ", ".join(p.stem for p in sorted(profiles_dir().glob("*.yml"))) or "none"
        raise UnknownNameError(f"unknown BIOS profile {name!r}",
                               hint=f"use one of: {names} (stacks/bios/), or a path")
    return load_profile(found)


def with_site(profile: BiosProfile, site: dict[str, Any] | None, *, where: str = ""
              ) -> BiosProfile:
    if not site:
        return profile
    attrs, sources = dict(profile.attributes), dict(profile.sources)
    for name, value in site.items():
        if not isinstance(value, str | int | bool):
            raise ManifestError(f"nodecert_bios {name}: a BIOS attribute is text, a number "
                                "or a boolean", where=where)
        attrs[name], sources[name] = value, "site"
    return replace(profile, attributes=attrs, sources=sources)


def differences(profile: BiosProfile, current: dict[str, Any]) -> dict[str, Scalar]:
    """The attributes to set: those present at another value (absent ones cannot be)."""
    return {k: v for k, v in profile.attributes.items()
            if k in current and current[k] != v}


def _same(a: Any, b: Any) -> bool:
    """One value in two representations (True and "true", 1 and "1", "Enabled" and
    "enabled "), as BMCs write an attribute in the current and pending objects."""
    def norm(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        return str(v).strip().lower()
    return norm(a) == norm(b)


def pending_changes(current: dict[str, Any], pending: dict[str, Any]) -> dict[str, Any]:
    """What the pending settings object changes at the next reset: its attributes whose
    value is not the current one in another representation (many BMCs copy every
    attribute into it)."""
    return {k: v for k, v in pending.items() if not (k in current and _same(current[k], v))}


def judge_bios(profile: BiosProfile, bios: dict[str, Any] | None, *,
               bmc_error: str = "") -> Result:
    """`bios`: {"attributes": {...}, "pending": {...}} as the BMC reports them (None where
    it was not read: `bmc_error` says why)."""
    if bios is None:
        return Result("bmc.bios", Verdict.ERROR, f"the BIOS settings were not read: "
                      f"{bmc_error or 'no BMC'}", fault_code="NC-BIOS-UNREAD",
                      facts={"profile": profile.name},
                      remediation="Check that the BMC answers over Redfish and lists the "
                                  "system's Bios, then validate again.")
    current = bios.get("attributes") or {}
    pending = pending_changes(current, bios.get("pending") or {})
    fails, errors = [], []
    for name, want in profile.attributes.items():
        if name not in current:
            errors.append(f"{name}: the BIOS does not report it")
        elif current[name] != want:
            note = (f" (pending: {pending[name]} at the next reset)" if name in pending
                    else "")
            fails.append(f"{name} is {current[name]}, the profile wants {want}{note}")
        elif name in pending and not _same(pending[name], want):
            # right now, wrong after the next reset: found before the reset happens
            fails.append(f"{name} is {current[name]} as the profile wants, but the BIOS's "
                         f"pending settings change it to {pending[name]} at the next reset")
    return judged(
        "bmc.bios", errors, fails,
        f"all {len(profile.attributes)} attributes of {profile.name} as wanted",
        value={"attributes": len(profile.attributes), "differ": len(fails),
               "unreported": len(errors)},
        facts={"profile": profile.name, "sources": profile.sources,
               "wanted": profile.attributes,
               "found": {k: current.get(k) for k in profile.attributes},
               "pending": pending},
        codes=("NC-BIOS-UNREAD", "NC-BIOS"),
        fix_fails="Set the attributes named (`nodecert firmware apply --bios` writes them "
                  "to the BIOS's pending settings and resets the system), then validate "
                  "again.",
        fix_errors="An attribute the BIOS does not report has another name on this "
                   "platform: set the profile's name for it.")


__all__ = ["BiosProfile", "differences", "find_profile", "judge_bios", "load_profile",
           "pending_changes", "profiles_dir", "with_site"]
