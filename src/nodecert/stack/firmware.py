"""Firmware recipes (stacks/firmware/*.yml): the version of every component below the OS
a platform ships with, each read out of band (the BMC's Redfish FirmwareInventory) and/or
in band (what the node reports: GPU VBIOS, HCA firmware), with its source; and the
pure judgement of what a host reports against its recipe (`firmware.recipe`).

A site names a host's recipe (`nodecert_firmware_recipe`) and may override components
(`nodecert_firmware`: {component: version} or {component: {version, redfish, inband}}).
A component the recipe names that nothing reports is an ERROR, never a pass; a reading
at another version is a FAIL naming the component, where it was read, found and wanted.
"""

from __future__ import annotations

import re
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

# What the node reports in band, by the name a recipe uses for it.
INBAND = ("gpu_vbios", "hca_firmware")
SCHEMA = "nodecert.firmware-recipe/v1"


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    redfish: tuple[str, ...] = ()  # patterns on FirmwareInventory member Ids
    inband: str | None = None
    image_sha256: str | None = None  # the vendor's image of this version, as pinned

    def matches(self, member_id: str) -> bool:
        return any(re.search(p, member_id) for p in self.redfish)

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "redfish": list(self.redfish), "inband": self.inband}


@dataclass(frozen=True)
class Recipe:
    """A firmware recipe: the version each component of a server model must run, with
    the sources that publish it and the components a site overrode."""

    name: str
    title: str
    gpu_models: tuple[str, ...]
    sources: tuple[str, ...]
    components: dict[str, Component]
    path: Path | None = None
    overridden: tuple[str, ...] = ()  # components the site set


def recipes_dir() -> Path:
    return stacks_dir() / "firmware"


def _pattern(node: yamldoc.Node) -> str:
    text = node.text()
    try:
        re.compile(text)
    except re.error as exc:
        raise node.error(f"{text!r} is not a regular expression: {exc}") from None
    return text


def _component(name: str, node: yamldoc.Node) -> Component:
    f = node.mapping({"version"}, {"redfish", "inband", "image_sha256"})
    redfish = tuple(_pattern(p) for p in f["redfish"].seq()) if "redfish" in f else ()
    inband = f["inband"].choice(INBAND) if "inband" in f else None
    if not redfish and inband is None:
        raise node.error(f"component {name} says neither where the BMC reports it (redfish) "
                         "nor what the node reports (inband)")
    pin = None
    if "image_sha256" in f:
        pin = f["image_sha256"].text().strip().lower()
        if not is_sha256(pin):
            raise f["image_sha256"].error(f"{pin!r} is not a SHA-256 digest (64 hex digits)")
    return Component(name, f["version"].text().strip(), redfish, inband, pin)


def is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def with_image_pins(recipe: Recipe, pins: dict[str, Any] | None, *, where: str = ""
                    ) -> Recipe:
    """The recipe with the site's image digests (`nodecert_firmware_images`: {component:
    sha256}) over the recipe's own."""
    if not pins:
        return recipe
    comps = dict(recipe.components)
    for name, digest in pins.items():
        text = str(digest).strip().lower()
        if name not in comps:
            raise ManifestError(f"nodecert_firmware_images pins {name}, which recipe "
                                f"{recipe.name} does not have", where=where,
                                hint=f"pin one of: {', '.join(sorted(comps))}")
        if not isinstance(digest, str) or not is_sha256(text):
            raise ManifestError(f"nodecert_firmware_images {name}: {str(digest)[:80]!r} is "
                                "not a SHA-256 digest (64 hex digits)", where=where)
        comps[name] = replace(comps[name], image_sha256=text)
    return replace(recipe, components=comps)


def load_recipe(path: Path) -> Recipe:
    root = yamldoc.load(path).mapping({"schema", "name", "title", "gpu_models", "source",
                                       "components"})
    if root["schema"].text() != SCHEMA:
        raise root["schema"].error(f"expected schema {SCHEMA}")
    known = load_sources(compat_dir() / "sources.yml")
    srcs = tuple(root["source"].text_list())
    for key in srcs:
        if key not in known:
            raise root["source"].error(f"source {key!r} is not in stacks/compat/sources.yml",
                                       hint="add it there, with its title and URL")
    comps = {name: _component(name, node) for name, node in root["components"].items()}
    if not comps:
        raise root["components"].error("a recipe names at least one component")
    name = root["name"].text()
    if name != path.stem:
        raise root["name"].error(f"recipe {name!r} is in {path.name}: name the file {name}.yml")
    return Recipe(name, root["title"].text(), tuple(root["gpu_models"].text_list()), srcs,
                  comps, path)


def list_recipes(directory: Path | None = None) -> list[Recipe]:
    d = directory or recipes_dir()
    return [load_recipe(p) for p in sorted(d.glob("*.yml"))] if d.is_dir() else []


def find_recipe(name: str, directory: Path | None = None) -> Recipe:
    path = Path(name)
    if path.suffix == ".yml" and path.is_file():
        return load_recipe(path)
    found = (directory or recipes_dir()) / f"{name}.yml"
    if not found.is_file():
        names = ", ".join(r.name for r in list_recipes(directory)) or "none"
        raise UnknownNameError(f"unknown firmware recipe {name!r}",
                               hint=f"use one of: {names} (stacks/firmware/), or a path")
    return load_recipe(found)


def with_overrides(recipe: Recipe, overrides: dict[str, Any] | None, *, where: str = ""
                   ) -> Recipe:
    """The recipe with a site's components (`nodecert_firmware`): a version string keeps
    the recipe's way of reading it; a mapping sets {version, redfish, inband}."""
    if not overrides:
        return recipe
    comps = dict(recipe.components)
    for name, value in overrides.items():
        base = comps.get(name)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            if base is None:
                raise ManifestError(f"nodecert_firmware sets {name} to a version, but recipe "
                                    f"{recipe.name} does not say where {name} is read",
                                    where=where, hint=f"give {name} as {{version: ..., "
                                    "redfish: [pattern]}} or {version: ..., inband: "
                                    f"{'|'.join(INBAND)}}}")
            # the recipe's image pin is for the recipe's version, not the site's
            comps[name] = replace(base, version=str(value).strip(), image_sha256=None)
        elif isinstance(value, dict) and "version" in value and set(value) <= {
                "version", "redfish", "inband"}:
            inband = value.get("inband")
            if inband is not None and inband not in INBAND:
                raise ManifestError(f"nodecert_firmware {name}: inband {inband!r} is not one "
                                    f"of {', '.join(INBAND)}", where=where)
            redfish = tuple(str(p) for p in value.get("redfish") or
                            (base.redfish if base else ()))
            comps[name] = Component(name, str(value["version"]).strip(), redfish,
                                    inband or (base.inband if base else None))
            if not comps[name].redfish and comps[name].inband is None:
                raise ManifestError(f"nodecert_firmware {name}: say where it is read "
                                    "(redfish patterns or inband)", where=where)
        else:
            raise ManifestError(f"nodecert_firmware {name}: expected a version or "
                                "{version, redfish, inband}", where=where)
    return replace(recipe, components=comps, overridden=tuple(sorted(overrides)))


def same_version(found: str, wanted: str) -> bool:
    """A vendor may append a build date to the version (HPE: '2.55 Oct 01 2021')."""
    f, w = found.strip(), wanted.strip()
    return f == w or (f.startswith(w) and f[len(w):len(w) + 1] in (" ", "("))


def readings(comp: Component, members: list[dict[str, Any]] | None,
             inband: dict[str, dict[str, str | None]] | None) -> dict[str, str | None]:
    """Where the component was read -> the version found there."""
    out: dict[str, str | None] = {}
    for m in members or []:
        # a backup bank's image is not what runs: never judged (standby_readings keeps it)
        if comp.matches(str(m.get("id", ""))) and not m.get("standby"):
            out[f"BMC {m['id']}"] = m.get("version")
    if comp.inband and inband and inband.get(comp.inband):
        out.update(inband[comp.inband])
    return out


def standby_readings(comp: Component, members: list[dict[str, Any]] | None
                     ) -> dict[str, str | None]:
    """The component's backup-bank images the BMC lists (kept beside what runs)."""
    return {f"BMC {m['id']}": m.get("version") for m in members or []
            if m.get("standby") and comp.matches(str(m.get("id", "")))}


def inband_readings(results: list[Result]) -> dict[str, dict[str, str | None]] | None:
    """What the node's own checks read of its firmware: each GPU's VBIOS
    (hardware.inventory) and each HCA's firmware (net.ib / net.roce). None where the node
    reported neither (it was not reached)."""
    out: dict[str, dict[str, str | None]] = {}
    from_tool = False  # mlxfwmanager's readings, where there are any, over ibstat's
    for r in results:
        if r.verdict is Verdict.ERROR:
            continue
        if r.check == "hardware.inventory" and isinstance(r.facts.get("vbios"), dict):
            out["gpu_vbios"] = {f"GPU {bus}": (str(v) if v else None)
                                for bus, v in sorted(r.facts["vbios"].items())}
        tool = r.facts.get("hca_firmware") if r.check == "hardware.inventory" else None
        if isinstance(tool, dict) and tool:  # mlxfwmanager's, by device: preferred
            out["hca_firmware"] = {f"HCA {dev}": str(v.get("fw")) if isinstance(v, dict)
                                   and v.get("fw") else None
                                   for dev, v in sorted(tool.items())}
            from_tool = True
        if r.check in ("net.ib", "net.roce") and isinstance(r.value, dict) and not from_tool:
            for port in r.value.get("ports") or []:
                if isinstance(port, dict) and port.get("ca"):
                    out.setdefault("hca_firmware", {})[f"HCA {port['ca']}"] = \
                        str(port["firmware"]) if port.get("firmware") else None
    return out or None


def judge_recipe(recipe: Recipe, members: list[dict[str, Any]] | None,
                 inband: dict[str, dict[str, str | None]] | None, *,
                 bmc_error: str | None = None) -> Result:
    """`members`: the BMC's FirmwareInventory ({id, name, version}), None where it was
    not read (`bmc_error` says why); `inband`: {gpu_vbios|hca_firmware|bios: {where:
    version}}, None where the node did not report."""
    fails: list[str] = []
    errors: list[str] = []
    bom: dict[str, dict[str, Any]] = {}
    for name, comp in recipe.components.items():
        got = readings(comp, members, inband)
        bom[name] = {"wanted": comp.version, "found": got}
        spare = standby_readings(comp, members)
        if spare:
            bom[name]["standby"] = spare
        if not got:
            where = []
            if comp.redfish:
                where.append("no FirmwareInventory member matches "
                             + " or ".join(comp.redfish) if members is not None else
                             f"the BMC was not read ({bmc_error or 'no BMC'})")
            if comp.inband:
                where.append(f"the node reported no {comp.inband}")
            errors.append(f"{name}: nothing reports it ({'; '.join(where)})")
            continue
        for place, version in sorted(got.items()):
            if version is None or not str(version).strip():
                errors.append(f"{name}: {place} reports no version")
            elif not same_version(str(version), comp.version):
                fails.append(f"{name}: {place} runs {version}, the recipe wants "
                             f"{comp.version}")
    n_read = sum(len(b["found"]) for b in bom.values())
    return judged(
        "firmware.recipe", errors, fails,
        f"all {len(recipe.components)} components of {recipe.name} at the recipe's "
        f"versions ({n_read} readings)",
        value={"components": len(recipe.components), "behind": len(fails),
               "unreported": len(errors)},
        facts={"recipe": recipe.name, "recipe_title": recipe.title,
               "sources": list(recipe.sources), "overridden": list(recipe.overridden),
               "bom": bom},
        codes=("NC-FIRMWARE-UNREAD", "NC-FIRMWARE"),
        fix_fails="Bring each component named to the recipe's version (the platform's "
                  "firmware package, through the BMC's UpdateService), then validate "
                  "again.",
        fix_errors="Where nothing reports a component, check that the BMC lists it in "
                   "UpdateService/FirmwareInventory (or set the recipe's redfish patterns "
                   "to the Ids it uses) and that the node's tools ran.")


__all__ = ["INBAND", "Component", "Recipe", "find_recipe", "inband_readings", "judge_recipe",
           "list_recipes", "load_recipe", "readings", "recipes_dir", "same_version",
           "standby_readings",
           "with_overrides"]
